"""A holdout PII corpus for the wild-import redaction, written apart from the recognizers (and
from bench/_wild_corpus.py): its values, formats and templates were not seen when they were made.

Formats vary the way real traces do: phone numbers of many countries with and without country
codes, separators and extensions; emails with tags, subdomains, capitals and display names;
IBANs of many countries (valid ISO 7064 checksums) grouped or not; cards of several networks
(valid Luhn) grouped by the network's own pattern; street addresses in US, UK, German and French
styles; vendors' order and account ids; API keys of common providers and generic secrets;
IPv4/IPv6; internal host names; names from many cultures, in lowercase chat, greetings,
signatures and JSON tool arguments under camelCase keys; company names. Each trace is rendered
in one of the importer's three formats (chat JSONL, OpenTelemetry GenAI spans, Inspect log).

Each planted value carries the fragments that must not survive either (a card's last four
digits, an email's local part, each part of a name, an address's street and postcode), so a
partial redaction counts as a leak."""

from __future__ import annotations

import json
import random
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# --- values ---------------------------------------------------------------------------------

NAMES = [
    ("Siobhán", "Ní Bhraonáin"), ("José Luis", "García-Márquez"), ("Jürgen", "Großmann"), ("Wang", "Xiaoming"),
    ("Haruto", "Sato"), ("Ji-woo", "Park"), ("Priya", "Raghunathan"), ("Fatima", "El-Amin"),
    ("Chukwuemeka", "Obi"), ("Adaeze", "Nwosu"), ("Nguyen", "Thi Lan"), ("Dmitri", "Volkov"),
    ("Małgorzata", "Wiśniewska"), ("Ayşe", "Yılmaz"), ("Giorgos", "Papadopoulos"), ("Ingrid", "Østergaard"),
    ("Jean-Baptiste", "Lefèvre"), ("Seán", "O'Connor"), ("Callum", "McAllister"), ("Thandiwe", "Mokoena"),
    ("Mei", "Lin"), ("Rahul", "Venkataraman"), ("Zoë", "van der Berg"), ("Björn", "Andersson"),
    ("Aroha", "Ngata"), ("Tomasz", "Kowalczyk"), ("Leilani", "Kahale"), ("Oluwaseun", "Adeyemi"),
    ("Camille", "Dubois"), ("Mateus", "Carvalho"), ("Yuki", "Tanabe"), ("Esperanza", "Quispe"),
]  # fmt: skip
COMPANIES = [
    "Quillfeather Analytics GmbH", "Brightwater Foods Ltd", "Nordlicht Versand AG", "Maison Delacroix SARL",
    "Tanaka Seimitsu K.K.", "Sunrise Dental Pty Ltd", "Vértice Consultores S.L.", "Kestrel & Finch LLP",
    "Bluefjord Logistics AS", "Harborview Capital LLC", "Pinecrest Veterinary Inc.", "Osei Textiles Ltd",
]  # fmt: skip
US_STREETS = ["Magnolia Blvd", "Sycamore Court", "W 43rd St", "Pennington Ave NW", "Larkspur Lane", "Cedar Ridge Rd"]
US_CITIES = [("Springfield", "IL"), ("Austin", "TX"), ("Tacoma", "WA"), ("Savannah", "GA"), ("Duluth", "MN")]
UK_STREETS = ["Chalcot Crescent", "Marchmont Street", "Wellgate Road", "Bramley Close", "Hollins Lane"]
UK_TOWNS = ["Leeds", "Bristol", "Dundee", "Norwich", "Cardiff"]
DE_STREETS = ["Kastanienallee", "Lindenstraße", "Am Mühlbach", "Schillerplatz", "Gneisenaustr."]
DE_TOWNS = ["Leipzig", "Köln", "Freiburg im Breisgau", "Bremen"]
FR_STREETS = ["rue des Tanneurs", "avenue Jean Jaurès", "boulevard de la Croix-Rousse", "impasse des Lilas"]
FR_TOWNS = ["Lyon", "Nantes", "Toulouse", "Lille"]
DOMAINS = ["gmail.com", "outlook.co.uk", "mail.quillfeather.de", "eu.corp-brightwater.com", "yahoo.co.jp", "web.de"]

