"""One comparison's state, read from the lake alone, and the single answer to "what next".

``assess`` is the one implementation of the adaptive loop's decision: the sampling sensor and
the CLI both call it, and a restarted daemon reaches the same answer because everything it
reads (request, commit facts, batch records, failure records) lives in the lake.

Windows. A task's windows are fixed positions of its seeded sample order; their bounds depend
only on the position (see :func:`window_bounds`), never on what was decided, so a base
commit's windows are the same for every PR on it and are reused, never re-run.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from evalrunner_assets import stats
from evalrunner_assets.discovery import AgentModel
from evalrunner_assets.documents.comparison import COMPARISON_SCHEMA_VERSION, ComparisonDocument
from evalrunner_assets.execution.inspect_runner import sample_order
from evalrunner_assets.pipeline.facts import CommitFacts, TaskFacts, load_facts
from evalrunner_assets.pipeline.spec import ComparisonRequest
from evalrunner_assets.pipeline.windows import RunSettings, batch_key_for, batch_state, read_failure
from evalrunner_assets.pricing import PriceTable, sample_accounting, usage_accounting
from evalrunner_assets.stats import ARMS
from lake import LAYOUT, Lake, Window
from lake.batch import BatchKey
from lake.integrity import LakeIntegrityError, quarantine

FIRST_WINDOW = stats.WINDOW_MIN  # pairs in the first window (the schedule lives in the stats planner)
SCHEMA_VERSION = COMPARISON_SCHEMA_VERSION


def window_bounds(start: int, limit: int) -> Window:
    """The window that starts at ``start`` (:func:`stats.window_span`), cut at ``limit``."""
    return Window(*stats.window_span(start, limit))


def window_plan(limit: int) -> list[Window]:
    return [Window(a, b) for a, b in stats.window_schedule(limit)]


@dataclass(frozen=True)
class PlannedWindow:
    """Run ``window`` of ``task`` at ``commit`` (one arm)."""

    arm: str  # "head" | "base"
    commit: str
    task: str
    window: Window


@dataclass
class TaskProgress:
    task: str
    n_samples: int  # positions available on both arms
    limit: int  # positions this comparison may use (dataset, cap + allowance)
    landed: int = 0  # positions committed on both arms (a prefix)
    windows: int = 0
    keys: dict[str, list[BatchKey]] = field(default_factory=lambda: {"head": [], "base": []})
    pending: list[PlannedWindow] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # arm -> first infrastructure cause
    load_errors: dict[str, str] = field(default_factory=dict)  # arm -> why its task code could not load
    failed_keys: list[BatchKey] = field(default_factory=list)  # the windows that failed (one per arm at most)


@dataclass
class Assessment:
    """Where a comparison stands and what to run next."""

    request: ComparisonRequest
    needs_facts: list[str]  # commits whose manifest/sample ids are not learnt yet
    next_windows: list[PlannedWindow]
    result: ComparisonDocument  # RUNNING with no tasks until facts are known
    # Each compared task's pairs, as the pairing rule gave them (sql/paired_inputs_of.sql).
    pairings: dict[str, stats.Pairing] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return not self.needs_facts and not self.next_windows


def model_choice(request: ComparisonRequest, agent: AgentModel | None) -> dict[str, Any]:
    """The model one commit runs, and why: the request's when it was set explicitly (a run
    setting or ``--model`` wins), else the one the commit's agent config names, else the
    request's default. ``source`` is ``run setting``, ``agent config (<file>)`` or ``default``."""
    if request.model_override or agent is None:
        source = "run setting" if request.model_override else "default"
        return {"model": request.settings.model, "model_args": dict(request.settings.model_args), "source": source}
    return {"model": agent.model, "model_args": dict(agent.model_args), "source": f"agent config ({agent.file})"}


def run_settings(request: ComparisonRequest, agent: AgentModel | None = None) -> RunSettings:
    """What one commit's windows run with (``agent``: the model its agent config names)."""
    choice = model_choice(request, agent)
    return RunSettings(
        model=choice["model"],
        model_args=choice["model_args"],
        seed=request.settings.seed,
        epochs=request.settings.epochs,
    )


