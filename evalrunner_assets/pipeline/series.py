"""Main-branch cohort series: one point per main commit, flags where a cohort really dropped.

A point measures one commit on its own: per task, the mean score with an anytime-valid interval
(sampling stops once it is narrower than ``half_width`` on each side, or at the cap, or when the
dataset runs out), per cohort and for all tasks a pooled Wilson interval. Its windows are the
same fixed positions of the same seeded order a comparison uses, under the same batch keys, so
a commit that was a PR's base already has its windows, and a second measurement runs nothing.

Consecutive points are compared pairwise on the inputs both measured, per task, with the PR
statistics (anytime-valid, alpha split over the shared tasks): a cohort is flagged when one of
its tasks regressed. A cohort that first appears at a commit is annotated "N evals added" and
starts its own series there; it never counts against the cohorts that existed before, and
tasks added to an existing cohort are compared only once they have a previous point.

Errored samples score 0 (as in a comparison) and are counted. A task more than half of whose
inputs raised (the comparison's ``error_cap``) is *not measured*: no mean, the cause in the
comparison's words, and no part in any regression test — the next point compares that task
with the nearest point that did measure it. A cohort or a whole point whose samples mostly
raised is not measured either, never a score of 0.00 and never "no regression".

Plain Python: the ``cohort_series`` asset, the push sensor and ``evalrunner backfill`` call it.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from evalrunner_assets import stats
from evalrunner_assets.discovery import AgentModel
from evalrunner_assets.errors import InputError
from evalrunner_assets.execution.inspect_runner import sample_order
from evalrunner_assets.execution.sandbox import RepoExport, SandboxBackend
from evalrunner_assets.pipeline.assess import _load_rows, window_plan
from evalrunner_assets.pipeline.facts import CommitFacts, TaskFacts, learn_commit
from evalrunner_assets.pipeline.measure_in_order import SandboxSlots, measure_in_order
from evalrunner_assets.pipeline.spec import DEFAULT_MODEL
from evalrunner_assets.pipeline.windows import RunSettings, batch_key_for, run_task_windows, task_session_config
from evalrunner_assets.pricing import PriceTable
from evalrunner_assets.report.series_markdown import not_measured_note, task_cause
from evalrunner_assets.report.series_markdown import (
    reading as reading,  # the point in words, the report's; kept as series.reading
)
from lake import LAYOUT, Lake, Window
from lake.schema import SERIES_ROWS_SCHEMA

# 2: a point records the model it ran (``model``: the agent config's unless the series names one).
# 3: errored samples are counted per task and pool (``ran``, ``errored``); a task, cohort or
#    point over the error cap is ``not_measured`` (no mean); ``compared_with`` per task.
SCHEMA_VERSION = 3
DEFAULT_HALF_WIDTH = 0.05
DEFAULT_CAP = 256
# The comparison's rule for an arm (``stats.StatsParams``): more than this share of the inputs
# raised, once this many ran (or at the point's end), and the scores say nothing about quality.
ERROR_CAP = stats.StatsParams().error_cap
ERROR_CAP_INPUTS = max(stats.StatsParams().min_pairs, stats.StatsParams().error_cap_inputs)


class SeriesError(InputError, ValueError):
    """A series setting or input is invalid (names it and what is wrong)."""


@dataclass(frozen=True)
class SeriesSettings:
    """How every point of a repository's series is measured (the same for all its points, so
    consecutive points pair on the same inputs and reuse the same windows)."""

    model: str = DEFAULT_MODEL
    model_args: dict[str, Any] = field(default_factory=dict)
    # False: each commit runs the model its agent config names (``model:``), ``model`` only
    # where it names none; True: ``model`` was chosen explicitly and every commit runs it.
    model_override: bool = False
    seed: int = 0
    epochs: int = 1
    half_width: float = DEFAULT_HALF_WIDTH  # stop a task once its interval is at most ±this
    cap: int = DEFAULT_CAP  # most inputs per task and point
    alpha: float = 0.05  # per-task interval level 1 - alpha; flags split alpha over tasks
    margin: float = 0.05  # equivalence margin of the point-to-point comparison

    def __post_init__(self) -> None:
        if not 0.0 < self.half_width < 0.5:
            raise SeriesError(f"half_width {self.half_width!r} must be in (0, 0.5)")
        if isinstance(self.cap, bool) or not isinstance(self.cap, int) or self.cap < 1:
            raise SeriesError(f"cap {self.cap!r} must be a positive integer")
        if not 0.0 < self.alpha < 1.0:
            raise SeriesError(f"alpha {self.alpha!r} must be in (0, 1)")
        if not 0.0 < self.margin < 1.0:
            raise SeriesError(f"margin {self.margin!r} must be in (0, 1)")
        if self.epochs < 1:
            raise SeriesError(f"epochs {self.epochs!r} must be at least 1")

    def run_settings(self) -> RunSettings:
        return RunSettings(model=self.model, model_args=dict(self.model_args), seed=self.seed, epochs=self.epochs)

    def model_choice(self, agent: AgentModel | None) -> dict[str, Any]:
        """The model one commit runs and why (``source``: ``run setting``, ``agent config
        (<file>)`` or ``default``), by the rule a PR comparison uses."""
        if self.model_override or agent is None:
            source = "run setting" if self.model_override else "default"
            return {"model": self.model, "model_args": dict(self.model_args), "source": source}
        return {"model": agent.model, "model_args": dict(agent.model_args), "source": f"agent config ({agent.file})"}

    def for_model(self, choice: Mapping[str, Any]) -> SeriesSettings:
        """These settings with the model one commit runs (``model_choice``)."""
        return replace(self, model=choice["model"], model_args=dict(choice["model_args"]))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MainCommit:
    """One commit of a branch's first-parent history (``position`` 0 = oldest listed)."""

    sha: str
    committed_at: str  # ISO 8601
    subject: str
    position: int


