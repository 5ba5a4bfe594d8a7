"""The starting contents of ACEBench's sandbox apps (users, inbox, reminders, merchants, flights), per language.

These are benchmark data: the ground-truth final states are computed from them. Chinese and
English worlds differ only in the text of some records (merchant and product names, cities,
cabin names, two messages and one reminder).
"""

from __future__ import annotations

import copy

MESSAGE_USERS = {
    "Eve": ("USR100", "123-456-7890", "Software Engineer"),
    "Frank": ("USR101", "234-567-8901", "Data Scientist"),
    "Grace": ("USR102", "345-678-9012", "Product Manager"),
    "Helen": ("USR103", "456-789-0123", "UX Designer"),
    "Isaac": ("USR104", "567-890-1234", "DevOps Engineer"),
    "Jack": ("USR105", "678-901-2345", "Marketing Specialist"),
}

_INBOX_TEXT = {
    "en": {
        2: "Can you help me order a \"Margherita Pizza\" delivery? The merchant is Domino's.",
        3: "Please check the milk tea delivery options available from Heytea and purchase a cheaper milk tea for me. "
           "After making the purchase, remember to reply to me with \"Already bought.\"",
    },
    "zh": {
        2: "你能帮我点一个\"玛格丽特披萨\"的外卖吗,商家是达美乐。",
        3: "帮我查一些喜茶有哪些奶茶外卖，买一杯便宜些的奶茶。买完以后记得回复我,回复的内容是（已经买好了）",
    },
}

_INBOX = [  # (id, sender, receiver, text or None for language-specific, date)
    (1, "USR100", "USR101", "Hey Frank, don't forget about our meeting on 2024-06-11 at 4 PM in Conference Room 1.",
     "2024-06-09"),
    (2, "USR101", "USR102", None, "2024-03-09"),
    (3, "USR102", "USR103", None, "2023-12-05"),
    (4, "USR103", "USR102", "No problem Helen, I can assist you.", "2024-09-09"),
    (5, "USR104", "USR105", "Isaac, are you available for a call?", "2024-06-06"),
    (6, "USR105", "USR104", "Yes Jack, let's do it in 30 minutes.", "2024-01-15"),
]

_TODO = {
    "en": "First, help Frank place a food delivery order at \"Hema Fresh,\" ordering two \"Fresh Gift Packs.\" Then, "
          "send a message to Frank saying, \"The price of the purchased goods is () yuan.\" Replace the parentheses "
          "with the actual amount, keeping one decimal place.",
    "zh": "首先帮Frank在\"盒马生鲜\"点外卖，需要定两个\"生鲜大礼包\"，再发短信告诉Frank：\"购买商品的价格是()元\"。"
          "要把括号换成实际金额，保留一位小数。",
}

FOOD_USERS = {
    "Eve": ("U100", "password123", 500.0),
    "Frank": ("U101", "password456", 300.0),
    "Grace": ("U102", "password789", 150.0),
    "Helen": ("U103", "password321", 800.0),
    "Isaac": ("U104", "password654", 400.0),
    "Jack": ("U105", "password654", 120.0),
}

_MERCHANTS = {  # merchant id, service type, name and menu per language
    "en": [
        ("M100", "Pizza", "Domino's", [("Margherita Pizza", 68.0), ("Super Supreme Pizza", 88.0)]),
        ("M101", "Bibimbap", "Rice Village Bibimbap", [("Stone Pot Bibimbap", 35.0), ("Korean Beef Bibimbap", 45.0)]),
        ("M102", "Hotpot", "Haidilao", [("Beef Rolls", 68.0), ("Seafood Platter", 88.0)]),
        ("M103", "Milk Tea", "Heytea", [("Cheese Milk Tea", 25.0), ("Four Seasons Spring Milk Tea", 22.0)]),
        ("M104", "Fresh Grocery", "Hema Fresh", [("Organic Vegetable Pack", 15.0), ("Fresh Gift Pack", 99.0)]),
        ("M105", "BBQ", "Jiutian BBQ", [("Korean Grilled Beef", 128.0), ("Grilled Pork Belly", 78.0)]),
    ],
    "zh": [
        ("M100", "Pizza", "达美乐", [("玛格丽特披萨", 68.0), ("超级至尊披萨", 88.0)]),
        ("M101", "Bibimbap", "米村拌饭", [("石锅拌饭", 35.0), ("韩式牛肉拌饭", 45.0)]),
        ("M102", "Hotpot", "海底捞", [("牛肉卷", 68.0), ("海鲜拼盘", 88.0)]),
        ("M103", "Milk Tea", "喜茶", [("芝士奶茶", 25.0), ("四季春奶茶", 22.0)]),
        ("M104", "Fresh Grocery", "盒马生鲜", [("有机蔬菜包", 15.0), ("生鲜大礼包", 99.0)]),
        ("M105", "BBQ", "九田家烤肉", [("韩式烤牛肉", 128.0), ("烤五花肉", 78.0)]),
    ],
}

