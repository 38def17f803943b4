"""``evalrunner mine``: the failure patterns of a task's trajectories, with evidence counts."""

from __future__ import annotations

import argparse
import json

from evalrunner_assets.cli.common import existing_lake
from evalrunner_assets.cli.options import Add, add_repo_id, error_rate


def _commit(text: str) -> str:
    if len(text) != 40 or any(c not in "0123456789abcdef" for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a full 40-hex commit SHA (the lake keys commits by it)")
    return text


def cmd_mine(args: argparse.Namespace) -> int:
    from evalrunner_assets.mining import mine_comparison, mine_task

    the_lake = existing_lake()
    if args.base:
        mined = mine_comparison(the_lake, args.repo_id, args.commit, args.base, args.task, fdr=args.fdr)
    else:
        mined = mine_task(the_lake, args.repo_id, args.commit, args.task, fdr=args.fdr)
    c = mined.contrast
    if args.format == "json":
        print(json.dumps({**mined.to_json(), "findings_path": mined.findings_path}, indent=2))
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
    return 0


def add_parsers(add: Add) -> None:
    p = add(
        "mine",
        help="failure patterns of a task's trajectories (failing vs passing), with evidence counts",
        description="Contrast a task's failing trajectories at a commit with its passing ones (or, with "
        "--base, the commit's trajectories on the inputs it fails and the base passes with the base's): every "
        "tool-call, order, error and length feature gets a one-sided Fisher exact test, adjusted by "
        "Benjamini-Hochberg; the significant ones are printed best first with how many failing samples show "
        "them. Findings go to the lake's miner/, a note per sample to annotations/.",
    )
    add_repo_id(p, required=True)
    p.add_argument("--commit", required=True, type=_commit, help="the commit whose trajectories are mined (40-hex)")
    p.add_argument("--task", required=True, help="the task id, e.g. triage/runbook_lookup")
    p.add_argument("--base", type=_commit, default=None, help="mine the inputs --commit fails and this commit passes")
    p.add_argument("--fdr", type=error_rate, default=0.05, help="false discovery rate (default 0.05)")
    p.add_argument("--top", type=int, default=10, help="findings to print (default 10)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_mine)
