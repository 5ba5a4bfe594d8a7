"""Our implementation of ACEBench's sandbox apps, from the benchmark's documented behaviour.

Five classes: BaseApi (wifi, device login), MessageApi, ReminderApi and FoodPlatform (phone apps;
each is a BaseApi with its own copy of the wifi/login flags) and Travel (flights). A task
instantiates its `involved_classes`; each loads its own `initial_config` entry and then the
BaseApi entry. A call to a method is made on *every* instance that has it (so `turn_on_wifi()`
switches the flag of every phone app), and its result is the last instance's. ACEBench records
only some attributes of each instance (`SAVED_ATTRIBUTES`) and compares them with the ground truth.

Observable quirks kept on purpose, because the ground truth depends on them: a sent message has
no "time"; an added reminder's id is the next counter value; a cancelled flight reservation stays
in the list (only the refund lands); `reserve_flight` charges without a seat check; Chinese
FoodPlatform refuses an order that costs exactly the balance.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from astra_eval.acebench import world

SAVED_ATTRIBUTES = {
    "BaseApi": ("wifi", "logged_in"),
    "MessageApi": ("inbox",),
    "ReminderApi": ("reminder_list",),
    "FoodPlatform": ("users", "logged_in_users", "orders"),
    "Travel": ("users", "reservations"),
}

TEXT = {
    "en": {
        "wifi_on": "Wi-Fi has been turned on",
        "logged_in": "Device has been logged in",
        "send_no_login": "Device not logged in, unable to send message",
        "send_no_wifi": "Wi-Fi is turned off, cannot send messages at this time",
        "inbox_full": "Inbox capacity is full. You need to ask the user which message to delete.",
        "no_party": "Sender or receiver does not exist",
        "sent": "Message successfully sent to {receiver}.",
        "delete_no_login": "Device not logged in, unable to delete message",
        "no_message_id": "Message ID does not exist",
        "deleted": "Message ID {id} has been successfully deleted.",
        "view_no_login": "Device not logged in, unable to view message information",
        "no_sender": "Sender does not exist",
        "no_receiver": "Receiver does not exist",
        "no_messages_between": "No related message records found",
        "no_user": "User does not exist",
        "no_keyword": "No messages found containing the keyword",
        "times_no_login": "Device not logged in, unable to retrieve all message times and their corresponding message IDs.",
        "latest_no_login": "Device not logged in, unable to retrieve the latest sent message ID.",
        "earliest_no_login": "Device not logged in, unable to retrieve the earliest sent message ID.",
        "empty_inbox": "No message records found",
        "latest": "The latest message ID is {id}",
        "earliest": "The earliest message ID is {id}",
        "reminder_view_no_login": "The device is not logged in, so you cannot view notifications",
        "no_reminder_title": "No reminder found with the title '{title}'.",
        "reminder_add_no_login": "Device not logged in. Unable to add a new reminder.",
        "reminders_full": "Reminder capacity is full. Unable to add a new reminder.",
        "reminder_added": "Reminder '{title}' was successfully added.",
        "reminder_delete_no_login": "Device not logged in. Unable to delete the specified reminder.",
        "no_reminder_id": "Reminder ID does not exist.",
        "reminder_deleted": "Reminder ID {id} was successfully deleted.",
        "no_reminders": "No reminders found.",
        "food_no_wifi": "Wi-Fi is not enabled, unable to login",
        "food_no_user": "User does not exist",
        "food_bad_password": "Incorrect password",
        "food_already": "{user} is already logged in",
        "food_logged_in": "User {user} has successfully logged in!",
        "food_nobody": "No users are currently logged in to the food platform",
        "food_not_logged_in": "User {user} is not logged in to the food platform",
        "no_merchant": "Merchant does not exist",
        "bad_quantity": "Invalid quantity {quantity} for product {product}",
        "no_product": "Product {product} does not exist in {merchant}'s menu",
        "poor": "Insufficient balance to place the order",
        "ordered": "Food delivery order successfully placed with {merchant}. Total amount: {total} yuan",
        "no_merchant_named": "Merchant '{merchant}' does not exist",
        "no_orders": "User has no order records",
        "no_matching_orders": "No matching orders found",
        "no_direct": "There are no direct flights that meet the criteria.",
        "bad_login": "Incorrect username or password.",
        "need_id": "Please provide a valid reservation ID or user ID",
        "no_transfer": "No connecting flights that meet the criteria were found.",
        "auth_failed": "Authentication failed. Please check your user ID and password.",
        "bad_payment": "Invalid payment method",
        "poor_cash": "Your cash balance is insufficient. Please consider using another payment method.",
        "poor_bank": "Your bank balance is insufficient. Please consider using another payment method.",
        "booked": "Booking successful. Reservation ID: {id}. Total cost: {cost} yuan (including baggage fees).",
        "no_reservation": "Reservation not found or user ID does not match.",
        "no_flight_info": "Flight information not found.",
        "no_user_info": "User information not found.",
        "flight_changed": "Flight number has been changed.",
        "flight_change_failed": "Flight change failed: Invalid new flight number or destination does not match.",
        "cabin_paid": "Cabin change successful. Price difference paid: {amount}.",
        "cabin_poor": "Insufficient balance to pay the cabin price difference.",
        "cabin_refunded": "Cabin change successful. Price difference refunded: {amount}.",
        "bags_paid": "Baggage has been added. Additional fee to be paid: {amount}.",
        "bags_poor": "Insufficient balance to pay the additional baggage fees.",
        "modified_free": "Modification completed with no additional fees.",
        "bad_user_id": "Invalid user ID.",
        "bad_reservation": "Invalid reservation ID or it does not belong to the user.",
        "bad_flight": "Invalid flight information.",
        "departed": "The flight segment has been used and cannot be canceled.",
        "airline_cancelled_reason": "The airline has canceled the flight.",
        "airline_cancelled": "The flight has been canceled. Your reservation will be canceled free of charge, and "
                             "{amount} yuan has been refunded.",
        "free_cancel": "More than 24 hours before departure. Free cancellation successful, {amount} yuan has been "
                       "refunded.",
        "fee_cancel": "Less than 24 hours before departure. A cancellation fee of {fee} yuan has been deducted, and "
                      "{amount} yuan has been refunded.",
    },
    "zh": {
        "wifi_on": "wifi已经打开",
        "logged_in": "设备已经登录",
        "send_no_login": "device未登录，无法发送短信",
        "send_no_wifi": "wifi关闭，此时不能发送信息",
        "inbox_full": "内存容量不够了，你需要询问user删除哪一条短信。",
        "no_party": "发送者或接收者不存在",
        "sent": "短信成功发送给{receiver}。",
        "delete_no_login": "device未登录，无法删除短信",
        "no_message_id": "短信ID不存在",
        "deleted": "短信ID {id} 已成功删除。",
        "view_no_login": "device未登录，无法查看短信信息",
        "no_sender": "发送者不存在",
        "no_receiver": "接收者不存在",
        "no_messages_between": "没有找到相关的短信记录",
        "no_user": "用户不存在",
        "no_keyword": "没有找到包含关键词的短信",
        "times_no_login": "device未登录，获取所有短信的时间以及对应的短信编号。",
        "latest_no_login": "device未登录，无法获取最新发送的短信ID。",
        "earliest_no_login": "device未登录，无法获取最早发送的短信ID",
        "empty_inbox": "短信记录为空",
        "latest": "最新的短信ID是 {id}",
        "earliest": "最早的短信ID是 {id}",
        "reminder_view_no_login": "device未登录，无法查看提醒",
        "no_reminder_title": "没有找到标题为 '{title}' 的提醒",
        "reminder_add_no_login": "device未登录，无法添加一个新的提醒",
        "reminders_full": "提醒容量已满，无法添加新的提醒",
        "reminder_added": "提醒 '{title}' 已成功添加",
        "reminder_delete_no_login": "device未登录，无法删除指定的提醒",
        "no_reminder_id": "提醒ID不存在",
        "reminder_deleted": "提醒ID {id} 已成功删除",
        "no_reminders": "没有任何提醒",
        "reminder_notified": "提醒ID {id} 已标记为已通知",
        "no_reminder_keyword": "没有找到包含该关键词的提醒",
        "food_no_wifi": "wifi未打开，无法登录",
        "food_no_user": "用户不存在",
        "food_bad_password": "密码错误",
        "food_already": "{user} 已经登录",
        "food_logged_in": "用户{user}登陆成功！",
        "food_nobody": "当前没有登录food platform",
        "food_not_logged_in": "用户 {user} 未登录food platform",
        "no_merchant": "商家不存在",
        "bad_quantity": "无效的数量 {quantity} 对于商品 {product}",
        "no_product": "商品 {product} 不存在于 {merchant} 的菜单中",
        "poor": "余额不足，无法下单",
        "ordered": "外卖订单成功下单给 {merchant}，总金额为 {total} 元",
        "no_merchant_named": "商家 '{merchant}' 不存在",
        "no_orders": "用户没有订单记录",
        "no_matching_orders": "没有找到匹配的订单",
        "no_direct": "没有符合条件的直达航班",
        "bad_login": "用户名或密码不正确",
        "need_id": "请提供有效的预订ID或用户ID",
        "no_transfer": "未找到符合条件的中转航班。",
        "auth_failed": "认证失败，请检查用户ID和密码。",
        "bad_payment": "支付方式无效",
        "poor_cash": "cash余额不足，请考虑换一种支付方式",
        "poor_bank": "bank余额不足，请考虑换一种支付方式",
        "booked": "预订成功，预订号：{id}，总费用：{cost}元（包含行李费用）。",
        "no_reservation": "预订未找到或用户ID不匹配。",
        "no_flight_info": "航班信息未找到。",
        "no_user_info": "用户信息未找到。",
        "flight_changed": "航班号已更改。",
        "flight_change_failed": "航班更改失败：新的航班号无效或目的地不匹配。",
        "cabin_paid": "舱位更改成功。已支付差价: {amount}。",
        "cabin_poor": "余额不足，无法支付舱位差价。",
        "cabin_refunded": "舱位更改成功。已退款差价: {amount}。",
        "bags_paid": "行李已增加。需支付额外费用: {amount}。",
        "bags_poor": "余额不足，无法支付额外行李费用。",
        "modified_free": "修改完成，无需额外费用。",
        "bad_user_id": "用户ID无效。",
        "bad_reservation": "预订ID无效或与该用户无关。",
        "bad_flight": "航班信息无效。",
        "departed": "航段已使用，无法取消。",
        "airline_cancelled_reason": "航空公司取消航班",
        "airline_cancelled": "航班已取消，您的预订将被免费取消，已退款{amount}元。",
        "free_cancel": "距离出发时间超过24小时，免费取消成功，已退款{amount}元。",
        "fee_cancel": "距离出发时间不足24小时，已扣除取消费{fee}元，退款{amount}元。",
    },
}

MAX_INBOX = 6
MAX_REMINDERS = 6
FREE_BAGS = {"regular": (1, 2), "silver": (2, 3), "gold": (3, 3)}  # (economy, business)
BAG_FEE = 50
NOW = datetime(2024, 7, 14, 6, 0, 0)  # the Travel app's clock


def _fail(text: str) -> dict:
    return {"status": False, "message": text}


def _ok(text: str) -> dict:
    return {"status": True, "message": text}


class App:
    """What every app shares: its language's texts and loading its slice of the initial config."""

    def __init__(self, lang: str):
        self._lang = lang
        self._text = TEXT[lang]

    def _t(self, key: str, **values: Any) -> str:
        return self._text[key].format(**values)

    def _load_scenario(self, scenario: dict, long_context: bool = False) -> None:
        pass


