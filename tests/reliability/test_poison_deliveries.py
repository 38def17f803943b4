"""Poison deliveries never stop PR evaluation.

Through the real receiver (uvicorn on loopback) every poison delivery is refused with 400 and
nothing is written; planted straight into the inbox (the receiver bypassed), the real
``pr_sensor`` moves each to ``inbox/github-dead/`` with its reason, reports it on the
``github_inbox`` asset and moves its cursor on. Either way the valid delivery after them is
evaluated (its run is requested)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets.assets.inbox import GITHUB_INBOX
from evalrunner_assets.github.inbox import (
    QUEUE_SOURCE,
    InboxError,
    InboxRecord,
    body_digest,
    check_ref_name,
    check_repo_full_name,
    normalize_delivery,
    queue_name,
    write_delivery,
)
from evalrunner_assets.http.webhook import ReceiverConfig, create_app
from evalrunner_assets.pipeline.spec import load_request
from lake.layout import LAYOUT
from lake.storage import Lake
from resources import GitHubResource, LakeResource, RepoResource
from sensors.pr import pr_sensor
from tests.helpers.github_standin import LoopbackServer

from ._deliveries import POISON, REPO, SECRET, pull_request, send

pytestmark = pytest.mark.reliability

VALID_HEAD = "1" * 40
VALID_BASE = "2" * 40


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for name in (
        "EVALRUNNER_GITHUB_TOKEN",
        "EVALRUNNER_GITHUB_TOKEN_FILE",
        "EVALRUNNER_GITHUB_APP_ID",
        "EVALRUNNER_GITHUB_PRIVATE_KEY",
        "EVALRUNNER_GITHUB_PRIVATE_KEY_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        lake_resource = LakeResource(root=str(tmp_path / "lake"))
        resources = {
            "lake": lake_resource,
            "repos": RepoResource(cache_dir=str(tmp_path / "repos"), export_dir=str(tmp_path / "exports")),
            "github": GitHubResource(),
        }
        yield {"instance": instance, "resources": resources, "lake": lake_resource.open(), "root": tmp_path}


def tick(home: dict[str, Any], cursor: str | None) -> dg.SensorResult:
    context = dg.build_sensor_context(instance=home["instance"], cursor=cursor, resources=home["resources"])
    result = pr_sensor(context)
    assert isinstance(result, dg.SensorResult)
    return result


def request_files(lake: Lake) -> list[str]:
    return lake.glob("comparisons/**/*.request.json")


def queue(lake: Lake) -> list[str]:
    return list(lake.listdir(LAYOUT.inbox_prefix(QUEUE_SOURCE)))


def test_poison_deliveries_are_refused_by_the_receiver_and_the_next_valid_one_is_evaluated(home):
    lake = home["lake"]
    config = ReceiverConfig(secret=SECRET)  # no allow-list: the default, which accepted them all
    with LoopbackServer(create_app(config, lake)) as receiver:
        answers = {name: send(receiver.port, "pull_request", payload) for name, payload in POISON.items()}
        valid = send(receiver.port, "pull_request", pull_request(number=5, head_sha=VALID_HEAD, base_sha=VALID_BASE))
    wrong = {name: a for name, a in answers.items() if a[0] != 400 or a[1]["status"] != "rejected"}
    assert not wrong, f"poison deliveries not refused with 400: {wrong}"
    # Each answer names the field at fault, so GitHub's "Recent deliveries" shows why.
    assert "owner 'öwner'" in answers["repo-non-ascii-owner"][1]["reason"]
    assert "-1 is not between 1" in answers["pr-minus-one"][1]["reason"]
    assert "head_sha 'abc123'" in answers["head-sha-short"][1]["reason"]
    assert "not a valid git ref name" in answers["head-ref-dotdot"][1]["reason"]
    assert valid[0] == 202, valid
    assert len(queue(lake)) == 1  # only the valid delivery was written

    result = tick(home, None)
    assert [r.run_key for r in result.run_requests] == [f"{REPO}#5@{VALID_HEAD}"]
    assert request_files(lake) == [LAYOUT.comparison_artifact(REPO, 5, VALID_HEAD, "request.json")]
    assert load_request(lake, REPO, "5", VALID_HEAD).head_ref == "changes"  # the delivery's head.ref
    assert not lake.glob("inbox/github-dead/*.json")


def _plant(lake: Lake, name: str, payload: dict[str, Any], received_ns: int) -> str:
    """Write a record into the inbox as an older or careless receiver would (no validation)."""
    pr = payload["pull_request"]
    record = InboxRecord.model_construct(
        v=1,
        delivery_id=name,
        event="pull_request",
        action="opened",
        kind="pull_request",
        repo=payload["repository"]["full_name"],
        default_branch="master",
        pr=payload["number"],
        head_sha=pr["head"]["sha"],
        head_ref=pr["head"]["ref"],
        head_repo=None,
        base_sha=pr["base"]["sha"],
        base_ref=pr["base"]["ref"],
        ref=None,
        sha=None,
        command=None,
        n=None,
        comment_id=None,
        author_association=None,
        sender="Codertocat",
        installation_id=payload["installation"]["id"],
        received_at="2026-01-01T00:00:00+00:00",
        received_ns=received_ns,
        payload_sha256=body_digest(json.dumps(payload).encode()),
    )
    assert write_delivery(lake, record)
    return name


def test_poison_planted_in_the_inbox_is_dead_lettered_and_the_sensor_moves_on(home):
    lake = home["lake"]
    t0 = time.time_ns()
    # A float or string PR number is a receiver-level poison only: the record model reads
    # "7" and 2.0 back as integers, so planted they are valid records.
    poison = {name: p for name, p in POISON.items() if name not in ("pr-float", "pr-string")}
    planted = [_plant(lake, name, payload, t0 + i) for i, (name, payload) in enumerate(poison.items())]
    # Bytes that are not a record at all, and a valid `/eval more` whose handling raises
    # (the PR's stored request is corrupt): anything that raises is dead-lettered too.
    lake.write_once(LAYOUT.inbox(QUEUE_SOURCE, queue_name(t0 + 100, "garbage")), b"\x00not json")
    lake.write_bytes(LAYOUT.comparison_artifact(REPO, 9, "3" * 40, "request.json"), b"{truncated")
    more = InboxRecord(
        delivery_id="more-on-corrupt",
        event="issue_comment",
        action="created",
        kind="more_samples",
        repo=REPO,
        pr=9,
        command="more",
        n=4,
        author_association="MEMBER",
        received_at="2026-01-01T00:00:00+00:00",
        received_ns=t0 + 101,
        payload_sha256="0" * 64,
    )
    assert write_delivery(lake, more)
    valid = InboxRecord(
        delivery_id=str(uuid.uuid4()),
        event="pull_request",
        action="opened",
        kind="pull_request",
        repo=REPO,
        pr=5,
        head_sha=VALID_HEAD,
        head_ref="changes",
        base_sha=VALID_BASE,
        base_ref="master",
        received_at="2026-01-01T00:00:00+00:00",
        received_ns=t0 + 200,
        payload_sha256="0" * 64,
    )
    assert write_delivery(lake, valid)

    result = tick(home, None)

    assert [r.run_key for r in result.run_requests] == [f"{REPO}#5@{VALID_HEAD}"]
    # No request file for any poison one (PR -1 used to write one before failing).
    assert request_files(lake) == sorted(
        [
            LAYOUT.comparison_artifact(REPO, 5, VALID_HEAD, "request.json"),
            LAYOUT.comparison_artifact(REPO, 9, "3" * 40, "request.json"),
        ]
    )
    dead = {
        json.loads(lake.read_bytes(p))["delivery_id"]: json.loads(lake.read_bytes(p))
        for p in lake.glob("inbox/github-dead/*.json")
    }
    assert set(dead) == {*planted, "garbage", "more-on-corrupt"}
    assert "owner 'öwner'" in dead["repo-non-ascii-owner"]["reason"]
    assert "-1 is not between 1" in dead["pr-minus-one"]["reason"]
    assert "unreadable inbox record" in dead["garbage"]["reason"]
    assert dead["more-on-corrupt"]["error_type"] != "InboxError"  # it raised inside the handling
    assert json.loads(dead["pr-minus-one"]["entry_text"])["pr"] == -1  # kept for a person to replay
    assert len(queue(lake)) == 1  # moved out of the queue; only the valid entry remains
    # The UI shows each one: an observation of the github_inbox asset with the reason.
    observed = {e.metadata["delivery"].value: e for e in result.asset_events}
    assert set(observed) == set(dead)
    assert all(e.asset_key == GITHUB_INBOX.key for e in result.asset_events)
    for e in result.asset_events:
        home["instance"].report_runless_asset_event(e)
    recorded = home["instance"].fetch_observations(GITHUB_INBOX.key, limit=100).records
    assert len(recorded) == len(dead)

    # The cursor moved past all of them: the next tick has nothing to do and raises nothing.
    again = tick(home, result.cursor)
    assert not again.run_requests and not again.asset_events
    # A redelivery of a dead-lettered delivery stays a duplicate: it is not queued again.
    assert not write_delivery(lake, InboxRecord.model_validate_json(dead["pr-zero"]["entry_text"]))
    assert len(queue(lake)) == 1


@pytest.mark.parametrize(
    "name",
    [
        "Codertocat/Hello-World",
        "a/b",
        "a-b-c/.github",
        "x" * 39 + "/" + "y" * 100,
        "octo-org/repo.with_dots-and_underscores",
        "0/0",
    ],
)
def test_every_name_github_allows_is_accepted(name):
    assert check_repo_full_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["x" * 40 + "/r", "a--b/r", "a-/r", "a/" + "y" * 101, "a/.", "a_b/r", "a/b/c", "a", "/r", "a/", "a/b c", "a/ö"],
)
def test_names_github_does_not_allow_are_refused(name):
    with pytest.raises(InboxError):
        check_repo_full_name(name)


@pytest.mark.parametrize(
    "ref", ["main", "feature/x-1", "refs/heads/main", "release/v1.2", "dependabot/pip/a-1.0", "ünïcode-branch", "a@b"]
)
def test_valid_git_ref_names_are_accepted(ref):
    assert check_ref_name(ref, "ref") == ref


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "a..b",
        "a b",
        "a~1",
        "a^",
        "a:b",
        "a?",
        "a*",
        "a[b",
        "a\\b",
        "/a",
        "a/",
        "a.",
        "a//b",
        ".hidden",
        "a/.b",
        "x.lock",
        "a@{1}",
        "@",
        "x" * 256,
        "tab\tbed",
    ],
)
def test_invalid_git_ref_names_are_refused(ref):
    with pytest.raises(InboxError):
        check_ref_name(ref, "ref")


def test_a_comment_body_longer_than_github_allows_is_refused():
    from ._deliveries import fixture

    payload = fixture("issue_comment.created")
    payload["issue"]["pull_request"] = {"url": "u"}
    payload["comment"].update(body="/eval more 4\n" + "x" * 70_000, author_association="MEMBER")
    with pytest.raises(InboxError, match="comment.body has"):
        normalize_delivery("issue_comment", "d", payload, body_sha256="0" * 64)
