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
# JSON keys whose whole value is personal, whatever it looks like.
SENSITIVE_KEYS = {
    "name": "PERSON", "first_name": "PERSON", "last_name": "PERSON", "full_name": "PERSON", "customer": "PERSON",
    "customer_name": "PERSON", "user": "PERSON", "username": "PERSON", "contact": "PERSON",
    "email": "EMAIL_ADDRESS", "e_mail": "EMAIL_ADDRESS", "phone": "PHONE_NUMBER", "mobile": "PHONE_NUMBER",
    "telephone": "PHONE_NUMBER", "address": "ADDRESS", "street": "ADDRESS", "postcode": "POSTCODE",
    "zip": "POSTCODE", "iban": "IBAN_CODE", "card": "CREDIT_CARD", "card_number": "CREDIT_CARD",
    "account": "ACCOUNT_NUMBER", "account_number": "ACCOUNT_NUMBER", "order_id": "ORDER_ID",
    "company": "COMPANY", "organisation": "COMPANY", "organization": "COMPANY", "api_key": "API_KEY",
    "token": "API_KEY", "password": "API_KEY", "secret": "API_KEY", "host": "INTERNAL_HOST",
    "hostname": "INTERNAL_HOST",
}  # fmt: skip
PLACEHOLDER = re.compile(r"\{\{[a-z_]+_\d+\}\}")

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


