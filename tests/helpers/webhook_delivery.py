"""Webhook deliveries for tests: GitHub's payload examples moved to a test repository, and a
POST to the receiver on loopback signed as GitHub signs it (shared by the end-to-end, served
and reliability tests)."""

from __future__ import annotations

import http.client
import json
import uuid
from typing import Any

from evalrunner_assets.http.webhook import sign

# The repository GitHub's payload examples name (tests/fixtures/github-webhooks/).
FIXTURE_REPO = "Codertocat/Hello-World"


def retarget(payload: dict[str, Any], repo: str) -> dict[str, Any]:
    """Move a fixture from Codertocat/Hello-World to ``repo`` (URLs included)."""
    payload = json.loads(json.dumps(payload).replace(FIXTURE_REPO, repo))
    owner, name = repo.split("/")
    payload["repository"]["name"] = name
    payload["repository"]["owner"]["login"] = owner
    payload["repository"]["default_branch"] = "main"
    return payload


def post_delivery(
    port: int,
    secret: bytes,
    event: str,
    body: bytes,
    delivery: str | None = None,
    *,
    content_type: str = "application/json",
    user_agent: str = "GitHub-Hookshot/tests",
    timeout: float = 60.0,
) -> tuple[int, dict[str, Any]]:
    """(status, answer); an answer that is not JSON comes back as ``{"raw": text}``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(
            "POST",
            "/webhooks/github",
            body=body,
            headers={
                "Content-Type": content_type,
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                "X-Hub-Signature-256": sign(secret, body),
                "User-Agent": user_agent,
            },
        )
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw or b"{}")
        except ValueError:
            return resp.status, {"raw": raw.decode("utf-8", "replace")}
    finally:
        conn.close()
