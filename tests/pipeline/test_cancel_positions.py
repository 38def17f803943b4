"""Ctrl-C at many points of a real comparison (the example repo, bubblewrap sandboxes, the CLI's
Dagster recording): every time, the comparison document is saved and marked cancelled, nothing
half-written stays in the lake, and the same call resumes to the verdict.

A real SIGINT is sent to this process at the k-th call of one of a chosen set of engine, scheduler
and lake functions after a phase began (learning the commits, running the windows, concluding),
on whichever thread makes that call. The runs share one lake, as a person pressing Ctrl-C and running the command again does: windows
that landed stay landed, so each run starts where the last one stopped.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets.driver import comparison as driver
from evalrunner_assets.errors import explain
from evalrunner_assets.example_repo import ExampleRepo, build_example_repo
from evalrunner_assets.execution.inspect_runner import WarmTaskRunner
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline import engine as engine_mod
from evalrunner_assets.pipeline.capabilities import PROGRESS_EVERY_S, EngineOptions
from evalrunner_assets.pipeline.engine import ComparisonCancelled, ComparisonEngine, ComparisonFailed
from evalrunner_assets.pipeline.facts import load_facts
from evalrunner_assets.pipeline.scheduler import PackedScheduler
from lake import LAYOUT
from lake.storage import LakeWriteError
from tests.helpers.pipeline_fixtures import PipelineHome, evalrunner_home, request_for

pytestmark = pytest.mark.slow

PR = "9"
CAP = 32  # four 8-pair windows per arm: some are left to interrupt after the first runs

# The phases a position is counted from: the k-th hooked call after the phase began.
PHASES = {
    "learn": (ComparisonEngine, "learn_commits"),
    "windows": (PackedScheduler, "run"),
    "final": (ComparisonEngine, "conclude"),
}
# Where an interrupt can land: the driving thread's steps, the window and progress threads'
# work, the assessments, and every write of the document, its execution summary and report.
HOOKED: list[tuple[Any, str]] = [
    (ComparisonEngine, "assess"),
    (ComparisonEngine, "saved"),
    (ComparisonEngine, "plan"),
    (ComparisonEngine, "run_step"),
    (ComparisonEngine, "on_done"),
    (ComparisonEngine, "record_progress"),
    (ComparisonEngine, "compare"),
    (ComparisonEngine, "report"),
    (ComparisonEngine, "write_execution"),
    (ComparisonEngine, "export"),
    (ComparisonEngine, "_list_in_warm_sessions"),
    (WarmTaskRunner, "list_ids"),
    (PackedScheduler, "_fold"),
    (PackedScheduler, "_collect"),
    (engine_mod, "learn_commit"),
    (engine_mod, "save_comparison"),
    (engine_mod, "write_report"),
    (assess_mod, "assess"),
    (assess_mod, "save_result"),
]


class Interrupter:
    """Sends this process SIGINT at the ``k``-th call of ``function`` after ``phase`` began, once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.phase = ""
        self.calls = 0
        self.target: tuple[str, str, int] | None = None
        self.sent = False

    def arm(self, phase: str, function: str, k: int) -> None:
        with self.lock:
            self.phase, self.calls, self.target, self.sent = "", 0, (phase, function, k), False

    def disarm(self) -> None:
        with self.lock:
            self.target = None

    def enter(self, phase: str) -> None:
        with self.lock:
            self.phase, self.calls = phase, 0

    def call(self, name: str) -> None:
        with self.lock:
            if self.target is None or self.sent or (self.phase, name) != self.target[:2]:
                return
            self.calls += 1
            if self.calls < self.target[2]:
                return
            self.sent = True
        os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C: to the process, any thread


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> ExampleRepo:
    return build_example_repo(tmp_path_factory.mktemp("example") / "support-agent", ["improve-runbook"])


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PipelineHome]:
    with evalrunner_home(tmp_path_factory.mktemp("cancel-home")) as h:
        yield h


@pytest.fixture(scope="module")
def instance(home: PipelineHome) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.local_temp(tempdir=str(home.root / "dagster")) as inst:
        yield inst


