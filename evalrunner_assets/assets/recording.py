"""What ``evalrunner compare`` did, recorded in a Dagster instance as runless asset events.

The comparison engine (:mod:`evalrunner_assets.pipeline.engine`) runs outside any Dagster run;
its work appears in each asset's history as materializations (and asset-check evaluations)
reported with ``instance.report_runless_asset_event``: no run to re-execute, tagged
``evalrunner/recorded_by: evalrunner-compare`` so the UI shows them as external. Their metadata
comes from the same functions the asset bodies use. The daemon path materializes the same
assets through the defined jobs (re-executable from the UI).

One event per asset and partition per comparison: a commit's ``eval_manifest`` when it is
learnt, a (commit, task)'s ``task_samples`` (with ``sample_scores`` and ``trajectories``) once
the comparison needs nothing more of it, holding every window it landed. The PR head's
``baselines``, ``comparison`` and ``pr_report`` are saved again for progress while windows run;
only the state the comparison ended in is recorded (progress shows in the lake, the check run
and the comment), as the daemon's run records its last saved comparison.

Opening the instance (~1–2.5 s) and every event happen on one recorder thread, off the
engine's path: the instance opens while the commits are learnt.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from collections.abc import Callable
from typing import Any

import dagster as dg

from evalrunner_assets import home
from evalrunner_assets.assets.manifest import eval_manifest
from evalrunner_assets.assets.metadata import (
    baselines_metadata,
    comparison_metadata,
    manifest_metadata,
    report_metadata,
    sample_scores_metadata,
    samples_metadata,
    trajectories_metadata,
)
from evalrunner_assets.partitions import COMMITS, COMPARISONS, TASKS, add_partitions
from evalrunner_assets.pipeline import nouns
from evalrunner_assets.pipeline.engine import ComparisonFailed
from evalrunner_assets.pipeline.keys import commit_key, parse_commit_key
from evalrunner_assets.pipeline.publish import SavedComparison, WrittenReport
from evalrunner_assets.pipeline.spec import ComparisonRequest
from evalrunner_assets.pipeline.windows import WindowOutcome

RECORDED_BY_TAG = "evalrunner/recorded_by"
RECORDED_BY = "evalrunner-compare"
# A recording already under way when the comparison stops gets this long to finish.
STOP_WAIT_S = 10.0


def local_instance() -> dg.DagsterInstance:
    """The persistent local instance at ``$DAGSTER_HOME`` (default ``<EVALRUNNER_HOME>/dagster``)."""
    # An explicit dagster.yaml: the defaults — SQLite storage under this directory — are what
    # we want, and Dagster otherwise warns on every start that the file is missing.
    path = home.ensure_dagster_home()
    os.environ["DAGSTER_HOME"] = str(path)
    # Opening a fresh instance creates its SQLite tables; two processes doing it at once race
    # ("table run_tags already exists"). One process at a time creates or migrates it.
    with _InstanceLock(path):
        instance = dg.DagsterInstance.get()
        instance.get_runs(limit=1)  # every storage opened (and created) under the lock
        instance.get_dynamic_partitions(COMMITS)
    return instance


class _InstanceLock:
    """An exclusive lock on ``<dagster home>/.evalrunner-instance.lock`` (held by one process)."""

    def __init__(self, path: Any) -> None:
        self.path = os.path.join(str(path), ".evalrunner-instance.lock")
        self.fd: int | None = None

    def __enter__(self) -> _InstanceLock:
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        import fcntl

        assert self.fd is not None
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


class DagsterRecorder:
    """A :class:`~evalrunner_assets.pipeline.engine.Recorder` writing runless asset events to
    ``instance`` (default: :func:`local_instance`, opened on the recorder thread)."""

    def __init__(self, lake: Any, instance: dg.DagsterInstance | None = None) -> None:
        self.lake = lake
        self._given = instance
        self._thread = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalrunner-recorder")
        self._pending: list[cf.Future] = []
        self._instance: cf.Future | None = None
        self._comparison = ""
        self._request: ComparisonRequest | None = None
        self._closed = threading.Event()
        # The PR head's latest comparison and report, recorded when the comparison ends:
        # (what, where, record) by asset.
        self._latest: dict[str, tuple[str, str, Callable[[dg.DagsterInstance], None]]] = {}

    # --- the Recorder protocol ------------------------------------------------------------------

    def start(self, request: ComparisonRequest) -> None:
        self._comparison, self._request = request.key, request
        commits = [commit_key(request.repo, sha) for sha in (request.base_sha, request.head_sha)]

        def open_instance() -> dg.DagsterInstance:
            instance = self._given or local_instance()
            # Another process may add the same keys at the same moment (two PRs on one base).
            add_partitions(instance, COMMITS, commits)
            add_partitions(instance, COMPARISONS, [request.key])
            return instance

        self._instance = self._thread.submit(open_instance)

    def commit_learnt(self, commit: str, facts: Any, *, learnt_now: bool) -> None:
        def record(instance: dg.DagsterInstance) -> None:
            add_partitions(instance, TASKS, sorted(facts.tasks))
            # Learnt by an earlier run that never recorded it: recorded now.
            if learnt_now or commit not in instance.get_materialized_partitions(eval_manifest.key):
                repo, sha = parse_commit_key(commit)
                self._materialization(instance, "eval_manifest", commit, manifest_metadata(self.lake, repo, sha, facts))

        self._submit(f"manifest:{commit}", f"recording the evals of {commit}", record)

    def samples_landed(self, commit: str, task: str, windows: list[str], outcomes: list[WindowOutcome]) -> None:
        partition = dg.MultiPartitionKey({"commit": commit, "task": task})

        def record(instance: dg.DagsterInstance) -> None:
            metadata, checks = samples_metadata(self.lake, outcomes)
            self._materialization(instance, "task_samples", partition, metadata)
            # What the lake now holds of the partition, as the task_samples step shows it.
            scores = sample_scores_metadata(nouns.sample_scores(self.lake, repo, sha, task))
            self._materialization(instance, "sample_scores", partition, scores)
            found = trajectories_metadata(nouns.trajectories(self.lake, repo, sha, task))
            self._materialization(instance, "trajectories", partition, found)
            for check in checks:
                # Not partitioned: Dagster stores one runless evaluation per check and partition
                # at most (a unique index over asset, check, run id "" and partition), and a
                # partition is recorded again by every comparison on the same base and on resume.
                # The partition is named in the evaluation's metadata and description instead.
                described = f"{partition}: {check['description']}" if check.get("description") else str(partition)
                instance.report_runless_asset_event(
                    dg.AssetCheckEvaluation(
                        asset_key=dg.AssetKey("task_samples"),
                        **{
                            **check,
                            "metadata": {**check["metadata"], "partition": dg.MetadataValue.text(str(partition))},
                            "description": described,
                        },
                    )
                )

        repo, sha = parse_commit_key(commit)
        self._submit(
            f"samples:{self._comparison}:{commit}:{task}:{','.join(windows)}",
            f"recording {task} of {repo} at {sha[:7]}",
            record,
        )

    def comparison_saved(self, saved: SavedComparison) -> None:
        metadata = comparison_metadata(saved)  # rendered now: the document is the one just saved
        request = self._request
        assert request is not None, "start() names the comparison"

        def record(instance: dg.DagsterInstance) -> None:
            base = baselines_metadata(nouns.baselines(self.lake, request, saved.result))
            self._materialization(instance, "baselines", self._comparison, base)
            self._materialization(instance, "comparison", self._comparison, metadata)

        self._latest["comparison"] = (f"compare:{self._comparison}", "recording the comparison", record)

    def report_written(self, report: WrittenReport) -> None:
        metadata = report_metadata(report)
        self._latest["pr_report"] = (
            f"report:{self._comparison}",
            "writing the report",
            lambda instance: self._materialization(instance, "pr_report", self._comparison, metadata),
        )

    def close(self, *, wait: bool) -> None:
        if self._closed.is_set():
            return
        latest, self._latest = self._latest, {}
        if not wait:
            # Stopping: queued recordings and the latest comparison are dropped (what they
            # record stays in the lake); one already under way gets a bounded wait.
            self._closed.set()
            self._thread.shutdown(wait=False, cancel_futures=True)
            cf.wait(self._pending, timeout=STOP_WAIT_S)
            return
        try:
            # The report after the document it shows: the sampling sensor takes a report older
            # than the last comparison for one still to come.
            for asset in ("comparison", "pr_report"):
                if asset in latest:
                    self._submit(*latest[asset])
        finally:
            self._closed.set()
            self._thread.shutdown(wait=True)
        for f in self._pending:
            f.result()

    # --- helpers --------------------------------------------------------------------------------

    def instance(self) -> dg.DagsterInstance:
        assert self._instance is not None, "start() opens the instance"
        return self._instance.result()

    def _materialization(
        self, instance: dg.DagsterInstance, asset: str, partition: str, metadata: dict[str, Any]
    ) -> None:
        instance.report_runless_asset_event(
            dg.AssetMaterialization(
                asset_key=asset,
                partition=partition,
                metadata=metadata,
                tags={RECORDED_BY_TAG: RECORDED_BY},
                description="recorded by `evalrunner compare` (outside a Dagster run)",
            )
        )

    def _submit(self, what: str, where: str, record: Callable[[dg.DagsterInstance], None]) -> None:
        """Queue ``record`` on the recorder thread; a recording that failed before stops the
        comparison here (ComparisonFailed naming it)."""
        for f in [f for f in self._pending if f.done()]:
            self._pending.remove(f)
            f.result()
        if self._closed.is_set():
            return

        def run() -> None:
            try:
                record(self.instance())
            except Exception as exc:
                raise ComparisonFailed(
                    f"recording {what} in Dagster failed: {type(exc).__name__}: {exc}", where=where
                ) from exc

        self._pending.append(self._thread.submit(run))


class RunRecorder:
    """A :class:`~evalrunner_assets.pipeline.engine.Recorder` for the engine inside a Dagster run
    (the ``comparison`` asset, see :func:`evalrunner_assets.assets.evals.comparison`).

    What the run touched besides its own assets becomes events of this run: each commit learnt
    as an ``eval_manifest`` materialization, each finished (commit, task) as ``task_samples``,
    ``sample_scores`` and ``trajectories`` materializations of that partition, with the checks'
    evaluations. The asset graph thus shows
    them materialized by the run (re-executable from it), partitioned as their own jobs would.
    The comparison document and the report are the run's own assets: the last ones saved are
    kept for the run's ``comparison`` materialization; ``pr_report`` materializes itself."""

    def __init__(self, lake: Any, instance: dg.DagsterInstance) -> None:
        self.lake = lake
        self.instance = instance
        self.saved: SavedComparison | None = None
        self.report: WrittenReport | None = None
        self._events: list[dg.AssetMaterialization | dg.AssetCheckEvaluation] = []
        self._touched: dict[tuple[str, str], dg.MultiPartitionKey] = {}
        self._lock = threading.Lock()

    def start(self, request: ComparisonRequest) -> None:
        pass

    def commit_learnt(self, commit: str, facts: Any, *, learnt_now: bool) -> None:
        add_partitions(self.instance, TASKS, sorted(facts.tasks))
        if learnt_now or commit not in self.instance.get_materialized_partitions(eval_manifest.key):
            repo, sha = parse_commit_key(commit)
            metadata = manifest_metadata(self.lake, repo, sha, facts)
            self._add(dg.AssetMaterialization(asset_key=eval_manifest.key, partition=commit, metadata=metadata))

    def samples_landed(self, commit: str, task: str, windows: list[str], outcomes: list[WindowOutcome]) -> None:
        partition = dg.MultiPartitionKey({"commit": commit, "task": task})
        metadata, checks = samples_metadata(self.lake, outcomes)
        self._add(dg.AssetMaterialization(asset_key="task_samples", partition=partition, metadata=metadata))
        with self._lock:
            self._touched[(commit, task)] = partition
        for check in checks:
            self._add(dg.AssetCheckEvaluation(asset_key=dg.AssetKey("task_samples"), partition=partition, **check))

    def comparison_saved(self, saved: SavedComparison) -> None:
        self.saved = saved

    def report_written(self, report: WrittenReport) -> None:
        self.report = report

    def close(self, *, wait: bool) -> None:
        pass

    def take_events(self) -> list[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
        """The events recorded since the last call, in the order the work happened, then what
        the lake holds of each (commit, task) touched (``sample_scores``, ``trajectories``): read
        once per partition here, not after every window step on the engine's path."""
        with self._lock:
            events, self._events = self._events, []
            touched, self._touched = self._touched, {}
        for (commit, task), partition in touched.items():
            repo, sha = parse_commit_key(commit)
            scores = sample_scores_metadata(nouns.sample_scores(self.lake, repo, sha, task))
            events.append(dg.AssetMaterialization(asset_key="sample_scores", partition=partition, metadata=scores))
            found = trajectories_metadata(nouns.trajectories(self.lake, repo, sha, task))
            events.append(dg.AssetMaterialization(asset_key="trajectories", partition=partition, metadata=found))
        return events

    def _add(self, event: dg.AssetMaterialization | dg.AssetCheckEvaluation) -> None:
        with self._lock:
            self._events.append(event)