class BaseApi(App):
    """The phone: wifi and device login."""

    def __init__(self, lang: str):
        super().__init__(lang)
        self.wifi = False
        self.logged_in = True

    def _load_scenario(self, scenario: dict, long_context: bool = False) -> None:
        self.wifi = scenario.get("wifi", False)
        self.logged_in = scenario.get("logged_in", True)

    def turn_on_wifi(self) -> dict:
        self.wifi = True
        return _ok(self._t("wifi_on"))

    def login_device(self) -> dict:
        self.logged_in = True
        return _ok(self._t("logged_in"))


class MessageApi(BaseApi):
    def __init__(self, lang: str):
        super().__init__(lang)
        self.user_list = {name: {"user_id": uid, "phone_number": phone, "occupation": job}
                          for name, (uid, phone, job) in world.MESSAGE_USERS.items()}
        self.inbox = world.inbox(lang)
        self.message_id_counter = len(self.inbox)

    def _user_id(self, name: str) -> str:
        return self.user_list[name]["user_id"]

    def send_message(self, sender_name: str, receiver_name: str, message: str) -> dict:
        if not self.logged_in:
            return _fail(self._t("send_no_login"))
        if not self.wifi:
            return _fail(self._t("send_no_wifi"))
        if len(self.inbox) >= MAX_INBOX:
            return _fail(self._t("inbox_full"))
        if sender_name not in self.user_list or receiver_name not in self.user_list:
            return _fail(self._t("no_party"))
        self.message_id_counter += 1
        self.inbox[self.message_id_counter] = {"sender_id": self._user_id(sender_name),
                                               "receiver_id": self._user_id(receiver_name), "message": message}
        return _ok(self._t("sent", receiver=receiver_name))

    def delete_message(self, message_id: int) -> dict:
        if not self.logged_in:
            return _fail(self._t("delete_no_login"))
        if message_id not in self.inbox:
            return _fail(self._t("no_message_id"))
        del self.inbox[message_id]
        return _ok(self._t("deleted", id=message_id))

    def view_messages_between_users(self, sender_name: str, receiver_name: str) -> dict:
        if not self.logged_in:
            return _fail(self._t("view_no_login"))
        if sender_name not in self.user_list:
            return _fail(self._t("no_sender"))
        if receiver_name not in self.user_list:
            return _fail(self._t("no_receiver"))
        sender, receiver = self._user_id(sender_name), self._user_id(receiver_name)
        found = [{"id": number, "sender": sender_name, "receiver": receiver_name, "message": sms["message"]}
                 for number, sms in self.inbox.items() if sms["sender_id"] == sender and sms["receiver_id"] == receiver]
        return {"status": True, "messages": found} if found else _fail(self._t("no_messages_between"))

    def search_messages(self, user_name: str, keyword: str) -> dict:
        if user_name not in self.user_list:
            return _fail(self._t("no_user"))
        user = self._user_id(user_name)
        found = [{"id": number, "sender_id": sms["sender_id"], "receiver_id": sms["receiver_id"],
                  "message": sms["message"]}
                 for number, sms in self.inbox.items()
                 if user in (sms["sender_id"], sms["receiver_id"]) and keyword.lower() in sms["message"].lower()]
        return {"status": True, "messages": found} if found else _fail(self._t("no_keyword"))

    def get_all_message_times_with_ids(self) -> dict:
        if not self.logged_in:
            return _fail(self._t("times_no_login"))
        return {number: sms["time"] for number, sms in self.inbox.items()}  # a sent message has no time: KeyError

    def _extreme_message_id(self, latest: bool) -> dict:
        if not self.logged_in:
            return _fail(self._t("latest_no_login" if latest else "earliest_no_login"))
        if not self.inbox:
            return _fail(self._t("empty_inbox"))
        best_id, best_time = None, None
        for number, sms in self.inbox.items():
            when = datetime.strptime(sms["time"], "%Y-%m-%d")  # strictly later/earlier: the first one wins ties
            if best_time is None or (when > best_time if latest else when < best_time):
                best_id, best_time = number, when
        key = "latest" if latest else "earliest"
        return {"status": True, "message": self._t(key, id=best_id), "message_id": best_id}

    def get_latest_message_id(self) -> dict:
        return self._extreme_message_id(latest=True)

    def get_earliest_message_id(self) -> dict:
        return self._extreme_message_id(latest=False)