def select_commits(
    history: Sequence[MainCommit], *, since: str | None = None, last: int | None = None, every: int | None = None
) -> list[MainCommit]:
    """The commits a backfill measures, oldest first: those committed at or after ``since``
    (an ISO date), then the newest ``last``, then every ``every``-th counted back from the tip
    (so the newest commit is always a point)."""
    chosen = list(history)
    if since is not None:
        try:
            cutoff = _parse_time(since)
        except ValueError as exc:
            raise SeriesError(f"--since {since!r} is not an ISO date (e.g. 2025-01-31)") from exc
        chosen = [c for c in chosen if _parse_time(c.committed_at) >= cutoff]
    if last is not None:
        if last < 1:
            raise SeriesError(f"--last {last!r} must be at least 1")
        chosen = chosen[-last:]
    if every is not None:
        if every < 1:
            raise SeriesError(f"--every {every!r} must be at least 1")
        chosen = list(reversed(list(reversed(chosen))[::every]))
    return chosen


def _parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


# --- one point ------------------------------------------------------------------------------


def _task_keys(
    repo: str,
    commit: str,
    facts: TaskFacts,
    settings: SeriesSettings,
    windows: Sequence[Window],
    backend_name: str,
    runtime: str,
) -> list[Any]:
    rs = settings.run_settings()
    return [
        batch_key_for(repo, commit, facts, rs, w, backend_name=backend_name, runtime_digest=runtime) for w in windows
    ]


def _input_values(rows: list[dict[str, Any]], order: Sequence[str]) -> tuple[list[str], list[float]]:
    means, _ = stats.arm_input_means(rows)
    ids = [sid for sid in order if sid in means]
    return ids, [means[sid] for sid in ids]


def _arm_errors(rows: list[dict[str, Any]], order: Sequence[str]) -> tuple[int, int, str | None]:
    """(inputs run, inputs that raised, what they raised) of one task's rows, counted and worded
    as a comparison counts an arm (``Pairing.error_share`` / ``error_cause``): the rows paired
    with themselves give that arm's summary without a second rule."""
    if not rows:
        return 0, 0, None
    arm = stats.pair_task(rows, rows, order=order)
    return arm.inputs_head, arm.errored_head, arm.error_cause("head")


def _over_error_cap(ran: int, errored: int) -> bool:
    return ran > 0 and errored / ran > ERROR_CAP