# Harmless text that looks like identifiers, numbers or names (what precision is measured on).
DISTRACTORS = [
    "The checkout service returned HTTP 503 after 30s; build 4.18.2 is deployed.",
    "Error code E_TIMEOUT_0042 appeared at 14:05 in the Payments Gateway logs.",
    "Our Premium Plan costs $49.99 per month and includes 3 seats.",
    "I tried Chrome 126 and Firefox 128 on Windows 11, same result.",
    "The Mobile App shows a spinner, then the Order History page is blank.",
    "Please check the FAQ and the Returns Policy before step 2.",
    "Release notes for v2.3.0 mention the New Dashboard and Dark Mode.",
    "Tracking says In Transit since Tuesday, about 5 business days.",
]

# Common English words that may follow a lowercase name cue ("this is urgent"): not names.
_LOWER_DISTRACTOR_NAMES = ["this is urgent", "i'm not sure", "this is the third time", "i am so frustrated"]


@dataclass
class Planted:
    kind: str
    value: str
    parts: list[str] = field(default_factory=list)  # fragments that must not survive either


@dataclass
class HoldoutTrace:
    format: str  # chat-jsonl | otel-genai | inspect
    messages: list[dict[str, Any]]  # {"role", "content", "tool_calls": [{"id","name","arguments"}], "tool_call_id"}
    failure: str
    planted: list[Planted] = field(default_factory=list)


def _digits(rng: random.Random, n: int, first: str = "123456789") -> str:
    return rng.choice(first) + "".join(rng.choice(string.digits) for _ in range(n - 1))


def luhn_complete(body: str) -> str:
    total = 0
    for i, c in enumerate(reversed(body)):
        d = int(c) * 2 if i % 2 == 0 else int(c)
        total += d - 9 if d > 9 else d
    return body + str((10 - total % 10) % 10)


def card(rng: random.Random) -> str:
    network = rng.choice(["visa", "mc", "mc2", "amex", "discover", "visa", "mc"])
    prefix, length = {
        "visa": ("4", 16),
        "mc": (str(rng.randrange(51, 56)), 16),
        "mc2": (str(rng.randrange(2221, 2721)), 16),
        "amex": (rng.choice(["34", "37"]), 15),
        "discover": (rng.choice(["6011", "65"]), 16),
    }[network]
    raw = luhn_complete(prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1)))
    groups = [4, 6, 5] if length == 15 else [4, 4, 4, 4]
    sep = rng.choice([" ", "-", "", " "])
    out, i = [], 0
    for g in groups:
        out.append(raw[i : i + g])
        i += g
    return sep.join(out)


# (country, BBAN layout: n digits, a upper letters, c alphanumerics)
_IBAN_LAYOUTS = {
    "DE": "18n", "FR": "10n11c2n", "ES": "20n", "IT": "1a10n12c", "NL": "4a10n", "BE": "12n", "CH": "5n12c",
    "AT": "16n", "PL": "24n", "SE": "20n", "IE": "4a14n", "PT": "21n", "NO": "11n", "DK": "14n", "FI": "14n",
    "LU": "3n13c", "SA": "2n18c", "AE": "19n", "BR": "23n1a1c", "TR": "5n1n16c", "GB": "4a14n",
}  # fmt: skip


def iban(rng: random.Random) -> str:
    country = rng.choice(sorted(_IBAN_LAYOUTS))
    bban = ""
    for count, kind in re.findall(r"(\d+)([nac])", _IBAN_LAYOUTS[country]):
        pool = {"n": string.digits, "a": string.ascii_uppercase, "c": string.digits * 3 + string.ascii_uppercase}[kind]
        bban += "".join(rng.choice(pool) for _ in range(int(count)))
    numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
    raw = f"{country}{98 - int(numeric) % 97:02d}{bban}"
    style = rng.random()
    if style < 0.45:
        return " ".join(raw[i : i + 4] for i in range(0, len(raw), 4))
    if style < 0.9:
        return raw
    return "-".join(raw[i : i + 4] for i in range(0, len(raw), 4))