class ReminderApi(BaseApi):
    def __init__(self, lang: str):
        super().__init__(lang)
        self.reminder_list = world.reminders(lang)
        self.reminder_id_counter = len(self.reminder_list)

    def view_reminder_by_title(self, title: str) -> dict:
        if not self.logged_in:
            return _fail(self._t("reminder_view_no_login"))
        for reminder in self.reminder_list.values():
            if reminder["title"] == title:
                return {"status": True, "reminder": reminder}
        return _fail(self._t("no_reminder_title", title=title))

    def add_reminder(self, title: str, description: str, time: str) -> dict:
        if not self.logged_in:
            return _fail(self._t("reminder_add_no_login"))
        if len(self.reminder_list) >= MAX_REMINDERS:
            return _fail(self._t("reminders_full"))
        self.reminder_id_counter += 1
        number = self.reminder_id_counter
        self.reminder_list[number] = {"reminder_id": number, "title": title, "description": description,
                                      "time": time, "notified": False}
        return _ok(self._t("reminder_added", title=title))

    def delete_reminder(self, reminder_id: int) -> dict:
        if not self.logged_in:
            return _fail(self._t("reminder_delete_no_login"))
        if reminder_id not in self.reminder_list:
            return _fail(self._t("no_reminder_id"))
        del self.reminder_list[reminder_id]
        return _ok(self._t("reminder_deleted", id=reminder_id))

    def view_all_reminders(self) -> dict:
        if not self.reminder_list:
            return _fail(self._t("no_reminders"))
        shown = [{key: r[key] for key in ("title", "description", "time", "notified")}
                 for r in self.reminder_list.values()]
        return {"status": True, "reminders": shown}