def _measure_task(
    lake: Lake,
    backend: SandboxBackend,
    export: RepoExport,
    facts: TaskFacts,
    settings: SeriesSettings,
    runtime: str,
    pool: Any,
    cancel: threading.Event | None,
    on_window: Callable[[Any], None] | None,
    stop_early: bool = True,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cohort": facts.cohort,
        "mean": None,
        "interval": None,
        "inputs": 0,
        "samples": 0,
        "ran": 0,
        "errored": 0,
        "error_cause": None,
        "not_measured": None,
        "windows": [],
        "windows_run": 0,
        "windows_reused": 0,
        "stop": None,
        "failure": None,
        "cost_usd": 0.0,
    }
    if facts.failure or not facts.sample_ids:
        out["failure"] = facts.failure or "the task has no samples"
        out["stop"] = "failed"
        return out
    dataset = len(facts.sample_ids)
    limit = min(settings.cap, dataset)
    order = sample_order(list(facts.sample_ids), settings.seed)
    done: list[Window] = []
    rows: list[dict[str, Any]] = []
    for window in window_plan(limit):
        if cancel is not None and cancel.is_set():
            out["stop"] = "cancelled"
            break
        outcome = run_task_windows(
            lake,
            backend,
            export,
            facts,
            settings.run_settings(),
            [window],
            pool=pool,
            cancel=cancel,
            retry_transient=True,
        )[0]
        if on_window is not None:
            on_window(outcome)
        if outcome.status not in ("landed", "reused"):
            out["failure"] = outcome.failure or outcome.status
            out["stop"] = "failed"
            break
        out["windows_run" if outcome.status == "landed" else "windows_reused"] += 1
        done.append(window)
        if not stop_early:
            continue  # every window runs anyway: its rows are read once, after the last
        rows = _load_rows(lake, _task_keys(export.repo, export.commit, facts, settings, done, backend.name, runtime))
        ran, errored, _ = _arm_errors(rows, order)
        if ran >= ERROR_CAP_INPUTS and _over_error_cap(ran, errored):
            # More windows would measure the same exception, not the agent.
            out["stop"] = f"more than {ERROR_CAP:.0%} of its inputs raised"
            break
        ids, values = _input_values(rows, order)
        lo, hi = stats.mean_sequence_interval(values, settings.alpha, looks=_looks(done, ids, order))
        if values and (hi - lo) / 2.0 <= settings.half_width:
            out["stop"] = f"interval within ±{settings.half_width:g}"
            break
    else:
        out["stop"] = (
            f"dataset exhausted ({dataset} samples)"
            if limit == dataset
            else f"reached the per-task cap of {settings.cap} inputs"
        )
    if pool is not None:
        # The session's thread ends with this point; a later point never needs it.
        pool.discard(backend, export, task_session_config(backend, export, facts, settings.run_settings()))
    if not stop_early and done:
        rows = _load_rows(lake, _task_keys(export.repo, export.commit, facts, settings, done, backend.name, runtime))
    ids, values = _input_values(rows, order)
    ran, errored, cause = _arm_errors(rows, order)
    out["windows"] = [w.name for w in done]
    out["samples"] = len(rows)
    out["ran"] = ran
    out["errored"] = errored
    out["error_cause"] = cause
    out["inputs"] = len(values)
    # a window that failed may have spent money its log does not tell: unknown, not $0
    out["cost_usd"] = _rows_cost(rows) if out["failure"] is None else None
    if _over_error_cap(ran, errored):
        out["not_measured"] = cause
    elif values:
        out["mean"] = sum(values) / len(values)
        out["interval"] = list(stats.mean_sequence_interval(values, settings.alpha, looks=_looks(done, ids, order)))
    return out


def _sum_known(values: Iterable[float | None]) -> float | None:
    total = 0.0
    for v in values:
        if v is None:
            return None
        total += v
    return round(total, 6)


