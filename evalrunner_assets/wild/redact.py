"""Redaction of a trace before anything is written or sent: Presidio, regex and checksum only.

Presidio's analyzer runs on its no-op NLP engine (``NoOpNlpEngine``: Presidio imports spaCy, but
no spaCy model is loaded, and none can be downloaded here), with its pattern/checksum
recognizers (email, phone via ``phonenumbers``, credit card with Luhn, IBAN with its checksum,
IP, URL, US SSN, crypto wallets, dates/times) plus ours: order ids, account numbers, internal
host names, API-key shapes, street addresses, company names, person names (from cue words and
capitalised name pairs, since there is no NER) and long digit runs. The score threshold is 0:
a weak pattern match is redacted, not kept (uncertain -> redacted). JSON tool arguments and
results are walked, and a value under a key such as ``name``/``email``/``phone``/``address``
is redacted whole.

Placeholders are consistent across a whole trace (and across the traces of one import):
``{{person_1}}`` is the same value everywhere. The mapping lives in memory only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from evalrunner_assets.wild.formats import Message, Trace

# Presidio entity -> placeholder stem.
STEMS = {
    "PERSON": "person",
    "COMPANY": "company",
    "EMAIL_ADDRESS": "email",
    "PHONE_NUMBER": "phone",
    "CREDIT_CARD": "card_number",
    "IBAN_CODE": "iban",
    "IP_ADDRESS": "ip_address",
    "URL": "url",
    "US_SSN": "ssn",
    "ID_NUMBER": "id_number",
    "CRYPTO": "wallet",
    "DATE_TIME": "time",
    "ORDER_ID": "order_id",
    "ACCOUNT_NUMBER": "account_number",
    "INTERNAL_HOST": "internal_host",
    "API_KEY": "api_key",
    "ADDRESS": "address",
    "POSTCODE": "postcode",
    "NUMBER": "number",
}
# Structured identifiers (what the bench's recall target is about).
STRUCTURED = frozenset(
    {"EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS", "US_SSN", "ORDER_ID",
     "ACCOUNT_NUMBER", "INTERNAL_HOST", "API_KEY"}
)  # fmt: skip
# JSON keys (normalised: snake_case) whose whole value is personal, whatever it looks like;
# :func:`sensitive_key` also matches the words of longer keys (``customerName``, ``billing_iban``).
SENSITIVE_KEYS = {
    "name": "PERSON", "first_name": "PERSON", "last_name": "PERSON", "full_name": "PERSON", "customer": "PERSON",
    "customer_name": "PERSON", "user": "PERSON", "username": "PERSON", "contact": "PERSON",
    "email": "EMAIL_ADDRESS", "e_mail": "EMAIL_ADDRESS", "phone": "PHONE_NUMBER", "mobile": "PHONE_NUMBER",
    "telephone": "PHONE_NUMBER", "address": "ADDRESS", "street": "ADDRESS", "postcode": "POSTCODE",
    "zip": "POSTCODE", "iban": "IBAN_CODE", "card": "CREDIT_CARD", "card_number": "CREDIT_CARD",
    "account": "ACCOUNT_NUMBER", "account_number": "ACCOUNT_NUMBER", "order_id": "ORDER_ID",
    "company": "COMPANY", "organisation": "COMPANY", "organization": "COMPANY", "api_key": "API_KEY",
    "token": "API_KEY", "password": "API_KEY", "secret": "API_KEY", "host": "INTERNAL_HOST",
    "hostname": "INTERNAL_HOST", "remote_addr": "IP_ADDRESS", "dob": "DATE_TIME",
}  # fmt: skip
# Words of a key, in the order they are tried: the first group with a word in the key decides.
_KEY_WORDS: list[tuple[str, frozenset[str]]] = [
    ("IP_ADDRESS", frozenset({"ip", "ipv4", "ipv6"})),
    ("EMAIL_ADDRESS", frozenset({"email", "emails", "mail", "mailbox"})),
    ("PHONE_NUMBER", frozenset({"phone", "phones", "mobile", "tel", "telephone", "fax", "cell", "cellphone", "msisdn",
                                "whatsapp", "sms"})),
    ("IBAN_CODE", frozenset({"iban"})),
    ("CREDIT_CARD", frozenset({"card", "cards", "pan", "cvv", "cvc", "creditcard", "cc"})),
    ("US_SSN", frozenset({"ssn"})),
    ("ID_NUMBER", frozenset({"passport", "nin", "tin", "vat", "license", "licence", "national", "tax", "nric", "vin",
                             "iccid", "imei", "aadhaar"})),
    ("API_KEY", frozenset({"secret", "secrets", "password", "passwd", "pwd", "passphrase", "credential",
                           "credentials", "token", "apikey", "auth", "authorization", "cookie", "session", "signature",
                           "otp", "pin", "bearer", "jwt"})),
    ("INTERNAL_HOST", frozenset({"host", "hostname", "hosts", "server", "fqdn", "hostnames"})),
    ("POSTCODE", frozenset({"postcode", "postal", "zip", "zipcode", "plz"})),
    ("ADDRESS", frozenset({"address", "addr", "street", "line1", "line2", "line3", "addresses", "residence"})),
    ("COMPANY", frozenset({"company", "organisation", "organization", "org", "employer", "business", "firm",
                           "merchant", "vendor", "supplier", "tenant"})),
    ("ORDER_ID", frozenset({"order", "orders", "booking", "reservation", "confirmation", "invoice", "tracking",
                            "pnr", "shipment", "parcel", "rma"})),
    ("ACCOUNT_NUMBER", frozenset({"account", "acct", "accounts", "iban", "routing", "sort", "membership", "loyalty",
                                  "policy", "contract", "subscription", "number", "no", "nr", "num"})),
    ("DATE_TIME", frozenset({"dob", "birth", "birthday", "birthdate"})),
    ("PERSON", frozenset({"name", "names", "customer", "customers", "client", "recipient", "recipients", "assignee",
                          "assignees", "owner", "owners", "requester", "reporter", "author", "sender", "to", "cc",
                          "bcc", "contact", "contacts", "user", "username", "login", "handle", "nickname", "creator",
                          "by", "approver", "reviewer", "manager", "employee", "patient", "member", "members",
                          "holder", "beneficiary", "payee", "payer", "signatory", "guest", "passenger", "driver",
                          "attendee", "attendees", "participant", "participants", "person", "people", "spouse",
                          "submitter", "firstname", "lastname", "fullname", "surname", "displayname", "signer",
                          "buyer", "seller", "tenant_name", "applicant", "caller", "subscriber", "watcher",
                          "watchers", "mentions", "mentioned"})),
]  # fmt: skip
# Last words that make a key about a value, not the value itself (``email_verified``, ``token_count``).
_KEY_NOT_VALUE = frozenset(
    {"count", "total", "len", "length", "size", "type", "types", "kind", "status", "format", "enabled", "verified",
     "valid", "required", "limit", "max", "min", "usage", "tokens", "used", "expires", "expiry", "ttl", "scope",
     "scopes", "provider", "method", "mode", "policy", "strategy", "version", "encoding", "lang", "language",
     "locale", "timezone", "tz", "currency", "brand", "network", "flag", "flags", "at", "field", "fields"}
)  # fmt: skip
# Words before ``name`` that make it a thing's name, not a person's (``toolName``, ``fileName``).
_THING_NAMES = frozenset(
    """file tool function product plan event service app application model table column field bucket branch repo
    repository project task queue topic metric class method module package image container pod namespace cluster db
    database schema index job step stage env variable var param parameter attribute attr tag label category feature
    device span operation op region zone resource role group team channel workflow action command script template
    key property test suite scorer dataset page view route path endpoint api library lib plugin item sku color
    colour theme font layout report form type kind status state city country town street page line version port
    build release issue pr row col column step attempt retry sequence seq chunk part batch""".split()
)  # fmt: skip
# A key's word for "the id of" (``customerId``, ``order_ref``): with a person word, an account.
_ID_WORDS = frozenset({"id", "ids", "ref", "reference", "number", "no", "num", "nr", "code", "uuid", "key"})
PLACEHOLDER = re.compile(r"\{\{[a-z_]+_\d+\}\}")


def key_words(key: str) -> list[str]:
    """``customerName``, ``customer-name``, ``CUSTOMER_NAME`` -> ``["customer", "name"]``."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", spaced)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