def phone(rng: random.Random) -> str:
    d = lambda n: _digits(rng, n)  # noqa: E731
    forms = [
        lambda: f"({d(3)}) {d(3)}-{d(4)}",
        lambda: f"{d(3)}.{d(3)}.{d(4)}",
        lambda: f"+1-{d(3)}-{d(3)}-{d(4)}",
        lambda: f"{d(3)}-{d(3)}-{d(4)} ext. {d(3)}",
        lambda: f"1 ({d(3)}) {d(3)} {d(4)} x{d(2)}",
        lambda: f"+1{d(10)}",
        lambda: f"+44 7{d(3)} {d(6)}",
        lambda: f"07{d(3)} {d(6)}",
        lambda: f"+44 (0)20 7{d(3)} {d(4)}",
        lambda: f"+49 30 {d(8)}",
        lambda: f"0151/{d(8)}",
        lambda: f"+49 (0)171 {d(3)} {d(4)}",
        lambda: f"+33 6 {d(2)} {d(2)} {d(2)} {d(2)}",
        lambda: f"06.{d(2)}.{d(2)}.{d(2)}.{d(2)}",
        lambda: f"+91 9{d(4)} {d(5)}",
        lambda: f"+91-9{d(9)}",
        lambda: f"+61 4{d(2)} {d(3)} {d(3)}",
        lambda: f"(02) 9{d(3)} {d(4)}",
        lambda: f"+55 11 9{d(4)}-{d(4)}",
        lambda: f"(21) 9{d(4)}-{d(4)}",
        lambda: f"+81 90-{d(4)}-{d(4)}",
        lambda: f"03-{d(4)}-{d(4)}",
        lambda: f"+31 6 {d(8)}",
        lambda: f"+34 6{d(2)} {d(2)} {d(2)} {d(2)}",
        lambda: f"+27 82 {d(3)} {d(4)}",
        lambda: f"+65 9{d(3)} {d(4)}",
        lambda: f"+52 55 {d(4)} {d(4)}",
        lambda: f"00353 8{d(1)} {d(3)} {d(4)}",
    ]
    return rng.choice(forms)()


def email(rng: random.Random, first: str, last: str) -> tuple[str, str]:
    """(the address as written, its local part)."""
    ascii_first = _ascii(first).lower().replace(" ", "")
    ascii_last = _ascii(last).lower().replace(" ", "").replace("'", "")
    domain = rng.choice(DOMAINS)
    local = rng.choice(
        [
            f"{ascii_first}.{ascii_last}",
            f"{ascii_first[0]}{ascii_last}+billing",
            f"{ascii_last}_{ascii_first}{rng.randrange(10, 99)}",
            f"{ascii_first}-{ascii_last}+support.2024",
            f"{ascii_first.upper()}.{ascii_last.upper()}",
            f"{ascii_first}{rng.randrange(1970, 2005)}",
        ]
    )
    if rng.random() < 0.2:
        domain = domain.upper()
    return f"{local}@{domain}", local.split("+")[0]


def _ascii(s: str) -> str:
    table = str.maketrans("áàâäãåçéèêëíìîïñóòôöõøúùûüýÿłśşıßđ", "aaaaaaceeeeiiiinoooooouuuuyylssisd")
    return s.lower().translate(table)


def address(rng: random.Random) -> tuple[str, list[str]]:
    """(the address as written, the fragments: street line, postcode)."""
    style = rng.choice(["us", "us_apt", "po", "uk", "uk_flat", "de", "fr"])
    if style in ("us", "us_apt"):
        city, state = rng.choice(US_CITIES)
        street = f"{rng.randrange(10, 9999)} {rng.choice(US_STREETS)}"
        zip_ = _digits(rng, 5)
        unit = rng.choice([", Apt 4B", ", Suite 210", " #12", ", Unit 7"]) if style == "us_apt" else ""
        return f"{street}{unit}, {city}, {state} {zip_}", [street, zip_]
    if style == "po":
        city, state = rng.choice(US_CITIES)
        box = rng.choice(["PO Box", "P.O. Box", "P.O. BOX"]) + f" {rng.randrange(100, 99999)}"
        zip_ = _digits(rng, 5)
        return f"{box}, {city}, {state} {zip_}-{_digits(rng, 4)}", [box, zip_]
    if style in ("uk", "uk_flat"):
        street = f"{rng.randrange(1, 300)} {rng.choice(UK_STREETS)}"
        letters = string.ascii_uppercase
        pc = f"{rng.choice(['LS', 'BS', 'DD', 'NR', 'CF', 'M', 'E'])}{rng.randrange(1, 20)} {rng.randrange(1, 10)}"
        pc += rng.choice(letters) + rng.choice(letters)
        flat = f"Flat {rng.randrange(1, 30)}, " if style == "uk_flat" else ""
        return f"{flat}{street}, {rng.choice(UK_TOWNS)} {pc}", [street, pc]
    if style == "de":
        street = f"{rng.choice(DE_STREETS)} {rng.randrange(1, 200)}{rng.choice(['', 'a', 'b'])}"
        plz = f"{rng.randrange(10, 99)}{_digits(rng, 3, string.digits)}"
        return f"{street}, {plz} {rng.choice(DE_TOWNS)}", [street, plz]
    street = f"{rng.randrange(1, 150)}{rng.choice(['', ' bis'])} {rng.choice(FR_STREETS)}"
    cp = f"{rng.choice(['69', '44', '31', '59'])}{_digits(rng, 3, string.digits)}"
    return f"{street}, {cp} {rng.choice(FR_TOWNS)}", [street, cp]