def _rows_cost(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """What a task's samples cost (logged cost, else tokens × the default price table); None
    when any sample's cost is unknown, never a partial sum."""
    prices = PriceTable.default()
    costs = [prices.cost(r) for r in rows]
    if any(c is None for c in costs):
        return None
    return round(sum(c for c in costs if c is not None), 6)


def _looks(done: Sequence[Window], ids: Sequence[str], order: Sequence[str]) -> list[int]:
    """Prefix lengths (in scored inputs) at which the interval was looked at: each window's end."""
    position = {sid: i for i, sid in enumerate(order)}
    looks = []
    for w in done:
        looks.append(sum(1 for sid in ids if position[sid] < w.stop))
    return [n for n in looks if n > 0]


def _pool(tasks: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    measured = [tasks[t] for t in names if tasks[t]["mean"] is not None]
    unmeasured = sorted(t for t in names if tasks[t]["mean"] is None)
    inputs = sum(t["inputs"] for t in measured)
    total = sum(t["mean"] * t["inputs"] for t in measured)
    interval = stats.wilson_interval(total, inputs)
    ran = sum(tasks[t].get("ran", 0) for t in names)
    errored = sum(tasks[t].get("errored", 0) for t in names)
    not_measured = None
    if unmeasured and (_over_error_cap(ran, errored) or not measured):
        first = unmeasured[0]
        not_measured = f"{first}: {task_cause(tasks[first])}"
        if len(unmeasured) > 1:
            others = len(unmeasured) - 1
            not_measured += f" (and {others} other eval{'s' if others != 1 else ''})"
    return {
        "tasks": sorted(names),
        "measured_tasks": len(measured),
        "unmeasured_tasks": unmeasured,
        "inputs": inputs,
        "ran": ran,
        "errored": errored,
        "not_measured": not_measured,
        "mean": (total / inputs) if inputs and not_measured is None else None,
        "interval": list(interval) if interval and not_measured is None else None,
    }


def summarise_point(tasks: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per-cohort and combined pools of a point's tasks."""
    cohorts: dict[str, list[str]] = {}
    for name, t in tasks.items():
        cohorts.setdefault(t["cohort"], []).append(name)
    return ({c: _pool(tasks, names) for c, names in sorted(cohorts.items())}, _pool(tasks, list(tasks)))


def measure_point(
    lake: Lake,
    backend: SandboxBackend,
    export: RepoExport,
    settings: SeriesSettings,
    commit: MainCommit,
    *,
    branch: str,
    pool: Any = None,
    workers: int = 1,
    cancel: threading.Event | None = None,
    on_window: Callable[[Any], None] | None = None,
    stop_early: bool = True,
    slots: SandboxSlots | None = None,
) -> dict[str, Any]:
    """Measure ``commit`` (learn its evals, run what its tasks still need) and return the point
    (not yet compared with the previous one: see :func:`flag_point`). ``stop_early=False`` runs
    every window up to the cap (or the dataset's end) whatever the interval, so measurements of
    different configurations cover the same inputs. ``slots`` (shared by points measured at
    once) runs the discovery and the tasks; without it, a pool of ``workers`` slots of its own."""
    with contextlib.ExitStack() as stack:
        if slots is None:
            slots = stack.enter_context(SandboxSlots(workers))
        facts: CommitFacts = slots.submit(
            lambda: learn_commit(lake, backend, export, model=settings.model, cancel=cancel)
        ).result()
        model = settings.model_choice(facts.agent_model)
        commit_settings = settings.for_model(model)
        runtime = backend.runtime_digest()
        names = sorted(facts.tasks)
        futures = {
            n: slots.submit(
                _measure_task,
                lake,
                backend,
                export,
                facts.tasks[n],
                commit_settings,
                runtime,
                pool,
                cancel,
                on_window,
                stop_early,
            )
            for n in names
        }
        tasks = {n: futures[n].result() for n in names}
    cohorts, combined = summarise_point(tasks)
    return {
        "schema_version": SCHEMA_VERSION,
        "repo": export.repo,
        "branch": branch,
        "commit": export.commit,
        "committed_at": commit.committed_at,
        "subject": commit.subject,
        "position": commit.position,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": settings.to_dict(),
        "model": model,
        "backend": backend.name,
        "runtime_digest": runtime,
        "tasks": tasks,
        "cohorts": cohorts,
        "combined": combined,
        "previous": None,
        "task_flags": {},
        "cohort_status": {},
        "flagged": False,
        "annotations": [],
        "execution": {
            "windows_run": sum(t["windows_run"] for t in tasks.values()),
            "windows_reused": sum(t["windows_reused"] for t in tasks.values()),
            "samples": sum(t["samples"] for t in tasks.values()),
            # None when any task's cost is unknown
            "cost_usd": _sum_known(t.get("cost_usd") for t in tasks.values()),
        },
    }


# --- flags between points --------------------------------------------------------------------


def is_measured(point: Mapping[str, Any]) -> bool:
    """Whether any task of the point has a mean (a point all of whose tasks raised or failed is
    nobody's neighbour in a regression test)."""
    return any(t["mean"] is not None for t in point["tasks"].values())


def compare_points(
    lake: Lake,
    earlier: Mapping[str, Any],
    later: Mapping[str, Any],
    settings: SeriesSettings,
    baselines: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Pairwise comparison of two points of one repository (any two, not only neighbours):
    per shared task the PR statistics on the inputs both measured; per cohort a status; and
    the annotations for cohorts and tasks that appear or disappear. A task that either point
    did not measure is not compared, unless ``baselines`` names, per task, the (older) point to
    compare it with instead of ``earlier`` (see :func:`task_baselines`)."""
    if baselines is None:
        baselines = {t: earlier for t, e in earlier["tasks"].items() if e["mean"] is not None}
    shared = sorted(
        t
        for t in later["tasks"]
        if t in baselines and later["tasks"][t]["mean"] is not None and baselines[t]["tasks"][t]["mean"] is not None
    )
    params = stats.StatsParams(alpha=settings.alpha, margin=settings.margin, min_pairs=8, cap=max(8, settings.cap))
    task_flags: dict[str, Any] = {}
    for name in shared:
        head = point_task_rows(lake, later, name)
        base = point_task_rows(lake, baselines[name], name)
        order = sorted({str(r["sample_id"]) for r in head} | {str(r["sample_id"]) for r in base})
        order = sample_order(order, settings.seed)
        decision = stats.decide_task(stats.pair_task(head, base, order=order), params, len(shared), forecast=False)
        task_flags[name] = {
            "label": decision.label,
            "pairs": decision.pairs,
            "delta": decision.delta,
            "interval": list(decision.anytime_interval),
            "cohort": later["tasks"][name]["cohort"],
            "compared_with": baselines[name]["commit"],
        }
    cohorts_before = set(earlier["cohorts"])
    annotations: list[dict[str, Any]] = []
    status: dict[str, str] = {}
    for cohort, pool in later["cohorts"].items():
        if cohort not in cohorts_before:
            n = len(pool["tasks"])
            annotations.append(
                {
                    "kind": "cohort_added",
                    "cohort": cohort,
                    "tasks": pool["tasks"],
                    "text": f"{n} eval{'s' if n != 1 else ''} added (new cohort {cohort})",
                }
            )
            status[cohort] = not_measured_note(pool) or f"{n} eval{'s' if n != 1 else ''} added"
            continue
        added = sorted(set(pool["tasks"]) - set(earlier["cohorts"][cohort]["tasks"]))
        if added:
            annotations.append(
                {
                    "kind": "tasks_added",
                    "cohort": cohort,
                    "tasks": added,
                    "text": f"{len(added)} eval{'s' if len(added) != 1 else ''} added to {cohort}",
                }
            )
        labels = [f["label"] for t, f in task_flags.items() if f["cohort"] == cohort]
        unmeasured = len(pool.get("unmeasured_tasks") or [])
        if "regressed" in labels:
            status[cohort] = "regression flagged"
        elif pool.get("not_measured"):
            status[cohort] = not_measured_note(pool) or ""
        elif not labels:
            status[cohort] = "not compared (no eval measured at both points)"
        elif "improved" in labels:
            status[cohort] = "improving"
        else:
            status[cohort] = "no regression"
        if unmeasured and not pool.get("not_measured"):
            status[cohort] += f" ({unmeasured} eval{'s' if unmeasured != 1 else ''} not measured)"
    removed = sorted(set(earlier["tasks"]) - set(later["tasks"]))
    if removed:
        annotations.append(
            {
                "kind": "tasks_removed",
                "tasks": removed,
                "text": f"{len(removed)} eval{'s' if len(removed) != 1 else ''} removed",
            }
        )
    flagged_tasks = sorted(t for t, f in task_flags.items() if f["label"] == "regressed")
    for t in flagged_tasks:
        annotations.append(
            {
                "kind": "regression",
                "cohort": task_flags[t]["cohort"],
                "tasks": [t],
                "text": f"{t} regressed ({_signed(task_flags[t]['delta'])})",
            }
        )
    return {
        "previous": earlier["commit"],
        "compared_with": {t: f["compared_with"] for t, f in task_flags.items()},
        "task_flags": task_flags,
        "cohort_status": status,
        "flagged": bool(flagged_tasks),
        "flagged_tasks": flagged_tasks,
        "annotations": annotations,
    }


def _signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f}"


def point_run_settings(point: Mapping[str, Any]) -> SeriesSettings:
    """The settings a saved point's windows ran with (its series settings with its model)."""
    settings = SeriesSettings(**point["settings"])
    return settings.for_model(point["model"]) if point.get("model") else settings


def point_task_rows(lake: Lake, point: Mapping[str, Any], task: str) -> list[dict[str, Any]]:
    """The committed rows behind one task of a point (its windows, under its batch keys)."""
    from evalrunner_assets.pipeline.facts import load_facts

    facts = load_facts(lake, point["repo"], point["commit"])
    if facts is None or task not in facts.tasks:
        return []
    settings = point_run_settings(point)
    windows = [Window.parse(w) for w in point["tasks"][task]["windows"]]
    keys = _task_keys(
        point["repo"], point["commit"], facts.tasks[task], settings, windows, point["backend"], point["runtime_digest"]
    )
    return _load_rows(lake, keys)


def flag_point(
    lake: Lake,
    point: dict[str, Any],
    previous: Mapping[str, Any] | None,
    baselines: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """``point`` with its comparison against ``previous`` (the nearest measured point before
    it on the branch) and, per task, ``baselines`` (:func:`task_baselines`)."""
    if previous is None:
        point.update(
            {
                "previous": None,
                "compared_with": {},
                "task_flags": {},
                "flagged": False,
                "flagged_tasks": [],
                "cohort_status": {c: not_measured_note(pool) or "first point" for c, pool in point["cohorts"].items()},
                "annotations": [],
            }
        )
        return point
    settings = SeriesSettings(**point["settings"])
    point.update(compare_points(lake, previous, point, settings, baselines))
    return point


# --- the lake ---------------------------------------------------------------------------------

ROW_SCHEMA = SERIES_ROWS_SCHEMA


def _notes(*texts: str | None) -> str | None:
    shown = [t for t in texts if t]
    return "; ".join(shown) if shown else None


def point_rows(point: Mapping[str, Any]) -> pa.Table:
    """A point as rows: one per task (``scope='task'``), cohort and the combined pool. A row's
    ``annotation`` holds its notes (regression, evals added or removed, not measured, a failed
    window); ``errored`` counts the inputs that raised; a row over the error cap has no mean
    and status ``not measured``."""
    base = {k: point[k] for k in ("repo", "branch", "commit", "position", "committed_at", "subject")}
    annotations = point.get("annotations", [])
    rows = []
    for name, t in sorted(point["tasks"].items()):
        flag = point.get("task_flags", {}).get(name, {})
        iv = t["interval"] or [None, None]
        notes = [a["text"] for a in annotations if name in a.get("tasks", []) and a["kind"] != "cohort_added"]
        rows.append(
            {
                **base,
                "scope": "task",
                "name": name,
                "cohort": t["cohort"],
                "mean": t["mean"],
                "lo": iv[0],
                "hi": iv[1],
                "inputs": t["inputs"],
                "errored": t.get("errored", 0),
                "label": flag.get("label"),
                "status": "not measured" if t.get("not_measured") else t["stop"],
                "flagged": flag.get("label") == "regressed",
                "annotation": _notes(*notes, not_measured_note(t), t["failure"]),
            }
        )
    for cohort, pool in point["cohorts"].items():
        iv = pool["interval"] or [None, None]
        status = point.get("cohort_status", {}).get(cohort)
        notes = [a["text"] for a in annotations if a.get("cohort") == cohort]
        rows.append(
            {
                **base,
                "scope": "cohort",
                "name": cohort,
                "cohort": cohort,
                "mean": pool["mean"],
                "lo": iv[0],
                "hi": iv[1],
                "inputs": pool["inputs"],
                "errored": pool.get("errored", 0),
                "label": None,
                "status": "not measured" if pool.get("not_measured") else status,
                "flagged": bool(status and status.startswith("regression flagged")),
                "annotation": _notes(*notes, not_measured_note(pool)),
            }
        )
    pool = point["combined"]
    iv = pool["interval"] or [None, None]
    rows.append(
        {
            **base,
            "scope": "combined",
            "name": "combined",
            "cohort": None,
            "mean": pool["mean"],
            "lo": iv[0],
            "hi": iv[1],
            "inputs": pool["inputs"],
            "errored": pool.get("errored", 0),
            "label": None,
            "status": (
                "regression flagged" if point.get("flagged") else ("not measured" if pool.get("not_measured") else None)
            ),
            "flagged": bool(point.get("flagged")),
            "annotation": _notes(*(a["text"] for a in annotations), not_measured_note(pool)),
        }
    )
    return pa.Table.from_pylist(rows, schema=ROW_SCHEMA)


def save_point(lake: Lake, point: Mapping[str, Any]) -> str:
    """The point's rows, then its document (the document is what readers look for first)."""
    import io

    buf = io.BytesIO()
    pq.write_table(point_rows(point), buf)
    lake.write_bytes(LAYOUT.series_point_rows(point["repo"], point["commit"]), buf.getvalue())
    return lake.write_bytes(
        LAYOUT.series_point(point["repo"], point["commit"]),
        json.dumps(point, indent=2, sort_keys=True, default=str).encode(),
    )


def load_point(lake: Lake, repo: str, commit: str) -> dict[str, Any] | None:
    rel = LAYOUT.series_point(repo, commit)
    if not lake.exists(rel):
        return None
    try:
        return json.loads(lake.read_bytes(rel))
    except json.JSONDecodeError as exc:
        raise SeriesError(
            f"series point {lake.url(rel)} is not valid JSON ({exc}); delete it to measure the commit again"
        ) from exc


def load_series(lake: Lake, repo: str, branch: str | None = None) -> list[dict[str, Any]]:
    """Every point of ``repo`` (of ``branch`` when given), in first-parent order."""
    points = []
    for rel in lake.glob(LAYOUT.series_points_glob(repo)):
        point = json.loads(lake.read_bytes(rel))
        if branch is None or point.get("branch") == branch:
            points.append(point)
    return sorted(points, key=lambda p: (p["position"], p["committed_at"]))


def point_matches(point: Mapping[str, Any] | None, settings: SeriesSettings, backend_name: str, runtime: str) -> bool:
    """A saved point is reusable only if measured the same way on the same runtime."""
    return (
        point is not None
        and point.get("schema_version") == SCHEMA_VERSION
        and point.get("settings") == settings.to_dict()
        and point.get("backend") == backend_name
        and point.get("runtime_digest") == runtime
    )


def earlier_points(
    lake: Lake, repo: str, history: Sequence[MainCommit], commit: MainCommit
) -> Iterator[dict[str, Any]]:
    """The saved points before ``commit`` on the branch's first-parent line, nearest first
    (read as they are asked for)."""
    for c in reversed([c for c in history if c.position < commit.position]):
        point = load_point(lake, repo, c.sha)
        if point is not None:
            yield point


def previous_point(lake: Lake, repo: str, history: Sequence[MainCommit], commit: MainCommit) -> dict[str, Any] | None:
    """The nearest point before ``commit`` on the branch's first-parent line that measured any
    task (a point whose every task raised or failed is skipped: it is no evidence either way)."""
    return next((p for p in earlier_points(lake, repo, history, commit) if is_measured(p)), None)


def task_baselines(point: Mapping[str, Any], earlier: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Per measured task of ``point``, the nearest of ``earlier`` (nearest first) that measured
    it: a task not measured at one point is compared across it. The search for a task ends at
    a measured point that does not list it (the task was added after it)."""
    wanted = {t for t, v in point["tasks"].items() if v["mean"] is not None}
    found: dict[str, Mapping[str, Any]] = {}
    for p in earlier:
        if not wanted:
            break
        measured = is_measured(p)
        for t in sorted(wanted):
            task = p["tasks"].get(t)
            if task is not None and task["mean"] is not None:
                found[t] = p
                wanted.discard(t)
            elif task is None and measured:
                wanted.discard(t)
    return found


# --- a run over many commits -----------------------------------------------------------------


def save_settings(lake: Lake, repo: str, branch: str, settings: SeriesSettings) -> str:
    doc = {"repo": repo, "branch": branch, "settings": settings.to_dict()}
    return lake.write_bytes(LAYOUT.series_settings(repo), json.dumps(doc, indent=2, sort_keys=True).encode())


def load_settings(lake: Lake, repo: str) -> tuple[str, SeriesSettings]:
    """(branch, settings) of the repository's series; defaults (``main``) when none recorded."""
    rel = LAYOUT.series_settings(repo)
    if not lake.exists(rel):
        return "main", SeriesSettings()
    try:
        doc = json.loads(lake.read_bytes(rel))
        return str(doc.get("branch") or "main"), SeriesSettings(**doc.get("settings", {}))
    except (json.JSONDecodeError, TypeError) as exc:
        raise SeriesError(
            f"series settings {lake.url(rel)} are not valid ({exc}); delete the file or "
            "run `evalrunner backfill` again with the settings you want"
        ) from exc


@dataclass
class SeriesRun:
    """What one series run did: its points (oldest first), how many were measured now."""

    points: list[dict[str, Any]]
    measured: list[str] = field(default_factory=list)  # shas measured by this run
    reused: list[str] = field(default_factory=list)  # shas whose saved point was reused
    windows_run: int = 0
    windows_reused: int = 0


def iter_series(
    lake: Lake,
    backend: SandboxBackend,
    repo: str,
    export_for: Callable[[str], RepoExport],
    history: Sequence[MainCommit],
    commits: Sequence[MainCommit],
    settings: SeriesSettings,
    run: SeriesRun,
    *,
    branch: str,
    pool: Any = None,
    workers: int = 1,
    cancel: threading.Event | None = None,
    on_window: Callable[[Any], None] | None = None,
    points_at_once: int | None = None,
) -> Iterator[tuple[dict[str, Any], bool]]:
    """Measure ``commits`` (a selection of ``history``, the branch's first-parent line), each
    flagged against the nearest measured point before it, yielding each point (saved, and added
    to ``run``) oldest first as it lands, with whether it was measured now. Points still to
    measure run up to ``points_at_once`` (default ``workers``) at a time, their discoveries and
    tasks sharing ``workers`` sandbox slots, older points' first; each is flagged and saved only
    once every point before it is, so the flags are those of a one-at-a-time run. A saved point measured the same way is
    reused as it is (no sandbox starts); its flags are computed again only when a newer point
    now sits between it and the one it was compared with."""
    runtime = backend.runtime_digest()
    ordered = sorted(commits, key=lambda c: c.position)

    def measure(commit: MainCommit, stop: threading.Event) -> tuple[dict[str, Any], bool]:
        saved = load_point(lake, repo, commit.sha)
        if saved is not None and point_matches(saved, settings, backend.name, runtime):
            return saved, False  # reused; its flags are looked at in order, below
        point = measure_point(
            lake,
            backend,
            export_for(commit.sha),
            settings,
            commit,
            branch=branch,
            pool=pool,
            workers=workers,
            cancel=stop,
            on_window=on_window,
            slots=slots,
        )
        return point, True

    with SandboxSlots(workers) as slots:
        for commit, (point, fresh) in measure_in_order(
            ordered, measure, ahead=max(1, points_at_once or workers), cancel=cancel
        ):
            if cancel is not None and cancel.is_set():
                break  # a cancelled point is not saved: the next run measures it again
            previous = previous_point(lake, repo, history, commit)
            if not fresh:
                run.reused.append(commit.sha)
                want_previous = previous["commit"] if previous else None
                baselines = task_baselines(point, earlier_points(lake, repo, history, commit))
                want_compared = {t: b["commit"] for t, b in baselines.items()}
                if (
                    point.get("previous") != want_previous
                    or point.get("compared_with", {}) != want_compared
                    or point.get("branch") != branch
                ):
                    point["branch"] = branch
                    point = flag_point(lake, point, previous, baselines)
                    save_point(lake, point)
            else:
                point = flag_point(
                    lake, point, previous, task_baselines(point, earlier_points(lake, repo, history, commit))
                )
                save_point(lake, point)
                run.measured.append(commit.sha)
                run.windows_run += point["execution"]["windows_run"]
                run.windows_reused += point["execution"]["windows_reused"]
            run.points.append(point)
            yield point, fresh


@dataclass(frozen=True)
class RegressionCheck:
    """A point's ``no_cohort_regression`` check: failed (error) where a cohort was flagged,
    failed as a warning where the point could not be measured, passed otherwise."""

    passed: bool
    severity: str  # "error" | "warn"
    description: str
    findings: list[dict[str, Any]]  # one per regressed eval: cohort, eval, delta, interval, versus


def regression_check(point: Mapping[str, Any]) -> RegressionCheck:
    """The check a point's partition carries, in the words of its flags."""
    flags = point.get("task_flags") or {}
    findings = []
    for task in point.get("flagged_tasks") or []:
        flag = flags[task]
        lo, hi = flag.get("interval") or (None, None)
        findings.append(
            {
                "cohort": flag["cohort"],
                "eval": task,
                "delta": flag.get("delta"),
                "interval": [lo, hi],
                "pairs": flag.get("pairs"),
                "compared_with": flag.get("compared_with") or point.get("previous"),
            }
        )
    if findings:
        text = "; ".join(
            f"{f['cohort']}: {f['eval']} dropped {_signed(f['delta'])} "
            f"(95% interval {_signed(f['interval'][0])} to {_signed(f['interval'][1])}, {f['pairs']} paired inputs) "
            f"against {str(f['compared_with'] or '')[:7]}"
            for f in findings
        )
        return RegressionCheck(False, "error", text, findings)
    cause = not_measured_note(point["combined"])
    if cause:
        return RegressionCheck(False, "warn", f"combined {cause}", [])
    if point.get("previous") is None:
        return RegressionCheck(True, "error", "first point of the series: nothing to compare with", [])
    compared = len(flags)
    return RegressionCheck(
        True,
        "error",
        f"no cohort regressed ({compared} eval{'s' if compared != 1 else ''} compared with the previous point)",
        [],
    )


def history_of(rows: Sequence[tuple[str, str, str]]) -> list[MainCommit]:
    """``RepoSource.first_parent_history`` rows as :class:`MainCommit` (position 0 = oldest)."""
    return [
        MainCommit(sha=sha, committed_at=when, subject=subject, position=i)
        for i, (sha, when, subject) in enumerate(rows)
    ]
