"""The GitHub webhook inbox: normalized delivery records, the cursor over them, and intents.

Pure domain logic (no Dagster): the receiver (``sensors.webhook``) calls ``normalize_delivery``
and ``write_delivery``; the sensors call ``read_inbox`` and ``intent_for``.

Storage (all paths from ``lake.layout``):

- ``inbox/github/<delivery-id>.json`` — the *claim*: written create-only, so the first copy of a
  delivery wins and a redelivery (same ``X-GitHub-Delivery``) finds it and does nothing.
- ``inbox/github-queue/<received_ns:020d>-<delivery-id>.json`` — the *queue entry*: the same
  record bytes under a name that sorts by receive time, so readers list names, never read old
  files, and process deliveries in a stable order.

Cursor. Receive timestamps are taken before the writes, and requests run concurrently, so a
delivery stamped earlier can become visible after a later one has already been processed. A
plain high-water mark would skip it. The cursor therefore keeps the high-water mark ``hw`` *and*
the ids it processed within the trailing ``window`` before ``hw``; every read re-examines the
entries stamped within that window and takes the ones whose id it has not seen. A delivery is
processed exactly once as long as its entry becomes visible within ``window`` of its stamp
(stamp → two small writes; GitHub itself gives up on a delivery after 10 s, the default window
is 10 minutes, and it also absorbs clock skew between receiver replicas).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from lake.layout import LAYOUT, LakePathError
from lake.storage import Lake

INBOX_SOURCE = "github"
QUEUE_SOURCE = "github-queue"
RECORD_VERSION = 1

DEFAULT_WINDOW_NS = 10 * 60 * 1_000_000_000
DEFAULT_MORE_SAMPLES = 10
MAX_MORE_SAMPLES = 1000
PR_ACTIONS = ("opened", "synchronize", "reopened")
WRITE_ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR")

MAX_DELIVERY_ID = 100  # GitHub's are 36-character GUIDs; the queue name adds 21 characters
_ZERO_SHA = "0" * 40
_SHA = re.compile(r"[0-9a-f]{40}")
_QUEUE_NAME = re.compile(r"^(\d{20})-([A-Za-z0-9_.-]{1,128})$")
# `/eval more` or `/eval more 20` on a line of its own (leading/trailing blanks allowed).
_MORE = re.compile(r"^[ \t]*/eval[ \t]+more(?:[ \t]+(\d{1,9}))?[ \t]*$", re.MULTILINE)


class InboxError(ValueError):
    """An inbox record or cursor cannot be read (the message names the file or value)."""


class InboxRecord(BaseModel):
    """One accepted GitHub delivery, normalized to the parts evalrunner acts on."""

    v: int = Field(RECORD_VERSION, description="Record schema version.")
    delivery_id: str = Field(description="X-GitHub-Delivery; unique per delivery, kept on redelivery.")
    event: str = Field(description="X-GitHub-Event: pull_request, push or issue_comment.")
    action: str | None = Field(None, description="The payload's action (None for push).")
    kind: Literal["pull_request", "push", "more_samples"] = Field(
        description="What the delivery asks for: evaluate a PR head, a default-branch push, or more samples."
    )
    repo: str = Field(description="Repository full name, owner/name.")
    default_branch: str | None = Field(None, description="The repository's default branch.")
    pr: int | None = Field(None, description="Pull request number (pull_request, issue_comment).")
    head_sha: str | None = Field(None, description="PR head commit (pull_request).")
    head_ref: str | None = Field(None, description="PR head branch name (pull_request).")
    head_repo: str | None = Field(None, description="Repository the PR head lives in (differs for forks).")
    base_sha: str | None = Field(None, description="PR base commit (pull_request).")
    base_ref: str | None = Field(None, description="PR base branch name (pull_request).")
    ref: str | None = Field(None, description="Pushed ref, refs/heads/<branch> (push).")
    sha: str | None = Field(None, description="Commit the ref points to after the push (push).")
    command: Literal["more"] | None = Field(None, description="Parsed comment command (issue_comment).")
    n: int | None = Field(None, description="Extra samples asked for by `/eval more [N]`.")
    comment_id: int | None = Field(None, description="The comment carrying the command.")
    author_association: str | None = Field(None, description="Comment author's association with the repo.")
    sender: str | None = Field(None, description="Login of the account that triggered the event.")
    installation_id: int | None = Field(None, description="GitHub App installation that sent it, if any.")
    received_at: str = Field(description="Receive time, ISO 8601 UTC.")
    received_ns: int = Field(description="Receive time in ns since the epoch; orders the queue.")
    payload_sha256: str = Field(description="SHA-256 of the raw request body, for audit.")


@dataclass(frozen=True)
class Ignored:
    """A valid delivery that asks for nothing (the reason is returned to GitHub)."""

    reason: str


# -- intents -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class EvaluatePR:
    repo: str
    pr: int
    head_sha: str
    base_sha: str
    base_ref: str

    @property
    def run_key(self) -> str:
        return pr_run_key(self.repo, self.pr, self.head_sha)


@dataclass(frozen=True)
class EvaluatePush:
    repo: str
    sha: str
    ref: str


@dataclass(frozen=True)
class MoreSamples:
    repo: str
    pr: int
    n: int


Intent = EvaluatePR | EvaluatePush | MoreSamples


def pr_run_key(repo: str, pr: int, head_sha: str) -> str:
    """``owner/repo#<pr>@<head sha>``: a force-push is a new key, a redelivery is not."""
    if not isinstance(repo, str) or repo.count("/") != 1 or not all(repo.split("/")):
        raise InboxError(f"repo {repo!r} must look like 'owner/name'")
    if isinstance(pr, bool) or not isinstance(pr, int) or pr <= 0:
        raise InboxError(f"pull request number {pr!r} must be a positive integer")
    if not isinstance(head_sha, str) or not re.fullmatch(r"[0-9a-f]{40}", head_sha):
        raise InboxError(f"head sha {head_sha!r} is not a full 40-hex lowercase SHA")
    return f"{repo}#{pr}@{head_sha}"


