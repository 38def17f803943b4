"""A failure trace of the example support agent as a user would report it from the wild, and
the personal values planted in it (none may reach a PR, a page or the lake)."""

from __future__ import annotations

PLANTED = ("Maria Keller", "ORD-77341", "4539 1488 0343 6467", "maria.keller@globex.example", "+49 30 901820",
           "pay-7.billing.internal", "Globex Corp")  # fmt: skip
TRACE = {
    "messages": [
        {"role": "system", "content": "You are the support agent on the Shopfront platform."},
        {"role": "user", "content": "Hi, this is Maria Keller from Globex Corp. My order ORD-77341 was charged twice "
         "to card 4539 1488 0343 6467. Reach me at maria.keller@globex.example or +49 30 901820. Please refund."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "order_lookup", "arguments": "{\"order_id\": \"ORD-77341\"}"}}]},
        {"role": "tool", "tool_call_id": "c1",
         "content": "{\"customer\": \"Maria Keller\", \"charges\": 2, \"host\": \"pay-7.billing.internal\"}"},
        {"role": "assistant", "content": "Dear Maria Keller, I cannot see a double charge on ORD-77341."},
    ],
    "outcome": "failure",
    "reason": "denied a duplicate charge the tool showed",
}  # fmt: skip
