"""The webhook receiver as a real uvicorn server on loopback, and the inbox reader behind it."""

from __future__ import annotations

import copy
import http.client
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evalrunner_assets.github.inbox import (
    QUEUE_SOURCE,
    EvaluatePR,
    EvaluatePush,
    InboxCursor,
    InboxError,
    MoreSamples,
    intent_for,
    normalize_delivery,
    pr_run_key,
    queue_name,
    read_inbox,
    web_more_samples_record,
    write_delivery,
)
from evalrunner_assets.http.webhook import (
    ReceiverConfig,
    WebhookConfigError,
    create_app,
    load_webhook_secret,
    serve,
    sign,
    signature_ok,
)
from lake.layout import LAYOUT
from lake.storage import Lake
from tests.helpers.github_standin import LoopbackServer
from tests.helpers.shared_files import shared_path

FIXTURES = shared_path("fixtures/github-webhooks")
SECRET = b"receiver-test-secret"
REPO = "Codertocat/Hello-World"
CAP = 256 * 1024


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def pr_comment(body: str, association: str) -> dict:
    """The issue_comment fixture, moved onto a pull request (the fixture's is a plain issue)."""
    p = fixture("issue_comment.created")
    p["issue"]["pull_request"] = {"url": f"https://api.github.com/repos/{REPO}/pulls/1"}
    p["comment"]["body"] = body
    p["comment"]["author_association"] = association
    return p


def default_branch_push() -> dict:
    """The push fixture (a tag deletion) turned into a push to the default branch."""
    p = fixture("push")
    p.update(ref="refs/heads/master", after="a" * 40, deleted=False, created=False)
    return p


@pytest.fixture
def lake(tmp_path) -> Lake:
    return Lake(str(tmp_path / "lake"))


@pytest.fixture
def receiver(lake):
    config = ReceiverConfig(secret=SECRET, allowed_repos=frozenset({REPO.lower(), "octocoders/*"}), max_body_bytes=CAP)
    with LoopbackServer(create_app(config, lake)) as server:
        yield server


def post(
    server,
    body: bytes,
    event: str | None,
    delivery: str | None = None,
    *,
    signature: str | None = "auto",
    secret: bytes = SECRET,
    headers: dict | None = None,
):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    h = {"Content-Type": "application/json"}
    if event is not None:
        h["X-GitHub-Event"] = event
    h["X-GitHub-Delivery"] = delivery or str(uuid.uuid4())
    if signature == "auto":
        h["X-Hub-Signature-256"] = sign(secret, body)
    elif signature is not None:
        h["X-Hub-Signature-256"] = signature
    h.update(headers or {})
    try:
        conn.request("POST", "/webhooks/github", body=body, headers=h)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def send(server, event: str, payload: dict, delivery: str | None = None, **kw):
    return post(server, json.dumps(payload).encode(), event, delivery, **kw)


def drain(lake, cursor=None):
    entries, cursor = read_inbox(lake, cursor)
    return entries, cursor


# -- signatures ----------------------------------------------------------------------------------
def test_signature_matches_githubs_documented_test_vector():
    secret, payload = b"It's a Secret to Everybody", b"Hello, World!"
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign(secret, payload) == expected
    assert signature_ok(secret, payload, expected)
    assert not signature_ok(secret, payload + b" ", expected)
    assert not signature_ok(secret, payload, expected.replace("sha256=", "sha1="))


def test_test_vector_is_verified_by_the_running_server_before_parsing(lake):
    # The vector's body is not JSON: a valid signature gets past 401 and fails parsing (400);
    # a wrong one stops at 401 before the body is looked at.
    config = ReceiverConfig(secret=b"It's a Secret to Everybody")
    with LoopbackServer(create_app(config, lake)) as server:
        good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        assert post(server, b"Hello, World!", "push", signature=good)[0] == 400
        assert post(server, b"Hello, World!", "push", signature=good[:-1] + "0")[0] == 401