def intent_for(record: InboxRecord) -> Intent:
    """The work one inbox record asks for."""
    if record.kind == "pull_request":
        return EvaluatePR(
            repo=record.repo,
            pr=_req(record, "pr"),
            head_sha=_req(record, "head_sha"),
            base_sha=_req(record, "base_sha"),
            base_ref=_req(record, "base_ref"),
        )
    if record.kind == "push":
        return EvaluatePush(repo=record.repo, sha=_req(record, "sha"), ref=_req(record, "ref"))
    return MoreSamples(repo=record.repo, pr=_req(record, "pr"), n=_req(record, "n"))


def _req(record: InboxRecord, name: str) -> Any:
    value = getattr(record, name)
    if value is None:
        raise InboxError(f"inbox record {record.delivery_id}: {record.kind} has no {name}")
    return value


# -- normalization -----------------------------------------------------------------------------
def parse_more_command(body: str | None) -> int | None:
    """N from the first ``/eval more [N]`` line (default ``DEFAULT_MORE_SAMPLES``, capped), else None."""
    m = _MORE.search(body or "")
    if not m:
        return None
    n = int(m.group(1)) if m.group(1) else DEFAULT_MORE_SAMPLES
    return min(n, MAX_MORE_SAMPLES) if n > 0 else None


def repo_of(payload: Any) -> str | None:
    """``repository.full_name`` of a payload, if it has one."""
    if isinstance(payload, dict) and isinstance(payload.get("repository"), dict):
        name = payload["repository"].get("full_name")
        return name if isinstance(name, str) else None
    return None


