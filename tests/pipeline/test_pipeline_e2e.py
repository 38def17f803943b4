"""The comparison pipeline end to end on the example agent repo: real git exports, real
bubblewrap sandboxes running Inspect with the simulated model, the real lake, DuckDB and
statistics, driven through Dagster runs on a temporary instance.

The module shares one evalrunner home and one Dagster instance, so the base commit is evaluated
once (by the first comparison) and every later comparison on it reuses those batches.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets import stats
from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.driver.comparison import EngineOptions, run_comparison
from evalrunner_assets.example_repo import ExampleRepo, build_example_repo
from evalrunner_assets.pipeline.assess import AssessCache, assess
from evalrunner_assets.report import MARKER
from lake import LAYOUT, Window
from tests.helpers.pipeline_fixtures import (
    ALL_TASKS,
    ESCALATION,
    REPO_ID,
    RUNBOOK,
    SUMMARY,
    PipelineHome,
    evalrunner_home,
    labels,
    ran_samples,
    request_for,
)

pytestmark = pytest.mark.slow

TRIAGE_SKILL = "skills/triage/SKILL.md"  # the one file every variant's patch changes


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> ExampleRepo:
    return build_example_repo(tmp_path_factory.mktemp("example") / "support-agent")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PipelineHome]:
    with evalrunner_home(tmp_path_factory.mktemp("evalrunner-home")) as h:
        yield h


@pytest.fixture(scope="module")
def instance(home: PipelineHome) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.local_temp(tempdir=str(home.root / "dagster")) as inst:
        yield inst


class Run:
    """One comparison driven to its verdict, with what it started in the sandbox."""

    def __init__(
        self,
        home: PipelineHome,
        result: ComparisonDocument,
        starts: list[dict[str, Any]],
        new_batches: dict[str, set[str]],
        new_failures: set[Path],
        check_runs: list[dict[str, Any]],
    ) -> None:
        self.home, self.result, self.starts = home, result, starts
        self.new_batches, self.new_failures = new_batches, new_failures
        self.check_runs = check_runs  # check_run.json after each report, in order

    def sample_runs(self, commit: str) -> list[dict[str, Any]]:
        """The windows of ``commit`` evaluated in a sandbox during this comparison."""
        return [s for s in self.starts if s["commit"] == commit and ran_samples(s)]

    def artifact(self, name: str) -> Path:
        r = self.result
        return self.home.lake_root / LAYOUT.comparison_artifact(r.repo, r.pr, r.head_sha, name)


@pytest.fixture(scope="module")
def compare(home: PipelineHome, instance: dg.DagsterInstance, example: ExampleRepo):
    def run(head: str, pr: str, progress_every_s: float = 20.0, **fields: Any) -> Run:
        before = len(home.starts())
        commits = {example.base_sha, example.sha(head)}
        batches_before = {c: home.batch_records(c) for c in commits}
        failures_before = set((home.lake_root / "failures").rglob("*.json"))
        request = request_for(example, head, pr, **fields)
        check_run = home.lake_root / LAYOUT.comparison_artifact(REPO_ID, pr, request.head_sha, "check_run.json")
        check_runs: list[dict[str, Any]] = []

        def on_step(step: Any, _result: Any) -> None:
            if step.kind == "compare":
                check_runs.append(json.loads(check_run.read_text()))

        result = run_comparison(
            request,
            instance=instance,
            resources=home.resources(),
            options=EngineOptions(on_step=on_step, progress_every_s=progress_every_s),
        )
        new = {c: home.batch_records(c) - batches_before[c] for c in commits}
        failures = set((home.lake_root / "failures").rglob("*.json")) - failures_before
        return Run(home, result, home.starts()[before:], new, failures, check_runs)

    return run


@pytest.fixture(scope="module")
def improved(compare) -> Run:
    # Progress on every recorded task, not every 20 s: the in-progress check run must not depend
    # on how fast this machine is.
    return compare("improve-runbook", "101", progress_every_s=0.0, changed_files=(TRIAGE_SKILL,))


@pytest.fixture(scope="module")
def identical(compare, improved: Run) -> Run:
    # Head is the base commit itself; runs after `improved` so most base windows are reused.
    return compare("base", "102")


@pytest.fixture(scope="module")
def base_evaluated(improved: Run, identical: Run) -> None:
    """The base commit has every window of every task up to the cap: `improved` ran the first
    windows of all tasks and those of the undecided ones; `identical` ran the rest."""


@pytest.fixture(scope="module")
def regressed(compare, base_evaluated: None) -> Run:
    return compare("regress-escalation", "103", affinity="prune", changed_files=(TRIAGE_SKILL,))


@pytest.fixture(scope="module")
def no_op(compare, base_evaluated: None) -> Run:
    return compare("no-op-wording", "104", affinity="prune", changed_files=(TRIAGE_SKILL,))


# --- verdicts ---------------------------------------------------------------------------------


def test_improving_variant_is_improved_on_runbook_lookup_and_regresses_nothing(improved: Run) -> None:
    r = improved.result
    assert r.status == "complete"
    assert r.verdict == "IMPROVED"
    got = labels(r)
    assert set(got) == ALL_TASKS
    assert got[RUNBOOK] == "improved"
    assert "regressed" not in got.values()
    # The example's untouched evals are near-deterministic: established as unchanged within the cap.
    assert got[ESCALATION] == got[SUMMARY] == "unchanged"
    runbook = r.tasks[RUNBOOK].decision
    assert runbook.delta > 0 and runbook.anytime_interval.lo > 0
    assert r.final_verdict.p_improvement >= 0.9
    for task, doc in r.tasks.items():
        assert doc.head.samples == doc.base.samples == doc.decision.pairs > 0, task
    assert r.samples_run == sum(d.head.samples + d.base.samples for d in r.tasks.values())


def test_regressing_variant_is_regressed_on_escalation_policy(regressed: Run) -> None:
    r = regressed.result
    assert r.verdict == "REGRESSED"
    got = labels(r)
    assert got[ESCALATION] == "regressed"
    assert got.get(RUNBOOK) != "improved"
    d = r.tasks[ESCALATION].decision
    assert d.delta < 0 and d.anytime_interval.hi < 0


def test_no_op_variant_is_never_improved_or_regressed(no_op: Run) -> None:
    r = no_op.result
    assert r.status == "complete"
    assert r.verdict not in ("IMPROVED", "REGRESSED")
    assert not {"improved", "regressed"} & set(labels(no_op.result).values())


def test_identical_base_and_head_is_only_unchanged_or_inconclusive(identical: Run) -> None:
    r = identical.result
    assert r.head_sha == r.base_sha
    assert r.verdict in ("UNCHANGED", "INCONCLUSIVE")
    assert set(labels(r).values()) <= {"unchanged", "inconclusive"}
    for doc in r.tasks.values():
        assert doc.decision.delta == 0


def test_identical_base_and_head_runs_each_window_once(
    identical: Run, example: ExampleRepo, instance: dg.DagsterInstance
) -> None:
    runs = identical.sample_runs(example.base_sha)
    assert runs, "the base windows the first comparison did not need ran here"
    ran = [(s["labels"]["task"], s["labels"].get("window") or s["samples"]) for s in runs]
    assert len(ran) == len(set(ran)), ran
    assert identical.new_failures == set()
    for rec in check_records(instance, identical.result, "no_error_logs"):
        assert rec.event.dagster_event.event_specific_data.passed  # type: ignore[union-attr]


# --- reuse ------------------------------------------------------------------------------------


def test_second_pr_on_the_same_base_runs_no_base_samples(regressed: Run, no_op: Run, example: ExampleRepo) -> None:
    base = example.base_sha
    for run in (regressed, no_op):
        assert run.result.base_sha == base
        assert [s for s in run.starts if s["commit"] == base] == []
        assert run.new_batches[base] == set()
        head = run.result.head_sha
        assert run.sample_runs(head), "the head's samples ran"
        assert run.new_batches[head]
        for doc in run.result.tasks.values():
            assert doc.base.samples == doc.head.samples > 0


def test_first_comparison_ran_both_arms(improved: Run, example: ExampleRepo) -> None:
    # The counting is real: the first comparison on a fresh lake starts sandboxes for both arms.
    commits = {s["commit"] for s in improved.starts}
    assert {example.base_sha, example.sha("improve-runbook")} <= commits
    assert improved.new_batches[example.base_sha]


def test_a_fresh_commit_starts_one_warm_sandbox_per_task_and_lists_ids_in_it(
    improved: Run, example: ExampleRepo
) -> None:
    # Learning a commit lists each task's ids in the warm sandbox its windows then use: no
    # separate listing sandbox, and no second session for the first window.
    for commit in (example.base_sha, example.sha("improve-runbook")):
        starts = [s for s in improved.starts if s["commit"] == commit]
        sessions = Counter(s["labels"]["task"] for s in starts if s["kind"] == "session")
        assert sessions == Counter({t: 1 for t in ALL_TASKS}), sessions
        assert [s["labels"]["step"] for s in starts if s["kind"] == "run"] == ["discovery"]
        assert sum(1 for s in starts if s["kind"] == "eval") == len(improved.new_batches[commit])


def test_changing_the_seed_invalidates_base_reuse(compare, improved: Run, example: ExampleRepo) -> None:
    base = example.base_sha
    run = compare("improve-runbook", "105", seed=1, max_tasks=1, cap=16)
    assert run.result.params.cap == 16
    (task,) = run.result.tasks
    assert run.sample_runs(base), "the base ran again under the new seed"
    # Every base window this comparison used ran anew (the schedule has 2 windows to 16).
    used = run.result.tasks[task].batches["base"]
    assert 1 <= len(run.new_batches[base]) == len(used) <= len(stats.window_schedule(16))
    old = set(improved.result.tasks[task].batches["base"])
    assert not old & set(run.result.tasks[task].batches["base"])


def test_changing_the_model_args_plans_new_base_batches(
    improved: Run, home: PipelineHome, example: ExampleRepo
) -> None:
    # The simulated model takes no model args, so this is checked at planning: the batches the
    # base already has are not offered for a request whose model args differ.
    backend = home.resources()["sandbox"].backend()
    lake = home.lake()

    def plan(**fields: Any) -> Any:
        request = request_for(example, "improve-runbook", "106", **fields)
        return assess(lake, request, backend_name=backend.name, runtime_digest=backend.runtime_digest())

    same = plan()
    assert all(same.result.tasks[t].batches["base"] for t in ALL_TASKS)  # reused
    changed = plan(model_args={"temperature": 0.5})
    assert all(changed.result.tasks[t].batches["base"] == [] for t in ALL_TASKS)
    planned = {(w.task, w.window.name) for w in changed.next_windows if w.arm == "base"}
    first = Window(*stats.window_span(0, 256)).name  # the schedule's first window
    assert planned == {(t, first) for t in ALL_TASKS}


def test_assess_with_a_cache_gives_the_same_document_and_sees_a_changed_request(
    improved: Run, home: PipelineHome, example: ExampleRepo
) -> None:
    backend = home.resources()["sandbox"].backend()
    lake = home.lake()
    request = request_for(example, "improve-runbook", "101", changed_files=(TRIAGE_SKILL,))
    kw = dict(backend_name=backend.name, runtime_digest=backend.runtime_digest(), detail=False)

    def doc(a: Any) -> dict[str, Any]:
        return a.result.model_dump(exclude={"computed_at"})

    plain = assess(lake, request, **kw)
    cache = AssessCache()
    first, second = assess(lake, request, cache=cache, **kw), assess(lake, request, cache=cache, **kw)
    assert doc(first) == doc(second) == doc(plain)
    assert cache.hits == len(ALL_TASKS)  # the second call computed no task again
    assert cache.rows and all(cache.rows.values())
    # Another request (a smaller cap) is not answered from the first one's cache.
    capped = request_for(example, "improve-runbook", "101", changed_files=(TRIAGE_SKILL,), cap=16)
    assert doc(assess(lake, capped, cache=cache, **kw)) == doc(assess(lake, capped, **kw))
    assert cache.hits == 0


def test_sql_users_get_the_engines_pairs_from_the_paired_inputs_rule(
    improved: Run, home: PipelineHome, example: ExampleRepo
) -> None:
    # One pairing rule (sql/paired_inputs_of.sql): over the batches the comparison document
    # names, SQL on the lake's samples view gives exactly the pairs the engine decided on.
    from lake import connect

    backend = home.resources()["sandbox"].backend()
    lake = home.lake()
    request = request_for(example, "improve-runbook", "101", changed_files=(TRIAGE_SKILL,))
    engine = assess(lake, request, backend_name=backend.name, runtime_digest=backend.runtime_digest(), detail=False)
    r = improved.result
    con = connect(lake)
    for task, doc in r.tasks.items():
        pairing = engine.pairings[task]
        assert engine.result.tasks[task].batches == doc.batches
        assert pairing.n_pairs == doc.decision.pairs > 0
        con.execute(
            "create or replace temp table comparison_rows as select * from samples "
            "where batch in (select unnest(?::varchar[]))",
            [doc.batches["head"] + doc.batches["base"]],
        )
        rows = con.sql(
            "select sample_id, pair_status, head_score, base_score, delta "
            "from paired_inputs_of('comparison_rows', 'comparison_rows', ?, ?, ?) where task = ?",
            params=[REPO_ID, r.head_sha, r.base_sha, task],
        ).fetchall()
        paired = {sid: (head, base, delta) for sid, status, head, base, delta in rows if status == "paired"}
        assert sorted(paired) == sorted(pairing.sample_ids)
        assert [paired[sid] for sid in pairing.sample_ids] == [
            (h, b, pytest.approx(h - b)) for h, b in zip(pairing.head, pairing.base)
        ]
        assert tuple(sorted(sid for sid, status, *_ in rows if status == "changed_input")) == pairing.changed_inputs
        head_only = tuple(sorted(sid for sid, status, *_ in rows if status == "head_only"))
        assert head_only == pairing.unpaired_head


# --- changed-file affinity ----------------------------------------------------------------------


def test_prune_skips_tasks_whose_paths_match_no_changed_file(regressed: Run, example: ExampleRepo) -> None:
    r = regressed.result
    # skills/triage/SKILL.md matches the two triage tasks' paths, not summary_quality's.
    assert r.skipped_tasks == [SUMMARY]
    assert set(r.tasks) == {RUNBOOK, ESCALATION}
    assert regressed.new_failures == set()
    assert all(doc.affinity == "matched" for doc in r.tasks.values())
    head = example.sha("regress-escalation")
    # Its sample ids are listed with the commit's manifest; none of its samples run.
    assert not [s for s in regressed.sample_runs(head) if s["labels"].get("task") == SUMMARY]
    assert not [b for b in regressed.new_batches[head] if "summary_quality" in b]
    comment = regressed.artifact("comment.md").read_text()
    assert re.search(r"\*\*Skipped[^*]*:\*\* `triage/summary_quality`", comment)


def test_order_mode_runs_matched_tasks_first(improved: Run) -> None:
    order = improved.result.task_order
    assert order[-1] == SUMMARY  # the only task whose paths miss the changed file
    assert set(order[:2]) == {RUNBOOK, ESCALATION}
    assert improved.result.skipped_tasks == []


# --- the report -------------------------------------------------------------------------------


def _headline(comment: str) -> re.Match[str] | None:
    return re.search(r"`([0-9a-f]{7})` vs `main` · P\(improvement\) = (\d\.\d\d)", comment)


def test_comparison_json_lands_in_the_lake(improved: Run) -> None:
    r = improved.result
    path = improved.home.lake_root / LAYOUT.comparison(REPO_ID, "101", r.head_sha)
    on_disk = json.loads(path.read_text())
    assert on_disk["verdict"] == "IMPROVED"
    assert on_disk["comparison"] == f"{REPO_ID}#101@{r.head_sha}"
    assert on_disk["tasks"].keys() == r.tasks.keys()


def test_improved_comment_has_marker_headline_and_a_row_per_eval(improved: Run) -> None:
    r = improved.result
    comment = improved.artifact("comment.md").read_text()
    assert comment.startswith(MARKER + "\n")
    assert "IMPROVED" in comment.splitlines()[1]
    m = _headline(comment)
    assert m is not None, comment[:500]
    assert m.group(1) == r.head_sha[:7]
    assert float(m.group(2)) == pytest.approx(r.final_verdict.p_improvement, abs=0.005)
    verdict_table = comment.split("<details>")[0]
    rows = {
        line.split("|")[1].strip(" `"): line for line in verdict_table.splitlines() if line.startswith("| `triage/")
    }
    assert {RUNBOOK, ESCALATION, SUMMARY} <= rows.keys()
    assert "improved" in rows[RUNBOOK] and "unchanged" in rows[ESCALATION]
    samples = r.tasks[RUNBOOK].head.samples + r.tasks[RUNBOOK].base.samples
    assert rows[RUNBOOK].rstrip(" |").endswith(str(samples))
    assert "│" in rows[RUNBOOK]  # the CI bar marks zero
    assert f"paired against base commit `{r.base_sha}`" in comment


def test_check_run_maps_improved_to_success_and_regressed_to_failure(improved: Run, regressed: Run) -> None:
    for run, conclusion in ((improved, "success"), (regressed, "failure")):
        check = json.loads(run.artifact("check_run.json").read_text())
        assert check["status"] == "completed"
        assert check["conclusion"] == conclusion
        assert check["head_sha"] == run.result.head_sha
        assert check["title"].endswith(f"{run.result.samples_run} samples")


def test_check_run_is_in_progress_with_sample_counts_until_the_verdict(improved: Run) -> None:
    runs = improved.check_runs
    assert len(runs) >= 2, "the report was rendered while running and at the end"
    running = runs[:-1]
    for check in running:
        assert (check["status"], check["conclusion"]) == ("in_progress", None)
        m = re.fullmatch(r"running · (\d+) of (\d+) samples", check["title"])
        assert m is not None, check["title"]
        # 0 is the report the engine makes as work starts (before any window has landed; on a
        # loaded machine it may be the only one before the verdict).
        assert 0 <= int(m.group(1)) < int(m.group(2)) == improved.result.samples_possible
    done = [int(re.search(r"(\d+) of", c["title"]).group(1)) for c in running]  # type: ignore[union-attr]
    assert done == sorted(done)
    assert (runs[-1]["status"], runs[-1]["conclusion"]) == ("completed", "success")


def test_regressed_comment_flags_the_regressed_eval(regressed: Run) -> None:
    comment = regressed.artifact("comment.md").read_text()
    assert comment.startswith(MARKER)
    assert "REGRESSED" in comment.splitlines()[1]
    row = next(line for line in comment.splitlines() if line.startswith(f"| `{ESCALATION}`"))
    assert "**regressed**" in row


def test_chart_files_exist_in_the_lake(improved: Run) -> None:
    png, svg = improved.artifact("chart.png"), improved.artifact("chart.svg")
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert "<svg" in svg.read_text()[:2000]


# --- the Dagster instance -----------------------------------------------------------------------


def check_records(instance: dg.DagsterInstance, result: ComparisonDocument, name: str) -> list[Any]:
    """The evaluations of one task_samples check on the commits of one comparison."""
    commits = {f"{result.repo}@{sha}" for sha in (result.base_sha, result.head_sha)}
    key = dg.AssetCheckKey(dg.AssetKey("task_samples"), name)
    history = instance.event_log_storage.get_asset_check_execution_history(key, limit=1000)
    return [rec for rec in history if _check_partition(rec).split("|")[0] in commits]


def _check_partition(rec: Any) -> str:
    """The task_samples partition a runless check evaluation names in its metadata."""
    return rec.event.dagster_event.event_specific_data.metadata["partition"].value


def test_task_samples_checks_are_recorded_as_passed(improved: Run, instance: dg.DagsterInstance) -> None:
    """The CLI records each finished (commit, task) outside any Dagster run: a runless
    materialization marked as recorded by `evalrunner compare`, with one evaluation per check."""
    from evalrunner_assets.assets.recording import RECORDED_BY, RECORDED_BY_TAG

    samples = instance.fetch_materializations(dg.AssetKey("task_samples"), limit=1000).records
    recorded = [
        rec
        for rec in samples
        if rec.asset_materialization is not None and rec.asset_materialization.tags.get(RECORDED_BY_TAG) == RECORDED_BY
    ]
    assert recorded
    assert all(rec.run_id == "" for rec in recorded)  # runless: no run to re-execute
    assert {"windows", "windows_run", "samples", "batches"} <= set(recorded[0].asset_materialization.metadata)  # type: ignore[union-attr]
    for name in ("reproducibility_fields_present", "no_error_logs", "lake_files_match_records"):
        key = dg.AssetCheckKey(dg.AssetKey("task_samples"), name)
        history = instance.event_log_storage.get_asset_check_execution_history(key, limit=1000)
        assert len(history) == len(recorded), name
        assert {_check_partition(rec) for rec in history} == {rec.partition_key for rec in recorded}, name
        for rec in history:
            assert rec.status.value == "SUCCEEDED", (name, rec.status)
            assert rec.event.dagster_event.event_specific_data.passed, name  # type: ignore[union-attr]
    latest = instance.get_latest_asset_check_evaluation_record(
        dg.AssetCheckKey(dg.AssetKey("task_samples"), "no_error_logs")
    )
    assert latest is not None
    assert not instance.get_runs(), "the CLI starts no Dagster run (no ephemeral jobs)"


def test_comparison_and_report_are_materialized_per_pr_head(
    improved: Run, example: ExampleRepo, instance: dg.DagsterInstance
) -> None:
    key = f"{REPO_ID}#101@{example.sha('improve-runbook')}"
    assert key in instance.get_dynamic_partitions("comparisons")
    assert f"{REPO_ID}@{example.base_sha}" in instance.get_dynamic_partitions("commits")
    assert set(instance.get_dynamic_partitions("tasks")) >= ALL_TASKS
    for asset in ("comparison", "pr_report"):
        event = instance.get_latest_materialization_event(dg.AssetKey(asset))
        assert event is not None
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("comparison"), asset_partitions=[key]), limit=50
    ).records
    verdicts = [rec.asset_materialization.metadata["verdict"].value for rec in records]  # type: ignore[union-attr]
    assert verdicts[0] == "IMPROVED"  # newest first
    samples = instance.fetch_materializations(dg.AssetKey("task_samples"), limit=500).records
    partitions = {rec.partition_key for rec in samples}
    assert any(example.base_sha in str(p) for p in partitions)
    assert any(example.sha("improve-runbook") in str(p) for p in partitions)


def test_a_comparison_is_recorded_once_per_asset_and_partition(improved: Run, instance: dg.DagsterInstance) -> None:
    """`improved` saved its document after every window step (progress on every recorded task):
    the CLI records the PR head's baselines, comparison and pr_report once, in the state the
    comparison ended in, and each (commit, task) once, with every window it landed."""
    r = improved.result
    assert len(improved.check_runs) > 2  # the document was saved again and again for progress

    def runless(asset: str, partitions: list[str] | None = None) -> list[Any]:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=partitions), limit=1000
        ).records
        return [rec for rec in records if rec.run_id == ""]  # other tests here materialize in runs

    ended = {asset: runless(asset, [r.comparison]) for asset in ("baselines", "comparison", "pr_report")}
    assert {asset: len(records) for asset, records in ended.items()} == {
        "baselines": 1,
        "comparison": 1,
        "pr_report": 1,
    }
    assert ended["comparison"][0].asset_materialization.metadata["verdict"].value == "IMPROVED"  # type: ignore[union-attr]
    assert ended["pr_report"][0].asset_materialization.metadata["check_run_conclusion"].value == "success"  # type: ignore[union-attr]
    head = f"{REPO_ID}@{r.head_sha}"
    # `improved` is the first comparison of its head and records its comparison last, so the head's
    # records before that one are its own; later tests compare the same head again (another seed).
    closed = ended["comparison"][0].storage_id

    def own(asset: str) -> list[Any]:
        return [rec for rec in runless(asset) if head in str(rec.partition_key) and rec.storage_id < closed]

    for asset in ("task_samples", "sample_scores", "trajectories"):
        partitions = Counter(str(rec.partition_key) for rec in own(asset))
        assert partitions == Counter({f"{head}|{task}": 1 for task in r.tasks}), asset
    for rec in own("task_samples"):
        commit, task = str(rec.partition_key).split("|")
        if commit == head:
            assert rec.asset_materialization.metadata["samples"].value == r.tasks[task].head.samples  # type: ignore[union-attr]


def test_sql_and_view_work_on_what_a_comparison_produced(improved: Run, home: PipelineHome, capsys) -> None:
    from evalrunner_assets import cli
    from lake import open_lake
    from lake.viewer import view_command

    r = improved.result
    query = "select \"commit\", count(*) as n from samples where task = 'triage/runbook_lookup' group by all order by 1"
    assert cli.main(["sql", query, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    counts = {row["commit"]: row["n"] for row in rows}
    pairs = r.tasks["triage/runbook_lookup"].decision.pairs
    # Every run sample of the head and the base is queryable, at least the pairs decided on.
    assert counts[r.head_sha] >= pairs and counts[r.base_sha] >= pairs
    cmd = view_command(open_lake(str(home.lake_root)))
    assert "view" in cmd and str(home.lake_root / "raw") in cmd


# --- the card's nouns, materialized from the lake -------------------------------------------


def _materialized(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    return {
        e.asset_key.to_user_string(): e.step_materialization_data.materialization.metadata
        for e in result.get_asset_materialization_events()
    }  # type: ignore[union-attr]


def test_sample_scores_and_trajectories_materialize_for_a_landed_partition_without_run_config(
    improved: Run, home: PipelineHome, instance: dg.DagsterInstance
) -> None:
    from evalrunner_assets.assets.evals import ASSETS
    from lake import duck

    r = improved.result
    commit = f"{REPO_ID}@{r.head_sha}"
    partition = dg.MultiPartitionKey({"commit": commit, "task": RUNBOOK})
    # What the CLI's comparison recorded for the partition (runless, beside task_samples).
    for noun in ("sample_scores", "trajectories"):
        (rec, *_) = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(noun), asset_partitions=[str(partition)]), limit=1
        ).records
        assert rec.run_id == ""
    before = len(home.starts())
    result = dg.materialize(
        ASSETS,
        selection=["task_samples", "sample_scores", "trajectories"],
        partition_key=str(partition),
        instance=instance,
        resources=home.resources(),
    )
    assert result.success
    # No config: the comparison judging the commit says which windows; all landed, so reused.
    assert len(home.starts()) == before
    got = _materialized(result)
    assert got["task_samples"]["windows_run"].value == 0 and got["task_samples"]["windows_reused"].value >= 1
    con = duck.connect(home.lake())
    rows, inputs, mean = con.execute(
        'select count(*), count(distinct sample_id), avg(score) from samples where "commit" = ? and task = ?',
        [r.head_sha, RUNBOOK],
    ).fetchone()
    events, tools = con.execute(
        "select count(*), count(*) filter (where event = 'tool') from events where \"commit\" = ? and task = ?",
        [r.head_sha, RUNBOOK],
    ).fetchone()
    assert rows == r.tasks[RUNBOOK].head.samples > 0
    scores = got["sample_scores"]
    assert scores["rows"].value == rows and scores["inputs"].value == inputs
    assert scores["mean_score"].value == pytest.approx(mean)
    assert scores["preview"].value.count("\n| ") == min(8, rows)
    trajectories = got["trajectories"]
    assert trajectories["events"].value == events > 0
    assert trajectories["tool_calls"].value == tools > 0
    assert trajectories["trajectories"].value == rows


def test_baselines_show_the_base_batches_and_their_reuse(
    improved: Run, identical: Run, home: PipelineHome, instance: dg.DagsterInstance
) -> None:
    from evalrunner_assets.assets.evals import ASSETS

    for run, reused in ((improved, False), (identical, True)):
        r = run.result
        result = dg.materialize(
            ASSETS, selection=["baselines"], partition_key=r.comparison, instance=instance, resources=home.resources()
        )
        assert result.success
        got = _materialized(result)
        assert set(got) == {"baselines"}  # the comparison document is read, not decided again
        meta = got["baselines"]
        used = [b for doc in r.tasks.values() for b in doc.batches["base"]]
        assert meta["batches"].value == len(used) > 0
        assert meta["samples"].value == sum(doc.base.samples for doc in r.tasks.values())
        assert meta["base_commit"].value == f"{REPO_ID}@{r.base_sha}"
        # The first comparison on the base ran its batches; the second reuses them.
        assert (meta["batches_reused"].value > 0) is reused
        # The CLI's comparison recorded it too (runless), beside the comparison.
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("baselines"), asset_partitions=[r.comparison]), limit=50
        ).records
        assert any(rec.run_id == "" for rec in records)


# --- the trajectory miner on what a comparison landed ------------------------------------------


def test_mining_the_bases_runbook_failures_finds_the_agents_known_pattern(improved: Run, home: PipelineHome) -> None:
    """The simulated agent fails runbook_lookup partly by answering from memory (no search);
    the miner finds that among the base's failures, never among its passes, and notes it on
    each of those trajectories — writing nothing outside miner/ and annotations/."""
    from evalrunner_assets.mining import mine_task
    from lake import duck, open_lake

    lake = open_lake(str(home.lake_root))
    before = {p for p in home.lake_root.rglob("*") if p.is_file()}
    mined = mine_task(lake, REPO_ID, improved.result.base_sha, RUNBOOK)
    after = {p for p in home.lake_root.rglob("*") if p.is_file()}
    assert {p.relative_to(home.lake_root).parts[0] for p in after - before} <= {"miner", "annotations"}
    top = mined.contrast.findings[0]
    assert "never calls runbook_search" in (top.feature.name, *top.aliases)
    assert top.passing_with == 0 and top.failing_with >= 3
    doc = json.loads(Path(mined.findings_path).read_text())
    assert doc["findings"][0]["headline"] == top.headline and doc["mode"] == "task"
    con = duck.connect(lake, views=("samples_view", "annotations"))
    notes = con.sql(
        'select a.sample_id, a.note, s.score from annotations a join samples s using (repo, "commit", task, batch, sample_id, epoch)'
    ).fetchall()
    assert len(notes) >= top.failing_with
    assert {row[0] for row in notes if row[1] == top.headline} == set(top.samples)
    assert all(row[2] < 1 for row in notes)  # notes are on failing trajectories only


def test_miner_findings_of_a_regressed_pr_say_why_in_its_comment(
    regressed: Run, home: PipelineHome, instance: dg.DagsterInstance
) -> None:
    """Materializing ``miner_findings`` for the regressed PR head (no run config) mines its
    regressed eval on the inputs the head fails and the base passes and writes the comment again
    with a "Why it regressed" line for it."""
    from evalrunner_assets.assets.mining import MINING_ASSETS
    from evalrunner_assets.pipeline.keys import comparison_key

    r = regressed.result
    assert r.verdict == "REGRESSED" and r.tasks[ESCALATION].decision.label == "regressed"
    key = comparison_key(REPO_ID, r.pr, r.head_sha)
    result = dg.materialize(MINING_ASSETS, partition_key=key, instance=instance, resources=home.resources())
    assert result.success
    got = _materialized(result)["miner_findings"]
    assert got["tasks_mined"].value == 1
    mined = json.loads(
        (home.lake_root / LAYOUT.miner_findings(REPO_ID, r.head_sha, ESCALATION, r.base_sha)).read_text()
    )
    assert mined["mode"] == "comparison" and mined["failing"] >= 5 and mined["passing"] == mined["failing"]
    assert got["findings"].value == len(mined["findings"])
    comment = (home.lake_root / LAYOUT.comparison_artifact(REPO_ID, r.pr, r.head_sha, "comment.md")).read_text()
    assert "**Why it regressed**" in comment
    (line,) = [ln for ln in comment.splitlines() if ln.startswith(f"- `{ESCALATION}`: ") and "fail" in ln]
    # The variant dropped the skill's `service_owner` guidance: the head stops looking owners up.
    top = mined["findings"][0]
    assert "never calls service_owner" in (top["feature"], *top["aliases"])
    assert top["passing_with"] == 0
    assert f"seen in {top['failing_with']} / {top['failing']} failing samples" in line
    assert f"`{top['feature']}`" in line


def test_evalrunner_mine_prints_the_pattern_and_refuses_a_task_with_nothing_to_contrast(
    improved: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    from evalrunner_assets import cli

    base = improved.result.base_sha
    assert cli.main(["mine", "--repo-id", REPO_ID, "--commit", base, "--task", RUNBOOK, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "task" and doc["failing"] + doc["passing"] > 0
    assert any("never calls runbook_search" in (f["feature"], *f["aliases"]) for f in doc["findings"])
    assert cli.main(["mine", "--repo-id", REPO_ID, "--commit", base, "--task", "triage/not_a_task"]) == 2
    err = capsys.readouterr().err
    assert "nothing to contrast in triage/not_a_task" in err and "0 failing and 0 passing" in err
