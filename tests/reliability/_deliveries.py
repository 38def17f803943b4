"""Signed deliveries for the reliability tests, built from GitHub's own payload examples."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.helpers.shared_files import shared_path
from tests.helpers.webhook_delivery import post_delivery

FIXTURES = shared_path("fixtures/github-webhooks")
SECRET = b"reliability-secret"
REPO = "Codertocat/Hello-World"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def pull_request(**changes: Any) -> dict[str, Any]:
    """``pull_request.opened`` with ``changes`` applied: ``full_name``, ``number``, ``head_sha``,
    ``base_sha``, ``head_ref``, ``base_ref``, ``installation_id``."""
    p = copy.deepcopy(fixture("pull_request.opened"))
    if "full_name" in changes:
        p["repository"]["full_name"] = changes["full_name"]
    if "number" in changes:
        p["number"] = p["pull_request"]["number"] = changes["number"]
    for arm in ("head", "base"):
        if f"{arm}_sha" in changes:
            p["pull_request"][arm]["sha"] = changes[f"{arm}_sha"]
        if f"{arm}_ref" in changes:
            p["pull_request"][arm]["ref"] = changes[f"{arm}_ref"]
    if "installation_id" in changes:
        p["installation"]["id"] = changes["installation_id"]
    return p


# The poison list: each is signed correctly and would have stopped the PR sensor for good.
POISON: dict[str, dict[str, Any]] = {
    "repo-dotdot": pull_request(full_name="../x"),
    "repo-non-ascii-owner": pull_request(full_name="öwner/repo"),
    "repo-space": pull_request(full_name="own er/repo"),
    "repo-nul": pull_request(full_name="a\x00b/c"),
    "repo-leading-hyphen": pull_request(full_name="-owner/repo"),
    "repo-dot-name": pull_request(full_name="owner/.."),
    "pr-minus-one": pull_request(number=-1),
    "pr-zero": pull_request(number=0),
    "pr-huge": pull_request(number=2**63),
    "pr-float": pull_request(number=2.0),
    "pr-string": pull_request(number="7"),
    "head-sha-short": pull_request(head_sha="abc123"),
    "head-sha-not-hex": pull_request(head_sha="g" * 40),
    "base-sha-upper": pull_request(base_sha="A" * 40),
    "head-ref-dotdot": pull_request(head_ref="feature/../../etc"),
    "base-ref-control": pull_request(base_ref="ma\x07in"),
    "installation-negative": pull_request(installation_id=-5),
}


def post(
    port: int, body: bytes, event: str, delivery: str | None = None, content_type: str = "application/json"
) -> tuple[int, dict[str, Any]]:
    """POST ``body`` to the receiver on loopback, signed as GitHub signs it."""
    return post_delivery(port, SECRET, event, body, delivery, content_type=content_type)


def send(port: int, event: str, payload: dict[str, Any], delivery: str | None = None) -> tuple[int, dict[str, Any]]:
    return post(port, json.dumps(payload).encode(), event, delivery)