def order_id(rng: random.Random) -> tuple[str, str]:
    """(the phrase as written, the id)."""
    forms = [
        lambda: (lambda v: (f"order {v}", v))(_digits(rng, 8)),
        lambda: (lambda v: (f"order {v}", v))(f"#A-{_digits(rng, 5)}"),
        lambda: (lambda v: (f"Order No. {v}", v))(f"2024-{_digits(rng, 5)}"),
        lambda: (lambda v: (f"order {v}", v))("ORD_" + "".join(rng.choice("XYZ987QWK") for _ in range(6))),
        lambda: (lambda v: (f"order #{v}", v))(f"{_digits(rng, 3)}-{_digits(rng, 7)}-{_digits(rng, 7)}"),
        lambda: (lambda v: (f"purchase order {v}", v))(f"PO-2025-{_digits(rng, 5, string.digits)}"),
        lambda: (lambda v: (f"my order ({v})", v))(f"SO{_digits(rng, 8)}"),
        lambda: (lambda v: (f"order ref {v}", v))(f"{rng.choice('KXQ')}{_digits(rng, 2)}-{_digits(rng, 2)}-QZ"),
        lambda: (lambda v: (f"booking reference {v}", v))("".join(rng.choice("BCDFGHJKLMNPQRSTVWXZ23456789") for _ in range(6))),
    ]  # fmt: skip
    return rng.choice(forms)()


