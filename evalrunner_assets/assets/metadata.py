"""What the evals group's materializations show: the metadata (and the ``task_samples`` asset
checks' evaluations) of each asset, computed from the domain's results.

The asset bodies (:mod:`evalrunner_assets.assets.evals`) and the runless recorder of
``evalrunner compare`` (:mod:`evalrunner_assets.assets.recording`) both report through these, so
a materialization reads the same whichever path made it.
"""

from collections import Counter
from collections.abc import Sequence
from typing import Any

import dagster as dg

from evalrunner_assets.pipeline import nouns
from evalrunner_assets.pipeline.facts import CommitFacts, facts_summary
from evalrunner_assets.pipeline.publish import SavedComparison, WrittenReport
from evalrunner_assets.pipeline.windows import WindowOutcome, batch_state
from evalrunner_assets.report import render_comment
from evalrunner_assets.report.chart import render_panel_chart
from evalrunner_assets.report.links import web_links
from evalrunner_assets.report.panel import markdown_image
from lake import LAYOUT, Lake
from lake.integrity import LakeIntegrityError, load_record, quarantine, verify_record
from lake.schema import BatchRecord

REPRODUCIBILITY_CHECK = "reproducibility_fields_present"

ERROR_LOG_CHECK = "no_error_logs"

INTEGRITY_CHECK = "lake_files_match_records"


def manifest_metadata(the_lake: Lake, repo: str, sha: str, facts: CommitFacts) -> dict[str, Any]:
    """What an ``eval_manifest`` materialization shows of one learnt commit."""
    summary = facts_summary(facts)
    return {
        "tasks": dg.MetadataValue.int(summary["tasks"]),
        "samples": dg.MetadataValue.int(summary["samples"]),
        "discovery": dg.MetadataValue.text(summary["discovery_source"]),
        "listing_failures": dg.MetadataValue.int(summary["listing_failures"]),
        # The repository environment its sandboxes mount (digest), or none.
        "environment": dg.MetadataValue.text(summary["environment"] or "none"),
        "manifest": dg.MetadataValue.path(the_lake.url(LAYOUT.manifest(repo, sha))),
        "task_ids": dg.MetadataValue.md("\n".join(f"- `{t}`" for t in sorted(facts.tasks))),
    }