class ReminderApiZh(ReminderApi):
    """The Chinese reminder app has two more methods."""

    def mark_as_notified(self, reminder_id: int) -> dict:
        if reminder_id not in self.reminder_list:
            return _fail(self._t("no_reminder_id"))
        self.reminder_list[reminder_id]["notified"] = True
        return _ok(self._t("reminder_notified", id=reminder_id))

    def search_reminders(self, keyword: str) -> dict:
        word = keyword.lower()
        found = [{"title": r["title"], "description": r["description"],
                  "time": r["time"].strftime("%Y-%m-%d %H:%M")}  # times are strings here: a match raises, as theirs
                 for r in self.reminder_list.values() if word in r["title"].lower() or word in r["description"].lower()]
        return {"status": True, "reminders": found} if found else _fail(self._t("no_reminder_keyword"))


class FoodPlatform(BaseApi):
    def __init__(self, lang: str):
        super().__init__(lang)
        self.users = world.food_users()
        self.merchant_list = world.merchants(lang)
        self.logged_in_users: list[str] = []
        self.orders: list[dict] = []

    def _load_scenario(self, scenario: dict, long_context: bool = False) -> None:
        super()._load_scenario(scenario)
        self.logged_in_users = scenario.get("logged_in_users", [])

    def login_food_platform(self, username: str, password: str) -> dict:
        if not self.wifi:
            return _fail(self._t("food_no_wifi"))
        if username not in self.users:
            return _fail(self._t("food_no_user"))
        if self.users[username]["password"] != password:
            return _fail(self._t("food_bad_password"))
        if username in self.logged_in_users:
            return _fail(self._t("food_already", user=username))
        self.logged_in_users.append(username)
        return _ok(self._t("food_logged_in", user=username))

    def view_logged_in_users(self) -> dict:
        if not self.logged_in_users:
            return _fail(self._t("food_nobody"))
        return {"status": True, "logged_in_users": self.logged_in_users}

    def check_balance(self, user_name: str) -> float:
        return self.users[user_name]["balance"] if user_name in self.users else 0.0

    def add_food_delivery_order(self, username: str, merchant_name: str, items: list[dict]) -> dict:
        if username not in self.logged_in_users:
            return _fail(self._t("food_not_logged_in", user=username))
        if merchant_name not in self.merchant_list:
            return _fail(self._t("no_merchant"))
        prices = {p["product"]: p["price"] for p in self.merchant_list[merchant_name]["menu"]}
        total, lines = 0.0, []
        for item in items:
            product, quantity = item.get("product"), item.get("quantity", 1)
            if not isinstance(quantity, int) or quantity <= 0:
                return _fail(self._t("bad_quantity", quantity=quantity, product=product))
            if product not in prices:
                return _fail(self._t("no_product", product=product, merchant=merchant_name))
            total += prices[product] * quantity
            lines.append({"product": product, "quantity": quantity, "price_per_unit": prices[product]})
        balance = self.users[username]["balance"]
        if total > balance or (self._lang == "zh" and total == balance):
            return _fail(self._t("poor"))
        self.users[username]["balance"] -= total
        self.orders.append({"user_name": username, "merchant_name": merchant_name, "items": lines,
                            "total_price": total})
        return _ok(self._t("ordered", merchant=merchant_name, total=total))

    def get_products(self, merchant_name: str) -> list | dict:
        merchant = self.merchant_list.get(merchant_name)
        return merchant["menu"] if merchant else _fail(self._t("no_merchant_named", merchant=merchant_name))

    def view_orders(self, user_name: str) -> dict:
        mine = [order for order in self.orders if order["user_name"] == user_name]
        return {"status": True, "orders": mine} if mine else _fail(self._t("no_orders"))

    def search_orders(self, keyword: str) -> dict:
        word = keyword.lower()

        def matches(order: dict) -> bool:
            if word in order["merchant_name"].lower():
                return True
            if self._lang == "zh":  # the Chinese app lower()s the item dicts themselves: an error, as theirs
                return any(word in item.lower() for item in order.get("items", []))
            return any(word in item["product"].lower() for item in order.get("items", []))

        found = [order for order in self.orders if matches(order)]
        return {"status": True, "orders": found} if found else _fail(self._t("no_matching_orders"))


