"""Candidate measurements and the continuum frontier with its promotion gate.

``candidate_measurements`` is partitioned by candidate (``owner/repo:name``), with its tasks as
data: a repository has a handful of candidates, so this stays far below Dagster's advised
partition counts whatever the number of tasks, and one candidate can be re-measured from the UI
on its own. ``continuum_frontier`` has one partition per repository (``owner/repo``) and reads
every measurement of it. The measuring, pairing, frontier and gate live in
``evalrunner_assets.pipeline.candidates`` (plain Python); settings and the reference come from
the lake, so a materialization from the UI needs no run config.
"""

import functools
from collections import defaultdict

import dagster as dg

from evalrunner_assets.assets.run_worker import record_run_worker
from evalrunner_assets.partitions import candidate_repos_partitions, candidates_partitions
from evalrunner_assets.pipeline import candidates as cands
from evalrunner_assets.report.frontier_markdown import render_frontier_table, render_promotion, render_steps_table
from evalrunner_assets.report.links import web_links
from lake import LAYOUT
from resources import LakeResource, RepoResource, SandboxResource

GROUP = "candidates"
SAME_INPUTS_CHECK = "same_inputs_as_reference"


@dg.asset(
    partitions_def=candidates_partitions,
    group_name=GROUP,
    kinds={"inspect", "duckdb"},
    owners=["team:evals"],
    tags={"evalrunner/noun": "candidate-measurements"},
    # One run for a range: the reference is measured (or found) once, the warm sandboxes and
    # Inspect's start-up are paid once, and every candidate pairs against the same reference.
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def candidate_measurements(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    sandbox: SandboxResource,
    repos: RepoResource,
) -> dg.MaterializeResult:
    """One partition is one candidate configuration (``owner/repo:name``). One record per task:
    the mean score with an anytime-valid interval, cost per sample, p50 latency and tokens on the
    reference's windows and inputs, and the paired comparison against the reference candidate."""
    record_run_worker(context)
    the_lake = lake.open()
    wanted: dict[str, list[str]] = defaultdict(list)
    for key in context.partition_keys:
        repo, name = cands.parse_candidate_key(key)
        wanted[repo].append(name)
    backend = sandbox.backend(context)
    backend.preflight()
    metadata: dict[str, dg.MetadataValue] = {}
    measured = reused = windows_run = 0
    for repo, names in sorted(wanted.items()):
        source = repos.source(the_lake, repo)
        source.update()

        def on_measurement(doc: dict, fresh: bool) -> None:
            context.log.info(f"{doc['repo']}:{cands.reading(doc)} ({'measured' if fresh else 'reused'})")

        run = cands.run_candidates(
            the_lake,
            backend,
            repo,
            resolve=functools.partial(cands.resolve_candidate, source),
            export_for=functools.partial(repos.export, the_lake, repo),
            names=names,
            pool=sandbox.warm_pool(),
            workers=sandbox.worker_count(),
            on_measurement=on_measurement,
        )
        measured += len(run.measured)
        reused += len(run.reused)
        windows_run += run.windows_run
        for name in names:
            doc = run.measurements.get(name)
            if doc is not None:
                metadata[f"{repo}:{name}"] = dg.MetadataValue.text(cands.reading(doc))
    metadata.update(
        {
            "measured": dg.MetadataValue.int(measured),
            "reused": dg.MetadataValue.int(reused),
            "windows_run": dg.MetadataValue.int(windows_run),
        }
    )
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    partitions_def=candidate_repos_partitions,
    deps=[dg.AssetDep(candidate_measurements, partition_mapping=dg.AllPartitionMapping())],
    group_name=GROUP,
    kinds={"duckdb", "altair"},
    owners=["team:evals"],
    tags={"evalrunner/noun": "continuum-frontier"},
    check_specs=[
        dg.AssetCheckSpec(
            SAME_INPUTS_CHECK,
            asset="continuum_frontier",
            description="Every candidate on the frontier ran the reference's windows on every task.",
        )
    ],
)
def continuum_frontier(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """One partition is one repository (``owner/repo``): every measured candidate at (cost per
    sample, suite score) with its place (frontier, uncertain, dominated), what each step up the
    frontier costs, and the promotion gate's decision with its reasons."""
    record_run_worker(context)
    the_lake = lake.open()
    repo = context.partition_key
    frontier = cands.build_frontier(the_lake, repo)
    from evalrunner_assets.report.frontier_chart import render_frontier_chart, render_frontier_panel
    from evalrunner_assets.report.panel import markdown_image

    chart = render_frontier_chart(frontier.rows, repo)
    for ext, data in chart.items():
        the_lake.write_bytes(LAYOUT.continuum_frontier(repo, ext), data)
    table = render_frontier_table(frontier.rows)
    steps = render_steps_table(frontier.steps)
    decision = render_promotion(frontier.promotion)
    the_lake.write_bytes(
        LAYOUT.continuum_frontier(repo, "md"),
        f"## Candidates\n\n{table}\n## Steps up the frontier\n\n{steps}\n## Promotion\n\n{decision}".encode(),
    )
    on_frontier = [r["candidate"] for r in frontier.rows if r["status"] == "frontier"]
    web = web_links()
    page = {"page": dg.MetadataValue.url(web.continuum(repo))} if web is not None else {}
    return dg.MaterializeResult(
        metadata={
            **page,
            # sized for the metadata panel; the full chart is at chart_path
            "chart": dg.MetadataValue.md(
                markdown_image(f"{repo} continuum frontier", render_frontier_panel(frontier.rows, repo))
            ),
            "candidates": dg.MetadataValue.md(table),
            "steps up the frontier": dg.MetadataValue.md(steps),
            "promotion": dg.MetadataValue.md(decision),
            "promoted": dg.MetadataValue.text(frontier.promotion.get("promoted") or "none"),
            "frontier": dg.MetadataValue.json(on_frontier),
            "candidates_measured": dg.MetadataValue.int(len(frontier.rows)),
            "chart_path": dg.MetadataValue.path(the_lake.url(LAYOUT.continuum_frontier(repo, "svg"))),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=SAME_INPUTS_CHECK,
                passed=not frontier.differing,
                metadata={"differing": dg.MetadataValue.json(frontier.differing)},
                description="; ".join(f"{n}: {', '.join(t)}" for n, t in frontier.differing.items())[:1000] or None,
            )
        ],
    )


CANDIDATE_ASSETS = [candidate_measurements, continuum_frontier]
