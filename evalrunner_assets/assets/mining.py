"""``miner_findings``: why a comparison's evals regressed, as failure patterns with counts.

One partition is one PR head (the ``comparisons`` set, retired with the comparison, so it stays
as small as the open work). Materializing it mines every regressed task of the comparison: the
head's trajectories on the inputs it fails and the base passes, against the base's on the same
inputs (``mining.mine_document``); the findings go to ``miner/`` and the notes to
``annotations/`` in the lake. A REGRESSED comparison's PR comment is then written again with a
"Why it regressed" line per task. ``miner_sensor`` requests it after every REGRESSED comparison;
Materialize in the UI or ``evalrunner mine`` runs it on demand.
"""

import dagster as dg

from evalrunner_assets.assets.evals import COMPARISON
from evalrunner_assets.assets.manifest import GROUP, NOUN_TAG, OWNERS
from evalrunner_assets.assets.run_worker import record_run_worker
from evalrunner_assets.mining import TaskMining, mine_document
from evalrunner_assets.partitions import comparisons_partitions
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline.keys import parse_comparison_key
from evalrunner_assets.pipeline.publish import write_report
from resources import GitHubResource, LakeResource


def findings_metadata(mined: list[TaskMining]) -> dict[str, dg.MetadataValue]:
    """The top findings per task as a table, and the counts the UI shows inline."""
    rows = ["| task | finding | failing | passing | lift | q |", "|---|---|---:|---:|---:|---:|"]
    total = 0
    for item in mined:
        if item.mined is None:
            rows.append(f"| `{item.task}` | {item.skipped} | | | | |")
            continue
        findings = item.mined.contrast.findings
        total += len(findings)
        if not findings:
            rows.append(f"| `{item.task}` | no pattern stood out ({item.mined.contrast.tested} tested) | | | | |")
        for f in findings[:5]:
            lift = "∞" if f.lift == float("inf") else f"{f.lift:.1f}"
            rows.append(
                f"| `{item.task}` | `{f.feature.name}` | {f.failing_with} / {f.failing} | "
                f"{f.passing_with} / {f.passing} | {lift} | {f.q_value:.2g} |"
            )
    return {
        "tasks_mined": dg.MetadataValue.int(sum(1 for m in mined if m.mined is not None)),
        "findings": dg.MetadataValue.int(total),
        "top_finding": dg.MetadataValue.text(
            next((m.mined.contrast.findings[0].headline for m in mined if m.mined and m.mined.contrast.findings), "")
        ),
        "findings_table": dg.MetadataValue.md("\n".join(rows)),
    }


@dg.asset(
    partitions_def=comparisons_partitions,
    group_name=GROUP,
    kinds={"duckdb"},
    owners=OWNERS,
    tags={NOUN_TAG: "miner-findings"},
    deps=[COMPARISON],
)
def miner_findings(
    context: dg.AssetExecutionContext, lake: LakeResource, github: GitHubResource
) -> dg.MaterializeResult:
    """Failure patterns of the PR head's regressed evals, with evidence counts and sample ids."""
    record_run_worker(context)
    repo, pr, head = parse_comparison_key(context.partition_key)
    the_lake = lake.open()
    result = assess_mod.load_result(the_lake, repo, pr, head)
    if result is None:
        raise dg.Failure(f"no comparison for {context.partition_key} yet; materialize comparison first")
    mined = mine_document(the_lake, result)
    if not mined:
        context.log.info(f"{context.partition_key}: no regressed eval to mine ({result.verdict})")
    if result.verdict == "REGRESSED" and any(m.mined is not None for m in mined):
        write_report(the_lake, result, github)  # the comment again, now with why it regressed
    return dg.MaterializeResult(metadata=findings_metadata(mined))


MINING_ASSETS = [miner_findings]