def account_id(rng: random.Random) -> tuple[str, str]:
    forms = [
        lambda: (lambda v: (f"account {v}", v))(_digits(rng, 8, "0")),
        lambda: (lambda v: (f"acct no. {v}", v))(f"{_digits(rng, 4)} {_digits(rng, 4)} {_digits(rng, 2)}"),
        lambda: (lambda v: (f"customer ID {v}", v))(f"CUS-{_digits(rng, 5)}"),
        lambda: (lambda v: (f"member #{v}", v))(f"M-{_digits(rng, 4)}-AX"),
        lambda: (lambda v: (f"account number: {v}", v))(f"{_digits(rng, 3)}-{_digits(rng, 6)}-{_digits(rng, 1)}"),
        lambda: (lambda v: (f"customer {v}", v))("cus_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(14))),
        lambda: (lambda v: (f"routing 021000021, account {v}", v))(_digits(rng, 12)),
    ]  # fmt: skip
    return rng.choice(forms)()


def _token(rng: random.Random, n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def api_key(rng: random.Random) -> tuple[str, str]:
    """(the phrase as written, the secret)."""
    alnum = string.ascii_letters + string.digits
    urlsafe = alnum + "-_"
    hexd = "0123456789abcdef"
    forms = [
        lambda: ("OPENAI_API_KEY={}", "sk-" + _token(rng, 48)),
        lambda: ("my key is {}", "sk-proj-" + _token(rng, 120, urlsafe)),
        lambda: ("ANTHROPIC_API_KEY: {}", "sk-ant-api03-" + _token(rng, 93, urlsafe) + "AA"),
        lambda: ("token {}", "ghp_" + _token(rng, 36)),
        lambda: ("GH token {}", "github_pat_11" + _token(rng, 20, string.ascii_uppercase + string.digits) + "_" + _token(rng, 59)),
        lambda: ("aws_access_key_id = {}", "AKIA" + _token(rng, 16, string.ascii_uppercase + "234567")),
        lambda: ("aws_secret_access_key = {}", _token(rng, 40, alnum + "/+")),
        lambda: ("SLACK_BOT_TOKEN={}", f"xoxb-{_digits(rng, 12)}-{_digits(rng, 13)}-{_token(rng, 24)}"),
        lambda: ("stripe key {}", "sk_live_51" + _token(rng, 96)),
        lambda: ("webhook secret {}", "whsec_" + _token(rng, 32)),
        lambda: ("maps key {}", "AIza" + _token(rng, 35, urlsafe)),
        lambda: ("Authorization: Bearer {}", "eyJhbGciOiJIUzI1NiJ9." + _token(rng, 60, urlsafe) + "." + _token(rng, 43, urlsafe)),
        lambda: ("password: {}", rng.choice(["Tr0ub4dor&3", "hunter2-Blue!", "Winter2025!!", "p@ssW0rd#77"])),
        lambda: ('"secret": "{}"', _token(rng, 32, hexd)),
        lambda: ("token={}", _token(rng, 44, alnum + "+/") + "="),
        lambda: ("HF_TOKEN={}", "hf_" + _token(rng, 34)),
        lambda: ("gitlab token {}", "glpat-" + _token(rng, 20, urlsafe)),
        lambda: ("SENDGRID_API_KEY={}", "SG." + _token(rng, 22, urlsafe) + "." + _token(rng, 43, urlsafe)),
        lambda: ("db: postgres://admin:{}@db.example.com/app", _token(rng, 14)),
        lambda: ("npm token {}", "npm_" + _token(rng, 36)),
    ]  # fmt: skip
    phrase, secret = rng.choice(forms)()
    return phrase.format(secret), secret


def ip(rng: random.Random) -> str:
    r = rng.randrange
    return rng.choice(
        [
            f"10.{r(256)}.{r(256)}.{r(1, 255)}",
            f"192.168.{r(256)}.{r(1, 255)}",
            f"172.{r(16, 32)}.{r(256)}.{r(1, 255)}",
            f"{r(11, 223)}.{r(256)}.{r(256)}.{r(1, 255)}",
            f"2001:db8:{r(65536):x}::{r(65536):x}:{r(65536):x}",
            f"fe80::{r(65536):x}:{r(65536):x}:{r(65536):x}:{r(65536):x}",
            f"2a02:{r(65536):x}:{r(65536):x}:{r(65536):x}:{r(65536):x}:{r(65536):x}:{r(65536):x}:{r(65536):x}",
        ]
    )


def host(rng: random.Random) -> str:
    n = rng.randrange(1, 40)
    return rng.choice(
        [
            f"pg-replica-{n}.billing.corp",
            f"ci-runner-{n:02d}.build.internal",
            f"ldap{n:02d}.ad.acme.lan",
            "grafana.ops.acme.intranet",
            f"redis-master-{n}.cache.svc.cluster.local",
            f"ip-10-0-{n}-17.eu-west-1.compute.internal",
            f"nas{n}.home.arpa",
            f"kafka-{n}.stream.prod.local",
        ]
    )


# --- traces ---------------------------------------------------------------------------------


def _person_parts(first: str, last: str) -> list[str]:
    return [w for w in re.split(r"[\s-]+", f"{first} {last}") if len(w) >= 3 and w.lower() not in ("van", "der")]


def make_trace(rng: random.Random, i: int) -> HoldoutTrace:
    first, last = rng.choice(NAMES)
    person = f"{first} {last}"
    agent_first, agent_last = rng.choice([n for n in NAMES if n[0] != first])
    agent = f"{agent_first} {agent_last}"
    company = rng.choice(COMPANIES)
    mail, local = email(rng, first, last)
    tel = phone(rng)
    tel2 = phone(rng)
    the_card = card(rng)
    the_iban = iban(rng)
    addr, addr_parts = address(rng)
    order_phrase, order = order_id(rng)
    account_phrase, account = account_id(rng)
    key_phrase, key = api_key(rng)
    the_ip = ip(rng)
    the_host = host(rng)
    casual = rng.random() < 0.35
    distractor = rng.choice(DISTRACTORS)
    if casual:
        name_text = rng.choice(
            [f"hey its {first.lower()} here", f"this is {person.lower()}", f"hi, {first.lower()} again"]
        )
        user = (
            f"{name_text}. {rng.choice(_LOWER_DISTRACTOR_NAMES)} but {order_phrase} got charged twice on card "
            f"{the_card}. call me on {tel} or mail {mail}. ship to {addr}. {distractor}"
        )
    else:
        greeting = rng.choice(["Hello", "Good morning", "Hi there", "Hi team"])
        intro = rng.choice(
            [f"I'm {person} from {company}", f"my name is {person} ({company})",
             f"{person} here, I work for {company}", f"This is {first} {last} at {company}"]
        )  # fmt: skip
        user = (
            f"{greeting}, {intro}. Regarding {order_phrase}: the refund should go to IBAN {the_iban}, "
            f"not the card ending {the_card[-4:]} (full number {the_card}). Phone {tel}, alt. {tel2}. "
            f"Address: {addr}. {distractor}\n\nThanks,\n{first}\n--\n{person}\n{company}"
        )
    user2 = f"Also {account_phrase} keeps failing. Our integration logs show {key_phrase} from {the_ip} via {the_host}."
    args = {
        "customerName": person,
        "contactInfo": {"emailAddress": mail, "mobileNumber": tel},
        "orderRef": order,
        "shippingAddress": {"line1": addr_parts[0], "postalCode": addr_parts[1], "country": "XX"},
        "payment": {"cardNumber": the_card.replace(" ", "") if rng.random() < 0.5 else the_card, "currency": "EUR"},
        "assignee": agent.lower() if rng.random() < 0.3 else agent,
        "notifyRecipients": [f"{agent} <{_ascii(agent_first)}@{rng.choice(DOMAINS)}>"],
    }
    result = {
        "ok": False,
        "error": "refund_rejected",
        "record": {
            "owner": person,
            "billingIban": the_iban,
            "accountId": account,
            "companyName": company,
            "clientIp": the_ip,
            "upstreamHost": the_host,
            "apiKey": key,
            "history": [{"createdBy": {"displayName": agent}, "note": f"called {tel2}, no answer"}],
        },
    }
    reply = (
        f"Sorry {first}, I've escalated {order_phrase} to {agent} in billing. We will write to {mail}. "
        f"{rng.choice(DISTRACTORS)}"
    )
    failure = f"refund denied for {person} ({mail}); agent said the card {the_card} was not found"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are the support agent. Be concise."},
        {"role": "user", "content": user},
        {"role": "assistant", "content": "", "tool_calls": [{"id": f"call_{i}", "name": "issue_refund", "arguments": args}]},
        {"role": "tool", "tool_call_id": f"call_{i}", "name": "issue_refund", "content": json.dumps(result)},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": user2},
        {"role": "assistant", "content": "Thanks, I rotated nothing; please contact security."},
    ]  # fmt: skip
    email_agent = f"{_ascii(agent_first)}@"
    planted = [
        Planted("PERSON", person, _person_parts(first, last)),
        Planted("PERSON", agent, _person_parts(agent_first, agent_last)),
        Planted("COMPANY", company),
        Planted("EMAIL_ADDRESS", mail, [local] if len(local) >= 4 else []),
        Planted("EMAIL_ADDRESS", email_agent),
        Planted("PHONE_NUMBER", tel),
        Planted("PHONE_NUMBER", tel2),
        Planted("CREDIT_CARD", the_card, [the_card[-4:]]),
        Planted("IBAN_CODE", the_iban),
        Planted("ADDRESS", addr, addr_parts),
        Planted("ORDER_ID", order),
        Planted("ACCOUNT_NUMBER", account),
        Planted("API_KEY", key, [key[:12], key[-12:]] if len(key) > 24 else []),
        Planted("IP_ADDRESS", the_ip),
        Planted("INTERNAL_HOST", the_host),
    ]
    fmt = ("chat-jsonl", "otel-genai", "inspect")[i % 3]
    return HoldoutTrace(fmt, messages, failure, planted)


def make_corpus(count: int, seed: int) -> list[HoldoutTrace]:
    rng = random.Random(seed)
    return [make_trace(rng, i) for i in range(count)]


# --- rendering in the importer's three formats ----------------------------------------------


def _chat_record(t: HoldoutTrace) -> dict[str, Any]:
    messages = []
    for m in t.messages:
        out: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if m.get("tool_calls"):
            out["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                for c in m["tool_calls"]
            ]  # fmt: skip
        if m.get("tool_call_id"):
            out["tool_call_id"] = m["tool_call_id"]
        messages.append(out)
    return {"messages": messages, "outcome": "thumbs_down", "comment": t.failure}


def _otel_spans(t: HoldoutTrace, trace_id: str) -> list[dict[str, Any]]:
    def attr(k: str, v: str) -> dict[str, Any]:
        return {"key": k, "value": {"stringValue": v}}

    def parts(m: dict[str, Any]) -> dict[str, Any]:
        ps: list[dict[str, Any]] = [{"type": "text", "content": m["content"]}] if m["content"] else []
        ps += [
            {"type": "tool_call", "id": c["id"], "name": c["name"], "arguments": c["arguments"]}
            for c in m.get("tool_calls", [])
        ]
        return {"role": m["role"], "parts": ps}  # fmt: skip

    spans: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    clock = 1
    for m in t.messages:
        if m["role"] == "tool":
            spans.append({"traceId": trace_id, "spanId": f"{clock:016x}", "startTimeUnixNano": str(clock),
                          "name": f"execute_tool {m['name']}",
                          "attributes": [attr("gen_ai.operation.name", "execute_tool"), attr("gen_ai.tool.name", m["name"]),
                                         attr("gen_ai.tool.call.id", m["tool_call_id"]),
                                         attr("gen_ai.tool.call.arguments", json.dumps(t.messages[2]["tool_calls"][0]["arguments"])),
                                         attr("gen_ai.tool.call.result", m["content"])]})  # fmt: skip
            clock += 1
            continue
        if m["role"] == "assistant":
            spans.append({"traceId": trace_id, "spanId": f"{clock:016x}", "startTimeUnixNano": str(clock), "name": "chat",
                          "attributes": [attr("gen_ai.operation.name", "chat"), attr("gen_ai.request.model", "gpt-4.1"),
                                         attr("gen_ai.input.messages", json.dumps([parts(h) for h in history])),
                                         attr("gen_ai.output.messages", json.dumps([parts(m)]))]})  # fmt: skip
            clock += 1
            history = []
            continue
        history.append(m)
    spans[-1]["status"] = {"code": 2, "message": t.failure}
    return spans


def _inspect_log(traces: list[HoldoutTrace], path: Path) -> None:
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSample, EvalSpec, write_eval_log
    from inspect_ai.model import ChatMessage, ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser
    from inspect_ai.scorer import Score
    from inspect_ai.tool import ToolCall

    samples = []
    for n, t in enumerate(traces, 1):
        messages: list[ChatMessage] = []
        for m in t.messages:
            if m["role"] == "system":
                messages.append(ChatMessageSystem(content=m["content"]))
            elif m["role"] == "user":
                messages.append(ChatMessageUser(content=m["content"]))
            elif m["role"] == "assistant":
                calls = [
                    ToolCall(id=c["id"], function=c["name"], arguments=c["arguments"]) for c in m.get("tool_calls", [])
                ]
                messages.append(ChatMessageAssistant(content=m["content"], tool_calls=calls or None))
            else:
                messages.append(
                    ChatMessageTool(content=m["content"], tool_call_id=m["tool_call_id"], function=m["name"])
                )
        samples.append(
            EvalSample(id=n, epoch=1, input=t.messages[1]["content"], target="refund issued", messages=messages,
                       scores={"includes": Score(value="I", explanation=t.failure)})
        )  # fmt: skip
    spec = EvalSpec(
        created="2026-11-02T09:00:00+00:00", task="support", dataset=EvalDataset(), model="openai/gpt-4.1",
        config=EvalConfig(),
    )  # fmt: skip
    write_eval_log(EvalLog(eval=spec, samples=samples, status="success"), str(path))


def write_corpus(directory: Path, count: int, seed: int) -> tuple[list[Path], list[HoldoutTrace]]:
    """The corpus written as three files (one per format), and its traces in the order the
    importer reads them back (chat JSONL, then OTel, then Inspect)."""
    traces = make_corpus(count, seed)
    chat = [t for t in traces if t.format == "chat-jsonl"]
    otel = [t for t in traces if t.format == "otel-genai"]
    inspect = [t for t in traces if t.format == "inspect"]
    paths = []
    if chat:
        paths.append(directory / "holdout.jsonl")
        paths[-1].write_text("".join(json.dumps(_chat_record(t)) + "\n" for t in chat), encoding="utf-8")
    if otel:
        spans = [s for n, t in enumerate(otel) for s in _otel_spans(t, f"{n + 1:032x}")]
        paths.append(directory / "holdout-spans.json")
        paths[-1].write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}), encoding="utf-8")
    if inspect:
        paths.append(directory / "holdout-inspect.json")
        _inspect_log(inspect, paths[-1])
    return paths, chat + otel + inspect


