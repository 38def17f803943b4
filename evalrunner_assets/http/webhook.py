"""The GitHub webhook receiver: verify, normalize, write to the inbox, answer fast.

``POST /webhooks/github``, in this order (nothing is parsed before the signature is checked):

1. body size: ``Content-Length`` over the cap → 413 without reading; a chunked body is read
   only up to the cap → 413;
2. ``X-Hub-Signature-256`` = ``sha256=`` HMAC-SHA256(secret, raw body) → 401 when missing or wrong;
3. ``X-GitHub-Event`` / ``X-GitHub-Delivery`` present and usable → else 400;
4. JSON (or GitHub's form encoding, ``payload=<json>``) → 400 when malformed or nested too deeply;
5. repository allow-list → **403** for a repository not on it. The sender proved it holds the
   secret, so this is a configuration mismatch (a hook or app installation wider than the
   allow-list); a 403 shows up red in GitHub's "Recent deliveries" with the reason, whereas
   accepting and ignoring it would hide the mismatch. Deliveries without a repository (an app's
   ``ping``) skip this step.
6. the event: ``ping`` → 200; a PR opened/synchronize/reopened, a default-branch push or an
   ``/eval more [N]`` from OWNER/MEMBER/COLLABORATOR → written once to the inbox, then 202;
   anything else (unknown events, other actions, other comments) → 202 ``ignored`` with the
   reason, nothing written. A redelivery of a written delivery → 200 ``duplicate``. Before a
   delivery is written, every field that becomes a path, key or number is checked
   (``evalrunner_assets.github.inbox.validate_record``: GitHub's repository naming rules, PR numbers, SHAs, git
   ref names, ids, comment size) → 400 with the reason for an invalid one.

Work happens in Dagster (the PR sensor reads the inbox); the receiver only writes one small file
pair per delivery. The secret comes from ``EVALRUNNER_WEBHOOK_SECRET`` or the file named by
``EVALRUNNER_WEBHOOK_SECRET_FILE`` and is never logged. Running without one needs the explicit
insecure mode, and that mode only binds to loopback.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from evalrunner_assets.errors import EvalrunnerError, InputError
from evalrunner_assets.github.inbox import (
    Ignored,
    InboxError,
    body_digest,
    check_delivery_id,
    normalize_delivery,
    repo_of,
    write_delivery,
)
from lake.storage import Lake, open_lake

log = logging.getLogger("evalrunner.webhook")

SECRET_ENV = "EVALRUNNER_WEBHOOK_SECRET"
SECRET_FILE_ENV = "EVALRUNNER_WEBHOOK_SECRET_FILE"
ALLOWED_REPOS_ENV = "EVALRUNNER_WEBHOOK_REPOS"
# GitHub caps payloads at 25 MB, but the events we act on are tens of kB; a push with many
# commits stays well under a few MB.
DEFAULT_MAX_BODY_BYTES = 5 * 1024 * 1024
WEBHOOK_PATH = "/webhooks/github"


class WebhookConfigError(InputError, ValueError):
    """The receiver cannot start with this configuration (the message says what to set)."""


def load_webhook_secret(env: Mapping[str, str] | None = None) -> bytes | None:
    """The webhook secret from ``EVALRUNNER_WEBHOOK_SECRET`` or ``…_SECRET_FILE`` (None if neither)."""
    env = os.environ if env is None else env
    value, path = env.get(SECRET_ENV), env.get(SECRET_FILE_ENV)
    if value and path:
        raise WebhookConfigError(f"set only one of {SECRET_ENV} and {SECRET_FILE_ENV}, not both")
    if path:
        try:
            with open(path, "rb") as fh:
                secret = fh.read().rstrip(b"\r\n")  # mounted secrets often end in a newline
        except OSError as exc:
            raise WebhookConfigError(f"{SECRET_FILE_ENV}={path!r} cannot be read: {exc.strerror}") from exc
        if not secret:
            raise WebhookConfigError(f"{SECRET_FILE_ENV}={path!r} is empty")
        return secret
    return value.encode() if value else None


def parse_allowed_repos(value: str | Iterable[str] | None) -> frozenset[str] | None:
    """``owner/name`` or ``owner/*`` entries (comma/space separated); None or empty allows all."""
    if value is None:
        return None
    items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    out = set()
    for item in items:
        item = item.strip().lower()
        if item.count("/") != 1 or not all(item.split("/")):
            raise WebhookConfigError(f"allow-list entry {item!r} must look like 'owner/name' or 'owner/*'")
        out.add(item)
    return frozenset(out) or None


def sign(secret: bytes, body: bytes) -> str:
    """GitHub's ``X-Hub-Signature-256`` header value for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signature_ok(secret: bytes, body: bytes, header: str | None) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(sign(secret, body).encode(), header.strip().encode())


@dataclass(frozen=True)
class ReceiverConfig:
    """How the receiver checks deliveries. ``secret=None`` requires ``insecure=True``."""

    secret: bytes | None = field(default=None, repr=False)
    allowed_repos: frozenset[str] | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    insecure: bool = False

    def __post_init__(self) -> None:
        if self.secret is None and not self.insecure:
            raise WebhookConfigError(
                f"no webhook secret: set {SECRET_ENV} or {SECRET_FILE_ENV} "
                "(or choose the local insecure mode explicitly)"
            )
        if self.max_body_bytes <= 0:
            raise WebhookConfigError(f"max_body_bytes must be positive, got {self.max_body_bytes}")

    def allows(self, repo: str) -> bool:
        if self.allowed_repos is None:
            return True
        repo = repo.lower()
        return repo in self.allowed_repos or f"{repo.split('/')[0]}/*" in self.allowed_repos

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, insecure: bool = False, **kw: Any) -> ReceiverConfig:
        env = os.environ if env is None else env
        kw.setdefault("allowed_repos", parse_allowed_repos(env.get(ALLOWED_REPOS_ENV)))
        return cls(secret=load_webhook_secret(env), insecure=insecure, **kw)


class _TooLarge(EvalrunnerError, Exception):
    pass


async def _read_capped(request: Request, cap: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ValueError(f"Content-Length {declared!r} is not a number")
        if int(declared) > cap:
            raise _TooLarge()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise _TooLarge()  # stop reading: the rest of the body is never buffered
        chunks.append(chunk)
    return b"".join(chunks)


def _answer(status: int, outcome: str, delivery: str | None, **extra: Any) -> JSONResponse:
    log.info("webhook delivery=%s status=%d outcome=%s %s", delivery, status, outcome, extra.get("reason", ""))
    return JSONResponse({"status": outcome, "delivery": delivery, **extra}, status_code=status)


def create_app(config: ReceiverConfig, lake: Lake) -> Starlette:
    """The receiver as an ASGI app writing to ``lake``."""

    async def github(request: Request) -> JSONResponse:
        delivery = request.headers.get("x-github-delivery")
        try:
            body = await _read_capped(request, config.max_body_bytes)
        except _TooLarge:
            return _answer(413, "rejected", delivery, reason=f"body larger than {config.max_body_bytes} bytes")
        except ValueError as exc:
            return _answer(400, "rejected", delivery, reason=str(exc))
        except ClientDisconnect:
            return _answer(400, "rejected", delivery, reason="client disconnected mid-body")

        if config.secret is not None:
            if not signature_ok(config.secret, body, request.headers.get("x-hub-signature-256")):
                return _answer(401, "rejected", delivery, reason="missing or invalid X-Hub-Signature-256")

        event = request.headers.get("x-github-event")
        if not event:
            return _answer(400, "rejected", delivery, reason="missing X-GitHub-Event header")
        try:
            delivery = check_delivery_id(delivery)
        except InboxError as exc:
            return _answer(400, "rejected", delivery, reason=str(exc))

        try:
            payload = _parse_body(body, request.headers.get("content-type", ""))
        except ValueError as exc:
            return _answer(400, "rejected", delivery, reason=f"malformed payload: {exc}")

        repo = repo_of(payload)
        if repo is not None and not config.allows(repo):
            return _answer(403, "rejected", delivery, reason=f"repository {repo!r} is not on the allow-list")
        if event == "ping":
            return _answer(200, "pong", delivery)

        try:
            result = normalize_delivery(event, delivery, payload, body_sha256=body_digest(body))
        except InboxError as exc:
            return _answer(400, "rejected", delivery, reason=str(exc))
        if isinstance(result, Ignored):
            return _answer(202, "ignored", delivery, reason=result.reason)
        # The write fsyncs; keep it off the event loop so other deliveries are not held up.
        wrote = await run_in_threadpool(write_delivery, lake, result)
        if not wrote:
            return _answer(200, "duplicate", delivery)
        return _answer(202, "queued", delivery, kind=result.kind)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route(WEBHOOK_PATH, github, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


def _parse_body(body: bytes, content_type: str) -> dict[str, Any]:
    if content_type.split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        try:
            form = parse_qs(body.decode("utf-8", errors="strict"), strict_parsing=False)
        except UnicodeDecodeError as exc:
            raise ValueError(f"form-encoded body is not UTF-8: {exc}") from exc
        if "payload" not in form:
            raise ValueError("form-encoded delivery has no 'payload' field")
        text: str | bytes = form["payload"][0]
    else:
        text = body
    try:
        payload = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        raise ValueError(str(exc)) from exc
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
    if not isinstance(payload, dict):
        raise ValueError(f"expected a JSON object, got {type(payload).__name__}")
    return payload


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_app(
    *,
    lake: Lake | None = None,
    secret: bytes | str | None = None,
    allowed_repos: str | Iterable[str] | None = None,
    insecure: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    env: Mapping[str, str] | None = None,
) -> Starlette:
    """The app from arguments, falling back to the environment for the secret and allow-list."""
    env = os.environ if env is None else env
    if isinstance(secret, str):
        secret = secret.encode()
    config = ReceiverConfig(
        secret=secret if secret is not None else load_webhook_secret(env),
        allowed_repos=parse_allowed_repos(allowed_repos if allowed_repos is not None else env.get(ALLOWED_REPOS_ENV)),
        max_body_bytes=max_body_bytes,
        insecure=insecure,
    )
    if config.allowed_repos is None:
        log.warning("webhook receiver accepts every repository (no %s allow-list)", ALLOWED_REPOS_ENV)
    return create_app(config, lake or open_lake())


def serve(
    host: str = "127.0.0.1",
    port: int = 8787,
    *,
    lake: Lake | None = None,
    secret: bytes | str | None = None,
    allowed_repos: str | Iterable[str] | None = None,
    insecure: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    log_level: str = "info",
    extra_routes: Iterable[Any] = (),
) -> None:
    """Run the receiver with uvicorn until interrupted (``evalrunner serve`` runs it beside Dagster)."""
    if insecure and not _is_loopback(host):
        raise WebhookConfigError(f"insecure mode only binds to loopback, not {host!r}")
    import uvicorn

    lake = lake or open_lake()
    if lake.is_local:
        # Temp files of a receiver killed mid-write carry its pid; the PR sensor sweeps them too.
        from evalrunner_assets.pipeline.scheduler import sweep_orphaned_temp_files

        for path in sweep_orphaned_temp_files(os.path.abspath(lake.root), [lake.layout.inbox_root()]):
            log.info("removed %s: its writer died before renaming it", path)
    app = build_app(
        lake=lake, secret=secret, allowed_repos=allowed_repos, insecure=insecure, max_body_bytes=max_body_bytes
    )
    # Other APIs served on the same port (the SWE run API, /v1/...).
    app.router.routes.extend(extra_routes)
    # Uvicorn's access log has no headers or bodies, so the signature never reaches a log.
    uvicorn.run(app, host=host, port=port, log_level=log_level)