def samples_metadata(the_lake: Lake, outcomes: Sequence[WindowOutcome]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What a ``task_samples`` materialization shows of its windows' ``outcomes``, and its asset
    checks' evaluations (keyword arguments of ``AssetCheckResult`` / ``AssetCheckEvaluation``).
    Verifies every file the windows' batch records vouch for (a batch that fails is quarantined)."""
    status = Counter(o.status for o in outcomes)
    failed = [o for o in outcomes if o.status == "failed"]
    missing = sorted({f for o in outcomes for f in o.key.missing_fields})
    records = _records(the_lake, outcomes)
    mismatches = _verify(the_lake, records)
    metadata = {
        "windows": dg.MetadataValue.int(len(outcomes)),
        "windows_run": dg.MetadataValue.int(status["landed"]),
        "windows_reused": dg.MetadataValue.int(status["reused"]),
        "windows_failed": dg.MetadataValue.int(len(failed)),
        "samples": dg.MetadataValue.int(sum(r.sample_rows for r in records)),
        "errors": dg.MetadataValue.int(sum(r.errored_samples for r in records)),
        "batches": dg.MetadataValue.json([o.key.digest for o in outcomes]),
    }
    checks = [
        {
            "check_name": REPRODUCIBILITY_CHECK,
            "passed": not missing,
            "metadata": {"missing_fields": dg.MetadataValue.json(missing)},
            "description": "unpublishable: missing " + ", ".join(missing) if missing else None,
        },
        {
            "check_name": ERROR_LOG_CHECK,
            "passed": not failed,
            "severity": dg.AssetCheckSeverity.ERROR,
            "metadata": {"failures": dg.MetadataValue.json({o.key.window.name: o.failure for o in failed})},
        },
        {
            "check_name": INTEGRITY_CHECK,
            "passed": not mismatches,
            "severity": dg.AssetCheckSeverity.ERROR,
            "metadata": {
                "files_checked": dg.MetadataValue.int(sum(len(r.files()) for r in records)),
                "quarantined": dg.MetadataValue.json(mismatches),
            },
            "description": "; ".join(mismatches)[:1000] if mismatches else None,
        },
    ]
    return metadata, checks


def _verify(the_lake: Lake, records: list[BatchRecord]) -> list[str]:
    """Full sha256 check of every file of ``records``; a batch that fails is quarantined."""
    problems = []
    for record in records:
        try:
            verify_record(the_lake, record, always=True)
        except LakeIntegrityError as exc:
            problems.append(str(exc))
            if exc.record is not None:
                quarantine(the_lake, exc.record, str(exc))
    return problems


def _records(the_lake: Lake, outcomes: Sequence[WindowOutcome]) -> list[BatchRecord]:
    out = []
    for o in outcomes:
        k = o.key
        rel = LAYOUT.batch_record(k.repo, k.commit, k.task, k.window, k.digest)
        if batch_state(the_lake, k) == "committed":
            out.append(load_record(the_lake, rel))
    return out


def sample_scores_metadata(scores: nouns.SampleScores) -> dict[str, Any]:
    """What a ``sample_scores`` materialization shows of one (commit, task)."""
    metadata: dict[str, Any] = {
        "rows": dg.MetadataValue.int(scores.rows),
        "inputs": dg.MetadataValue.int(scores.inputs),
        "errored_rows": dg.MetadataValue.int(scores.errored_rows),
        "windows": dg.MetadataValue.int(len(scores.windows)),
        "mean_score": dg.MetadataValue.float(scores.mean_score) if scores.mean_score is not None else None,
        "by_scorer": dg.MetadataValue.md(
            _table(
                scores.by_scorer,
                ["scorer", "rows", "inputs", "epochs", "mean_score", "errored_rows", "total_tokens", "cost_usd"],
            )
        ),
        "preview": dg.MetadataValue.md(
            _table(
                scores.preview,
                ["window", "sample_id", "epoch", "score", "scorer", "error", "total_tokens", "total_time_s"],
            )
        ),
        "samples_files": dg.MetadataValue.path(scores.tables_url),
        "sql": dg.MetadataValue.md(
            '```\nevalrunner sql "select sample_id, epoch, score, error from samples '
            f"where \\\"commit\\\" = '{scores.commit}' and task = '{scores.task}'\"\n```"
        ),
    }
    return {k: v for k, v in metadata.items() if v is not None}


def trajectories_metadata(found: nouns.Trajectories) -> dict[str, Any]:
    """What a ``trajectories`` materialization shows of one (commit, task)."""
    return {
        "trajectories": dg.MetadataValue.int(found.trajectories),
        "events": dg.MetadataValue.int(found.events),
        "tool_calls": dg.MetadataValue.int(found.tool_calls),
        "by_event": dg.MetadataValue.md(
            _table(found.by_event, ["event", "events", "trajectories", "tool_calls_requested", "errored"])
        ),
        "tools": dg.MetadataValue.md(_table(found.tools, ["tool_function", "calls", "failed_calls"])),
        "inspect_logs": dg.MetadataValue.path(found.logs_url),
        "open_with": dg.MetadataValue.md(
            f"```\nevalrunner view\n```\n{len(found.logs)} log(s) under `{found.logs_url}`"
        ),
    }


def baselines_metadata(found: nouns.Baselines) -> dict[str, Any]:
    """What a ``baselines`` materialization shows of one comparison's base side."""
    rows = [
        {"task": t.task, "batches": t.batches, "samples": t.samples, "reused": t.reused, "landed for this PR": t.landed}
        for t in found.tasks
    ]
    return {
        "base_commit": dg.MetadataValue.text(f"{found.repo}@{found.base_sha}"),
        "base_ref": dg.MetadataValue.text(found.base_ref or "-"),
        "batches": dg.MetadataValue.int(found.batches),
        "batches_reused": dg.MetadataValue.int(found.reused),
        "samples": dg.MetadataValue.int(found.samples),
        "tasks": dg.MetadataValue.md(_table(rows, ["task", "batches", "samples", "reused", "landed for this PR"])),
    }


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A small Markdown table of ``rows`` (floats to 4 places, long text cut)."""
    if not rows:
        return "_none yet_"

    def cell(v: Any) -> str:
        if v is None:
            return ""
        text = f"{v:.4g}" if isinstance(v, float) else str(v)
        text = " ".join(text.split()).replace("|", "\\|")
        return text if len(text) <= 60 else text[:59] + "…"

    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns)
    return head + "".join("\n| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows)


def comparison_metadata(saved: SavedComparison) -> dict[str, Any]:
    """What a ``comparison`` materialization shows of one saved comparison document."""
    result = saved.result
    links = web_links()
    metadata: dict[str, Any] = {
        "verdict": dg.MetadataValue.text(result.verdict),
        "p_improvement": result.final_verdict.p_improvement,
        "pairs": dg.MetadataValue.int(sum(t.decision.pairs for t in result.tasks.values())),
        "labels": dg.MetadataValue.json({t: d.decision.label for t, d in result.tasks.items()}),
        "samples_run": dg.MetadataValue.int(result.samples_run),
        "spend_usd": result.spend_usd,
        "comparison_json": dg.MetadataValue.path(saved.url),
        "summary": dg.MetadataValue.md(render_comment(result, links=links)),
    }
    if result.tasks:
        # sized for the metadata panel; the full chart is in the lake once the comparison ended
        metadata["chart"] = dg.MetadataValue.md(
            markdown_image("how many samples until we know", render_panel_chart(result))
        )
    if saved.chart_url is not None:
        metadata["chart_path"] = dg.MetadataValue.path(saved.chart_url)
    if links is not None:
        metadata["page"] = dg.MetadataValue.url(links.pull_request(result.repo, result.pr, result.head_sha))
    return metadata


def report_metadata(report: WrittenReport) -> dict[str, Any]:
    """What a ``pr_report`` materialization shows of one written report."""
    check = report.check
    conclusion = check.get("conclusion") or check.get("status")
    metadata: dict[str, Any] = {
        # Shown inline in the UI (a JSON blob showed the summary as one line of "\n" escapes).
        "check_run_conclusion": dg.MetadataValue.text(str(conclusion)),
        "check_run_title": dg.MetadataValue.text(str(check.get("title", ""))),
        "check_run": dg.MetadataValue.md(
            f"**{check.get('name', '')}** · `{conclusion}` · {check.get('title', '')}\n\n"
            f"```\n{check.get('summary', '')}\n```"
        ),
        "comment_file": dg.MetadataValue.path(report.comment_url),
        "comment": dg.MetadataValue.md(report.body),
    }
    for name in ("github_comment_id", "github_check_run_id"):
        if name in report.posted:
            metadata[name] = dg.MetadataValue.int(report.posted[name])
    if report.github_error is not None:
        # A permanent GitHub error is reported on the materialization, never hidden.
        metadata["github_error"] = dg.MetadataValue.text(report.github_error)
    return metadata