# --- judging --------------------------------------------------------------------------------

_SEPARATORS = re.compile(r"[\s().+/-]")


def _fragments(p: Planted) -> list[str]:
    return [p.value, *p.parts]


def survives(text: str, p: Planted) -> list[str]:
    """The fragments of ``p`` still in ``text``: verbatim (case-insensitive, on word
    boundaries), separators removed, and for numbers the digits alone."""
    lowered = text.lower()
    compact = _SEPARATORS.sub("", lowered)
    found = []
    for frag in _fragments(p):
        f = frag.lower()
        if not f.strip():
            continue
        if re.search(
            rf"(?<![\w]){re.escape(f)}(?![\w])" if f[-1].isalnum() and f[0].isalnum() else re.escape(f), lowered
        ):
            found.append(frag)
            continue
        cf = _SEPARATORS.sub("", f)
        if len(cf) >= 6 and cf in compact:
            found.append(frag)
            continue
        digits = re.sub(r"\D", "", frag)
        if len(digits) >= 6 and sum(c.isdigit() for c in f) >= 0.7 * len(cf):
            # A number's digits may come back with other separators: compare digit runs.
            if re.search(rf"(?<!\d){digits}(?!\d)", re.sub(r"(?<=\d)[\s().+/-]+(?=\d)", "", text)):
                found.append(frag)
    return found