def stats_params(request: ComparisonRequest) -> stats.StatsParams:
    return stats.StatsParams(
        alpha=request.alpha,
        margin=request.margin,
        min_pairs=request.min_pairs,
        cap=request.cap + request.extra_samples,
        batch_size=FIRST_WINDOW,
        design_cap=request.cap,
    )


def affinity(tasks: Mapping[str, TaskFacts], changed: Iterable[str]) -> dict[str, bool]:
    """Whether each task is touched by the changed files (a task without ``paths`` always is)."""
    changed = list(changed)
    out = {}
    for task, facts in tasks.items():
        if not facts.paths:
            out[task] = True
        else:
            out[task] = any(fnmatch.fnmatchcase(f, g) for g in facts.paths for f in changed)
    return out


@dataclass
class _Batches:
    """Sample rows of committed batches by batch digest, in query order: as Arrow tables (what
    the pairing rule reads) and as dicts (what the accounting reads)."""

    tables: dict[str, pa.Table]
    rows: dict[str, list[dict[str, Any]]]

    # Batches in digest order, as the rows were always summed (float sums depend on order).
    def arm_table(self, keys: list[BatchKey]) -> pa.Table | list[dict[str, Any]]:
        tables = [self.tables[d] for d in sorted({k.digest for k in keys})]
        return pa.concat_tables(tables) if tables else []

    def arm_rows(self, keys: list[BatchKey]) -> list[dict[str, Any]]:
        return [r for d in sorted({k.digest for k in keys}) for r in self.rows[d]]