@cache
def sensitive_key(key: str) -> str | None:
    """The entity a JSON key's whole value is (None: the value is analysed as text)."""
    words = key_words(key)
    if not words:
        return None
    joined = "_".join(words)
    if joined in SENSITIVE_KEYS:
        return SENSITIVE_KEYS[joined]
    bare = [re.sub(r"\d+$", "", w) or w for w in words]
    if bare[-1] in _KEY_NOT_VALUE:
        return None
    found = set(bare)
    if "name" in found or "names" in found:
        before = bare[: bare.index("name" if "name" in found else "names")]
        if any(w in _THING_NAMES for w in before):
            return None
        if found & {"host", "domain", "server", "node", "machine"}:
            return "INTERNAL_HOST"
        if found & {"company", "organisation", "organization", "org", "business", "firm", "merchant", "employer",
                    "legal", "vendor", "supplier", "brand", "trading"}:  # fmt: skip
            return "COMPANY"
        return "PERSON"
    if found & {"api", "access", "private", "signing", "encryption", "ssh", "client", "auth", "license"} and (
        found & {"key", "keys", "secret"}
    ):
        return "API_KEY"
    if found & _ID_WORDS and found & {"customer", "user", "client", "member", "patient", "employee", "account",
                                       "subscriber", "person", "contact", "buyer", "tenant", "profile"}:  # fmt: skip
        return "ACCOUNT_NUMBER"
    if bare[-1] in ("number", "no", "nr", "num") and any(w in _THING_NAMES for w in bare[:-1]):
        return None  # page_number, line_no
    for entity, group in _KEY_WORDS:
        if found & group:
            return entity
    return None


# Capitalised words that start sentences or name things in support traffic but are no person.
_NOT_NAMES = frozenset(
    """The This That These Those There Then When What Where Which While Who Why How Hello Hi Hey Dear
    Thanks Thank Please Sorry Yes No Ok Okay Regards Best Kind Cheers Sincerely Order Account Customer
    Support Team Agent User Assistant System Tool Monday Tuesday Wednesday Thursday Friday Saturday Sunday
    January February March April May June July August September October November December I My Your Our
    We You He She It They Can Could Would Should Will Shall Did Does Do Is Are Was Were Has Have Had Not
    If And But Or For From To In On At By With Of As An A SEV1 SEV2 SEV3 SEV4 Incident Alert Runbook Page
    Status Summary Error Failed Refund Payment Delivery Shipping Street Road Avenue Lane London Paris Berlin
    Invoice Ticket Case Issue Note Subject Re Fwd Mr Mrs Ms Dr Prof API Http Https Json Null True False""".split()
)  # fmt: skip


