"""Dead letters can be replayed once their cause is fixed, and the inbox does not grow for good.

A `/eval more` that died because the PR's stored request was corrupt is replayed with
`evalrunner inbox replay` after the request is repaired, and the real ``pr_sensor`` then raises
the allowance, even though its cursor still remembers the original delivery as handled. Claims
and done entries past the retention are removed by the sensor's periodic sweep; entries still
queued or dead-lettered keep their claims."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets.cli import main as cli_main
from evalrunner_assets.github.inbox import (
    DONE_SOURCE,
    INBOX_SOURCE,
    QUEUE_SOURCE,
    InboxError,
    InboxRecord,
    dead_letters,
    prune_inbox,
    queue_name,
    replay_dead_letter,
    write_delivery,
)
from evalrunner_assets.pipeline.spec import ComparisonRequest, latest_request, save_request
from lake.layout import LAYOUT
from lake.storage import Lake
from resources import GitHubResource, LakeResource, RepoResource
from sensors import pr as pr_module
from sensors.pr import pr_sensor

pytestmark = pytest.mark.reliability

REPO = "acme/agent"
HEAD = "3" * 40
BASE = "4" * 40
DAY = 24 * 3600.0


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for name in ("EVALRUNNER_GITHUB_TOKEN", "EVALRUNNER_GITHUB_APP_ID", "EVALRUNNER_INBOX_RETAIN_DAYS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EVALRUNNER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVALRUNNER_LAKE", raising=False)
    from evalrunner_assets import home as home_mod

    lake_root = home_mod.lake_root()
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        lake_resource = LakeResource(root=str(lake_root))
        resources = {
            "lake": lake_resource,
            "repos": RepoResource(cache_dir=str(tmp_path / "repos"), export_dir=str(tmp_path / "exports")),
            "github": GitHubResource(),
        }
        yield {"instance": instance, "resources": resources, "lake": lake_resource.open()}


def tick(home: dict[str, Any], cursor: str | None) -> dg.SensorResult:
    context = dg.build_sensor_context(instance=home["instance"], cursor=cursor, resources=home["resources"])
    result = pr_sensor(context)
    assert isinstance(result, dg.SensorResult)
    return result


def more_samples(delivery_id: str, n: int, received_ns: int) -> InboxRecord:
    return InboxRecord(
        delivery_id=delivery_id,
        event="issue_comment",
        action="created",
        kind="more_samples",
        repo=REPO,
        pr=9,
        command="more",
        n=n,
        author_association="MEMBER",
        received_at="2026-01-01T00:00:00+00:00",
        received_ns=received_ns,
        payload_sha256="0" * 64,
    )


def request() -> ComparisonRequest:
    return ComparisonRequest(
        repo=REPO, source="", pr="9", base_sha=BASE, head_sha=HEAD, requested_at="2026-01-01T00:00:00+00:00"
    )


def test_a_dead_letter_replayed_after_its_cause_is_fixed_is_handled(home, capsys):
    lake: Lake = home["lake"]
    lake.write_bytes(LAYOUT.comparison_artifact(REPO, 9, HEAD, "request.json"), b"{truncated")
    assert write_delivery(lake, more_samples("more-1", 16, time.time_ns()))
    first = tick(home, None)
    assert [f.delivery_id for f in dead_letters(lake)] == ["more-1"]

    assert cli_main(["inbox", "list"]) == 0
    assert "more-1" in capsys.readouterr().out

    save_request(lake, request())  # the cause is fixed: the stored request is whole again
    assert cli_main(["inbox", "replay", "more-1"]) == 0
    assert "queued again" in capsys.readouterr().out
    assert dead_letters(lake) == []

    # The cursor still remembers "more-1" as handled; the replay is read as new all the same.
    second = tick(home, first.cursor)
    assert not list(lake.glob("inbox/github-dead/*.json")), "the replay died again"
    latest = latest_request(lake, REPO, "9")
    assert latest is not None and latest.extra_samples == 16
    # Replaying the same delivery again is refused (nothing to replay), and asks nothing twice.
    assert cli_main(["inbox", "replay", "more-1"]) == 2
    assert "no dead letter 'more-1'" in capsys.readouterr().err
    again = tick(home, second.cursor)
    assert not again.run_requests


def test_a_dead_letter_without_a_valid_record_is_not_replayed_and_stays(home, capsys):
    lake: Lake = home["lake"]
    lake.write_once(LAYOUT.inbox(QUEUE_SOURCE, queue_name(time.time_ns(), "garbage")), b"\x00not json")
    tick(home, None)
    with pytest.raises(InboxError, match="holds no valid delivery record"):
        replay_dead_letter(lake, "garbage")
    assert cli_main(["inbox", "replay", "--all"]) == 2
    assert "garbage" in capsys.readouterr().err
    assert [f.delivery_id for f in dead_letters(lake)] == ["garbage"]
    assert cli_main(["inbox", "replay"]) == 2  # neither ids nor --all
    assert "--all" in capsys.readouterr().err


def _age(lake: Lake, rel: str, days: float) -> None:
    t = time.time() - days * DAY
    os.utime(lake.path(rel), (t, t))


def test_claims_and_done_entries_past_the_retention_are_pruned_and_live_ones_kept(home):
    lake: Lake = home["lake"]
    now = time.time_ns()
    for i in range(4):
        assert write_delivery(lake, more_samples(f"old-{i}", 1, now - 30 * 86_400 * 10**9 + i))
    assert write_delivery(lake, more_samples("recent", 1, now))
    # old-0 and old-1 were handled long ago (done); old-2 is still queued; old-3 died.
    for i in (0, 1):
        name = LAYOUT.inbox(QUEUE_SOURCE, queue_name(now - 30 * 86_400 * 10**9 + i, f"old-{i}"))
        lake.write_once(LAYOUT.inbox(DONE_SOURCE, f"old-{i}"), lake.read_bytes(name))
        lake.remove(name)
        _age(lake, LAYOUT.inbox(DONE_SOURCE, f"old-{i}"), 30)
    dead = LAYOUT.inbox_dead_letter(INBOX_SOURCE, "old-3")
    lake.write_once(dead, b"{}")
    lake.remove(LAYOUT.inbox(QUEUE_SOURCE, queue_name(now - 30 * 86_400 * 10**9 + 3, "old-3")))
    for i in range(4):
        _age(lake, LAYOUT.inbox(INBOX_SOURCE, f"old-{i}"), 30)

    assert prune_inbox(lake, retain_s=14 * DAY, limit=1) == 1  # bounded per pass
    assert prune_inbox(lake, retain_s=14 * DAY) == 3
    claims = sorted(p.rsplit("/", 1)[-1] for p in lake.listdir(LAYOUT.inbox_prefix(INBOX_SOURCE)))
    assert claims == ["old-2.json", "old-3.json", "recent.json"]
    assert list(lake.listdir(LAYOUT.inbox_prefix(DONE_SOURCE))) == []
    assert prune_inbox(lake, retain_s=14 * DAY) == 0


def test_the_pr_sensor_prunes_at_its_sweep_and_refuses_a_bad_retention(home, monkeypatch):
    lake: Lake = home["lake"]
    assert write_delivery(lake, more_samples("handled-long-ago", 1, time.time_ns()))
    queued = next(iter(lake.listdir(LAYOUT.inbox_prefix(QUEUE_SOURCE))))
    lake.write_once(LAYOUT.inbox(DONE_SOURCE, "handled-long-ago"), lake.read_bytes(queued))
    lake.remove(queued)
    for rel in (LAYOUT.inbox(INBOX_SOURCE, "handled-long-ago"), LAYOUT.inbox(DONE_SOURCE, "handled-long-ago")):
        _age(lake, rel, 3)
    monkeypatch.setenv("EVALRUNNER_INBOX_RETAIN_DAYS", "2")
    monkeypatch.setattr(pr_module, "_last_sweep", {})
    tick(home, None)
    assert list(lake.listdir(LAYOUT.inbox_prefix(INBOX_SOURCE))) == []
    assert list(lake.listdir(LAYOUT.inbox_prefix(DONE_SOURCE))) == []

    monkeypatch.setenv("EVALRUNNER_INBOX_RETAIN_DAYS", "forever")
    monkeypatch.setattr(pr_module, "_last_sweep", {})
    with pytest.raises(InboxError, match="EVALRUNNER_INBOX_RETAIN_DAYS='forever'"):
        tick(home, None)