TRAVEL_USERS = {
    "user1": {"user_name": "Eve", "password": "password123", "cash_balance": 2000.0, "bank_balance": 50000.0,
              "membership_level": "regular"},
    "user2": {"user_name": "Frank", "password": "password456", "cash_balance": 8000.0, "bank_balance": 8000.0,
              "membership_level": "silver"},
    "user3": {"user_name": "Grace", "password": "password789", "cash_balance": 1000.0, "bank_balance": 5000.0,
              "membership_level": "gold"},
}

CITIES = {
    "en": {"BJ": "Beijing", "SH": "Shanghai", "NJ": "Nanjing", "SZ": "Shenzhen", "XM": "Xiamen", "CD": "Chengdu",
           "FZ": "Fuzhou"},
    "zh": {"BJ": "北京", "SH": "上海", "NJ": "南京", "SZ": "深圳", "XM": "厦门", "CD": "成都", "FZ": "福州"},
}
CABINS = {"en": ("Economy Class", "Business Class"), "zh": ("经济舱", "商务舱")}

_FLIGHTS = [  # number, from, to, departs, arrives, seats, economy, business
    ("CA1234", "BJ", "SH", "2024-07-15 08:00:00", "2024-07-15 10:30:00", 5, 1200, 3000),
    ("MU5678", "SH", "BJ", "2024-07-16 09:00:00", "2024-07-16 11:30:00", 3, 1900, 3000),
    ("CZ4321", "SH", "BJ", "2024-07-16 20:00:00", "2024-07-16 22:00:00", 8, 2500, 4000),
    ("CZ4352", "SH", "BJ", "2024-07-17 20:00:00", "2024-07-17 22:00:00", 8, 1600, 2500),
    ("MU3561", "BJ", "NJ", "2024-07-18 08:00:00", "2024-07-18 10:00:00", 8, 1500, 4000),
    ("MU1566", "BJ", "NJ", "2024-07-18 20:00:00", "2024-07-18 22:00:00", 8, 1500, 4000),
    ("CZ1765", "NJ", "SZ", "2024-07-17 20:30:00", "2024-07-17 22:00:00", 8, 1500, 2500),
    ("CZ1765", "NJ", "SZ", "2024-07-18 12:30:00", "2024-07-18 15:00:00", 8, 1500, 2500),
    ("MH1765", "XM", "CD", "2024-07-17 12:30:00", "2024-07-17 15:00:00", 8, 1500, 2500),
    ("MH2616", "CD", "XM", "2024-07-18 18:30:00", "2024-07-18 21:00:00", 8, 1500, 2500),
    ("MH2616", "CD", "FZ", "2024-07-16 18:30:00", "2024-07-16 21:00:00", 8, 1500, 2500),
]

_RESERVATIONS = [  # id, user, flight, payment, cabin (0 economy, 1 business), bags, from, to
    ("res_1", "user1", "CA1234", "bank", 0, 1, "BJ", "SH"),
    ("res_2", "user1", "MU5678", "bank", 1, 1, "SH", "BJ"),
    ("res_3", "user2", "MH1765", "bank", 1, 1, "XM", "CD"),
    ("res_4", "user2", "MU2616", "bank", 1, 1, "CD", "XM"),
]


def inbox(lang: str) -> dict[int, dict]:
    return {number: {"sender_id": sender, "receiver_id": receiver,
                     "message": text if text is not None else _INBOX_TEXT[lang][number], "time": date}
            for number, sender, receiver, text, date in _INBOX}


def reminders(lang: str) -> dict[int, dict]:
    listed = [(1001, "Doctor's Appointment", "Visit Dr. Smith for a checkup.", "2024-07-15 09:30"),
              (1002, "Team Meeting", "Monthly project review with the team.", "2024-07-17 11:00"),
              (1003, "To-do list", _TODO[lang], "2024-07-16 11:00")]
    return {index: {"reminder_id": rid, "title": title, "description": text, "time": when, "notified": False}
            for index, (rid, title, text, when) in enumerate(listed, start=1)}


def food_users() -> dict[str, dict]:
    return {name: {"user_id": uid, "password": password, "balance": balance}
            for name, (uid, password, balance) in FOOD_USERS.items()}


def merchants(lang: str) -> dict[str, dict]:
    return {name: {"merchant_id": mid, "service_type": kind,
                   "menu": [{"product": product, "price": price} for product, price in menu]}
            for mid, kind, name, menu in _MERCHANTS[lang]}


def flights(lang: str) -> list[dict]:
    city = CITIES[lang]
    return [{"flight_no": number, "origin": city[src], "destination": city[dst], "depart_time": departs,
             "arrival_time": arrives, "status": "available", "seats_available": seats, "economy_price": economy,
             "business_price": business}
            for number, src, dst, departs, arrives, seats, economy, business in _FLIGHTS]


def reservations(lang: str) -> list[dict]:
    city, cabins = CITIES[lang], CABINS[lang]
    return [{"reservation_id": rid, "user_id": user, "flight_no": flight, "payment_method": payment,
             "cabin": cabins[cabin], "baggage": bags, "origin": city[src], "destination": city[dst]}
            for rid, user, flight, payment, cabin, bags, src, dst in _RESERVATIONS]


def travel_users() -> dict[str, dict]:
    return copy.deepcopy(TRAVEL_USERS)