# Lowercase words that follow a cue ("this is urgent", "hi all"): not names. spaCy's English
# stop words (no model needed) plus what support chats say after "I'm" / "this is".
_NOT_LOWER_NAMES = frozenset(
    """urgent ridiculous unacceptable frustrating important annoying weird strange odd broken wrong late
    having trying getting looking writing contacting reaching following waiting sending asking calling checking
    unable sorry sure glad happy confused frustrated stuck done new back here there again still not very really
    so just about regarding re all everyone team guys folks support there ok okay thanks thank please hello hi hey
    good great fine bad worse awful terrible totally completely absolutely literally actually honestly basically
    my our your the a an and or but if is are was were be been being have has had do does did can could would
    should will shall may might must to from for with of on in at by as it its this that these those what when
    where who why how which while ai bot assistant agent customer user admin manager owner mate bye cheers
    thx ty pls asap lol btw fyi tia regards best yours sincerely please help""".split()
)  # fmt: skip
# Last words of capitalised product and UI names ("Premium Plan", "Order History"): a weak First
# Last pair ending in one is no person. Cue-word matches and names already known are kept.
_THING_WORDS = frozenset(
    """Plan Plans Page Pages Dashboard Mode Modes App Apps Service Services Gateway Policy Policies History Console
    Indexer Platform Api API Flow Flows Performance Notes Settings Portal Center Centre Store Cart Checkout Status
    Login Profile Menu Button Tab Screen Window Editor Server Cloud Studio Suite Pro Plus Premium Edition Version
    Update Updates Release Feature Features Module Report Reports Logs Log Transit Queue Panel Widget Engine Tier
    Bundle Package Subscription Support Desk Team Teams Manager Dashboard Console Agent Bot Assistant Search Index
    Inbox Calendar Drive Docs Sheets Mail Chat Store Market Marketplace Hub Lab Labs Kit SDK CLI Portal Wallet""".split()
)  # fmt: skip
_PARTICLES = frozenset("van von der den de del della da di du la le bin ibn al el ter ten dos das y ní nic mac".split())


