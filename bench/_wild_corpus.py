"""A synthetic trace corpus with planted personal values, for the wild-import tests and bench.

Every value is generated (checksums valid where the format has one: Luhn for cards, ISO 7064
for IBANs), so a test can assert that none of them survives redaction anywhere."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

FIRST = ["Maria", "Jonas", "Aisha", "Oliver", "Chen", "Sofia", "Liam", "Priya", "Mateo", "Hannah", "Kwame", "Elena"]
LAST = ["Keller", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Brennan", "Haddad", "Silva", "Fischer"]
COMPANIES = ["Globex Corp", "Initech Ltd", "Umbrella Holdings", "Vandelay Industries Inc", "Stark Logistics GmbH"]
# Harmless text that looks like identifiers or names: what precision is measured against.
DISTRACTORS = [
    "Runbook RB-104 for payments-api says SEV2 incidents page payments-core.",
    "The Shopfront Platform returned HTTP 502 from checkout-web; retry in 30 seconds.",
    "Release 2.14.3 of the Order Service fixed the Refund Flow in March.",
    "Status Page: Degraded Performance on Search Indexer, 3 regions affected.",
    "Use the Billing Dashboard and the Support Console to check charges.",
    "Ticket volume rose 12 percent; median wait 4 minutes.",
]
STREETS = ["Baker Street", "Elm Avenue", "Kings Road", "Mill Lane", "Harbour Way", "Oak Drive"]


def luhn_card(rng: random.Random, prefix: str = "4") -> str:
    digits = [int(c) for c in prefix] + [rng.randrange(10) for _ in range(15 - len(prefix))]
    total = 0
    for i, d in enumerate(reversed(digits)):
        d = d * 2 if i % 2 == 0 else d
        total += d - 9 if d > 9 else d
    digits.append((10 - total % 10) % 10)
    s = "".join(map(str, digits))
    return " ".join(s[i : i + 4] for i in range(0, 16, 4))


def iban(rng: random.Random) -> str:
    bank = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(4))
    account = "".join(str(rng.randrange(10)) for _ in range(14))
    rearranged = bank + account + "GB00"
    numeric = "".join(str(int(c, 36)) for c in rearranged)
    check = 98 - int(numeric) % 97
    raw = f"GB{check:02d}{bank}{account}"
    return " ".join(raw[i : i + 4] for i in range(0, len(raw), 4))


@dataclass
class Planted:
    kind: str
    value: str


@dataclass
class CorpusTrace:
    record: dict
    planted: list[Planted] = field(default_factory=list)


def make_trace(rng: random.Random, i: int) -> CorpusTrace:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    person = f"{first} {last}"
    company = rng.choice(COMPANIES)
    email = f"{first.lower()}.{last.lower()}{i}@{company.split()[0].lower()}.example.com"
    phone = f"+44 20 7{rng.randrange(100, 999)} {rng.randrange(1000, 9999)}"
    card = luhn_card(rng)
    the_iban = iban(rng)
    order = f"ORD-{rng.randrange(10000, 99999)}"
    account = f"ACCT-{rng.randrange(100000, 999999)}"
    key = "sk-proj-" + "".join(rng.choice("abcdefghijkLMNOPQRS0123456789") for _ in range(28))
    host = f"db-{rng.randrange(1, 9)}.payments.internal"
    address = f"{rng.randrange(1, 400)} {rng.choice(STREETS)}"
    ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    user = (
        f"Hello, my name is {person} from {company}. Order {order} was charged twice to my card {card}. "
        f"Please refund to IBAN {the_iban}. You can reach me at {email} or {phone}; I live at {address}. "
        f"{rng.choice(DISTRACTORS)}"
    )
    args = json.dumps({"order_id": order, "email": email})
    result = json.dumps({"customer": person, "account": account, "charges": 2, "host": host, "client_ip": ip})
    record = {
        "messages": [
            {"role": "system", "content": "You are the support agent on the Shopfront platform."},
            {"role": "user", "content": user},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "order_lookup", "arguments": args}}]},
            {"role": "tool", "tool_call_id": "c1", "content": result},
            {"role": "assistant", "content": f"Dear {person}, our logs ({host}) show one charge. Debug key {key}. "
             f"{rng.choice(DISTRACTORS)} {rng.choice(DISTRACTORS)}"},
        ],
        "tools": [{"type": "function", "function": {"name": "order_lookup"}}],
        "outcome": "failure",
        "reason": f"denied a duplicate charge to {person}",
    }  # fmt: skip
    planted = [
        Planted("PERSON", person), Planted("COMPANY", company), Planted("EMAIL_ADDRESS", email),
        Planted("PHONE_NUMBER", phone), Planted("CREDIT_CARD", card), Planted("IBAN_CODE", the_iban),
        Planted("ORDER_ID", order), Planted("ACCOUNT_NUMBER", account), Planted("API_KEY", key),
        Planted("INTERNAL_HOST", host), Planted("ADDRESS", address), Planted("IP_ADDRESS", ip),
    ]  # fmt: skip
    return CorpusTrace(record, planted)


def write_corpus(path: Path, count: int, seed: int = 7) -> list[CorpusTrace]:
    rng = random.Random(seed)
    traces = [make_trace(rng, i) for i in range(count)]
    path.write_text("".join(json.dumps(t.record) + "\n" for t in traces), encoding="utf-8")
    return traces


def leaks(text: str, traces: list[CorpusTrace]) -> list[str]:
    """The planted values found in ``text`` (digits compared without separators too)."""
    compact = "".join(text.split())
    found = []
    for t in traces:
        for p in t.planted:
            if p.value in text or "".join(p.value.split()) in compact:
                found.append(f"{p.kind}: {p.value}")
    return found
