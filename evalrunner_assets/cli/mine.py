"""``evalrunner mine``: the failure patterns of a task's trajectories, with evidence counts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from evalrunner_assets.cli.common import existing_lake
from evalrunner_assets.cli.options import Add, add_repo_id, error_rate
from evalrunner_assets.errors import UserError

if TYPE_CHECKING:
    from evalrunner_assets.mining import Mined
    from lake.storage import Lake


def _commit(text: str) -> str:
    if len(text) != 40 or any(c not in "0123456789abcdef" for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a full 40-hex commit SHA (the lake keys commits by it)")
    return text


def cmd_mine(args: argparse.Namespace) -> int:
    from evalrunner_assets.mining import mine_comparison, mine_task

    if args.fix and args.format == "json":
        raise UserError("--fix shows the edit as a diff: use it with --format text")
    the_lake = existing_lake()
    if args.base:
        mined = mine_comparison(the_lake, args.repo_id, args.commit, args.base, args.task, fdr=args.fdr)
    else:
        mined = mine_task(the_lake, args.repo_id, args.commit, args.task, fdr=args.fdr)
    c = mined.contrast
    if args.format == "json":
        doc = {**mined.to_json(), "findings_path": mined.findings_path, "annotated_logs": mined.annotated_logs}
        print(json.dumps(doc, indent=2))
        return 0
    against = f" against {args.base[:12]}" if args.base else ""
    print(
        f"{args.task} at {args.commit[:12]}{against}: {c.failing} failing, {c.passing} passing trajectories; "
        f"{c.tested} features tested, {len(c.findings)} significant at FDR {c.fdr:g}"
    )
    for f in c.findings[: args.top]:
        lift = "inf" if f.lift == float("inf") else f"{f.lift:.1f}"
        also = f" (same samples: {', '.join(f.aliases)})" if f.aliases else ""
        print(f"  {f.headline}  lift {lift}  q {f.q_value:.2g}{also}")
        shown = ", ".join(f.samples[:8]) + (" …" if len(f.samples) > 8 else "")
        print(f"    samples: {shown}")
    if not c.findings:
        print("  no pattern stood out")
    print(f"findings: {mined.findings_path}\nnotes:    {mined.annotations_path} (SQL: the annotations view)")
    if mined.annotated_logs:
        print(
            f"          {len(mined.annotated_logs)} annotated log copies for Inspect's viewer "
            f"(evalrunner view --annotated)"
        )
    if args.fix:
        return _fix(args, the_lake, mined)
    return 0


def _task_paths(the_lake: Lake, repo_id: str, commit: str, task: str) -> list[str]:
    """The task's manifest paths at ``commit`` (the skills its evals depend on), from the lake."""
    from lake.layout import LAYOUT

    rel = LAYOUT.manifest(repo_id, commit)
    if not the_lake.exists(rel):
        return []
    manifest = json.loads(the_lake.read_bytes(rel))
    for entry in manifest.get("tasks", []):
        if entry.get("id") == task:
            return [str(p) for p in entry.get("paths") or []]
    return []


def _fix(args: argparse.Namespace, the_lake: Lake, mined: Mined) -> int:
    from evalrunner_assets.mining.fixer import TemplateFixer, open_fix_pr
    from evalrunner_assets.mining.lake_findings import system_prompts

    checkout = Path(args.repo)
    if not (checkout / ".git").exists():
        raise UserError(f"--repo {args.repo}: not a git checkout (the fix edits the agent repository's skills)")
    failing = [s for f in mined.contrast.findings for s in f.samples]
    prompts = system_prompts(the_lake, args.repo_id, mined.commit, mined.task, failing)
    fixer = TemplateFixer(prompts=prompts, skill=args.skill)
    fix = fixer.propose(mined, checkout, _task_paths(the_lake, args.repo_id, mined.commit, mined.task))
    print(f"\nproposed fix for {fix.finding.feature.name!r} in {fix.path}:\n{fix.diff()}", end="")
    if args.fix == "write":
        (checkout / fix.path).write_text(fix.after, encoding="utf-8")
        print(f"wrote {checkout / fix.path}")
        return 0
    from resources.github import GitHubClient

    opened = open_fix_pr(GitHubClient.from_env(), args.repo_id, fix, mined, base=args.pr_base)
    state = "opened" if opened.created else "already open"
    print(f"pull request {state}: {opened.url} (branch {opened.branch})")
    return 0


def add_parsers(add: Add) -> None:
    p = add(
        "mine",
        help="failure patterns of a task's trajectories (failing vs passing), with evidence counts",
        description="Contrast a task's failing trajectories at a commit with its passing ones (or, with "
        "--base, the commit's trajectories on the inputs it fails and the base passes with the base's): every "
        "tool-call, order, error and length feature gets a one-sided Fisher exact test, adjusted by "
        "Benjamini-Hochberg; the significant ones are printed best first with how many failing samples show "
        "them. Findings go to the lake's miner/, a note per sample to annotations/ (and into annotated copies "
        "of the raw logs that `evalrunner view --annotated` shows).",
    )
    add_repo_id(p, required=True)
    p.add_argument("--commit", required=True, type=_commit, help="the commit whose trajectories are mined (40-hex)")
    p.add_argument("--task", required=True, help="the task id, e.g. triage/runbook_lookup")
    p.add_argument("--base", type=_commit, default=None, help="mine the inputs --commit fails and this commit passes")
    p.add_argument("--fdr", type=error_rate, default=0.05, help="false discovery rate (default 0.05)")
    p.add_argument("--top", type=int, default=10, help="findings to print (default 10)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    fix = p.add_argument_group(
        "skill fix", "turn the first fixable finding into a rule in the skill that names its tool"
    )
    fix.add_argument(
        "--fix",
        choices=("write", "pr"),
        default=None,
        help="write: edit the checkout's skill file; pr: open a branch and PR on --repo-id (labelled "
        "'authored by trajectory-miner', the evidence in its description) for the evals to judge",
    )
    fix.add_argument("--repo", default=".", help="the agent repository's checkout (default: .)")
    fix.add_argument("--skill", default=None, help="the skill file to edit (default: the one that names the tool)")
    fix.add_argument("--pr-base", default=None, help="the PR's base branch (default: the repository's default)")
    p.set_defaults(func=cmd_mine)
