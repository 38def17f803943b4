"""The GitHub webhook inbox: normalized delivery records, the cursor over them, and intents.

Pure domain logic (no Dagster): the receiver (``evalrunner_assets.http.webhook``) calls ``normalize_delivery``
and ``write_delivery``; the sensors call ``read_inbox`` and ``intent_for``.

Storage (all paths from ``lake.layout``):

- ``inbox/github/<delivery-id>.json`` — the *claim*: written create-only, so the first copy of a
  delivery wins and a redelivery (same ``X-GitHub-Delivery``) finds it and does nothing.
- ``inbox/github-queue/<received_ns:020d>-<delivery-id>.json`` — the *queue entry*: the same
  record bytes under a name that sorts by receive time, so readers list names, never read old
  files, and process deliveries in a stable order.
- ``inbox/github-done/<delivery-id>.json`` — a queue entry the committed cursor has passed for
  good (stamped before its trailing window): moved out of the queue, so a reader lists a window's
  worth of names, not every delivery ever (``archive_passed``).
- ``inbox/github-dead/<delivery-id>.json`` — the *dead letter*: a queue entry the sensors could
  not handle (unreadable, invalid, or it raised), moved here with the reason, so the cursor moves
  on and one bad delivery never blocks the others.

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
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from evalrunner_assets.errors import InputError
from lake.layout import LAYOUT, LakePathError
from lake.storage import Lake

INBOX_SOURCE = "github"
QUEUE_SOURCE = "github-queue"
DONE_SOURCE = "github-done"
DEAD_LETTER_VERSION = 1
RECORD_VERSION = 1

DEFAULT_WINDOW_NS = 10 * 60 * 1_000_000_000
DEFAULT_MORE_SAMPLES = 10
MAX_MORE_SAMPLES = 1000
PR_ACTIONS = ("opened", "synchronize", "reopened")
WRITE_ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR")

MAX_DELIVERY_ID = 100  # GitHub's are 36-character GUIDs; the queue name adds 21 characters
MAX_PR_NUMBER = 2**31 - 1  # GitHub numbers issues and PRs with 32-bit signed integers
MAX_GITHUB_ID = 2**63 - 1  # installation, comment ids: 64-bit on GitHub's side
MAX_COMMENT_CHARS = 65536  # GitHub refuses longer comment bodies
MAX_REF_BYTES = 255  # a ref longer than a file name cannot be stored as a loose ref
MAX_LOGIN_CHARS = 100  # user logins are <= 39; bots add "[bot]"; leave room for app slugs
_ZERO_SHA = "0" * 40
_SHA = re.compile(r"[0-9a-f]{40}")
_QUEUE_NAME = re.compile(r"^(\d{20})-([A-Za-z0-9_.-]{1,128})$")
# `/eval more` or `/eval more 20` on a line of its own (leading/trailing blanks allowed).
_MORE = re.compile(r"^[ \t]*/eval[ \t]+more(?:[ \t]+(\d{1,9}))?[ \t]*$", re.MULTILINE)
# GitHub's naming rules: an owner (user or organization) is 1-39 alphanumerics or single
# hyphens, neither first nor last; a repository name is 1-100 of [A-Za-z0-9._-], not "." or "..".
_OWNER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}")
_REPO_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
# git check-ref-format: no control characters, space, ~ ^ : ? * [ or backslash anywhere.
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


class InboxError(InputError, ValueError):
    """An inbox record or cursor cannot be read (the message names the file or value)."""


# -- validation --------------------------------------------------------------------------------
# The receiver applies these before it answers 202 and the PR sensor applies them again to every
# record it reads, so a record planted in the inbox (or written by an older receiver) is refused
# with the same reason instead of failing somewhere inside the pipeline.
def check_repo_full_name(name: Any, field_name: str = "repository.full_name") -> str:
    """``owner/repo`` as GitHub allows names (raises ``InboxError`` naming what is wrong)."""
    if not isinstance(name, str):
        raise InboxError(f"{field_name} {name!r} is not a string")
    owner, sep, repo = name.partition("/")
    if not sep:
        raise InboxError(f"{field_name} {name!r} must look like 'owner/repo'")
    if not _OWNER.fullmatch(owner):
        raise InboxError(
            f"{field_name} {name!r}: owner {owner!r} is not a GitHub account name "
            "(1-39 letters, digits or single hyphens, not starting or ending with a hyphen)"
        )
    if not _REPO_NAME.fullmatch(repo) or repo in (".", ".."):
        raise InboxError(
            f"{field_name} {name!r}: repository name {repo!r} is not a GitHub repository name "
            "(1-100 of A-Z a-z 0-9 . _ -, not '.' or '..')"
        )
    return name


def check_number(value: Any, field_name: str, maximum: int) -> int:
    """A positive integer no larger than ``maximum`` (JSON booleans and floats are refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InboxError(f"{field_name} {value!r} is not an integer")
    if not 0 < value <= maximum:
        raise InboxError(f"{field_name} {value!r} is not between 1 and {maximum}")
    return value


def check_sha(value: Any, field_name: str) -> str:
    if not isinstance(value, str) or not _SHA.fullmatch(value):
        raise InboxError(f"{field_name} {value!r:.80} is not a 40-hex lowercase commit SHA")
    return value


def check_ref_name(value: Any, field_name: str) -> str:
    """A valid git ref name (``git check-ref-format --allow-onelevel`` rules), at most 255 bytes."""
    if not isinstance(value, str) or not value:
        raise InboxError(f"{field_name} {value!r:.80} is not a non-empty string")
    problem = None
    if len(value.encode("utf-8", "surrogatepass")) > MAX_REF_BYTES:
        problem = f"is longer than {MAX_REF_BYTES} bytes"
    elif _REF_FORBIDDEN.search(value):
        problem = "contains a control character, space or one of ~ ^ : ? * [ \\"
    elif ".." in value or "@{" in value or "//" in value or value == "@":
        problem = "contains '..', '@{' or '//', or is '@'"
    elif value.startswith("/") or value.endswith(("/", ".")):
        problem = "starts with '/' or ends with '/' or '.'"
    elif any(part.startswith(".") or part.endswith(".lock") for part in value.split("/")):
        problem = "has a component starting with '.' or ending with '.lock'"
    if problem:
        raise InboxError(f"{field_name} {value!r:.80} is not a valid git ref name: it {problem}")
    return value


def _check_short_text(value: Any, field_name: str, maximum: int) -> None:
    if value is not None and (not isinstance(value, str) or len(value) > maximum or not value.isprintable()):
        raise InboxError(f"{field_name} {value!r:.80} is not a string of at most {maximum} characters")


class InboxRecord(BaseModel):
    """One accepted GitHub delivery, normalized to the parts evalrunner acts on."""

    v: int = Field(default=RECORD_VERSION, description="Record schema version.")
    delivery_id: str = Field(description="X-GitHub-Delivery; unique per delivery, kept on redelivery.")
    event: str = Field(
        description="X-GitHub-Event: pull_request, push or issue_comment; `web` for the web app's actions."
    )
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
    head_ref: str = ""

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
    """The work one inbox record asks for (``InboxError`` when the record is not valid)."""
    validate_record(record)
    if record.kind == "pull_request":
        return EvaluatePR(
            repo=record.repo,
            pr=_req(record, "pr"),
            head_sha=_req(record, "head_sha"),
            base_sha=_req(record, "base_sha"),
            base_ref=_req(record, "base_ref"),
            head_ref=record.head_ref or "",
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


def validate_record(record: InboxRecord) -> InboxRecord:
    """``record`` if every field that reaches a path, key or number is valid, else ``InboxError``.

    The rules are GitHub's (names, numbers) and git's (refs, SHAs), so a delivery GitHub could
    really send always passes and a forged or corrupted one never reaches the pipeline.
    """
    where = f"{record.event} delivery {record.delivery_id}"
    try:
        check_delivery_id(record.delivery_id)
        check_repo_full_name(record.repo, "repository.full_name")
        if record.head_repo is not None:
            check_repo_full_name(record.head_repo, "pull_request.head.repo.full_name")
        if record.pr is not None:
            check_number(record.pr, "pull request number", MAX_PR_NUMBER)
        for name in ("head_sha", "base_sha", "sha"):
            if getattr(record, name) is not None:
                check_sha(getattr(record, name), name)
        for name in ("head_ref", "base_ref", "ref", "default_branch"):
            if getattr(record, name) is not None:
                check_ref_name(getattr(record, name), name)
        if record.installation_id is not None:
            check_number(record.installation_id, "installation.id", MAX_GITHUB_ID)
        if record.comment_id is not None:
            check_number(record.comment_id, "comment.id", MAX_GITHUB_ID)
        if record.n is not None:
            check_number(record.n, "/eval more count", MAX_MORE_SAMPLES)
        _check_short_text(record.sender, "sender.login", MAX_LOGIN_CHARS)
        _check_short_text(record.action, "action", MAX_LOGIN_CHARS)
    except InboxError as exc:
        raise InboxError(f"{where}: {exc}") from exc
    required = {
        "pull_request": ("pr", "head_sha", "base_sha", "base_ref"),
        "push": ("sha", "ref"),
        "more_samples": ("pr", "n"),
    }[record.kind]
    missing = [n for n in required if getattr(record, n) is None]
    if missing:
        raise InboxError(f"{where} lacks {', '.join(missing)} in its payload")
    return record


def normalize_delivery(
    event: str,
    delivery_id: str,
    payload: dict[str, Any],
    *,
    body_sha256: str,
    received_ns: int | None = None,
) -> InboxRecord | Ignored:
    """Turn a verified, parsed delivery into an ``InboxRecord``, or say why it is ignored.

    Raises ``InboxError`` when a delivery of an event we act on lacks a field we need or carries
    one that is not valid (``validate_record``); the receiver answers 400 with the message.
    Payload parts are read defensively: any JSON shape is either a record, ignored, or an error.
    """
    received_ns = time.time_ns() if received_ns is None else received_ns
    if event not in ("pull_request", "push", "issue_comment"):
        return Ignored(f"event {event!r} is not handled")
    action = _get(payload, "action")
    action = action if isinstance(action, str) else None
    repository = _get(payload, "repository")
    repo = check_repo_full_name(_get(repository, "full_name"))
    common: dict[str, Any] = dict(
        delivery_id=delivery_id,
        event=event,
        action=action,
        repo=repo,
        default_branch=_text(repository, "default_branch"),
        sender=_text(payload, "sender", "login"),
        installation_id=_number(payload, "installation", "id", name="installation.id", maximum=MAX_GITHUB_ID),
        received_at=datetime.fromtimestamp(received_ns / 1e9, UTC).isoformat(),
        received_ns=received_ns,
        payload_sha256=body_sha256,
    )
    try:
        if event == "pull_request":
            if action not in PR_ACTIONS:
                return Ignored(f"pull_request action {action!r} is not evaluated")
            pr = _get(payload, "pull_request")
            number = _get(payload, "number")
            number = _get(pr, "number") if number is None else number
            record = InboxRecord(
                kind="pull_request",
                pr=None if number is None else check_number(number, "pull request number", MAX_PR_NUMBER),
                head_sha=_text(pr, "head", "sha"),
                head_ref=_text(pr, "head", "ref"),
                head_repo=_text(pr, "head", "repo", "full_name"),
                base_sha=_text(pr, "base", "sha"),
                base_ref=_text(pr, "base", "ref"),
                **common,
            )
            return validate_record(record)
        if event == "push":
            ref, after = _get(payload, "ref"), _get(payload, "after")
            default = common["default_branch"]
            if not default or ref != f"refs/heads/{default}":
                return Ignored(f"push to {ref!r:.200} is not the default branch {default!r}")
            if _get(payload, "deleted") or after == _ZERO_SHA:
                return Ignored(f"push deleted {ref!r}")
            return validate_record(InboxRecord(kind="push", ref=ref, sha=_text(payload, "after"), **common))
        # issue_comment
        if action != "created":
            return Ignored(f"issue_comment action {action!r} is not read for commands")
        issue = _get(payload, "issue")
        if not _get(issue, "pull_request"):
            return Ignored("comment is on an issue, not a pull request")
        body = _get(payload, "comment", "body")
        if body is not None and not isinstance(body, str):
            raise InboxError(f"comment.body is a {type(body).__name__}, not a string")
        if body is not None and len(body) > MAX_COMMENT_CHARS:
            raise InboxError(f"comment.body has {len(body)} characters; GitHub allows at most {MAX_COMMENT_CHARS}")
        n = parse_more_command(body)
        if n is None:
            return Ignored("comment has no /eval more command")
        association = _get(payload, "comment", "author_association")
        if association not in WRITE_ASSOCIATIONS:
            return Ignored(
                f"/eval more from author_association {association!r:.60} ignored; "
                f"only {', '.join(WRITE_ASSOCIATIONS)} may ask for samples"
            )
        number = _get(issue, "number")
        record = InboxRecord(
            kind="more_samples",
            pr=None if number is None else check_number(number, "issue.number", MAX_PR_NUMBER),
            command="more",
            n=n,
            comment_id=_number(payload, "comment", "id", name="comment.id", maximum=MAX_GITHUB_ID),
            author_association=association,
            **common,
        )
        return validate_record(record)
    except ValidationError as exc:
        raise InboxError(f"{event} delivery {delivery_id}: unexpected payload shape: {exc}") from exc


WEB_EVENT = "web"


def web_more_samples_record(repo: str, pr: int, n: int, *, received_ns: int | None = None) -> InboxRecord:
    """The inbox record of "ask for N more samples" sent from a PR's web page: the same
    ``more_samples`` intent a member's ``/eval more N`` comment becomes, so one sensor path
    raises the allowance. Its delivery id (``web-<uuid>``) never collides with GitHub's GUIDs."""
    received_ns = time.time_ns() if received_ns is None else received_ns
    check_number(n, "more samples", MAX_MORE_SAMPLES)
    record = InboxRecord(
        delivery_id=f"web-{uuid.uuid4()}",
        event=WEB_EVENT,
        action="more",
        kind="more_samples",
        repo=check_repo_full_name(repo, "repository"),
        pr=check_number(pr, "pull request number", MAX_PR_NUMBER),
        command="more",
        n=n,
        received_at=datetime.fromtimestamp(received_ns / 1e9, UTC).isoformat(),
        received_ns=received_ns,
        payload_sha256=hashlib.sha256(f"{WEB_EVENT} more {repo}#{pr} {n}".encode()).hexdigest(),
    )
    return validate_record(record)


def _text(obj: Any, *keys: str) -> str | None:
    """A string field of the payload, None when absent; any other JSON type is an error."""
    value = _get(obj, *keys)
    if value is not None and not isinstance(value, str):
        raise InboxError(f"{'.'.join(keys)} is a {type(value).__name__}, not a string")
    return value


def _number(obj: Any, *keys: str, name: str, maximum: int) -> int | None:
    value = _get(obj, *keys)
    return None if value is None else check_number(value, name, maximum)


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
    if (
        not lake.exists(entry)
        and not lake.exists(LAYOUT.inbox_dead_letter(INBOX_SOURCE, first.delivery_id))
        and not lake.exists(LAYOUT.inbox(DONE_SOURCE, first.delivery_id))
    ):
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
    def from_json(cls, text: str | None) -> InboxCursor:
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


def archive_passed(
    lake: Lake,
    cursor: InboxCursor | str | None,
    *,
    limit: int | None = None,
    window_ns: int = DEFAULT_WINDOW_NS,
) -> int:
    """Move queue entries stamped at or before ``cursor``'s floor to ``inbox/github-done/``;
    returns how many moved (at most ``limit``).

    Pass the cursor the last *committed* tick left: no read from it or a later cursor looks at
    those entries again, so they were handled (or dead-lettered) already. Copied before removed,
    so a crash in between leaves an entry in both places, never in neither."""
    if not isinstance(cursor, InboxCursor):
        cursor = InboxCursor.from_json(cursor)
    floor = cursor.hw - window_ns
    if floor <= 0:
        return 0
    moved = 0
    for rel in lake.listdir(LAYOUT.inbox_prefix(QUEUE_SOURCE)):
        if limit is not None and moved >= limit:
            break
        stem = rel.rsplit("/", 1)[-1]
        m = _QUEUE_NAME.match(stem[: -len(".json")]) if stem.endswith(".json") else None
        if not m or int(m.group(1)) > floor:
            continue
        try:
            data = lake.read_bytes(rel)
        except OSError:
            continue  # moved by a concurrent reader
        lake.write_once(LAYOUT.inbox(DONE_SOURCE, m.group(2)), data)
        lake.remove(rel)
        moved += 1
    return moved


class DeadLetter(BaseModel):
    """A queue entry moved out of the queue because the sensors could not handle it."""

    v: int = Field(default=DEAD_LETTER_VERSION, description="Dead-letter schema version.")
    delivery_id: str = Field(description="X-GitHub-Delivery of the entry.")
    queue_entry: str = Field(description="Lake path the entry had in the queue (now removed).")
    reason: str = Field(description="Why it could not be handled: the error message.")
    error_type: str = Field(description="The exception's class name.")
    dead_lettered_at: str = Field(description="When it was moved, ISO 8601 UTC.")
    entry_text: str = Field(description="The entry's bytes as text (undecodable bytes replaced), for replay.")


def dead_letter(lake: Lake, entry: InboxEntry, error: BaseException | str) -> str:
    """Move ``entry`` to ``inbox/github-dead/<delivery>.json`` with the reason; returns that path.

    The dead letter is written before the queue entry is removed, so a crash in between leaves
    the entry in both places (never in neither). Its claim stays, so a redelivery is still a
    duplicate."""
    reason = error if isinstance(error, str) else f"{error}"
    reason = reason.encode("utf-8", "replace").decode("utf-8")  # no lone surrogates in JSON
    try:
        raw = lake.read_bytes(entry.name)
    except OSError:
        raw = b""
    letter = DeadLetter(
        delivery_id=entry.delivery_id,
        queue_entry=entry.name,
        reason=reason[:4000],
        error_type="InboxError" if isinstance(error, str) else type(error).__name__,
        dead_lettered_at=datetime.now(UTC).isoformat(),
        entry_text=raw[:1_000_000].decode("utf-8", errors="replace"),
    )
    path = LAYOUT.inbox_dead_letter(INBOX_SOURCE, entry.delivery_id)
    lake.write_once(path, letter.model_dump_json(indent=2).encode())
    lake.remove(entry.name)
    return path


@dataclass(frozen=True)
class DeadLetterFile:
    """A dead letter as found in the lake: its path, and the letter or why it cannot be read."""

    path: str
    delivery_id: str
    letter: DeadLetter | None
    error: str | None = None


def dead_letters(lake: Lake) -> list[DeadLetterFile]:
    """Every dead letter of the GitHub inbox, oldest delivery id first (by name)."""
    out = []
    for rel in lake.listdir(LAYOUT.inbox_prefix(f"{INBOX_SOURCE}-dead")):
        name = rel.rsplit("/", 1)[-1]
        if not name.endswith(".json"):
            continue
        delivery_id = name[: -len(".json")]
        try:
            out.append(DeadLetterFile(rel, delivery_id, DeadLetter.model_validate_json(lake.read_bytes(rel))))
        except (ValidationError, ValueError, OSError) as exc:
            out.append(DeadLetterFile(rel, delivery_id, None, f"{rel}: unreadable dead letter: {exc}"))
    return out


REPLAY_MARK = ".replay-"


def replay_dead_letter(lake: Lake, delivery_id: str, *, now_ns: int | None = None) -> str:
    """Put dead letter ``delivery_id`` back into the queue, stamped now; returns the queue entry.

    For a delivery that failed on something passing (GitHub or the lake down, a bug since
    fixed). The entry is queued under ``<delivery>.replay-<stamp>``: the cursor may still
    remember the original id as handled, and a replay must be read as new. What it asks for is
    idempotent (run keys name the PR head), so replaying twice starts nothing twice. The queue
    entry is written before the dead letter is removed: a crash in between leaves both, never
    neither. Raises ``InboxError`` naming the letter when there is none or it holds no valid
    record (such a delivery would only die again)."""
    path = LAYOUT.inbox_dead_letter(INBOX_SOURCE, check_delivery_id(delivery_id))
    try:
        letter = DeadLetter.model_validate_json(lake.read_bytes(path))
    except FileNotFoundError as exc:
        raise InboxError(f"no dead letter {delivery_id!r} ({lake.url(path)} does not exist)") from exc
    except (ValidationError, ValueError) as exc:
        raise InboxError(f"{lake.url(path)}: unreadable dead letter: {exc}") from exc
    try:
        record = InboxRecord.model_validate_json(letter.entry_text)
    except (ValidationError, ValueError) as exc:
        raise InboxError(
            f"dead letter {delivery_id!r} holds no valid delivery record, so it cannot be replayed "
            f"(it died because: {letter.reason[:300]}): {exc}"
        ) from exc
    original = delivery_id.split(REPLAY_MARK, 1)[0]
    stamp = time.time_ns() if now_ns is None else now_ns
    entry = LAYOUT.inbox(QUEUE_SOURCE, queue_name(stamp, f"{original}{REPLAY_MARK}{stamp}"))
    lake.write_once(entry, record.model_dump_json().encode())
    lake.remove(path)
    return entry


DEFAULT_RETAIN_S = 14 * 24 * 3600


def prune_inbox(
    lake: Lake, *, retain_s: float = DEFAULT_RETAIN_S, now: float | None = None, limit: int | None = None
) -> int:
    """Remove claims and done entries older than ``retain_s``; returns how many went.

    Without this the inbox keeps a file per delivery for good. A claim is what makes a
    redelivery a duplicate, and GitHub redelivers for a few days at most, so the default keeps
    two weeks. A claim whose delivery is still queued or dead-lettered stays whatever its age.
    Ages come from the listing (one call per folder), not from reading each file."""
    now = time.time() if now is None else now
    cutoff = now - retain_s
    keep: set[str] = set()
    for rel in lake.listdir(LAYOUT.inbox_prefix(QUEUE_SOURCE)):
        m = _QUEUE_NAME.match(rel.rsplit("/", 1)[-1].removesuffix(".json"))
        if m:
            keep.add(m.group(2).split(REPLAY_MARK, 1)[0])
    for rel in lake.listdir(LAYOUT.inbox_prefix(f"{INBOX_SOURCE}-dead")):
        keep.add(rel.rsplit("/", 1)[-1].removesuffix(".json").split(REPLAY_MARK, 1)[0])
    removed = 0
    # Claims first: a done entry left by a crash in between is removed on the next pass.
    for source in (INBOX_SOURCE, DONE_SOURCE):
        for rel, modified in lake.list_modified(LAYOUT.inbox_prefix(source)):
            if limit is not None and removed >= limit:
                return removed
            delivery_id = rel.rsplit("/", 1)[-1].removesuffix(".json")
            if modified >= cutoff or delivery_id.split(REPLAY_MARK, 1)[0] in keep:
                continue
            lake.remove(rel)
            removed += 1
    return removed


def check_delivery_id(delivery_id: str | None) -> str:
    """A delivery id usable as an inbox key (raises ``InboxError`` naming it otherwise)."""
    if delivery_id and len(delivery_id) > MAX_DELIVERY_ID:
        raise InboxError(f"X-GitHub-Delivery {delivery_id[:40]!r}… is longer than {MAX_DELIVERY_ID} characters")
    key = delivery_id or ""
    try:
        LAYOUT.inbox(INBOX_SOURCE, key)
    except LakePathError as exc:
        raise InboxError(f"X-GitHub-Delivery {delivery_id!r} is not a usable delivery id: {exc}") from exc
    return key