def test_missing_or_wrong_signature_is_401_and_writes_nothing(receiver, lake):
    body = json.dumps(fixture("pull_request.opened")).encode()
    assert post(receiver, body, "pull_request", signature=None)[0] == 401
    assert post(receiver, body, "pull_request", secret=b"another secret")[0] == 401
    assert post(receiver, body, "pull_request", signature="sha256=" + "0" * 64)[0] == 401
    assert post(receiver, body, "pull_request", signature="sha256=zz")[0] == 401
    assert post(receiver, body + b" ", "pull_request", signature=sign(SECRET, body))[0] == 401
    assert drain(lake)[0] == []


# -- body checks ---------------------------------------------------------------------------------
def test_declared_oversized_body_is_413_without_reading_it(receiver):
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    conn.putrequest("POST", "/webhooks/github")
    conn.putheader("Content-Length", str(10**9))  # the body is never sent
    conn.putheader("X-GitHub-Event", "push")
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 413
    conn.close()


def test_chunked_body_past_the_cap_is_413(receiver):
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    chunks = [b"x" * 16384 for _ in range(CAP // 16384 + 2)]
    conn.request(
        "POST",
        "/webhooks/github",
        body=iter(chunks),
        headers={"X-GitHub-Event": "push", "Transfer-Encoding": "chunked"},
        encode_chunked=True,
    )
    assert conn.getresponse().status == 413
    conn.close()


def test_malformed_json_with_a_valid_signature_is_400(receiver, lake):
    assert post(receiver, b'{"action": "opened", ', "pull_request")[0] == 400
    assert post(receiver, b"[1, 2]", "pull_request")[0] == 400
    assert post(receiver, b"\xff\xfe", "pull_request")[0] == 400
    assert drain(lake)[0] == []


def test_missing_event_header_or_unusable_delivery_id_is_400(receiver):
    body = json.dumps(fixture("pull_request.opened")).encode()
    assert post(receiver, body, None)[0] == 400
    assert post(receiver, body, "pull_request", delivery="../../etc/passwd")[0] == 400


def test_form_encoded_delivery_is_accepted(receiver, lake):
    from urllib.parse import urlencode

    body = urlencode({"payload": json.dumps(fixture("pull_request.opened"))}).encode()
    status, answer = post(receiver, body, "pull_request", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert (status, answer["status"]) == (202, "queued")
    assert len(drain(lake)[0]) == 1


# -- events --------------------------------------------------------------------------------------
def test_ping_is_answered_and_not_queued(receiver, lake):
    status, answer = send(receiver, "ping", fixture("ping"))  # Octocoders/* is allowed
    assert (status, answer["status"]) == (200, "pong")
    assert drain(lake)[0] == []


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened"])
def test_pull_request_actions_are_queued_as_evaluate_pr(receiver, lake, action):
    payload = fixture(f"pull_request.{action}")
    status, answer = send(receiver, "pull_request", payload, delivery=f"d-{action}")
    assert (status, answer["status"]) == (202, "queued")
    (entry,), _ = drain(lake)
    rec = entry.record
    assert (rec.delivery_id, rec.event, rec.action, rec.repo, rec.pr) == (
        f"d-{action}",
        "pull_request",
        action,
        REPO,
        2,
    )
    assert rec.default_branch == "master" and rec.installation_id == 1
    assert intent_for(rec) == EvaluatePR(
        REPO,
        2,
        payload["pull_request"]["head"]["sha"],
        payload["pull_request"]["base"]["sha"],
        "master",
        head_ref=payload["pull_request"]["head"]["ref"],
    )


def test_closed_pull_request_is_ignored(receiver, lake):
    status, answer = send(receiver, "pull_request", fixture("pull_request.closed"))
    assert (status, answer["status"]) == (202, "ignored")
    assert "closed" in answer["reason"]
    assert drain(lake)[0] == []


def test_push_only_to_the_default_branch_is_queued(receiver, lake):
    assert send(receiver, "push", fixture("push"))[1]["status"] == "ignored"  # a tag
    other = default_branch_push()
    other["ref"] = "refs/heads/feature"
    assert send(receiver, "push", other)[1]["status"] == "ignored"
    deleted = default_branch_push()
    deleted.update(after="0" * 40, deleted=True)
    assert send(receiver, "push", deleted)[1]["status"] == "ignored"
    assert send(receiver, "push", default_branch_push())[0] == 202
    (entry,), _ = drain(lake)
    assert intent_for(entry.record) == EvaluatePush(REPO, "a" * 40, "refs/heads/master")


def test_unknown_event_is_accepted_and_ignored(receiver, lake):
    status, answer = send(receiver, "star", {"action": "created", "repository": {"full_name": REPO}})
    assert (status, answer["status"]) == (202, "ignored")
    assert drain(lake)[0] == []


def test_repository_outside_the_allow_list_is_403(receiver, lake):
    payload = fixture("pull_request.opened")
    payload["repository"]["full_name"] = "someone-else/Hello-World"
    status, answer = send(receiver, "pull_request", payload)
    assert status == 403 and "allow-list" in answer["reason"]
    assert drain(lake)[0] == []


@pytest.mark.parametrize("association", ["OWNER", "MEMBER", "COLLABORATOR"])
def test_eval_more_from_a_writer_is_queued(receiver, lake, association):
    status, answer = send(receiver, "issue_comment", pr_comment("Looks odd.\n/eval more 24\n", association))
    assert (status, answer["status"]) == (202, "queued")
    (entry,), _ = drain(lake)
    assert intent_for(entry.record) == MoreSamples(REPO, 1, 24)
    assert entry.record.author_association == association


def test_more_samples_asked_on_the_web_page_read_back_as_the_comments_intent(lake):
    """The PR page's "Ask for more samples" writes the record ``/eval more N`` becomes, under its
    own delivery id, so the PR sensor's one path serves both."""
    first, second = web_more_samples_record(REPO, 1, 24), web_more_samples_record(REPO, 1, 24)
    assert first.delivery_id != second.delivery_id and first.delivery_id.startswith("web-")
    assert write_delivery(lake, first) and write_delivery(lake, second)
    entries, _ = drain(lake)
    assert [intent_for(e.record) for e in entries] == [MoreSamples(REPO, 1, 24)] * 2
    assert {e.record.event for e in entries} == {"web"}
    for repo, pr, n, named in [
        ("no-slash", 1, 5, "repository"),
        (REPO, 0, 5, "pull request number"),
        (REPO, 1, 0, "more samples"),
        (REPO, 1, 10**6, "more samples"),
    ]:
        with pytest.raises(InboxError, match=named):
            web_more_samples_record(repo, pr, n)


@pytest.mark.parametrize("association", ["CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "NONE"])
def test_eval_more_from_a_non_member_is_ignored(receiver, lake, association):
    status, answer = send(receiver, "issue_comment", pr_comment("/eval more 24", association))
    assert (status, answer["status"]) == (202, "ignored")
    assert association in answer["reason"]
    assert drain(lake)[0] == []


def test_comment_without_command_or_on_an_issue_is_ignored(receiver, lake):
    assert send(receiver, "issue_comment", pr_comment("nice work", "OWNER"))[1]["status"] == "ignored"
    plain_issue = fixture("issue_comment.created")
    plain_issue["comment"]["body"] = "/eval more"
    assert send(receiver, "issue_comment", plain_issue)[1]["status"] == "ignored"
    assert drain(lake)[0] == []


def test_redelivery_is_a_no_op(receiver, lake):
    payload = fixture("pull_request.synchronize")
    assert send(receiver, "pull_request", payload, delivery="same-id")[0] == 202
    status, answer = send(receiver, "pull_request", payload, delivery="same-id")
    assert (status, answer["status"]) == (200, "duplicate")
    entries, cursor = drain(lake)
    assert [e.delivery_id for e in entries] == ["same-id"]
    assert send(receiver, "pull_request", payload, delivery="same-id")[0] == 200
    assert drain(lake, cursor)[0] == []


def test_healthz(receiver):
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=5)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200


@pytest.mark.slow
def test_burst_of_1000_with_20_percent_redeliveries_is_processed_exactly_once(receiver, lake):
    payload = fixture("pull_request.synchronize")
    bodies = {}
    ids = [f"burst-{i:04d}" for i in range(800)]
    for i, d in enumerate(ids):
        p = copy.deepcopy(payload)
        p["pull_request"]["head"]["sha"] = f"{i:040x}"
        bodies[d] = json.dumps(p).encode()
    # 200 redeliveries of earlier ids, interleaved so originals and copies race each other.
    sends = ids + [ids[(i * 7) % 800] for i in range(200)]
    order = sorted(range(len(sends)), key=lambda k: (k * 7919) % len(sends))
    sends = [sends[k] for k in order]

    processed: list[str] = []
    stop = threading.Event()
    cursor_box = [InboxCursor()]

    def reader():  # a sensor ticking while the burst lands
        while not stop.is_set():
            entries, cursor_box[0] = read_inbox(lake, cursor_box[0])
            processed.extend(e.delivery_id for e in entries)
            time.sleep(0.005)

    t = threading.Thread(target=reader)
    t.start()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=24) as pool:
        results = list(pool.map(lambda d: post(receiver, bodies[d], "pull_request", d), sends))
    stop.set()
    t.join()
    entries, _ = read_inbox(lake, cursor_box[0])
    processed.extend(e.delivery_id for e in entries)
    elapsed = time.monotonic() - started

    statuses = [s for s, _ in results]
    assert all(s in (200, 202) for s in statuses), set(statuses)
    assert statuses.count(202) == 800 and statuses.count(200) == 200
    assert sorted(processed) == sorted(ids)  # none lost, none twice
    assert elapsed < 40, f"burst took {elapsed:.1f}s"


# -- inbox cursor ------------------------------------------------------------------------------
def _record(delivery: str, ns: int, head: str = "b" * 40):
    p = fixture("pull_request.opened")
    p["pull_request"]["head"]["sha"] = head
    return normalize_delivery("pull_request", delivery, p, body_sha256="0" * 64, received_ns=ns)


def test_a_delivery_stamped_earlier_but_written_later_is_not_skipped(lake):
    base = 1_700_000_000 * 10**9
    write_delivery(lake, _record("late", base + 1))
    # The race: "late" was stamped first, but its queue entry lands after "early-visible" was read.
    qpath = LAYOUT.inbox(QUEUE_SOURCE, queue_name(base + 1, "late"))
    late_bytes = lake.read_bytes(qpath)
    Path(lake.path(qpath)).unlink()
    write_delivery(lake, _record("early-visible", base + 2))
    entries, cursor = read_inbox(lake)
    assert [e.delivery_id for e in entries] == ["early-visible"]
    assert cursor.hw == base + 2
    lake.write_once(qpath, late_bytes)  # now it lands, stamped before the high-water mark
    entries, cursor = read_inbox(lake, cursor.to_json())
    assert [e.delivery_id for e in entries] == ["late"]
    assert read_inbox(lake, cursor)[0] == []


def test_cursor_forgets_ids_outside_its_window_and_keeps_order(lake):
    base = 1_700_000_000 * 10**9
    for i, d in enumerate(["a", "b", "c", "d"]):
        write_delivery(lake, _record(d, base + i * 10**9))
    first, cursor = read_inbox(lake, None, limit=2, window_ns=1_500_000_000)
    assert [e.delivery_id for e in first] == ["a", "b"]
    rest, cursor = read_inbox(lake, cursor, window_ns=1_500_000_000)
    assert [e.delivery_id for e in rest] == ["c", "d"]
    assert dict(cursor.seen) == {"d": base + 3 * 10**9, "c": base + 2 * 10**9}
    assert InboxCursor.from_json(cursor.to_json()) == cursor
    with pytest.raises(InboxError, match="not a valid cursor"):
        InboxCursor.from_json("{nope")


def test_crash_between_claim_and_queue_entry_is_repaired_by_redelivery(lake):
    base = 1_700_000_000 * 10**9
    rec = _record("crashed", base)
    write_delivery(lake, rec)
    Path(lake.path(LAYOUT.inbox(QUEUE_SOURCE, queue_name(base, "crashed")))).unlink()
    assert read_inbox(lake)[0] == []
    assert write_delivery(lake, _record("crashed", base + 5)) is False  # the redelivery
    (entry,), cursor = read_inbox(lake)
    assert entry.delivery_id == "crashed" and entry.record.received_ns == base


def test_unreadable_queue_entry_is_reported_once_not_blocking(lake):
    base = 1_700_000_000 * 10**9
    lake.write_once(LAYOUT.inbox(QUEUE_SOURCE, queue_name(base, "junk")), b"{not json")
    write_delivery(lake, _record("fine", base + 1))
    entries, cursor = read_inbox(lake)
    assert [(e.delivery_id, e.error is not None) for e in entries] == [("junk", True), ("fine", False)]
    assert read_inbox(lake, cursor)[0] == []


def test_run_key_changes_on_force_push_not_on_redelivery():
    a = intent_for(_record("x", 1, head="c" * 40))
    again = intent_for(_record("y", 2, head="c" * 40))
    forced = intent_for(_record("z", 3, head="d" * 40))
    assert a.run_key == again.run_key == f"{REPO}#2@{'c' * 40}"
    assert forced.run_key != a.run_key
    with pytest.raises(InboxError, match="40-hex"):
        pr_run_key(REPO, 2, "abc")


def test_pull_request_without_head_sha_is_a_clear_error(receiver):
    p = fixture("pull_request.opened")
    del p["pull_request"]["head"]["sha"]
    status, answer = send(receiver, "pull_request", p, delivery="no-head")
    assert status == 400 and "no-head" in answer["reason"] and "head_sha" in answer["reason"]


# -- configuration -------------------------------------------------------------------------------
def test_secret_is_required_unless_insecure_mode_is_chosen(tmp_path):
    with pytest.raises(WebhookConfigError, match="EVALRUNNER_WEBHOOK_SECRET"):
        ReceiverConfig(secret=None)
    ReceiverConfig(secret=None, insecure=True)
    f = tmp_path / "secret"
    f.write_bytes(b"from-a-file\n")
    assert load_webhook_secret({"EVALRUNNER_WEBHOOK_SECRET_FILE": str(f)}) == b"from-a-file"
    assert load_webhook_secret({"EVALRUNNER_WEBHOOK_SECRET": "env"}) == b"env"
    with pytest.raises(WebhookConfigError, match="only one"):
        load_webhook_secret({"EVALRUNNER_WEBHOOK_SECRET": "a", "EVALRUNNER_WEBHOOK_SECRET_FILE": str(f)})
    with pytest.raises(WebhookConfigError, match="cannot be read"):
        load_webhook_secret({"EVALRUNNER_WEBHOOK_SECRET_FILE": str(tmp_path / "missing")})
    assert "from-a-file" not in repr(ReceiverConfig(secret=b"from-a-file"))
    with pytest.raises(WebhookConfigError, match="loopback"):
        serve("0.0.0.0", 1, insecure=True)


def test_insecure_local_mode_accepts_unsigned_deliveries(lake):
    with LoopbackServer(create_app(ReceiverConfig(insecure=True), lake)) as server:
        status, _ = send(server, "pull_request", fixture("pull_request.opened"), signature=None)
    assert status == 202
