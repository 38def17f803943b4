"""Reports: the PR comment, the check-run mapping and the comparison chart."""

from evalrunner_assets.report.chart import comparison_chart, render_chart
from evalrunner_assets.report.checks import check_run_state, stopped_title
from evalrunner_assets.report.markdown import MARKER, ci_bar, headline, render_comment, render_summary

__all__ = [
    "MARKER",
    "check_run_state",
    "stopped_title",
    "ci_bar",
    "comparison_chart",
    "headline",
    "render_chart",
    "render_comment",
    "render_summary",
]
