"""Decide and report: save a comparison's document (and its chart), then write its PR report.

Plain functions the ``comparison`` / ``pr_report`` assets and the comparison engine both call,
so the document, the chart files, the comment and the check run are the same whichever path
produced them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.report import check_run_state, render_chart, render_comment, render_summary
from evalrunner_assets.report.checks import broken_detail, broken_on_both_detail, stopped_title
from evalrunner_assets.report.links import web_links
from lake import LAYOUT

CHECK_RUN_NAME = "evalrunner / evals"


@dataclass(frozen=True)
class SavedComparison:
    """A comparison document as saved to the lake, with its chart when it has one."""

    result: ComparisonDocument
    url: str  # where the document lives in the lake
    chart_png: bytes | None
    chart_url: str | None = None  # the full chart (SVG) in the lake


def save_comparison(the_lake: Any, result: ComparisonDocument) -> SavedComparison:
    """Save a comparison document (an assessment's ``result``, with detail) and, once it has
    tasks and is no longer running, its chart files (a progress save is not worth a render)."""
    url = assess_mod.save_result(the_lake, result)
    if not result.tasks or result.status == "running":
        return SavedComparison(result, url, None)
    chart = render_chart(result)
    for ext, data in chart.items():
        the_lake.write_bytes(LAYOUT.comparison_artifact(result.repo, result.pr, result.head_sha, f"chart.{ext}"), data)
    svg = the_lake.url(LAYOUT.comparison_artifact(result.repo, result.pr, result.head_sha, "chart.svg"))
    return SavedComparison(result, url, chart["png"], svg)


@runtime_checkable
class ReportPoster(Protocol):
    """Where a report goes besides the lake (GitHub): ``post_report`` returns the ids it
    created (``github_comment_id``, ``github_check_run_id``) or ``github_error``; an empty
    dict when there is nowhere to post."""

    def post_report(
        self, repo: str, pr: str, head: str, check: dict[str, Any], body: str
    ) -> dict[str, Any]: ...  # pragma: no cover - protocol


@dataclass(frozen=True)
class WrittenReport:
    """The PR report of one comparison: its comment, its check run and where they went."""

    body: str
    check: dict[str, Any]
    comment_url: str
    posted: dict[str, Any] = field(default_factory=dict)  # what post_report returned

    @property
    def github_error(self) -> str | None:
        return self.posted.get("github_error")


def why_regressed(the_lake: Any, result: ComparisonDocument) -> list[tuple[str, str, str]]:
    """(task, evidence, pattern) of the top finding the trajectory miner wrote for each regressed
    task of ``result`` (``miner/…`` in the lake; none until it has run)."""
    found = []
    for task, doc in result.ordered_tasks():
        if doc.decision.label != "regressed":
            continue
        rel = LAYOUT.miner_findings(result.repo, result.head_sha, task, result.base_sha)
        if not the_lake.exists(rel):
            continue  # not mined (yet)
        try:
            mined = json.loads(the_lake.read_bytes(rel))
        except ValueError:
            continue  # a document this version cannot read: no line rather than a failed report
        findings = mined.get("findings") or []
        if findings:
            top = findings[0]
            evidence = (
                f"seen in {top['failing_with']} / {top['failing']} failing samples "
                f"({top['passing_with']} / {top['passing']} of the base's passing ones)"
            )
            found.append((task, evidence, str(top["feature"])))
        else:
            found.append((task, f"no pattern stood out ({mined.get('features_tested', 0)} features tested)", ""))
    return found


def write_report(the_lake: Any, result: ComparisonDocument, poster: ReportPoster | None = None) -> WrittenReport:
    """Render the PR comment and the check run of ``result``, write both to the lake, and post
    them when ``poster`` is given (a permanent GitHub error is returned, never raised: the
    report files in the lake are complete either way)."""
    repo, pr, head = result.repo, result.pr, result.head_sha
    links = web_links()
    body = render_comment(result, why_regressed=why_regressed(the_lake, result), links=links)
    status, conclusion, title = check_run_state(
        result.verdict,
        result.samples_run,
        result.samples_possible,
        detail=broken_detail(result) or broken_on_both_detail(result),
        action_required=bool(result.final_verdict.broken_on_both),
    )
    if result.status == "stopped" and result.stopped_reason:
        title = stopped_title(result.stopped_reason)  # no verdict: say why instead
    check = {
        "name": CHECK_RUN_NAME,
        "head_sha": head,
        "status": status,
        "conclusion": conclusion,
        "title": title,
        "summary": render_summary(result),
    }
    if links is not None:
        check["details_url"] = links.pull_request(repo, pr, head)  # GitHub's "Details" link
    comment_url = the_lake.write_bytes(LAYOUT.comparison_artifact(repo, pr, head, "comment.md"), body.encode())
    the_lake.write_bytes(
        LAYOUT.comparison_artifact(repo, pr, head, "check_run.json"), json.dumps(check, indent=2).encode()
    )
    posted = poster.post_report(repo, pr, head, check, body) if poster is not None else {}
    return WrittenReport(body, check, comment_url, posted)
