"""After an outage, the same comparison run again retries the windows that failed on
infrastructure (their failure records are kept under ``failures-retired/``); within one run a
failure stops its task."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets.driver.comparison import EngineOptions, run_comparison
from evalrunner_assets.example_repo import build_example_repo
from evalrunner_assets.execution.sandbox import SandboxBackend
from resources import SandboxResource
from tests.helpers.pipeline_fixtures import ALL_TASKS, PipelineHome, evalrunner_home, request_for

pytestmark = pytest.mark.slow


class OutageSandboxResource(SandboxResource):
    """The configured (real) backend, except that while the file ``outage_flag`` exists each warm
    sandbox is closed just before it would serve one of ``ops`` (evaluate a window, list ids):
    the caller sees its sandbox gone, an infrastructure failure like a node dying, never an agent
    failure."""

    outage_flag: str
    ops: str = "eval"

    def backend(self, context: Any = None) -> SandboxBackend:
        backend = super().backend(context)
        if getattr(backend, "_outage_flag", None) == (self.outage_flag, self.ops):
            return backend
        open_session, flag, ops = backend.open_session, self.outage_flag, set(self.ops.split(","))

        def open_session_with_outage(request: Any, *args: Any, **kwargs: Any) -> Any:
            session = open_session(request, *args, **kwargs)
            call = session.call

            def call_during_outage(payload: dict, *a: Any, **kw: Any) -> Any:
                if payload.get("op") in ops and os.path.exists(flag):
                    session.close()
                return call(payload, *a, **kw)

            session.call = call_during_outage
            return session

        backend.open_session = open_session_with_outage  # type: ignore[method-assign]
        backend._outage_flag = (flag, self.ops)  # type: ignore[attr-defined]
        return backend


@pytest.fixture
def home(tmp_path: Path) -> Iterator[PipelineHome]:
    with evalrunner_home(tmp_path / "home") as h:
        yield h


def test_a_rerun_after_an_outage_retries_the_failed_windows(tmp_path: Path, home: PipelineHome) -> None:
    example = build_example_repo(tmp_path / "repo", ["improve-runbook"])
    flag = tmp_path / "outage"
    resources = {**home.resources(), "sandbox": OutageSandboxResource(outage_flag=str(flag))}
    request = request_for(example, "improve-runbook", "201", cap=16)
    failures, retired = home.lake_root / "failures", home.lake_root / "failures-retired"

    with dg.DagsterInstance.local_temp(tempdir=str(home.root / "dagster")) as instance:
        flag.touch()
        during = run_comparison(
            request, instance=instance, resources=resources, options=EngineOptions(breaker_threshold=100)
        )
        assert during.verdict == "INCONCLUSIVE"
        assert all(doc.failures for doc in during.tasks.values())
        failed = sorted(p.relative_to(failures) for p in failures.rglob("*.json"))
        assert len(failed) == 2 * len(ALL_TASKS)  # the first window of each task on each arm
        assert during.failed_windows.windows == len(failed)

        # The same comparison again, with the outage over: only its retries run.
        flag.unlink()
        after = run_comparison(
            request, instance=instance, resources=resources, options=EngineOptions(breaker_threshold=100)
        )
        assert after.execution["retried_failures"] == len(failed)
        assert after.verdict != "RUNNING" and not any(doc.failures for doc in after.tasks.values())
        assert all(doc.head.samples == doc.base.samples == 16 for doc in after.tasks.values())
        assert after.failed_windows.windows == 0
        assert not list(failures.rglob("*.json"))
        kept = sorted(p.relative_to(retired) for p in retired.rglob("*.json"))
        assert [str(k).rsplit(".", 2)[0] for k in kept] == [str(f).rsplit(".", 1)[0] for f in failed]

        # A third run has nothing to retry and runs nothing.
        again = run_comparison(
            request, instance=instance, resources=resources, options=EngineOptions(breaker_threshold=100)
        )
        assert again.execution["retried_failures"] == 0
        assert again.samples_run == after.samples_run
        assert again.execution["steps"] == 0


def test_a_rerun_after_an_outage_while_listing_sample_ids_learns_the_commit_again(
    tmp_path: Path, home: PipelineHome
) -> None:
    example = build_example_repo(tmp_path / "repo", ["improve-runbook"])
    flag = tmp_path / "outage"
    resources = {**home.resources(), "sandbox": OutageSandboxResource(outage_flag=str(flag), ops="ids")}
    request = request_for(example, "improve-runbook", "202", cap=16)
    with dg.DagsterInstance.local_temp(tempdir=str(home.root / "dagster")) as instance:
        flag.touch()
        during = run_comparison(
            request, instance=instance, resources=resources, options=EngineOptions(breaker_threshold=100)
        )
        assert during.verdict == "INCONCLUSIVE"
        assert all("could not be listed" in " ".join(doc.failures.values()) for doc in during.tasks.values())
        assert during.samples_run == 0

        flag.unlink()
        after = run_comparison(
            request, instance=instance, resources=resources, options=EngineOptions(breaker_threshold=100)
        )
        assert after.execution["retried_failures"] == 2  # both commits' facts, learnt again
        assert not any(doc.failures for doc in after.tasks.values())
        assert all(doc.head.samples == doc.base.samples == 16 for doc in after.tasks.values())
        assert len(list((home.lake_root / "failures-retired").rglob("tasks.*.json"))) == 2