def _patterns() -> list[tuple[str, str, float, list[str]]]:
    r"""(entity, regex, score, context words) of our own pattern recognizers (the ``regex``
    module's syntax: Presidio compiles them with it, so ``\p{Lu}`` and variable lookbehinds work)."""
    word = r"(?:[OD]['’])?\p{Lu}\p{Ll}+(?:\p{Lu}\p{Ll}+)?(?:[-'’]\p{L}\p{Ll}+)*"
    particle = r"(?:van|von|der|den|de|del|della|da|di|du|la|le|bin|ibn|al|el|ter|ten|dos|das|Ní|Nic|Mac)"
    name = rf"{word}(?:\s(?:{particle}\s){{0,2}}{word}){{0,2}}"
    lower_word = r"\p{Ll}[\p{Ll}'’-]{1,}"
    cue = (
        r"(?:name is|name's|I am|I'm|Im|this is|it's|its|it is|Dear|Hi|Hello|Hey|Morning|Sorry|Thanks|Thank you|"
        r"Regards|Best|Cheers|Sincerely|Mr\.?|Mrs\.?|Ms\.?|Mx\.?|Dr\.?|Prof\.?|from|customer|contact|colleague|manager|"
        r"signed|by|for|cc|to|with|ask|asked|tell|told|call|called|ping|pinged|cc'd|assigned to|escalated to|"
        r"spoke to|spoke with|talked to|emailed|messaged)"
    )
    card_cue = r"(?i:ending(?:\s+in|\s+with)?|ends\s+(?:in|with)|last\s+(?:4|four)(?:\s+digits)?(?:\s+(?:are|is))?|[*xX•]{4}[\s-]?)"
    order_cue = (
        r"(?i:order|orders|booking|reservation|confirmation|invoice|ticket|case|tracking|shipment|parcel|return|"
        r"rma|purchase order|po|pnr|reference|ref)"
    )
    account_cue = (
        r"(?i:account|acct|customer|client|member|membership|user|subscriber|policy|contract|routing|sort code|"
        r"loyalty|profile)"
    )
    id_word = r"(?i:id|number|no\.?|num|nr\.?|#|ref|reference|code)"
    # An id: a run of letters/digits/dashes holding a digit (or an all-capitals code), digit groups kept together.
    id_value = r"#?(?:(?=[\w-]*\d)[A-Za-z0-9][\w-]{2,}(?:[ ]\d{2,})*|[A-Z]{5,}\b)"
    secret_key = (
        r"(?i:key|token|secret|password|passwd|pwd|pass|passphrase|credential|credentials|auth|authorization|"
        r"api[_-]?key|access[_-]?key|client[_-]?secret|private[_-]?key|cookie|session)"
    )
    street = (
        r"(?:Street|St|Avenue|Ave|Road|Rd|Lane|Ln|Boulevard|Blvd|Drive|Dr|Way|Court|Ct|Place|Pl|Square|Sq|Terrace|Ter|"
        r"Close|Crescent|Cres|Parkway|Pkwy|Highway|Hwy|Circle|Cir|Trail|Trl|Row|Mews|Gardens|Gdns|Grove|Hill|Walk|"
        r"Strasse|Straße|Gasse|Weg|Plaza|Alley|Loop|Pike|Green|Park|Rise|View|Wharf|Quay)"
    )
    unit = r"(?:,?\s*(?:Apt|Apartment|Suite|Ste|Unit|Flat|Fl|Floor|Room|Rm|Bldg|Building|#)\.?\s*[\w-]{1,6})?"
    return [
        # Vendors' order ids, and any id-looking token after an order cue word.
        ("ORDER_ID", r"\b(?:ORD|ORDER|SO|PO|INV|RMA|BK)[-_ #]?[A-Z0-9]{4,}(?:-[A-Z0-9]+)*\b", 0.9, ["order"]),
        ("ORDER_ID", rf"(?<=\b{order_cue}(?:\s+{id_word})?(?:\s+(?:is|was))?[\s:#(]*){id_value}", 0.8, []),
        ("ORDER_ID", r"(?<![\w#])#[A-Z]{0,3}-?\d{4,}\b", 0.6, ["order"]),
        ("ORDER_ID", r"\b\d{3}-\d{7}-\d{7}\b", 0.8, []),  # marketplace style
        ("ACCOUNT_NUMBER", r"\b(?:ACCT|ACC|CUST|CUS|AC|MEM|CID|UID)[-_ #]?\d{4,}\b", 0.9, ["account"]),
        (
            "ACCOUNT_NUMBER",
            r"\b(?:cus|acct|ch|pi|pm|sub|seti|src|tok|ba|card|in|ii|prod|price)_[A-Za-z0-9]{10,}\b",
            0.8,
            [],
        ),
        ("ACCOUNT_NUMBER", rf"(?<=\b{account_cue}(?:\s+{id_word})?(?:\s+(?:is|was))?[\s:#(]*){id_value}", 0.8, []),
        (
            "PERSON",
            r"(?<=\b(?i:user|username|user name|login|handle|userid|user id)\s*[:=]\s*)[^\s\"',;/]{2,}",
            0.6,
            [],
        ),
        ("ID_NUMBER", r"\b[A-Z]{2}\s?\d{2}\s?\d{2}\s?\d{2}\s?[A-D]\b", 0.7, []),  # UK NI number
        (
            "EMAIL_ADDRESS",
            r"(?i)\b[\w.+-]+\s*[(\[{<]\s*at\s*[)\]}>]\s*[\w-]+(?:\s*[(\[{<]\s*dot\s*[)\]}>]\s*[\w-]+)+",
            0.7,
            [],
        ),  # "jane (at) example (dot) com"
        ("ACCOUNT_NUMBER", r"\b\d{2}-\d{2}-\d{2}\b", 0.5, ["sort"]),  # UK sort code
        (
            "ID_NUMBER",
            rf"(?<=\b(?i:passport|licen[cs]e|driver'?s licen[cs]e|national id|id card|tax id|tax number|nin|"
            rf"ni number|national insurance|vat|nric|aadhaar|pan card|sin|tfn|bsn|steuer-id)(?:\s+{id_word})?[\s:#]*){id_value}",
            0.8,
            [],
        ),
        ("CREDIT_CARD", rf"(?<=\b(?i:card|visa|mastercard|amex)\b[^.\n]{{0,20}}{card_cue}\s*)\d{{4}}\b", 0.8, []),
        (
            "INTERNAL_HOST",
            r"(?i)\b[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*"
            r"\.(?:internal|corp|local|lan|intra|intranet|svc|cluster\.local|private|localdomain|home\.arpa|home|"
            r"int|priv|prod|staging|dev)\b",
            0.9,
            [],
        ),
        # Keys of common providers.
        ("API_KEY", r"\bsk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}", 1.0, []),
        ("API_KEY", r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}", 1.0, []),
        ("API_KEY", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b", 1.0, []),
        ("API_KEY", r"\bxox[abposre]-[A-Za-z0-9-]{10,}", 1.0, []),
        ("API_KEY", r"\bxapp-[A-Za-z0-9-]{10,}", 1.0, []),
        ("API_KEY", r"\b(?:pk|rk|sk)_(?:live|test)_[A-Za-z0-9]{10,}", 1.0, []),
        (
            "API_KEY",
            r"\b(?:whsec|shpat|shpss|dop_v1|hf|npm|glpat|gldt|pypi|sq0atp|sq0csp|xoxe|lin_api|pat)[-_][A-Za-z0-9_-]{16,}",
            1.0,
            [],
        ),
        ("API_KEY", r"\bSG\.[\w-]{16,}\.[\w-]{16,}", 1.0, []),
        ("API_KEY", r"\bAIza[0-9A-Za-z_-]{35}", 1.0, []),
        ("API_KEY", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", 1.0, []),  # JWT
        ("API_KEY", r"(?i)(?<=\b(?:bearer|basic|token) )[A-Za-z0-9._~+/=-]{12,}", 0.9, []),
        # A value given for a secret-named key ("password: hunter2", "api_key=…", "secret is …").
        ("API_KEY", rf"(?<=\b[\w.-]*{secret_key}[\w.-]*[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]{{4,}}", 0.7, []),
        ("API_KEY", rf"(?<=\b{secret_key}\s+(?:is\s+)?)(?=\S*\d)(?=\S*[A-Za-z])[^\s\"',;]{{8,}}", 0.6, []),
        (
            "API_KEY",
            r"(?<=\b(?i:password|passphrase|passwd|pwd|pin|passcode)\s+(?:is|was|=)\s+)[^\s\"',;]{4,}",
            0.7,
            [],
        ),
        ("API_KEY", r"(?<=://[^/\s:@]+:)[^@\s/]{3,}(?=@)", 0.9, []),  # a URL's password
        # High-entropy tokens: 20+ characters mixing capitals, small letters and digits; long hex.
        (
            "API_KEY",
            r"(?<![\w+/=-])(?=[\w+/=-]*\d)(?=[\w+/=-]*[a-z])(?=[\w+/=-]*[A-Z])[A-Za-z0-9_+/=-]{20,}",
            0.5,
            ["key", "token"],
        ),
        ("API_KEY", r"\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{32,}\b", 0.5, ["key", "token"]),
        # Street addresses: US/UK ("12B Baker Street, Apt 4"), French ("5 bis rue …"), German ("Lindenstraße 8a").
        (
            "ADDRESS",
            rf"\b\d{{1,5}}[A-Za-z]?(?:\s+(?:bis|ter))?,?\s+(?:[NSEW]\.?\s+)?(?:(?:\d+(?:st|nd|rd|th)|\p{{Lu}}[\p{{L}}'’.-]*)\s+){{1,4}}"
            rf"{street}\b\.?(?:\s+(?:NW|NE|SW|SE|N|S|E|W)\b)?{unit}",
            0.8,
            [],
        ),
        (
            "ADDRESS",
            r"(?i)\b\d{1,4}(?:\s*(?:bis|ter))?,?\s+(?:rue|avenue|av\.|boulevard|bd|place|impasse|allée|chemin|quai|"
            r"route|cours|passage|square|voie|calle|carrer|avenida|via|viale|piazza|rua|praça)\s+[^,\n\d]{2,40}",
            0.8,
            [],
        ),
        (
            "ADDRESS",
            r"\b(?:\p{Lu}[\p{Ll}äöüß-]+(?:straße|strasse|str\.|weg|gasse|platz|allee|ring|damm|ufer|chaussee|steig|pfad|"
            r"markt|gracht|laan|straat|plein|vej|gatan|gata|veien)|(?:Am|An der|Im|In der|Auf dem|Zum|Zur|Unter den)\s+"
            r"\p{Lu}[\p{L}-]+)\s+\d{1,4}\s?[a-z]?\b",
            0.8,
            [],
        ),
        (
            "ADDRESS",
            r"(?i)\b(?:p\.?\s?o\.?\s?box|post\s+office\s+box|postfach|bo[iî]te\s+postale|apartado)\s*#?\d{1,6}\b",
            0.8,
            [],
        ),
        (
            "ADDRESS",
            r"(?<=\b(?i:address|addr|live at|lives at|living at|ship to|deliver to|send to|located at)[\s:]+)\d{1,5}[A-Za-z]?\s+[^,\n]{3,40}",
            0.6,
            [],
        ),
        ("POSTCODE", r"\b[A-Z]{1,2}\d[A-Z\d]?\s*\d[A-Z]{2}\b", 0.6, []),  # UK
        ("POSTCODE", r"(?<=\b[A-Z]{2},?\s)\d{5}(?:-\d{4})?\b", 0.6, []),  # US ZIP after a state
        ("POSTCODE", r"\b\d{4,5}(?=\s+\p{Lu}\p{Ll}+)", 0.4, []),  # continental: postcode before the town
        ("POSTCODE", r"\b[A-Z]\d[A-Z]\s?\d[A-Z]\d\b", 0.6, []),  # Canada
        (
            "COMPANY",
            r"\b(?:\p{Lu}[\p{L}0-9&'’-]+[ \t]+(?:&[ \t]+)?){0,3}\p{Lu}[\p{L}0-9&'’-]+,?[ \t]+(?:Inc|Ltd|LLC|LLP|GmbH|Corp|Corporation|"
            r"Co|plc|PLC|AG|SA|S\.A|BV|B\.V|NV|N\.V|Pty(?:\s+Ltd)?|Limited|Holdings|Group|Partners|SARL|S\.A\.R\.L|SAS|"
            r"S\.A\.S|S\.L|SL|S\.p\.A|SpA|Srl|S\.r\.l|K\.K|KK|AS|A/S|ASA|AB|Oy|Oyj|KG|OHG|UG|e\.V|Sp\.\s?z\s?o\.o|"
            r"s\.r\.o|Kft|Bhd|Pte(?:\s+Ltd)?|LP|PC|PLLC|Ltda|S\.?A\.? de C\.?V)\b\.?",
            0.8,
            [],
        ),
        # Person names: after a cue word (capitalised, any script; or lowercase in casual chat),
        # or a First Last pair (weak). Lowercase words are checked against _NOT_LOWER_NAMES.
        ("PERSON", rf"(?<=\b(?i:{cue})[,:]?\s+){name}", 0.6, []),
        (
            "PERSON",
            rf"(?<=\b(?i:name is|name's|i am|i'm|im|this is|it's|its|hey|hi|hello|thanks|cheers|regards|sorry)[,:]?\s+){lower_word}(?:\s{lower_word})?",
            0.4,
            [],
        ),
        ("PERSON", rf"(?<=^\s*(?:--|—|-)?\s*\n\s*){name}\s*$", 0.5, []),  # a signature line
        ("PERSON", r"(?<=,\s*)\p{Ll}[\p{Ll}'’-]+(?=[.!]?\s*$)", 0.4, []),  # a lowercase sign-off: "cheers, dave"
        ("PERSON", rf"\b{word}(?:\s[A-Z]\.)?\s(?:{particle}\s){{0,2}}{word}(?:\s{word})?\b", 0.3, []),
        ("NUMBER", r"(?<![\w.])\+?\d(?:[ -]?\d){8,}(?![\w.])", 0.3, []),
    ]


def _luhn(digits: str) -> bool:
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c) * 2 if i % 2 else int(c)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


@cache
def analyzer() -> Any:
    """Presidio's analyzer on the no-op NLP engine with the regex/checksum recognizers."""
    from presidio_analyzer import AnalyzerEngine, Pattern, PatternRecognizer, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NoOpNlpEngine
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        CryptoRecognizer,
        DateRecognizer,
        EmailRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        UrlRecognizer,
        UsSsnRecognizer,
    )

    class OfflineEmailRecognizer(EmailRecognizer):
        # Presidio validates an email's domain with tldextract, which fetches the public suffix
        # list over the network; any address-shaped string is redacted here instead.
        def validate_result(self, pattern_text: str) -> bool | None:
            return None

    class LuhnCardRecognizer(PatternRecognizer):
        # Presidio's own card pattern knows some networks' prefixes only (not Mastercard's 2-series,
        # say): any 13-19 digit run, grouped or not, that passes Luhn is a card.
        def validate_result(self, pattern_text: str) -> bool | None:
            return _luhn(re.sub(r"\D", "", pattern_text))

    class AnyPhoneRecognizer(PatternRecognizer):
        # ``phonenumbers`` rejects numbers it does not think are allocated (a US area code
        # 145, an unlisted region): a phone-shaped run of 7-15 digits is redacted anyway.
        def validate_result(self, pattern_text: str) -> bool | None:
            digits = re.sub(r"\D", "", re.split(r"(?i)\s*(?:ext|x|#)", pattern_text)[0])
            return None if 7 <= len(digits) <= 15 else False  # None keeps the pattern's low score

    class AnyCaseIbanRecognizer(PatternRecognizer):
        # Presidio's IBAN recognizer wants capitals and its countries' layouts: any
        # IBAN-shaped run whose ISO 7064 checksum holds is one.
        def validate_result(self, pattern_text: str) -> bool | None:
            raw = re.sub(r"[\s-]", "", pattern_text).upper()
            return 15 <= len(raw) <= 34 and int("".join(str(int(c, 36)) for c in raw[4:] + raw[:4])) % 97 == 1

    registry = RecognizerRegistry(supported_languages=["en"])
    for recognizer in (
        OfflineEmailRecognizer(),
        # National formats of other regions are the phone-shaped pattern's (phonenumbers runs once per region).
        PhoneRecognizer(supported_regions=("US", "GB", "DE", "FR", "IE", "NL", "ES", "IT", "CA", "AU", "IN")),
        CreditCardRecognizer(),
        IbanRecognizer(),
        IpRecognizer(),
        UrlRecognizer(),
        UsSsnRecognizer(),
        CryptoRecognizer(),
        DateRecognizer(),
        AnyCaseIbanRecognizer(
            supported_entity="IBAN_CODE",
            name="evalrunner_iban",
            patterns=[Pattern("iban", r"(?i)\b[a-z]{2}\d{2}(?:[ -]?[a-z0-9]{4}){2,7}(?:[ -]?[a-z0-9]{1,4})?\b", 0.5)],
        ),
        LuhnCardRecognizer(
            supported_entity="CREDIT_CARD",
            name="evalrunner_luhn_card",
            patterns=[Pattern("luhn_card", r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])", 0.5)],
        ),
        AnyPhoneRecognizer(
            supported_entity="PHONE_NUMBER",
            name="evalrunner_any_phone",
            patterns=[
                Pattern(
                    "any_phone",
                    r"(?<![\w+.-])(?:\+|00)?(?:\(?\d{1,4}\)?[ .\/-]?)?(?:\(0\)\s?)?\(?\d{1,5}\)?(?:[ .\/-]?\d{2,5}){1,4}"
                    r"(?:\s*(?:ext\.?|extension|x|#)\s*\d{1,5})?(?![\w.-])",
                    0.4,
                )
            ],
            context=["phone", "call", "tel", "mobile", "reach", "text", "whatsapp"],
        ),
    ):
        registry.add_recognizer(recognizer)
    for i, (entity, regex, score, context) in enumerate(_patterns()):
        registry.add_recognizer(
            PatternRecognizer(
                supported_entity=entity,
                name=f"evalrunner_{entity.lower()}_{i}",
                patterns=[Pattern(f"{entity.lower()}_{i}", regex, score)],
                context=context,
                # Case matters for names and id prefixes; patterns that ignore it say (?i).
                global_regex_flags=re.DOTALL | re.MULTILINE,
            )
        )
    engine = NoOpNlpEngine(models=[{"lang_code": "en", "model_name": "none"}])
    engine.load()
    return AnalyzerEngine(registry=registry, nlp_engine=engine, supported_languages=["en"], default_score_threshold=0.0)