@dataclass
class Measured:
    recall: dict[str, tuple[int, int]]  # kind -> (caught, planted)
    leaks: list[str]  # "KIND value: fragments left"
    true: int  # distinct values redacted that are (part of) a planted value
    false: list[str]  # distinct values redacted that are not
    traces: int
    seconds: float

    def structured_recall(self, kinds: frozenset[str]) -> float:
        caught = sum(c for k, (c, _) in self.recall.items() if k in kinds)
        return caught / max(1, sum(n for k, (_, n) in self.recall.items() if k in kinds))

    @property
    def precision(self) -> float:
        return self.true / max(1, self.true + len(self.false))


def measure(directory: Path, count: int, seed: int) -> Measured:
    """The corpus read by the importer's readers and redacted by one :class:`Redactor`, as
    ``evalrunner wild import`` does; recall per kind and precision over distinct values."""
    import dataclasses
    import time

    from evalrunner_assets.wild import Redactor, read_traces

    paths, corpus = write_corpus(directory, count, seed)
    traces = [t for p in paths for t in read_traces(p)]
    assert len(traces) == len(corpus), (len(traces), len(corpus))
    redactor = Redactor()
    recall: dict[str, list[int]] = {}
    leaks = []
    start = time.perf_counter()
    for trace, held in zip(traces, corpus, strict=True):
        out = redactor.trace(trace)
        text = json.dumps(dataclasses.asdict(out), ensure_ascii=False)
        for p in held.planted:
            left = survives(text, p)
            counts = recall.setdefault(p.kind, [0, 0])
            counts[0] += int(not left)
            counts[1] += 1
            if left:
                leaks.append(f"{p.kind} {p.value!r} ({held.format}): {left}")
    seconds = time.perf_counter() - start
    planted = {_SEPARATORS.sub("", f.lower()) for t in corpus for p in t.planted for f in _fragments(p)}
    planted.discard("")
    true, false = 0, []
    for (_, value), _placeholder in redactor.mapping.items():
        v = _SEPARATORS.sub("", value)
        if any(v and (v in f or (len(f) >= 3 and f in v)) for f in planted):
            true += 1
        else:
            false.append(value)
    return Measured({k: (c, n) for k, (c, n) in recall.items()}, leaks, true, false, len(corpus), seconds)


if __name__ == "__main__":
    import sys
    import tempfile

    from evalrunner_assets.wild import STRUCTURED

    with tempfile.TemporaryDirectory() as tmp:
        m = measure(Path(tmp), int(sys.argv[1]) if len(sys.argv) > 1 else 60, seed=2026)
    for kind, (c, n) in sorted(m.recall.items()):
        print(f"{kind:<15} {c / n:.3f} ({c}/{n})")
    print(
        f"structured {m.structured_recall(STRUCTURED):.3f} precision {m.precision:.3f} ({m.true} / {len(m.false)} other)"
    )
    print(f"{m.seconds / m.traces * 1000:.0f} ms/trace")
    print("\n".join(m.leaks))
    print("false:", sorted(set(m.false)))