class Travel(App):
    def __init__(self, lang: str):
        super().__init__(lang)
        self.users = world.travel_users()
        self.flights = world.flights(lang)
        self.reservations = world.reservations(lang)
        self._economy, self._business = world.CABINS[lang]

    def _flight(self, number: str, *, available: bool = False) -> dict | None:
        return next((f for f in self.flights if f["flight_no"] == number
                     and (not available or f["status"] == "available")), None)

    def _free_bags(self, membership: str, cabin: str) -> int:
        cabins = {self._economy: 0, self._business: 1}
        return FREE_BAGS[membership][cabins[cabin]] if membership in FREE_BAGS and cabin in cabins else 0

    def _price(self, flight: dict, cabin: str) -> int:
        return flight["economy_price"] if cabin == self._economy else flight["business_price"]

    def get_flight_details(self, origin: str | None = None, destination: str | None = None) -> list | str:
        found = [f for f in self.flights if (not origin or f["origin"] == origin)
                 and (not destination or f["destination"] == destination)]
        return [dict(f) for f in found] if found else self._t("no_direct")

    def get_user_details(self, user_id: str, password: str) -> dict:
        user = self.users.get(user_id)
        if user and user["password"] == password:
            return {key: value for key, value in user.items() if key != "password"}
        return {"status": "error", "message": self._t("bad_login")}

    def get_reservation_details(self, reservation_id: str | None = None, user_id: str | None = None) -> list | dict:
        if reservation_id:
            found = [r for r in self.reservations if r["reservation_id"] == reservation_id]
        elif user_id:
            found = [r for r in self.reservations if r["user_id"] == user_id]
        else:
            return {"status": "error", "message": self._t("need_id")}
        return [{**r, "flight_info": self._flight(r["flight_no"])} for r in found]

    def authenticate_user(self, user_id: str, password: str) -> dict:
        user = self.users.get(user_id)
        if user and user["password"] == password:
            return user
        return {"status": "error", "message": self._t("bad_login")}

    def get_baggage_allowance(self, membership_level: str, cabin_class: str) -> int:
        return self._free_bags(membership_level, cabin_class)

    def find_transfer_flights(self, origin_city: str, transfer_city: str, destination_city: str) -> list | str:
        def leg(src: str, dst: str) -> list[dict]:
            return [f for f in self.flights if f["origin"] == src and f["destination"] == dst
                    and f["status"] == "available"]

        def at(text: str) -> datetime:
            return datetime.strptime(text, "%Y-%m-%d %H:%M:%S")

        pairs = [{"first_leg": first, "second_leg": second}
                 for first in leg(origin_city, transfer_city) for second in leg(transfer_city, destination_city)
                 if at(first["arrival_time"]) < at(second["depart_time"])]
        return pairs or self._t("no_transfer")

    def calculate_baggage_fee(self, membership_level: str, cabin_class: str, baggage_count: int) -> int:
        cabins = {self._economy: 0, self._business: 1}
        free = FREE_BAGS[membership_level][cabins[cabin_class]]  # unknown level or cabin raises, as theirs
        return max(baggage_count - free, 0) * BAG_FEE

    def update_balance(self, user: dict, payment_method: str, amount: float) -> bool:
        account = {"cash": "cash_balance", "bank": "bank_balance"}.get(payment_method)
        if account is None:
            return True
        if user[account] + amount < 0:
            return False
        user[account] += amount
        return True

    def reserve_flight(self, user_id: str, password: str, flight_no: str, cabin: str, payment_method: str,
                       baggage_count: int) -> str:
        # A failed login still returns an (error) dict, so the booking goes on, as in ACEBench.
        user = self.authenticate_user(user_id, password)
        if not user:
            return self._t("auth_failed")
        flight = self._flight(flight_no, available=True)
        cost = self._price(flight, cabin) + self.calculate_baggage_fee(user["membership_level"], cabin, baggage_count)
        if payment_method not in ("cash", "bank"):
            return self._t("bad_payment")
        account = f"{payment_method}_balance"
        if cost > self.users[user_id][account]:
            return self._t(f"poor_{payment_method}")
        self.users[user_id][account] -= cost
        flight["seats_available"] -= 1
        number = f"res_{len(self.reservations) + 1}"
        self.reservations.append({"reservation_id": number, "user_id": user_id, "flight_no": flight_no,
                                  "payment_method": payment_method, "cabin": cabin, "baggage": baggage_count})
        return self._t("booked", id=number, cost=cost)

    def modify_flight(self, user_id: str, reservation_id: str, new_flight_no: str | None = None,
                      new_cabin: str | None = None, add_baggage: int = 0, new_payment_method: str | None = None) -> str:
        reservation = next((r for r in self.reservations
                            if r["reservation_id"] == reservation_id and r["user_id"] == user_id), None)
        if not reservation:
            return self._t("no_reservation")
        flight = self._flight(reservation["flight_no"])
        if not flight:
            return self._t("no_flight_info")
        payment = new_payment_method or reservation["payment_method"]
        user = self.users[user_id]
        notes = []
        if new_flight_no and new_flight_no != reservation["flight_no"]:
            new_flight = self._flight(new_flight_no)
            if not (new_flight and new_flight["origin"] == flight["origin"]
                    and new_flight["destination"] == flight["destination"]):
                return self._t("flight_change_failed")
            reservation["flight_no"] = new_flight_no
            notes.append(self._t("flight_changed"))
        if new_cabin and new_cabin != reservation.get("cabin"):
            # priced on the reservation's original flight, as ACEBench does
            difference = self._cabin_price(flight, new_cabin) - self._cabin_price(flight, reservation["cabin"])
            reservation["cabin"] = new_cabin
            if difference > 0:
                paid = self.update_balance(user, payment, -difference)
                notes.append(self._t("cabin_paid", amount=difference) if paid else self._t("cabin_poor"))
            elif difference < 0:
                self.update_balance(user, payment, -difference)
                notes.append(self._t("cabin_refunded", amount=-difference))
        if add_baggage > 0:
            total_bags = reservation.get("baggage", 0) + add_baggage
            fee = max(0, total_bags - self._free_bags(user["membership_level"], reservation["cabin"])) * BAG_FEE
            if fee > 0:
                paid = self.update_balance(user, payment, -fee)
                notes.append(self._t("bags_paid", amount=fee) if paid else self._t("bags_poor"))
            reservation["baggage"] = total_bags
        return " ".join(notes or [self._t("modified_free")])

    def _cabin_price(self, flight: dict, cabin: str) -> int:
        return {self._economy: flight["economy_price"], self._business: flight["business_price"]}.get(cabin, 0)

    def cancel_reservation(self, user_id: str, reservation_id: str, reason: str) -> str:
        user = self.users.get(user_id)
        if not user:
            return self._t("bad_user_id")
        reservation = next((r for r in self.reservations
                            if r["reservation_id"] == reservation_id and r["user_id"] == user_id), None)
        if not reservation:
            return self._t("bad_reservation")
        flight = self._flight(reservation["flight_no"])
        if not flight:
            return self._t("bad_flight")
        departs = datetime.strptime(flight["depart_time"], "%Y-%m-%d %H:%M:%S")
        if NOW > departs:
            return self._t("departed")
        price = self._price(flight, reservation["cabin"])
        if reason == self._t("airline_cancelled_reason"):
            self.process_refund(user, price)
            return self._t("airline_cancelled", amount=price)
        if departs - NOW > timedelta(days=1):
            self.process_refund(user, price)
            return self._t("free_cancel", amount=price)
        fee = price * 0.1
        self.process_refund(user, price - fee)
        return self._t("fee_cancel", fee=fee, amount=price - fee)

    def process_refund(self, user: dict, amount: float) -> None:
        user["cash_balance"] += amount

    def calculate_price_difference(self, flight: dict, old_cabin: str, new_cabin: str) -> int:
        return self._cabin_price(flight, new_cabin) - self._cabin_price(flight, old_cabin)


CLASSES = {
    "en": {"BaseApi": BaseApi, "MessageApi": MessageApi, "ReminderApi": ReminderApi, "FoodPlatform": FoodPlatform,
           "Travel": Travel},
    "zh": {"BaseApi": BaseApi, "MessageApi": MessageApi, "ReminderApi": ReminderApiZh, "FoodPlatform": FoodPlatform,
           "Travel": Travel},
}