@dataclass(frozen=True)
class Finding:
    """One value found: where (in the original text of one field), its type and placeholder."""

    entity: str
    start: int
    end: int
    score: float
    placeholder: str


# Entities whose values are looked for again, in every form, across the rest of the import.
_UNSWEPT = frozenset({"DATE_TIME", "URL", "POSTCODE"})
_EXTENSION = re.compile(r"\s*(?:ext\.?|extension|x|#)\s*\d{1,5}\b", re.IGNORECASE)


def _lower(text: str) -> str:
    """``text`` in lowercase, of the same length (positions stay valid)."""
    low = text.lower()
    return low if len(low) == len(text) else "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _compact(text: str) -> tuple[str, list[int]]:
    """``text`` without separators (spaces, brackets, dots, dashes, plus, slash), and where each
    of its characters was."""
    kept = [(i, c) for i, c in enumerate(text) if not (c.isspace() or c in "().+/-")]
    return "".join(c for _, c in kept), [i for i, _ in kept]


def _is_name_word(word: str) -> bool:
    w = word.strip(".,'’")
    return len(w) >= 2 and w not in _NOT_NAMES and w.lower() not in _NOT_LOWER_NAMES and w.lower() not in _stop_words()


@cache
def _stop_words() -> frozenset[str]:
    from spacy.lang.en.stop_words import STOP_WORDS  # a word list: no model is loaded

    return frozenset(STOP_WORDS)


