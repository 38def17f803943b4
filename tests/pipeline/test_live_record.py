"""The live record a running comparison keeps beside its document (the run page's "sandboxes
running windows"): what is in flight, rewritten on change at most once a second and on a
heartbeat while nothing changes, ended at the end; on a real local lake."""

from __future__ import annotations

from evalrunner_assets.pipeline.live import HEARTBEAT_S, LiveRecorder, read_live
from evalrunner_assets.pipeline.loop import Step
from evalrunner_assets.pipeline.scheduler import Unit
from lake import open_lake

REPO, PR = "acme/agent", "7"
HEAD, BASE = "a" * 40, "b" * 40


def _unit(seq: int, sha: str, task: str, windows: tuple[str, ...], submitted_at: float) -> Unit:
    step = Step("samples", f"k{seq}", commit=f"{REPO}@{sha}", task=task, windows=windows)
    return Unit(seq=seq, step=step, windows=len(windows), submitted_at=submitted_at)


def test_the_record_names_each_step_in_flight_with_its_arm_and_windows(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    live = LiveRecorder(lake, REPO, PR, HEAD, workers=2)
    assert read_live(lake, REPO, PR, HEAD) is None
    units = [_unit(0, HEAD, "qa/one", ("w0000-0016",), 100.0), _unit(1, BASE, "qa/one", ("w0000-0016",), 101.0)]
    live.update(units, now=105.0)
    record = read_live(lake, REPO, PR, HEAD)
    assert record is not None and not record.ended and record.workers == 2
    assert [(s.task, s.arm, s.windows) for s in record.steps] == [
        ("qa/one", "base", ["w0000-0016"]),
        ("qa/one", "head", ["w0000-0016"]),
    ]
    assert record.sandboxes() == 2 and record.sandboxes("qa/one", "head") == 1 and record.sandboxes("qa/two") == 0
    assert record.age_s() < 60


def test_a_change_is_written_at_most_once_a_second_and_a_quiet_run_still_beats(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    live = LiveRecorder(lake, REPO, PR, HEAD, workers=1)
    one = [_unit(0, HEAD, "qa/one", ("w0",), 0.0)]
    two = [*one, _unit(1, BASE, "qa/one", ("w0",), 0.5)]
    live.update(one, now=1.0)
    live.update(two, now=1.5)  # too soon after the last write: waits for the next call
    assert read_live(lake, REPO, PR, HEAD).sandboxes() == 1  # type: ignore[union-attr]
    live.update(two, now=2.1)
    assert read_live(lake, REPO, PR, HEAD).sandboxes() == 2  # type: ignore[union-attr]
    rel = f"comparisons/{REPO}/{PR}/{HEAD}.live.json"
    (tmp_path / "lake" / rel).unlink()
    live.update(two, now=2.1 + HEARTBEAT_S / 2)  # unchanged and not yet due: nothing written
    assert not lake.exists(rel)
    live.update(two, now=2.2 + HEARTBEAT_S)  # the heartbeat
    beat = read_live(lake, REPO, PR, HEAD)
    assert beat is not None and [(s.arm, s.windows) for s in beat.steps] == [("base", ["w0"]), ("head", ["w0"])]


def test_the_end_is_written_at_once_with_nothing_in_flight(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    live = LiveRecorder(lake, REPO, PR, HEAD, workers=1)
    live.update([_unit(0, HEAD, "qa/one", ("w0",), 0.0)], now=1.0)
    live.end()
    record = read_live(lake, REPO, PR, HEAD)
    assert record is not None and record.ended and record.steps == []


def test_an_unreadable_record_reads_as_none(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    lake.write_bytes(f"comparisons/{REPO}/{PR}/{HEAD}.live.json", b"{not json")
    assert read_live(lake, REPO, PR, HEAD) is None
