"""``evalrunner swe``: SWE-style task sets (build the example repository, register a task set,
run an agent version on it here, print its leaderboard)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evalrunner_assets import home
from evalrunner_assets.cli.options import Add, Parser, add_seed, count
from evalrunner_assets.errors import UserError


def cmd_swe(args: argparse.Namespace) -> int:
    import json

    from evalrunner_assets.execution import make_backend
    from evalrunner_assets.swe import RunSpec, SweError
    from evalrunner_assets.swe.leaderboard import leaderboard
    from evalrunner_assets.swe.runner import local_context

    try:
        if args.swe_command == "example-repo":
            from evalrunner_assets.swe.example import EXAMPLE_TASK_SET, build_tinystats_repo

            sha = build_tinystats_repo(Path(args.dest))
            print(f"{args.dest}: tinystats at {sha}; its task set: {EXAMPLE_TASK_SET}")
            return 0
        from evalrunner_assets.driver.swe import local_launcher

        launcher = local_launcher()
        if args.swe_command == "register":
            ctx = local_context(launcher.store, make_backend(args.backend), home.home())
            try:
                result = launcher.register(ctx, Path(args.spec), args.repo, args.gold_runs)
            finally:
                ctx.close()
            gold = result["gold"] or {}
            print(
                f"task set {result['task_set']}: {result['tasks']} tasks ({'new' if result['created'] else 'unchanged'})"
            )
            for tid, verdict in sorted(gold.get("tasks", {}).items()):
                print(f"  {tid:<24} {verdict['status']:<14} {verdict['reason']}")
            return 0
        if args.swe_command == "run":
            spec = RunSpec(
                agent_version=args.agent_version,
                task_set=args.task_set,
                samples=args.samples,
                budget_usd=args.budget_usd,
                seed=args.seed,
                prompt_version=args.prompt_version,
            )
            record, launched = launcher.run_here(spec)
            print(json.dumps({**launcher.status(record["id"]), "launched_now": launched}, indent=2, default=str))
            return 0
        board = leaderboard(launcher.store, args.task_set, args.reference)
        print(json.dumps(board, indent=2))
        return 0
    except SweError as exc:
        raise UserError(str(exc)) from exc
    except ValueError as exc:  # pydantic's validation errors name the field
        raise UserError(f"invalid run: {exc}") from exc


def add_parsers(add: Add) -> None:
    p = add("swe", help="SWE-style task sets: register, run an agent version, read the leaderboard")
    swe = p.add_subparsers(dest="swe_command", required=True, parser_class=Parser)
    s = swe.add_parser("example-repo", help="build the bundled tinystats repository (git) at DEST")
    s.add_argument("dest")
    s = swe.add_parser("register", help="register a task set and run its gold check")
    s.add_argument("--spec", required=True, help="task-set file (e.g. examples/swe-tinystats/taskset.json)")
    s.add_argument("--repo", required=True, help="where the repository is fetched from (path or URL)")
    s.add_argument("--gold-runs", type=count(3, " (a gold check needs 3 runs or more)"), default=3)
    # The SWE runner runs locally: the two local backends only.
    s.add_argument("--backend", default="bubblewrap", choices=("bubblewrap", "unsafe-local"))
    s = swe.add_parser("run", help="run an agent version on a task set in this process (waits; idempotent)")
    s.add_argument("--agent-version", required=True)
    s.add_argument("--task-set", required=True)
    s.add_argument("--samples", type=count(1), default=1)
    s.add_argument("--budget-usd", type=float, required=True)
    add_seed(s)
    s.add_argument("--prompt-version", default="v1")
    s = swe.add_parser("leaderboard", help="print a task set's leaderboard as JSON")
    s.add_argument("--task-set", required=True)
    s.add_argument("--reference", default=None)
    p.set_defaults(func=cmd_swe)