def normalize_delivery(
    event: str,
    delivery_id: str,
    payload: dict[str, Any],
    *,
    body_sha256: str,
    received_ns: int | None = None,
) -> InboxRecord | Ignored:
    """Turn a verified, parsed delivery into an ``InboxRecord``, or say why it is ignored.

    Raises ``InboxError`` when a delivery of an event we act on lacks a field we need.
    """
    received_ns = time.time_ns() if received_ns is None else received_ns
    repo = repo_of(payload)
    action = payload.get("action") if isinstance(payload.get("action"), str) else None
    if event not in ("pull_request", "push", "issue_comment"):
        return Ignored(f"event {event!r} is not handled")
    if repo is None:
        raise InboxError(f"{event} delivery {delivery_id} has no repository.full_name")
    repository = payload["repository"]
    common: dict[str, Any] = dict(
        delivery_id=delivery_id,
        event=event,
        action=action,
        repo=repo,
        default_branch=repository.get("default_branch"),
        sender=_get(payload, "sender", "login"),
        installation_id=_get(payload, "installation", "id"),
        received_at=datetime.fromtimestamp(received_ns / 1e9, timezone.utc).isoformat(),
        received_ns=received_ns,
        payload_sha256=body_sha256,
    )
    try:
        if event == "pull_request":
            if action not in PR_ACTIONS:
                return Ignored(f"pull_request action {action!r} is not evaluated")
            pr = payload.get("pull_request") or {}
            record = InboxRecord(
                kind="pull_request",
                pr=payload.get("number") or pr.get("number"),
                head_sha=_get(pr, "head", "sha"),
                head_ref=_get(pr, "head", "ref"),
                head_repo=_get(pr, "head", "repo", "full_name"),
                base_sha=_get(pr, "base", "sha"),
                base_ref=_get(pr, "base", "ref"),
                **common,
            )
            return _require(record, ("pr", "head_sha", "base_sha", "base_ref"))
        if event == "push":
            ref, after = payload.get("ref"), payload.get("after")
            default = repository.get("default_branch")
            if not default or ref != f"refs/heads/{default}":
                return Ignored(f"push to {ref!r} is not the default branch {default!r}")
            if payload.get("deleted") or after == _ZERO_SHA:
                return Ignored(f"push deleted {ref!r}")
            return _require(InboxRecord(kind="push", ref=ref, sha=after, **common), ("sha",))
        # issue_comment
        if action != "created":
            return Ignored(f"issue_comment action {action!r} is not read for commands")
        issue = payload.get("issue") or {}
        if not issue.get("pull_request"):
            return Ignored("comment is on an issue, not a pull request")
        comment = payload.get("comment") or {}
        n = parse_more_command(comment.get("body"))
        if n is None:
            return Ignored("comment has no /eval more command")
        association = comment.get("author_association")
        if association not in WRITE_ASSOCIATIONS:
            return Ignored(
                f"/eval more from author_association {association!r} ignored; "
                f"only {', '.join(WRITE_ASSOCIATIONS)} may ask for samples"
            )
        record = InboxRecord(
            kind="more_samples",
            pr=issue.get("number"),
            command="more",
            n=n,
            comment_id=comment.get("id"),
            author_association=association,
            **common,
        )
        return _require(record, ("pr",))
    except ValidationError as exc:
        raise InboxError(f"{event} delivery {delivery_id}: unexpected payload shape: {exc}") from exc


def _require(record: InboxRecord, names: tuple[str, ...]) -> InboxRecord:
    missing = [n for n in names if getattr(record, n) is None]
    if missing:
        raise InboxError(
            f"{record.event} delivery {record.delivery_id} lacks {', '.join(missing)} in its payload"
        )
    for name in names:
        value = getattr(record, name)
        if name.endswith("sha") and not _SHA.fullmatch(value):
            raise InboxError(
                f"{record.event} delivery {record.delivery_id}: {name} {value!r} is not a 40-hex SHA"
            )
    return record


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


# -- writing -----------------------------------------------------------------------------------
def queue_name(received_ns: int, delivery_id: str) -> str:
    return f"{received_ns:020d}-{delivery_id}"


def write_delivery(lake: Lake, record: InboxRecord) -> bool:
    """Persist ``record`` once; False when this delivery id was already in the inbox.

    The claim (keyed by delivery id) is written first, create-only: of concurrent copies exactly
    one wins. The queue entry follows; a redelivery re-asserts it, so a crash between the two
    writes is repaired by GitHub's redelivery instead of losing the delivery.
    """
    data = record.model_dump_json().encode()
    claim = LAYOUT.inbox(INBOX_SOURCE, record.delivery_id)
    if lake.write_once(claim, data):
        lake.write_once(LAYOUT.inbox(QUEUE_SOURCE, queue_name(record.received_ns, record.delivery_id)), data)
        return True
    try:
        first_bytes = lake.read_bytes(claim)
        first = InboxRecord.model_validate_json(first_bytes)
    except (ValidationError, OSError, ValueError):
        return False  # a claim we cannot read is still a claim: never enqueue twice
    entry = LAYOUT.inbox(QUEUE_SOURCE, queue_name(first.received_ns, first.delivery_id))
    if not lake.exists(entry):
        # The first receipt crashed between its writes: enqueue now, stamped now, so a reader
        # whose window has moved past the original stamp still sees it (readers dedupe by id).
        lake.write_once(LAYOUT.inbox(QUEUE_SOURCE, queue_name(time.time_ns(), first.delivery_id)), first_bytes)
    return False


