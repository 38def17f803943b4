"""Redaction on the holdout corpus (bench/_pii_holdout.py: values and formats written apart from
the recognizers), through the importer's readers of all three formats and one Redactor, as
`evalrunner wild import` runs them: structured identifiers reach recall 0.98, and no planted
value survives, whole or in part (a card's last four digits, an email's local part, a surname,
a number's digits with other separators)."""

from __future__ import annotations

from bench._pii_holdout import Planted, make_corpus, measure, survives
from evalrunner_assets.wild import STRUCTURED
from evalrunner_assets.wild.redact import sensitive_key


def test_the_holdout_corpus_is_redacted_whole(tmp_path):
    m = measure(tmp_path, 30, seed=2026)
    assert {k for k, (_, n) in m.recall.items() if n} >= STRUCTURED - {"US_SSN"}
    assert m.structured_recall(STRUCTURED) >= 0.98, m.recall
    assert m.leaks == []
    assert m.precision >= 0.95, sorted(set(m.false))


def test_the_judge_sees_partial_leaks():
    # What the holdout test relies on: a fragment, or the digits with other separators, is a leak.
    card = Planted("CREDIT_CARD", "4929 1234 5678 9012", ["9012"])
    assert survives("card ending 9012", card) == ["9012"]
    assert survives("{{card_number_1}}", card) == []
    assert survives("4929-1234-5678-9012", card)
    phone = Planted("PHONE_NUMBER", "+49 (0)171 555 1234")
    assert survives("call +490171.555.1234", phone)
    name = Planted("PERSON", "Zoë van der Berg", ["Zoë", "Berg"])
    assert survives("Dear Ms. Berg", name) == ["Berg"]
    assert make_corpus(3, seed=1)[0].planted == make_corpus(3, seed=1)[0].planted  # seeded


def test_sensitive_keys_are_matched_by_their_words():
    for key, entity in [
        ("customerName", "PERSON"), ("recipient", "PERSON"), ("assignee", "PERSON"), ("owner", "PERSON"),
        ("created_by", "PERSON"), ("displayName", "PERSON"), ("billing_email", "EMAIL_ADDRESS"),
        ("contact-email", "EMAIL_ADDRESS"), ("mobileNumber", "PHONE_NUMBER"), ("postalCode", "POSTCODE"),
        ("shipping_address_line1", "ADDRESS"), ("billingIban", "IBAN_CODE"), ("cardNumber", "CREDIT_CARD"),
        ("customerId", "ACCOUNT_NUMBER"), ("orderRef", "ORDER_ID"), ("x-api-key", "API_KEY"),
        ("DB_PASSWORD", "API_KEY"), ("clientIp", "IP_ADDRESS"), ("upstreamHost", "INTERNAL_HOST"),
        ("companyName", "COMPANY"),
    ]:  # fmt: skip
        assert sensitive_key(key) == entity, key
    for key in ("toolName", "file_name", "max_tokens", "token_count", "email_verified", "status", "currency"):
        assert sensitive_key(key) is None, key
