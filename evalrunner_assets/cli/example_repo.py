"""``evalrunner example-repo``: build the example agent repository (its PR variants, the
candidates' repository or main's history for the cohort series)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evalrunner_assets.cli.options import Add
from evalrunner_assets.errors import UserError


def cmd_example_repo(args: argparse.Namespace) -> int:
    from evalrunner_assets.example_repo import (
        VARIANTS,
        ExampleRepoError,
        build_example_candidates,
        build_example_history,
        build_example_repo,
    )

    if args.candidates and args.variant:
        raise UserError("--candidates builds its own branch; drop --variant")
    if args.history:
        if args.candidates or args.variant:
            raise UserError("--history builds main's history alone; drop --candidates and --variant")
        try:
            commits = build_example_history(Path(args.dest))
        except ExampleRepoError as exc:
            raise UserError(str(exc), hint="give example-repo a new or empty directory") from exc
        for c in commits:
            print(f"{c.sha[:12]}  {c.kind:<12}  {c.message}")
        print(f"{args.dest}: main has {len(commits)} commits (oldest first above)")
        return 0
    ex = (
        build_example_candidates(Path(args.dest))
        if args.candidates
        else build_example_repo(Path(args.dest), args.variant or VARIANTS)
    )
    print(
        json.dumps(
            {"path": str(ex.path), "base": ex.base_sha, **{name: v.sha for name, v in ex.variants.items()}}, indent=2
        )
    )
    return 0


def add_parsers(add: Add) -> None:
    p = add("example-repo", help="build the example agent repo with its PR variants")
    p.add_argument("dest")
    p.add_argument("--variant", action="append", default=None)
    p.add_argument(
        "--candidates",
        action="store_true",
        help="the repo for `candidates measure`: main with .evals/candidates.yaml, and improve-runbook",
    )
    p.add_argument(
        "--history",
        action="store_true",
        help="the repo for the cohort series: main's 12-commit history with a planted regression and an "
        "eval added to a cohort",
    )
    p.set_defaults(func=cmd_example_repo)