# -- reading -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class InboxCursor:
    """High-water receive stamp plus the ids processed in the trailing window before it."""

    hw: int = 0
    seen: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> str:
        return json.dumps({"v": 1, "hw": self.hw, "seen": dict(self.seen)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> "InboxCursor":
        if not text:
            return cls()
        try:
            data = json.loads(text)
            seen = tuple(sorted((str(k), int(v)) for k, v in data["seen"].items()))
            return cls(hw=int(data["hw"]), seen=seen)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InboxError(f"inbox cursor {text[:80]!r} is not a valid cursor: {exc}") from exc


@dataclass(frozen=True)
class InboxEntry:
    name: str
    received_ns: int
    delivery_id: str
    record: InboxRecord | None
    error: str | None = None


def read_inbox(
    lake: Lake,
    cursor: InboxCursor | str | None = None,
    *,
    limit: int | None = None,
    window_ns: int = DEFAULT_WINDOW_NS,
) -> tuple[list[InboxEntry], InboxCursor]:
    """Entries past ``cursor`` in receive order (at most ``limit``), and the cursor after them.

    An entry that cannot be parsed is returned with ``error`` set (and counted as processed), so
    one bad file is reported once instead of blocking the queue forever.
    """
    if not isinstance(cursor, InboxCursor):
        cursor = InboxCursor.from_json(cursor)
    seen = dict(cursor.seen)
    floor = cursor.hw - window_ns
    candidates: list[tuple[int, str, str]] = []
    for rel in lake.listdir(LAYOUT.inbox_prefix(QUEUE_SOURCE)):
        stem = rel.rsplit("/", 1)[-1]
        if not stem.endswith(".json"):
            continue
        m = _QUEUE_NAME.match(stem[: -len(".json")])
        if not m:
            continue
        ns, delivery_id = int(m.group(1)), m.group(2)
        if ns <= floor or delivery_id in seen:
            continue
        candidates.append((ns, delivery_id, rel))
    candidates.sort()
    out: list[InboxEntry] = []
    hw = cursor.hw
    for ns, delivery_id, rel in candidates:
        if limit is not None and len(out) >= limit:
            break
        if delivery_id in seen:  # a repaired delivery enqueued twice
            continue
        try:
            record = InboxRecord.model_validate_json(lake.read_bytes(rel))
            entry = InboxEntry(rel, ns, delivery_id, record)
        except (ValidationError, ValueError, OSError) as exc:
            entry = InboxEntry(rel, ns, delivery_id, None, f"{rel}: unreadable inbox record: {exc}")
        out.append(entry)
        seen[delivery_id] = ns
        hw = max(hw, ns)
    keep = tuple(sorted((k, v) for k, v in seen.items() if v > hw - window_ns))
    return out, InboxCursor(hw=hw, seen=keep)


def check_delivery_id(delivery_id: str | None) -> str:
    """A delivery id usable as an inbox key (raises ``InboxError`` naming it otherwise)."""
    if delivery_id and len(delivery_id) > MAX_DELIVERY_ID:
        raise InboxError(f"X-GitHub-Delivery {delivery_id[:40]!r}… is longer than {MAX_DELIVERY_ID} characters")
    try:
        LAYOUT.inbox(INBOX_SOURCE, delivery_id or "")
    except LakePathError as exc:
        raise InboxError(f"X-GitHub-Delivery {delivery_id!r} is not a usable delivery id: {exc}") from exc
    return delivery_id  # type: ignore[return-value]