@dataclass
class Redactor:
    """Redacts the texts of one import, keeping ``{{stem_n}}`` consistent across them.

    A value found once (by a recognizer, or whole under a sensitive JSON key) is looked for
    again everywhere: its other spellings (case, separators, the digits alone), a person's
    single names, an email's local part. :meth:`trace` finds them in the whole trace first, so
    a name given only in a tool result is redacted in the user's greeting too."""

    mapping: dict[tuple[str, str], str] = field(default_factory=dict)  # (stem, normalised value) -> placeholder
    counts: dict[str, int] = field(default_factory=dict)  # placeholders issued per stem
    found: dict[str, int] = field(default_factory=dict)  # values found per entity
    people: set[str] = field(default_factory=set)  # person names seen (to keep their placeholders)
    known: dict[str, tuple[str, str]] = field(default_factory=dict)  # lowercase form -> (entity, placeholder)
    known_compact: dict[str, tuple[str, str]] = field(default_factory=dict)  # the same without separators
    _analysed: dict[str, list[Any]] = field(default_factory=dict, repr=False)  # per trace: text -> results
    _learning: bool = field(default=False, repr=False)  # the first pass of a trace: no sweep yet

    def placeholder(self, entity: str, value: str) -> str:
        stem = STEMS.get(entity, "pii")
        key = (stem, re.sub(r"[\s().-]", "", value).lower())
        if key not in self.mapping:
            self.counts[stem] = self.counts.get(stem, 0) + 1
            self.mapping[key] = f"{{{{{stem}_{self.counts[stem]}}}}}"
        return self.mapping[key]

    def remember(self, entity: str, value: str, placeholder: str, strong: bool = True) -> None:
        """Look for ``value`` (and, when it is certain, its parts) in every text from now on."""
        value = value.strip()
        if entity in _UNSWEPT or len(value) < 3 or PLACEHOLDER.search(value):
            return
        low = " ".join(_lower(value).split())
        self.known.setdefault(low, (entity, placeholder))
        compact = _compact(low)[0]
        if entity not in ("PERSON", "COMPANY", "ADDRESS") and len(compact) >= 6 and compact != low:
            # Another spelling of the same number or code: other separators, or none.
            self.known_compact.setdefault(compact, (entity, placeholder))
        if entity == "PERSON" and strong:
            for part in re.split(r"[\s,]+|(?<=\w)-(?=\w)", value):
                if _is_name_word(part) and part.lower() not in _PARTICLES and not part.isdigit():
                    self.known.setdefault(_lower(part), (entity, placeholder))
                    self.mapping.setdefault((STEMS[entity], part.lower()), placeholder)
        if entity == "EMAIL_ADDRESS" and "@" in value:
            local = low.split("@", 1)[0].split("+", 1)[0]
            if len(local) >= 3:
                self.known.setdefault(local, (entity, placeholder))

    def _known_spans(self, text: str) -> list[tuple[str, int, int, float, str | None]]:
        """Where the values remembered occur in ``text``, on word boundaries, in any case."""
        if self._learning or not (self.known or self.known_compact):
            return []
        low = _lower(text)
        spans: list[tuple[str, int, int, float, str | None]] = []

        def bounded(start: int, end: int) -> bool:
            return (start == 0 or not text[start - 1].isalnum()) and (end == len(text) or not text[end].isalnum())

        for form, (entity, placeholder) in self.known.items():
            i = low.find(form)
            while i != -1:
                if bounded(i, i + len(form)):
                    spans.append((entity, i, i + len(form), 0.5, placeholder))
                i = low.find(form, i + 1)
        if self.known_compact:
            compact, index = _compact(low)
            for form, (entity, placeholder) in self.known_compact.items():
                i = compact.find(form)
                while i != -1:
                    start, end = index[i], index[i + len(form) - 1] + 1
                    if bounded(start, end):
                        spans.append((entity, start, end, 0.5, placeholder))
                    i = compact.find(form, i + 1)
        return spans

    def _analyse(self, text: str) -> list[Any]:
        if text not in self._analysed:
            self._analysed[text] = analyzer().analyze(text=text, language="en", score_threshold=0.0)
        return self._analysed[text]

    def find(self, text: str) -> list[Finding]:
        """Non-overlapping findings in ``text`` (the longer, then the higher-scored span wins)."""
        if not text.strip():
            return []
        results = self._analyse(text)
        # A weak name match may take a word in front ("Call Jane Doe"): shrink it to a name
        # already seen (in this text or an earlier one), so the person keeps one placeholder.
        people = {text[r.start : r.end] for r in results if r.entity_type == "PERSON"} | self.people
        spans: list[tuple[str, int, int, float, str | None]] = []
        for r in results:
            start, end = r.start, r.end
            if r.entity_type == "PERSON":
                value = text[start:end]
                inner = max(
                    (p for p in people if p != value and " " in p and value.endswith(" " + p)), key=len, default=None
                )
                if inner is not None:
                    start = end - len(inner)
                if value.islower():
                    # A lowercase name after a cue: drop the words that are plain English.
                    words = value.split()
                    if not _is_name_word(words[0]):
                        continue
                    if len(words) > 1 and not _is_name_word(words[1]):
                        end = start + len(words[0])
            if r.entity_type == "PERSON":
                # "José Luis" of a "José Luis García" already known: the same person.
                owners = {self.mapping.get(("person", w.lower())) for w in text[start:end].split()}
                if len(owners) == 1 and None not in owners:
                    spans.append(("PERSON", start, end, r.score + 0.01, owners.pop()))
                    continue
            if r.entity_type == "PHONE_NUMBER":
                ext = _EXTENSION.match(text, end)
                end = ext.end() if ext else end
            spans.append((r.entity_type, start, end, r.score, None))
        spans += self._known_spans(text)
        ranked = sorted(spans, key=lambda r: (-(r[2] - r[1]), -r[3], r[1]))
        taken: list[Finding] = []
        for entity, start, end, score, known in ranked:
            value = text[start:end]
            if not value.strip() or PLACEHOLDER.fullmatch(value.strip()):
                continue
            if entity == "PERSON" and known is None:
                words = [w for w in re.split(r"[\s.,]+", value) if w]
                if all(w in _NOT_NAMES for w in words) or (score < 0.4 and words[-1] in _THING_WORDS):
                    continue
            if any(start < f.end and f.start < end for f in taken):
                continue
            placeholder = known or self.placeholder(entity, value)
            if known is None:
                if entity == "PERSON":
                    self.people.add(value)
                self.remember(entity, value, placeholder, strong=score >= 0.4)
            taken.append(Finding(entity, start, end, score, placeholder))
        return sorted(taken, key=lambda f: f.start)

    def text(self, text: str) -> tuple[str, list[Finding]]:
        findings = self.find(text)
        out, last = [], 0
        for f in findings:
            out.append(text[last : f.start])
            out.append(f.placeholder)
            self.found[f.entity] = self.found.get(f.entity, 0) + 1
            last = f.end
        out.append(text[last:])
        return "".join(out), findings

    def value(self, value: Any, key: str | None = None, inherited: str | None = None) -> Any:
        """A JSON value redacted: strings by analysis, or whole under a sensitive key (or a
        key inside a sensitive one: ``{"customer": {"first": …}}``)."""
        entity = (sensitive_key(key) if key else None) or inherited
        if isinstance(value, dict):
            return {k: self.value(v, k, entity) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, key, inherited) for v in value]
        if entity and isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip():
            text = str(value)
            self.found[entity] = self.found.get(entity, 0) + 1
            placeholder = self.placeholder(entity, text)
            self.remember(entity, text, placeholder)
            # The value may hold more than it is named for ("Jane Doe <jane@x.io>"): its parts too.
            for f in self.find(text) if " " in text.strip() and re.search(r"[@<\d]", text) else []:
                if f.placeholder != placeholder:
                    self.remember(f.entity, text[f.start : f.end], f.placeholder, strong=f.score >= 0.4)
            return placeholder
        if isinstance(value, str):
            nested = self._nested_json(value)
            return nested if nested is not None else self.text(value)[0]
        return value

    def _nested_json(self, text: str) -> str | None:
        """A string holding JSON (a tool result wrapped as text): walked as JSON."""
        if not text.lstrip().startswith(("{", "[")):
            return None
        try:
            parsed = json.loads(text)
        except (json.JSONDecodeError, ValueError):
            return None
        if not isinstance(parsed, (dict, list)):
            return None
        return json.dumps(self.value(parsed), sort_keys=True)

    def json_or_text(self, text: str) -> str:
        """A tool's arguments or result: walked as JSON when it is JSON, else as text."""
        nested = self._nested_json(text)
        return nested if nested is not None else self.text(text)[0]

    def trace(self, trace: Trace) -> Trace:
        """``trace`` with every string redacted (messages, tool calls and results, the failure
        note, metadata, the captured environment); its source label is kept (a file name).

        Twice: the first pass only learns the values (so one found late, e.g. in a tool
        result, is known when the user's first message is redacted), the second redacts."""
        self._analysed = {}
        counts = dict(self.found)
        self._learning = True
        try:
            self._redact_trace(trace)
        finally:
            self._learning = False
            self.found = counts
        try:
            return self._redact_trace(trace)
        finally:
            self._analysed = {}

    def _redact_trace(self, trace: Trace) -> Trace:
        messages = []
        for m in trace.messages:
            content = self.json_or_text(m.content) if m.role == "tool" else self.text(m.content)[0]
            calls = tuple(replace(c, arguments=self.json_or_text(c.arguments)) for c in m.tool_calls)
            messages.append(Message(m.role, content, calls, m.tool_call_id, m.name))
        return replace(
            trace,
            messages=tuple(messages),
            failure=self.text(trace.failure)[0],
            metadata={k: self.value(v, k) if isinstance(v, str) else v for k, v in trace.metadata.items()},
            environment={self.text(k)[0]: self.json_or_text(v) for k, v in trace.environment.items()},
        )


def redact_text(text: str, redactor: Redactor | None = None) -> str:
    """``text`` with every value found replaced by its placeholder."""
    return (redactor or Redactor()).text(text)[0]