def _unscored_reasons(task: str, pairing: stats.Pairing, rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Per arm, the inputs left out of the pairing because no score in [0, 1] could be read
    (a scorer returning 1.5, -1, a dict, an unknown letter, or no scorer), with the first raw
    value: a scorer out of range must not quietly shrink the comparison to the inputs it got right."""
    out = []
    for arm in ARMS:
        n = pairing.unscored_head if arm == "head" else pairing.unscored_base
        if not n:
            continue
        inputs = pairing.inputs_head if arm == "head" else pairing.inputs_base
        bad = next((r for r in rows[arm] if r.get("score") is None and not r.get("error")), None)
        got = "no score"
        if bad is not None and bad.get("score_raw") is not None:
            got = f"scorer {bad.get('scorer')!r} returned {bad['score_raw']}"
        out.append(
            f"{task}: {arm}: {n}/{inputs} sample(s) have no score in [0, 1] ({got}) and are left out of "
            "the pairing; a scorer must return a number in [0, 1], a boolean or C/P/I/N"
        )
    return out


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


class AssessCache:
    """What one process remembers between assessments of one comparison, so that planning after
    every window costs what changed, not the whole comparison again.

    Everything kept is immutable once it exists in the lake: a commit's facts (written once),
    batch keys (derived from facts and the request), the rows of a committed batch (its record
    is the commit marker; committed files are never rewritten), and each task's decision and
    figures computed from exactly those batches. Failure records and absent batches are always
    read again. The cache belongs to one request: a changed request (e.g. ``/eval more`` raised
    the allowance), another price table, lake or sandbox runtime empties it."""

    def __init__(self) -> None:
        self._empty()

    def _empty(self) -> None:
        self.request: ComparisonRequest | None = None
        self.prices: PriceTable | None = None
        self.runtime: tuple[str, ...] | None = None  # (lake, backend, runtime digest): keys and rows depend on them
        self.facts: dict[str, CommitFacts] = {}
        self.keys: dict[tuple[str, str, str], BatchKey] = {}
        self.committed: set[str] = set()  # digests of batches known committed
        self.rows: dict[str, list[dict[str, Any]]] = {}  # digest -> its sample rows, in query order
        self.tables: dict[str, pa.Table] = {}  # digest -> the same rows as Arrow (for the pairing rule)
        self.tasks: dict[tuple[Any, ...], tuple[stats.TaskDecision, dict[str, Any], float | None, stats.Pairing]] = {}
        self.hits = 0  # task results reused (for measurements)
        self.con: Any = None  # a DuckDB connection, opened on first use

    def bind(self, request: ComparisonRequest, prices: PriceTable, runtime: tuple[str, ...]) -> None:
        if self.request != request or self.prices != prices or self.runtime != runtime:
            if self.con is not None:
                self.con.close()
            self._empty()
            self.request, self.prices, self.runtime = request, prices, runtime


def _load_facts(lake: Lake, repo: str, commit: str, cache: AssessCache | None) -> CommitFacts | None:
    if cache is not None and commit in cache.facts:
        return cache.facts[commit]
    facts = load_facts(lake, repo, commit)
    # Facts with a listing failure may be learnt again on a later request: not kept.
    if cache is not None and facts is not None and not any(t.failure for t in facts.tasks.values()):
        cache.facts[commit] = facts
    return facts


# What comparison_samples.sql reads: the engine's connection creates no other view.
_SAMPLES_ONLY = ("samples_view",)


def _load_rows(lake: Lake, keys: list[BatchKey], cache: AssessCache | None = None) -> list[dict[str, Any]]:
    """Sample rows of ``keys``' committed batches, ordered by (batch, sample id, epoch); with a
    cache only batches not read before are queried."""
    batches = _load_batches(lake, keys, cache)
    return [r for d in sorted(batches.rows) for r in batches.rows[d]]


def _load_batches(lake: Lake, keys: list[BatchKey], cache: AssessCache | None = None) -> _Batches:
    """Sample rows of ``keys``' committed batches by batch digest; with a cache only batches not
    read before are queried."""
    digests = sorted({k.digest for k in keys})
    if not digests:
        return _Batches({}, {})
    missing = digests if cache is None else [d for d in digests if d not in cache.rows]
    fetched: dict[str, pa.Table] = {}
    fetch = set(missing)
    if missing:
        from lake import duck

        wanted = {k.digest: k for k in keys if k.digest in fetch}
        records = duck.read_batch_records(lake, list(wanted.values()))
        # A file that no longer has its recorded size is a LakeIntegrityError here (assess
        # quarantines the batch and plans again), never rows silently read.
        if cache is None:
            con = duck.connect(lake, records=records, on_problem=duck.raise_problem, views=_SAMPLES_ONLY)
            try:
                table = duck.query(con, "comparison_samples", {"batches": missing})
            finally:
                con.close()
        else:
            # One connection for the cache's life (opening one costs more than the query);
            # its views are pointed at just the batches read now.
            if cache.con is None:
                cache.con = duck.connect(lake, records=records, on_problem=duck.raise_problem, views=_SAMPLES_ONLY)
            else:
                duck.refresh(cache.con, lake, records, duck.raise_problem)
            table = duck.query(cache.con, "comparison_samples", {"batches": missing})
        # The query orders by batch: each batch's rows are one slice.
        batch_column = table.column("batch").to_pylist()
        start = 0
        for end in range(1, len(batch_column) + 1):
            if end == len(batch_column) or batch_column[end] != batch_column[start]:
                fetched[batch_column[start]] = table.slice(start, end - start)
                start = end
        for digest in missing:
            fetched.setdefault(digest, table.slice(0, 0))
    rows = {d: t.to_pylist() for d, t in fetched.items()}
    if cache is None:
        return _Batches(fetched, rows)
    cache.tables.update(fetched)
    cache.rows.update(rows)
    return _Batches({d: cache.tables[d] for d in digests}, {d: cache.rows[d] for d in digests})


def assess(
    lake: Lake,
    request: ComparisonRequest,
    *,
    backend_name: str,
    runtime_digest: str,
    prices: PriceTable | None = None,
    detail: bool = True,
    cache: AssessCache | None = None,
) -> Assessment:
    """Read the comparison's state from the lake; decide each task; plan the next windows.

    ``detail=False`` skips what only the report needs (the interval path for the chart and the
    more-pairs forecast): planning calls it after every step, and those two dominate its cost.
    ``cache``: pass the same :class:`AssessCache` to successive calls for one comparison (the
    result is the same as without it; only tasks whose batches changed are computed again)."""
    prices = prices or PriceTable.default()
    if cache is not None:
        cache.bind(request, prices, (str(lake.root), backend_name, runtime_digest))
    facts: dict[str, CommitFacts | None] = {
        "head": _load_facts(lake, request.repo, request.head_sha, cache),
        "base": _load_facts(lake, request.repo, request.base_sha, cache),
    }
    commits = {"head": request.head_sha, "base": request.base_sha}
    missing = [commits[a] for a in ("base", "head") if facts[a] is None]
    if missing:
        return Assessment(request, sorted(set(missing), key=missing.index), [], _waiting(request, lake))
    head_facts, base_facts = facts["head"], facts["base"]
    assert head_facts is not None and base_facts is not None

    arm_agent = {"head": head_facts.agent_model, "base": base_facts.agent_model}
    arm_settings = {arm: run_settings(request, agent) for arm, agent in arm_agent.items()}
    params = stats_params(request)
    touched = affinity(head_facts.tasks, request.changed_files)
    shared = sorted(set(head_facts.tasks) & set(base_facts.tasks))
    skipped = [t for t in shared if request.affinity == "prune" and not touched[t]]
    compared = [t for t in shared if t not in skipped]
    if request.max_tasks is not None:
        compared = compared[: request.max_tasks]
    order = compared
    if request.affinity in ("order", "prune"):
        order = [t for t in compared if touched[t]] + [t for t in compared if not touched[t]]

    progress: dict[str, TaskProgress] = {}
    for task in compared:
        hf, bf = head_facts.tasks[task], base_facts.tasks[task]
        n = min(len(hf.sample_ids), len(bf.sample_ids))
        p = TaskProgress(task=task, n_samples=n, limit=min(n, params.cap))
        for arm, f in (("head", hf), ("base", bf)):
            if f.load_error:
                p.load_errors[arm] = f.load_error
            elif f.failure:
                p.failures[arm] = f"sample ids could not be listed: {f.failure}"
        start = 0
        while start < p.limit and not p.failures and not p.load_errors:
            w = window_bounds(start, p.limit)
            states = {}
            for arm, f in (("head", hf), ("base", bf)):
                key = _batch_key(
                    cache,
                    request.repo,
                    commits[arm],
                    f,
                    arm_settings[arm],
                    w,
                    backend_name=backend_name,
                    runtime_digest=runtime_digest,
                )
                if cache is not None and key.digest in cache.committed:
                    states[arm] = (key, "committed")
                    continue
                states[arm] = (key, batch_state(lake, key))
                if cache is not None and states[arm][1] == "committed":
                    cache.committed.add(key.digest)
            for arm, (key, state) in states.items():
                if state == "failed":
                    p.failures[arm] = read_failure(lake, key) or "infrastructure failure"
                    p.failed_keys.append(key)
            if p.failures:
                break
            if all(s == "committed" for _, s in states.values()):
                for arm, (key, _) in states.items():
                    p.keys[arm].append(key)
                p.landed, p.windows = w.stop, p.windows + 1
                start = w.stop
                continue
            p.pending = [PlannedWindow(arm, commits[arm], task, w) for arm, (_, s) in states.items() if s == "absent"]
            break
        progress[task] = p

    # A task only the head has (the PR adds it) runs on head alone, up to the cap: measured,
    # never paired, and never part of the improved/regressed verdict.
    added = sorted(set(head_facts.tasks) - set(base_facts.tasks))
    new_progress = {
        task: _new_task_progress(
            lake,
            request,
            head_facts.tasks[task],
            arm_settings["head"],
            params,
            cache,
            backend_name=backend_name,
            runtime_digest=runtime_digest,
        )
        for task in added
    }
    all_keys = [k for p in progress.values() for arm in ARMS for k in p.keys[arm]]
    all_keys += [k for p in new_progress.values() for k in p.keys["head"]]
    try:
        batches = _load_batches(lake, all_keys, cache)
    except LakeIntegrityError as exc:
        if exc.record is None:
            raise
        # A committed file changed after it was verified: the batch is quarantined and this
        # assessment starts again without it (the window is planned again).
        quarantine(lake, exc.record, str(exc))
        if cache is not None:
            cache.committed.clear()
            cache.rows.clear()
            cache.tables.clear()
        return assess(
            lake,
            request,
            backend_name=backend_name,
            runtime_digest=runtime_digest,
            prices=prices,
            detail=detail,
            cache=cache,
        )
    n_tasks = max(1, len(compared))
    samples_run = sum(len(r) for r in batches.rows.values())
    budget = None
    if request.budget_samples is not None:
        budget = request.budget_samples + request.extra_samples
    budget_left = None if budget is None else max(0, budget - samples_run)

    decisions: dict[str, stats.TaskDecision] = {}
    task_docs: dict[str, Any] = {}
    failures: dict[str, str] = {}
    failed_causes: list[str] = []
    plan_states: dict[str, stats.TaskPlanState] = {}
    pairings: dict[str, stats.Pairing] = {}
    budget_exhausted = budget_left is not None and budget_left <= 0
    memos = {
        task: (
            task,
            tuple(k.digest for k in progress[task].keys["head"]),
            tuple(k.digest for k in progress[task].keys["base"]),
            progress[task].n_samples,
            progress[task].limit,
            tuple(sorted(progress[task].failures.items())),
            tuple(sorted(progress[task].load_errors.items())),
            budget_exhausted,
            n_tasks,
            touched[task],
            detail,
        )
        for task in compared
    }
    # The tasks to decide again are paired together: one run of the pairing rule for them all.
    paired_now = stats.pair_tasks(
        {
            task: (
                batches.arm_table(progress[task].keys["head"]),
                batches.arm_table(progress[task].keys["base"]),
                _task_order(head_facts.tasks[task], base_facts.tasks[task], request),
            )
            for task in compared
            if cache is None or memos[task] not in cache.tasks
        }
    )
    for task in compared:
        p = progress[task]
        memo = memos[task]
        if cache is not None and memo in cache.tasks:
            decision, doc, cost_per_pair, pairing = cache.tasks[memo]
            cache.hits += 1
        else:
            pairing = paired_now[task]
            decision, doc, cost_per_pair = _assess_task(
                p,
                head_facts.tasks[task],
                base_facts.tasks[task],
                pairing,
                batches,
                params,
                n_tasks,
                budget_exhausted=budget_exhausted,
                touched=touched[task],
                prices=prices,
                detail=detail,
                budget_samples=budget,
            )
            if cache is not None:
                cache.tasks[memo] = (decision, doc, cost_per_pair, pairing)
        pairings[task] = pairing
        task_docs[task] = copy.deepcopy(doc)  # the document may be edited; the cached one stays
        decisions[task] = decision
        causes = {**p.failures, **p.load_errors}
        if "head" in p.failures and "base" not in causes:
            failures[task] = f"failed on this PR's head: {p.failures['head']}"
        elif "base" in causes:
            # No baseline: the decision says so ("failed on both head and base", or "failed on
            # base while head succeeded"); run_verdict's failures are only head-failed tasks.
            # A task that cannot load on head alone is the decision's "broken", cause included.
            failed_causes.append(f"{task}: " + "; ".join(f"{a}: {causes[a]}" for a in ARMS if a in causes))
        if decision.label == "continue" and not causes and p.pending:
            plan_states[task] = stats.TaskPlanState(
                next_start=p.landed,
                n_samples=p.limit,
                label="continue",
                cost_per_sample=cost_per_pair,
            )

    new_results = {
        task: _measure_new_task(p, head_facts.tasks[task], batches, params, prices, request, budget_exhausted)
        for task, p in new_progress.items()
    }
    broken_new = {
        task: f"broken by this PR: the eval it adds {_new_task_broken_cause(r)}"
        for task, r in new_results.items()
        if r["status"] == "broken"
    }
    verdict = stats.run_verdict(decisions, failures, broken_new=broken_new)
    unscored = [
        r
        for task in compared
        if pairings[task].unscored_head or pairings[task].unscored_base
        for r in _unscored_reasons(task, pairings[task], {a: batches.arm_rows(progress[task].keys[a]) for a in ARMS})
    ]
    if unscored or failed_causes:
        verdict = dataclasses.replace(verdict, reasons=verdict.reasons + tuple(failed_causes + unscored))

    # What next: the stats planner picks which undecided tasks get their next window (budget,
    # affinity order); the window itself is the fixed window at that position.
    planned = stats.plan_next_windows(
        plan_states,
        params=params,
        budget_remaining=None if budget_left is None else stats.Budget(samples=budget_left),
        affinity_order=order,
    )
    next_windows: list[PlannedWindow] = []
    for wp in planned:
        next_windows.extend(progress[wp.task].pending)
    if not budget_exhausted:
        for task, p in new_progress.items():
            if new_results[task]["status"] == "measuring":
                next_windows.extend(p.pending)

    failed_keys = [k for t in compared for k in progress[t].failed_keys]
    failed_keys += [k for p in new_progress.values() for k in p.failed_keys]
    failed = failed_window_accounting(lake, failed_keys, prices)
    # Samples are rows: one per input and epoch, as samples_run counts them.
    possible = (sum(2 * progress[t].limit for t in compared) + sum(p.limit for p in new_progress.values())) * max(
        1, request.settings.epochs
    )
    spend = [task_docs[t][arm]["cost_usd"] for t in compared for arm in ARMS]
    spend += [r["head"]["cost_usd"] for r in new_results.values() if r["head"]["samples"]]
    result: dict[str, Any] = {
        **_identity(request),
        "status": "running" if next_windows else "complete",
        "verdict": "RUNNING" if next_windows else verdict.verdict,
        "final_verdict": verdict.to_dict(),
        "params": params.to_dict(),
        "tasks": task_docs,
        "task_order": order,
        "skipped_tasks": skipped,
        "new_tasks": added,
        "new_task_results": new_results,
        "removed_tasks": sorted(set(base_facts.tasks) - set(head_facts.tasks)),
        "samples_run": samples_run,
        "samples_possible": possible,
        "spend_usd": round(sum(s for s in spend if s is not None), 6)
        if spend and all(s is not None for s in spend)
        else None,
        "spend_known": bool(spend) and all(s is not None for s in spend),
        # Money spent is money spent: windows that failed on infrastructure landed no samples,
        # but what their logs say they used is counted here (unknown when no log was readable).
        "failed_windows": failed,
        "next_windows": [
            {"arm": w.arm, "commit": w.commit, "task": w.task, "window": w.window.name} for w in next_windows
        ],
        "trajectories": {arm: lake.url(LAYOUT.raw_prefix(request.repo, commits[arm])) for arm in ARMS},
        # Which model each arm ran and where that came from (a run setting, the agent config).
        "arm_models": {arm: model_choice(request, agent) for arm, agent in arm_agent.items()},
        "computed_at": datetime.now(UTC).isoformat(),
    }
    if next_windows:
        result["final_verdict"]["verdict"] = "RUNNING"
    return Assessment(request, [], next_windows, ComparisonDocument.model_validate(result), pairings)


def _batch_key(
    cache: AssessCache | None,
    repo: str,
    commit: str,
    facts: TaskFacts,
    settings: RunSettings,
    window: Window,
    *,
    backend_name: str,
    runtime_digest: str,
) -> BatchKey:
    memo = (commit, facts.task, window.name)
    if cache is not None and memo in cache.keys:
        return cache.keys[memo]
    key = batch_key_for(repo, commit, facts, settings, window, backend_name=backend_name, runtime_digest=runtime_digest)
    if cache is not None:
        cache.keys[memo] = key
    return key


def _new_task_progress(
    lake: Lake,
    request: ComparisonRequest,
    hf: TaskFacts,
    settings: RunSettings,
    params: stats.StatsParams,
    cache: AssessCache | None,
    *,
    backend_name: str,
    runtime_digest: str,
) -> TaskProgress:
    """A new task's windows on head: the landed prefix, the first one not landed, or the failure."""
    n = len(hf.sample_ids)
    p = TaskProgress(task=hf.task, n_samples=n, limit=min(n, params.cap))
    if hf.load_error:
        p.load_errors["head"] = hf.load_error
    elif hf.failure:
        p.failures["head"] = f"sample ids could not be listed: {hf.failure}"
    start = 0
    while start < p.limit and not p.failures and not p.load_errors:
        w = window_bounds(start, p.limit)
        key = _batch_key(
            cache,
            request.repo,
            request.head_sha,
            hf,
            settings,
            w,
            backend_name=backend_name,
            runtime_digest=runtime_digest,
        )
        state = "committed" if cache is not None and key.digest in cache.committed else batch_state(lake, key)
        if state == "committed":
            if cache is not None:
                cache.committed.add(key.digest)
            p.keys["head"].append(key)
            p.landed, p.windows = w.stop, p.windows + 1
            start = w.stop
        elif state == "failed":
            p.failures["head"] = read_failure(lake, key) or "infrastructure failure"
            p.failed_keys.append(key)
        else:
            p.pending = [PlannedWindow("head", request.head_sha, hf.task, w)]
            break
    return p


def _measure_new_task(
    p: TaskProgress,
    hf: TaskFacts,
    batches: _Batches,
    params: stats.StatsParams,
    prices: PriceTable,
    request: ComparisonRequest,
    budget_exhausted: bool,
) -> dict[str, Any]:
    """A new task's measurement document (``NewTaskResult``) from its landed head windows."""
    rows = batches.arm_rows(p.keys["head"])
    order = sample_order(list(hf.sample_ids), request.settings.seed)
    looks = [k.window.stop for k in p.keys["head"]]
    at_limit = p.landed >= p.limit
    m = stats.measure_arm(batches.arm_table(p.keys["head"]), order, params, looks=looks, at_limit=at_limit)
    failure = p.load_errors.get("head") or p.failures.get("head")
    if p.load_errors or m.broken:
        status = "broken"
    elif p.failures:
        status = "failed"
    elif at_limit:
        status = "measured"
    elif budget_exhausted:
        status = "budget_spent"
    else:
        status = "measuring"
    return {
        "status": status,
        "mean": m.mean,
        "interval": m.interval,
        "level": m.level,
        "inputs": m.inputs,
        "inputs_run": m.inputs_run,
        "errored": m.errored,
        "unscored": m.unscored,
        "samples_possible": p.n_samples,
        "limit": p.limit,
        "error_cause": m.error_cause,
        "failure": failure,
        "head": sample_accounting(rows, prices),
        "batches": [k.digest for k in p.keys["head"]],
    }


def _new_task_broken_cause(result: Mapping[str, Any]) -> str:
    if result.get("error_cause"):
        return f"raises: head: {result['error_cause']}"
    return f"cannot be loaded ({result.get('failure')})"


def _task_order(hf: TaskFacts, bf: TaskFacts, request: ComparisonRequest) -> list[str]:
    """The task's pre-committed sample order (the same for both arms): what pairs follow."""
    return sample_order(sorted(set(hf.sample_ids) | set(bf.sample_ids)), request.settings.seed)


def _assess_task(
    p: TaskProgress,
    hf: TaskFacts,
    bf: TaskFacts,
    pairing: stats.Pairing,
    batches: _Batches,
    params: stats.StatsParams,
    n_tasks: int,
    *,
    budget_exhausted: bool,
    touched: bool,
    prices: PriceTable,
    detail: bool,
    budget_samples: int | None = None,
) -> tuple[stats.TaskDecision, dict[str, Any], float | None]:
    """One task's decision, its document and the mean cost of a pair, from its committed
    batches alone (``pairing``: the pairing rule over exactly those batches)."""
    decision = stats.decide_task(
        pairing,
        params,
        n_tasks,
        at_cap=p.landed >= p.limit,
        budget_exhausted=budget_exhausted,
        head_failed="head" in p.failures,
        base_failed="base" in p.failures,
        head_load_error=p.load_errors.get("head"),
        base_load_error=p.load_errors.get("base"),
        breakage=True,
        forecast=detail,
        dataset_size=p.n_samples,
        budget_samples=budget_samples,
    )
    head_acc = sample_accounting(batches.arm_rows(p.keys["head"]), prices)
    base_acc = sample_accounting(batches.arm_rows(p.keys["base"]), prices)
    cost_per_pair = None
    if head_acc["cost_per_sample_usd"] is not None and base_acc["cost_per_sample_usd"] is not None:
        cost_per_pair = (head_acc["cost_per_sample_usd"] + base_acc["cost_per_sample_usd"]) / 2
    doc = {
        "decision": decision.to_dict(),
        "affinity": "matched" if touched else "unmatched",
        "pairs_possible": p.n_samples,
        "pairs_limit": p.limit,
        "positions_landed": p.landed,
        "windows": p.windows,
        "failures": dict(p.failures),
        "load_errors": dict(p.load_errors),
        # Ids both commits list whose input digests differ (known before running; pairing
        # counts the same from the rows that ran: decision.pairing.changed_inputs).
        "changed_inputs_listed": len(hf.changed_inputs(bf)),
        "head": head_acc,
        "base": base_acc,
        "cost_per_sample_delta_usd": _delta(head_acc["cost_per_sample_usd"], base_acc["cost_per_sample_usd"]),
        "latency_p50_delta_s": _delta(head_acc["latency_p50_s"], base_acc["latency_p50_s"]),
        "more_samples_hint": (
            stats.describe_more_samples(decision.more_pairs_needed, cost_per_pair)
            if decision.label in ("continue", "inconclusive") and decision.more_pairs_needed
            else None
        ),
        "path": [list(step) for step in stats.confidence_path(pairing, params, n_tasks)] if detail else [],
        "batches": {arm: [k.digest for k in p.keys[arm]] for arm in ARMS},
    }
    return decision, doc, cost_per_pair


def failed_window_accounting(lake: Lake, keys: list[BatchKey], prices: PriceTable) -> dict[str, Any]:
    """Samples, tokens and cost that failed windows used, from their failure records."""
    from evalrunner_assets.pipeline.windows import failure_usage

    return usage_accounting((failure_usage(lake, key) for key in keys), prices)


def _identity(request: ComparisonRequest) -> dict[str, Any]:
    """The fields that say which comparison a document is."""
    return {
        "schema_version": SCHEMA_VERSION,
        "comparison": request.key,
        "repo": request.repo,
        "pr": request.pr,
        "head_sha": request.head_sha,
        "base_sha": request.base_sha,
        "base_ref": request.base_ref,
        "head_ref": request.head_ref,
        "model": request.settings.model,
    }


def _waiting(request: ComparisonRequest, lake: Lake) -> ComparisonDocument:
    """The document before any commit's evals are known: RUNNING, nothing sampled yet (so a
    check run can show progress from the first moment)."""
    return ComparisonDocument.model_validate(
        {
            **_identity(request),
            "status": "running",
            "verdict": "RUNNING",
            "final_verdict": {"verdict": "RUNNING", "reasons": ["discovering evals"], "p_improvement": None},
            "params": stats_params(request).to_dict(),
            "tasks": {},
            "task_order": [],
            "skipped_tasks": [],
            "new_tasks": [],
            "removed_tasks": [],
            "samples_run": 0,
            "samples_possible": 0,
            "spend_usd": None,
            "spend_known": False,
            "failed_windows": usage_accounting([], PriceTable()),
            "next_windows": [],
            "trajectories": {
                arm: lake.url(LAYOUT.raw_prefix(request.repo, sha))
                for arm, sha in (("head", request.head_sha), ("base", request.base_sha))
            },
            "computed_at": datetime.now(UTC).isoformat(),
        }
    )


def save_result(lake: Lake, result: ComparisonDocument) -> str:
    rel = LAYOUT.comparison(result.repo, result.pr, result.head_sha)
    return lake.write_bytes(rel, result.to_json())


def load_result(lake: Lake, repo: str, pr: str, head: str) -> ComparisonDocument | None:
    """The comparison document saved in the lake (None when there is none yet); a document that
    is not valid raises :class:`DocumentError` naming the file and the field."""
    rel = LAYOUT.comparison(repo, pr, head)
    if not lake.exists(rel):
        return None
    return ComparisonDocument.from_json(lake.read_bytes(rel), lake.url(rel))