@pytest.fixture(scope="module")
def interrupter() -> Iterator[Interrupter]:
    hooks = Interrupter()
    patch = pytest.MonkeyPatch()

    def counted(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            hooks.call(name)
            return fn(*args, **kwargs)

        return wrapper

    def phase(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            hooks.enter(name)
            return fn(*args, **kwargs)

        return wrapper

    for owner, attr in HOOKED:
        patch.setattr(owner, attr, counted(attr, getattr(owner, attr)))
    for name, (owner, attr) in PHASES.items():
        patch.setattr(owner, attr, phase(name, getattr(owner, attr)))
    # Python's own handler, as a terminal gives it; a shell that starts the suite in the
    # background leaves SIGINT ignored, and the product must restore whichever was there.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield hooks
    signal.signal(signal.SIGINT, before)
    patch.undo()


class Comparisons:
    """Runs of one comparison on one lake, each checked as it ends."""

    def __init__(self, home: PipelineHome, instance: dg.DagsterInstance, example: ExampleRepo) -> None:
        self.home, self.instance, self.example = home, instance, example
        self.request = request_for(example, "improve-runbook", PR, cap=CAP, max_tasks=1)

    def run(self, progress_every_s: float = PROGRESS_EVERY_S) -> Any:
        return driver.run_comparison(
            self.request,
            instance=self.instance,
            resources=self.home.resources(),
            options=EngineOptions(progress_every_s=progress_every_s),
        )

    def document(self) -> dict[str, Any] | None:
        path = self.home.lake_root / LAYOUT.comparison(self.request.repo, PR, self.request.head_sha)
        return json.loads(path.read_text()) if path.exists() else None

    def execution(self) -> dict[str, Any]:
        rel = LAYOUT.comparison_artifact(self.request.repo, PR, self.request.head_sha, "execution.json")
        return json.loads((self.home.lake_root / rel).read_text())

    def check_cancelled(self, raised: ComparisonCancelled, where: str) -> dict[str, Any]:
        doc = self.document()
        assert doc is not None, f"interrupted at {where}: no comparison document was saved"
        assert doc["status"] == "cancelled", f"interrupted at {where}: the document says {doc['status']}"
        assert doc["execution"]["status"] == "cancelled", where
        assert self.execution()["status"] == "cancelled", where
        assert "SIGINT" in doc["stopped_reason"], (where, doc["stopped_reason"])
        assert raised.save_errors == [], (where, raised.save_errors)
        for sha in {self.request.base_sha, self.request.head_sha}:
            facts = load_facts(self.home.lake(), self.request.repo, sha)
            failed = {t: f.failure for t, f in facts.tasks.items() if f.failure} if facts is not None else {}
            assert not failed, f"interrupted at {where}: the cancellation was recorded as the tasks' failure: {failed}"
        leftovers = [p for p in self.home.lake_root.rglob("*") if ".tmp-" in p.name]
        assert not leftovers, (where, leftovers)
        return doc


@pytest.fixture(scope="module")
def comparisons(home: PipelineHome, instance: dg.DagsterInstance, example: ExampleRepo) -> Comparisons:
    return Comparisons(home, instance, example)


# Positions (phase, function, k), in the order the runs meet them on one lake. Learning: at its
# start, exporting, each commit's learning starting, its ids about to be listed (the warm
# sandboxes starting), listed in a running sandbox. Windows: the first
# window folded (in the run that learnt the commits, on the sandboxes that listed their ids),
# planning, each arm's window starting in its sandbox, a progress document being reported (on
# the progress thread). The end, each step: the final assessment, the document, the report, the
# execution summary. Each window position in a run of its own costs a sandbox start: few of them.
POSITIONS = [
    ("learn", "assess", 1),
    ("learn", "export", 1),
    ("learn", "learn_commit", 1),
    ("learn", "learn_commit", 2),
    ("learn", "_list_in_warm_sessions", 1),
    ("learn", "list_ids", 1),
    ("windows", "_fold", 1),
    ("windows", "plan", 1),
    ("windows", "run_step", 1),
    ("windows", "run_step", 2),
    ("windows", "write_report", 1),
    ("final", "assess", 1),
    ("final", "assess", 2),
    ("final", "saved", 1),
    ("final", "compare", 1),
    ("final", "assess", 3),
    ("final", "save_comparison", 1),
    ("final", "save_result", 1),
    ("final", "report", 1),
    ("final", "saved", 2),
    ("final", "write_report", 1),
    ("final", "saved", 3),
    ("final", "save_result", 2),
    ("final", "write_execution", 1),
]
# Progress documents after every window only where a position needs one (they cost a report each).
PROGRESS_POSITIONS = {("windows", "write_report")}


def test_ctrl_c_at_every_position_leaves_the_document_saved_and_marked_cancelled(
    comparisons: Comparisons, interrupter: Interrupter, home: PipelineHome
) -> None:
    assert len(POSITIONS) >= 20
    for phase, function, k in POSITIONS:
        where = f"call {k} of {function} while in {phase}"
        interrupter.arm(phase, function, k)
        with pytest.raises(KeyboardInterrupt) as raised:
            comparisons.run(progress_every_s=0.0 if (phase, function) in PROGRESS_POSITIONS else 20.0)
        assert interrupter.sent, f"{where} was never reached"
        assert isinstance(raised.value, ComparisonCancelled), where
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "the SIGINT handler was not restored"
        comparisons.check_cancelled(raised.value, where)
    interrupter.disarm()

    # Resumed: the verdict, every window landed once.
    result = comparisons.run()
    assert result.status == "complete"
    assert result.verdict != "RUNNING"
    records = [json.loads(p.read_text()) for p in (home.lake_root / "batches").rglob("*.json")]
    windows = Counter((r["commit"], r["task"], r["window"]) for r in records if r.get("status") == "ok")
    assert windows and all(n == 1 for n in windows.values()), windows


def test_a_second_ctrl_c_while_the_cancellation_is_saved_is_ignored(
    comparisons: Comparisons, interrupter: Interrupter, monkeypatch: pytest.MonkeyPatch
) -> None:
    finish = ComparisonEngine.finish

    def finish_interrupted(self: ComparisonEngine, status: Any, reason: str, **kw: Any) -> Any:
        if status == "cancelled":
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C pressed again while saving
        return finish(self, status, reason, **kw)

    monkeypatch.setattr(ComparisonEngine, "finish", finish_interrupted)
    interrupter.arm("final", "assess", 1)
    with pytest.raises(ComparisonCancelled) as raised:
        comparisons.run()
    comparisons.check_cancelled(raised.value, "final call 1, then again while saving")


def test_a_failed_recording_is_reported_and_the_cancellation_still_saved(
    comparisons: Comparisons, interrupter: Interrupter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalrunner_assets.assets.recording import DagsterRecorder

    def close_failing(self: DagsterRecorder, *, wait: bool) -> None:
        raise ComparisonFailed("recording sample_scores failed: the instance's database is locked")

    monkeypatch.setattr(DagsterRecorder, "close", close_failing)
    interrupter.arm("final", "compare", 1)
    with pytest.raises(ComparisonCancelled) as raised:
        comparisons.run()
    # Recording failed twice: as the end was concluded (the error the comparison stopped on) and
    # again when the cancellation stopped it; each is reported, and the document still saved.
    assert raised.value.save_errors == [
        "ComparisonFailed: recording sample_scores failed: the instance's database is locked",
        "stopping the recording failed: ComparisonFailed: recording sample_scores failed: the instance's "
        "database is locked",
    ]
    doc = comparisons.document()
    assert doc is not None and doc["status"] == "cancelled"
    told = explain(raised.value, "compare")
    assert told.exit_code == 130
    assert len(told.lines) == 2 and "database is locked" in told.lines[1], told.lines


def test_when_the_state_cannot_be_assessed_the_saved_document_is_marked_cancelled(
    comparisons: Comparisons, interrupter: Interrupter, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = comparisons.document()
    assert before is not None
    finish = ComparisonEngine.finish

    def finish_failing(self: ComparisonEngine, status: Any, reason: str, **kw: Any) -> Any:
        if status == "cancelled":
            raise ValueError("a task's rows could not be paired")
        return finish(self, status, reason, **kw)

    monkeypatch.setattr(ComparisonEngine, "finish", finish_failing)
    interrupter.arm("final", "assess", 1)
    with pytest.raises(ComparisonCancelled) as raised:
        comparisons.run()
    assert [e.split(":")[0] for e in raised.value.save_errors] == [
        "saving the cancelled comparison failed",
        "assessing it afresh failed",
    ]
    doc = comparisons.document()
    assert doc is not None and doc["status"] == "cancelled" and "SIGINT" in doc["stopped_reason"]
    assert doc["samples_run"] == before["samples_run"] and doc["tasks"].keys() == before["tasks"].keys()
    assert comparisons.execution()["status"] == "cancelled"
    told = explain(raised.value, "compare")
    assert told.exit_code == 130 and "could not be paired" in told.lines[1], told.lines


def test_a_lake_that_refuses_the_cancelled_document_is_the_outage_reported(
    comparisons: Comparisons, interrupter: Interrupter, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_result = assess_mod.save_result
    refusing = threading.Event()

    def save_refused(lake: Any, result: Any) -> Any:
        if result.status == "cancelled" or refusing.is_set():
            refusing.set()  # the lake stays full for the stopped document too
            raise LakeWriteError("comparisons/…json: [Errno 28] No space left on device")
        return save_result(lake, result)

    monkeypatch.setattr(assess_mod, "save_result", save_refused)
    interrupter.arm("final", "assess", 1)
    with pytest.raises(engine_mod.ComparisonStopped) as raised:
        comparisons.run()
    told = explain(raised.value, "compare")
    assert told.exit_code == 3, told.lines
    assert "No space left on device" in told.lines[0], told.lines
