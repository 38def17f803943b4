"""The receiver never answers 5xx for client input: random bytes, random JSON and real payloads
with random parts replaced, all correctly signed, through a real uvicorn server on loopback."""

from __future__ import annotations

import copy
import json
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalrunner_assets.github.inbox import QUEUE_SOURCE, InboxRecord, validate_record
from evalrunner_assets.http.webhook import ReceiverConfig, create_app
from lake.layout import LAYOUT
from lake.storage import Lake
from tests.helpers.github_standin import LoopbackServer

from ._deliveries import SECRET, fixture, post

pytestmark = pytest.mark.reliability

EVENTS = st.sampled_from(["pull_request", "push", "issue_comment", "ping", "installation"]) | st.text(
    string.ascii_letters + "_", min_size=1, max_size=20
)
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


def _pr_comment() -> dict[str, Any]:
    p = fixture("issue_comment.created")
    p["issue"]["pull_request"] = {"url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/1"}
    p["comment"].update(body="/eval more 8", author_association="MEMBER")
    return p


def _push() -> dict[str, Any]:
    p = fixture("push")
    p.update(ref="refs/heads/master", after="a" * 40, deleted=False)
    return p


BASES = {"pull_request": fixture("pull_request.opened"), "push": _push(), "issue_comment": _pr_comment()}


def _paths(obj: Any, prefix: tuple = (), depth: int = 4) -> list[tuple]:
    out = [prefix] if prefix else []
    if depth and isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k), depth - 1)
    return out


PATHS = {event: _paths(payload) for event, payload in BASES.items()}
# The parts the receiver reads, and their parents: drawn as often as all other paths together.
READ = [
    tuple(p.split("."))
    for p in (
        "action repository repository.full_name repository.default_branch number pull_request "
        "pull_request.number pull_request.head pull_request.head.sha pull_request.head.ref "
        "pull_request.head.repo pull_request.head.repo.full_name pull_request.base pull_request.base.sha "
        "pull_request.base.ref installation installation.id sender sender.login ref after deleted issue "
        "issue.pull_request issue.number comment comment.body comment.author_association comment.id"
    ).split()
]


@st.composite
def mutated_delivery(draw) -> tuple[str, dict[str, Any]]:
    event = draw(st.sampled_from(sorted(BASES)))
    payload = copy.deepcopy(BASES[event])
    path_strategy = st.sampled_from(READ) | st.sampled_from(PATHS[event])
    for path in draw(st.lists(path_strategy, min_size=1, max_size=3)):
        node = payload
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):  # also adds a field the event does not carry
            node[path[-1]] = draw(json_values)
    return event, payload


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    lake = Lake(str(tmp_path_factory.mktemp("fuzz") / "lake"))
    with LoopbackServer(create_app(ReceiverConfig(secret=SECRET), lake)) as server:
        yield server, lake


@FUZZ
@given(
    body=st.binary(max_size=2048),
    event=EVENTS,
    content_type=st.sampled_from(["application/json", "application/x-www-form-urlencoded"]),
)
def test_random_signed_bytes_never_get_a_5xx(served, body, event, content_type):
    server, _ = served
    status, answer = post(server.port, body, event, content_type=content_type)
    assert status < 500, answer


@FUZZ
@given(value=json_values, event=EVENTS)
def test_random_signed_json_never_gets_a_5xx(served, value, event):
    server, _ = served
    status, answer = post(server.port, json.dumps(value).encode(), event)
    assert status < 500, answer


@FUZZ
@given(delivery=mutated_delivery())
def test_real_payloads_with_random_parts_never_get_a_5xx_and_only_valid_records_are_queued(served, delivery):
    server, lake = served
    event, payload = delivery
    status, answer = post(server.port, json.dumps(payload).encode(), event)
    assert status < 500, answer
    if answer.get("status") == "queued":
        (entry,) = [p for p in lake.listdir(LAYOUT.inbox_prefix(QUEUE_SOURCE)) if answer["delivery"] in p]
        validate_record(InboxRecord.model_validate_json(lake.read_bytes(entry)))


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_json_nested_too_deeply_is_400(served, depth):
    server, _ = served
    for body in (b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth):
        status, answer = post(server.port, body, "pull_request")
        assert status == 400, answer
        assert answer["status"] == "rejected"