def _patterns() -> list[tuple[str, str, float, list[str]]]:
    """(entity, regex, score, context words) of our own pattern recognizers."""
    name = r"[A-Z][a-z]+(?:[-'][A-Z][a-z]+)?"
    return [
        ("ORDER_ID", r"\b(?:ORD|ORDER|SO|PO|INV)[-_ #]?[A-Z0-9]{4,}(?:-[A-Z0-9]+)*\b", 0.9, ["order"]),
        ("ORDER_ID", r"(?<=(?i:order)(?:\s+(?i:id|number|no\.?|#))?[\s:#]*)\d{5,}\b", 0.8, []),
        ("ORDER_ID", r"#\d{5,}\b", 0.6, ["order"]),
        ("ACCOUNT_NUMBER", r"\b(?:ACCT|ACC|CUST|AC)[-_ #]?\d{4,}\b", 0.9, ["account"]),
        (
            "ACCOUNT_NUMBER",
            r"(?<=(?i:account)(?:\s+(?i:id|number|no\.?|#))?[\s:#]*)(?=[A-Z-]*\d)[A-Z0-9-]{6,}\b",
            0.8,
            [],
        ),
        ("ACCOUNT_NUMBER", r"\b\d{2}-\d{2}-\d{2}\b", 0.5, ["sort"]),  # UK sort code
        (
            "INTERNAL_HOST",
            r"(?i)\b[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*"
            r"\.(?:internal|corp|local|lan|intra|intranet|svc|cluster\.local|private)\b",
            0.9,
            [],
        ),
        ("API_KEY", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}\b", 1.0, []),
        ("API_KEY", r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}\b", 1.0, []),
        ("API_KEY", r"\bAKIA[0-9A-Z]{16}\b", 1.0, []),
        ("API_KEY", r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b", 1.0, []),
        ("API_KEY", r"\b(?:pk|rk|sk)_(?:live|test)_[A-Za-z0-9]{10,}\b", 1.0, []),
        ("API_KEY", r"\bAIza[0-9A-Za-z_-]{35}\b", 1.0, []),
        ("API_KEY", r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b", 1.0, []),  # JWT
        ("API_KEY", r"(?i)(?<=bearer )[A-Za-z0-9._~+/=-]{12,}", 0.9, []),
        # High-entropy tokens: 24+ characters mixing letters and digits.
        ("API_KEY", r"\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{32,}\b", 0.5, ["key", "token"]),
        (
            "ADDRESS",
            r"\b\d{1,5}[A-Za-z]?,?\s+(?:[A-Z][a-z]+\s+){1,4}(?:Street|St|Avenue|Ave|Road|Rd|Lane|Ln|Boulevard|Blvd|"
            r"Drive|Dr|Way|Court|Ct|Place|Pl|Square|Sq|Terrace|Close|Crescent|Parkway|Strasse|Straße|Gasse|Weg)\b\.?",
            0.8,
            [],
        ),
        ("POSTCODE", r"\b[A-Z]{1,2}\d[A-Z\d]?\s*\d[A-Z]{2}\b", 0.6, []),  # UK
        ("POSTCODE", r"(?<=[A-Z]{2} )\d{5}(?:-\d{4})?\b", 0.6, []),  # US ZIP after a state
        (
            "COMPANY",
            r"\b(?:[A-Z][A-Za-z0-9&'-]+\s+){0,3}[A-Z][A-Za-z0-9&'-]+,?\s+(?:Inc|Ltd|LLC|LLP|GmbH|Corp|Corporation|"
            r"Co|plc|PLC|AG|SA|S\.A|BV|B\.V|NV|Pty|Limited|Holdings|Group|Partners)\b\.?",
            0.8,
            [],
        ),
        # Person names: after a cue word (any capitalised word), or a First Last pair (weak).
        (
            "PERSON",
            rf"(?<=\b(?:name is|I am|I'm|This is|Dear|Hi|Hello|Hey|Regards,|Thanks,|Cheers,|Mr\.?|Mrs\.?|Ms\.?|Dr\.?|"
            rf"from|customer|contact|signed|by|for|cc|to) )(?:{name})(?: {name}){{0,2}}",
            0.6,
            [],
        ),
        ("PERSON", rf"\b{name}(?: [A-Z]\.)? {name}(?: {name})?\b", 0.3, []),
        ("NUMBER", r"(?<![\w.])\+?\d(?:[ -]?\d){8,}(?![\w.])", 0.3, []),
    ]


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

    registry = RecognizerRegistry(supported_languages=["en"])
    for recognizer in (
        OfflineEmailRecognizer(),
        PhoneRecognizer(supported_regions=("US", "GB", "DE", "FR", "IE", "NL", "ES", "IT", "CA", "AU", "IN")),
        CreditCardRecognizer(),
        IbanRecognizer(),
        IpRecognizer(),
        UrlRecognizer(),
        UsSsnRecognizer(),
        CryptoRecognizer(),
        DateRecognizer(),
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


@dataclass
class Redactor:
    """Redacts the texts of one import, keeping ``{{stem_n}}`` consistent across them."""

    mapping: dict[tuple[str, str], str] = field(default_factory=dict)  # (stem, normalised value) -> placeholder
    counts: dict[str, int] = field(default_factory=dict)  # placeholders issued per stem
    found: dict[str, int] = field(default_factory=dict)  # values found per entity
    people: set[str] = field(default_factory=set)  # person names seen (to keep their placeholders)

    def placeholder(self, entity: str, value: str) -> str:
        stem = STEMS.get(entity, "pii")
        key = (stem, re.sub(r"[\s().-]", "", value).lower())
        if key not in self.mapping:
            self.counts[stem] = self.counts.get(stem, 0) + 1
            self.mapping[key] = f"{{{{{stem}_{self.counts[stem]}}}}}"
        return self.mapping[key]

    def find(self, text: str) -> list[Finding]:
        """Non-overlapping findings in ``text`` (the longer, then the higher-scored span wins)."""
        if not text.strip():
            return []
        results = analyzer().analyze(text=text, language="en", score_threshold=0.0)
        # A weak name match may take a word in front ("Call Jane Doe"): shrink it to a name
        # already seen (in this text or an earlier one), so the person keeps one placeholder.
        people = {text[r.start : r.end] for r in results if r.entity_type == "PERSON"} | self.people
        spans = []
        for r in results:
            start, end = r.start, r.end
            if r.entity_type == "PERSON":
                value = text[start:end]
                inner = max(
                    (p for p in people if p != value and " " in p and value.endswith(" " + p)), key=len, default=None
                )
                if inner is not None:
                    start = end - len(inner)
            spans.append((r.entity_type, start, end, r.score))
        ranked = sorted(spans, key=lambda r: (-(r[2] - r[1]), -r[3], r[1]))
        taken: list[Finding] = []
        for entity, start, end, score in ranked:
            value = text[start:end]
            if not value.strip() or PLACEHOLDER.fullmatch(value.strip()):
                continue
            if entity == "PERSON" and all(w in _NOT_NAMES for w in re.split(r"[\s.,]+", value) if w):
                continue
            if any(start < f.end and f.start < end for f in taken):
                continue
            if entity == "PERSON":
                self.people.add(value)
            taken.append(Finding(entity, start, end, score, self.placeholder(entity, value)))
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

    def value(self, value: Any, key: str | None = None) -> Any:
        """A JSON value redacted: strings by analysis, or whole under a sensitive key."""
        if isinstance(value, dict):
            return {k: self.value(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, key) for v in value]
        entity = SENSITIVE_KEYS.get((key or "").lower().replace("-", "_"))
        if entity and isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            self.found[entity] = self.found.get(entity, 0) + 1
            return self.placeholder(entity, str(value))
        if isinstance(value, str):
            return self.text(value)[0]
        return value

    def json_or_text(self, text: str) -> str:
        """A tool's arguments or result: walked as JSON when it is JSON, else as text."""
        try:
            parsed = json.loads(text)
        except (json.JSONDecodeError, ValueError):
            return self.text(text)[0]
        if not isinstance(parsed, (dict, list)):
            return self.text(text)[0]
        return json.dumps(self.value(parsed), sort_keys=True)

    def trace(self, trace: Trace) -> Trace:
        """``trace`` with every string redacted (messages, tool calls and results, the failure
        note, metadata, the captured environment); its source label is kept (a file name)."""
        messages = []
        for m in trace.messages:
            content = self.json_or_text(m.content) if m.role == "tool" else self.text(m.content)[0]
            calls = tuple(replace(c, arguments=self.json_or_text(c.arguments)) for c in m.tool_calls)
            messages.append(Message(m.role, content, calls, m.tool_call_id, m.name))
        return replace(
            trace,
            messages=tuple(messages),
            failure=self.text(trace.failure)[0],
            metadata={k: self.text(v)[0] for k, v in trace.metadata.items()},
            environment={self.text(k)[0]: self.json_or_text(v) for k, v in trace.environment.items()},
        )


def redact_text(text: str, redactor: Redactor | None = None) -> str:
    """``text`` with every value found replaced by its placeholder."""
    return (redactor or Redactor()).text(text)[0]
