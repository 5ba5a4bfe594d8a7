"""A small online shop: customers, products with stock, orders. State-changing tools, so a task's
outcome is checked on the final state (AReaL-SEA's executable checkers). Runs in an astra-sandbox
session; `get_state()` is what the state verifier compares."""

PRODUCTS = {
    "P1": {"name": "apple", "price": 0.5, "stock": 10},
    "P2": {"name": "bread", "price": 2.0, "stock": 4},
    "P3": {"name": "coffee", "price": 7.5, "stock": 2},
}
CUSTOMERS = {
    "C1": {"name": "Ada Lovelace", "email": "ada@example.com", "balance": 20.0},
    "C2": {"name": "Alan Turing", "email": "alan@example.com", "balance": 5.0},
}
ORDERS = {
    "O1": {"customer_id": "C1", "items": [{"product_id": "P2", "quantity": 1}], "total": 2.0, "status": "pending"},
    "O2": {"customer_id": "C2", "items": [{"product_id": "P1", "quantity": 4}], "total": 2.0, "status": "delivered"},
}


def find_customer(email: str) -> dict:
    """The customer with this email address: id, name and balance."""
    for customer_id, customer in CUSTOMERS.items():
        if customer["email"] == email:
            return {"customer_id": customer_id, **customer}
    raise ValueError(f"no customer with email {email}")


def list_products() -> list:
    """Every product: id, name, price and stock."""
    return [{"product_id": product_id, **product} for product_id, product in PRODUCTS.items()]


def get_order(order_id: str) -> dict:
    """One order: customer, items, total and status."""
    if order_id not in ORDERS:
        raise ValueError(f"no order {order_id}")
    return {"order_id": order_id, **ORDERS[order_id]}


def place_order(customer_id: str, product_id: str, quantity: int) -> dict:
    """Buy `quantity` of a product for a customer; paid from the customer's balance."""
    if customer_id not in CUSTOMERS:
        raise ValueError(f"no customer {customer_id}")
    if product_id not in PRODUCTS:
        raise ValueError(f"no product {product_id}")
    product, customer = PRODUCTS[product_id], CUSTOMERS[customer_id]
    if quantity < 1 or quantity > product["stock"]:
        raise ValueError(f"quantity must be between 1 and {product['stock']}")
    total = round(product["price"] * quantity, 2)
    if total > customer["balance"]:
        raise ValueError(f"balance {customer['balance']} is below the total {total}")
    order_id = f"O{len(ORDERS) + 1}"
    product["stock"] -= quantity
    customer["balance"] = round(customer["balance"] - total, 2)
    ORDERS[order_id] = {"customer_id": customer_id, "items": [{"product_id": product_id, "quantity": quantity}],
                        "total": total, "status": "pending"}
    return {"order_id": order_id, "total": total}


def cancel_order(order_id: str) -> dict:
    """Cancel a pending order: the stock goes back and the customer is refunded."""
    order = ORDERS.get(order_id)
    if order is None:
        raise ValueError(f"no order {order_id}")
    if order["status"] != "pending":
        raise ValueError(f"order {order_id} is {order['status']}; only pending orders can be cancelled")
    for item in order["items"]:
        PRODUCTS[item["product_id"]]["stock"] += item["quantity"]
    customer = CUSTOMERS[order["customer_id"]]
    customer["balance"] = round(customer["balance"] + order["total"], 2)
    order["status"] = "cancelled"
    return {"order_id": order_id, "status": "cancelled", "refund": order["total"]}


def update_email(customer_id: str, email: str) -> dict:
    """Change a customer's email address."""
    if customer_id not in CUSTOMERS:
        raise ValueError(f"no customer {customer_id}")
    CUSTOMERS[customer_id]["email"] = email
    return {"customer_id": customer_id, "email": email}


def get_state() -> dict:
    return {"products": PRODUCTS, "customers": CUSTOMERS, "orders": ORDERS}
