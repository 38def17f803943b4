"""`evalrunner` command line: demo, compare, sql, lake verify, view, serve, example-repo."""

from __future__ import annotations

import argparse
import builtins
import json
import os
import re
import subprocess
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalrunner_assets import home


def _repo_id(source: str, explicit: str | None) -> str:
    if explicit:
        return explicit
    m = re.search(r"[:/]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$", source)
    if "://" in source or source.startswith("git@"):
        if not m:
            raise SystemExit(f"evalrunner: cannot tell owner/name from {source!r}; pass --repo-id owner/name")
        return f"{m.group(1)}/{m.group(2)}"
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", Path(source).resolve().name) or "repo"
    return f"local/{name}"


def _progress_printer() -> Any:
    started = time.monotonic()
    # Progress goes to a duplicate of stdout: while a Dagster run executes, its compute-log
    # capture redirects file descriptor 1 itself, and lines printed from other threads would
    # land in that run's log instead of the terminal.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)

    def print(*args: Any, **kwargs: Any) -> None:  # noqa: A001 - the printer's own target
        kwargs.pop("flush", None)
        builtins.print(*args, file=out, **kwargs)

    def on_step(step: Any, result: dict[str, Any] | None) -> None:
        elapsed = time.monotonic() - started
        if step.kind == "manifest":
            print(f"[{elapsed:6.1f}s] learnt evals of {step.commit}", flush=True)
        elif step.kind == "samples":
            print(f"[{elapsed:6.1f}s] ran {step.task} @ {step.commit.split('@')[1][:7]} windows {', '.join(step.windows)}",
                  flush=True)
        elif result is not None:
            spend = result.get("spend_usd")
            money = f"${spend:,.2f}" if result.get("spend_known") and spend is not None else "unknown"
            labels = ", ".join(f"{t.split('/')[-1]}={d['decision']['label']}" for t, d in result["tasks"].items())
            print(f"[{elapsed:6.1f}s] {result['verdict']}: samples {result['samples_run']} of "
                  f"{result['samples_possible']} planned at most · spend {money} · {labels}", flush=True)

    return on_step


def _print_outcome(result: dict[str, Any]) -> None:
    from evalrunner_assets.report import render_summary
    from lake import LAYOUT, open_lake

    the_lake = open_lake(home.lake_root())
    repo, pr, head = result["repo"], result["pr"], result["head_sha"]
    print()
    print(render_summary(result))
    print()
    print(f"comparison JSON : {the_lake.url(LAYOUT.comparison(repo, pr, head))}")
    print(f"PR comment      : {the_lake.url(LAYOUT.comparison_artifact(repo, pr, head, 'comment.md'))}")
    print(f"chart           : {the_lake.url(LAYOUT.comparison_artifact(repo, pr, head, 'chart.png'))}")
    print(f"Inspect logs    : {the_lake.url(LAYOUT.raw_prefix(repo))}  (evalrunner view)")
    print(f"Dagster instance: {home.dagster_home()}  (evalrunner serve)")
    print('SQL             : evalrunner sql "select task, commit, avg(score) from samples group by all"')


def cmd_compare(args: argparse.Namespace) -> int:
    from evalrunner_assets.driver import run_comparison
    from evalrunner_assets.execution.repo import RepoSource
    from evalrunner_assets.pipeline.spec import ComparisonRequest
    from resources import SandboxResource

    repo_id = _repo_id(args.repo, args.repo_id)
    source = RepoSource(repo_id, args.repo, cache_dir=str(home.repo_cache()))
    source.ensure_mirror()
    base, head = source.resolve_ref(args.base), source.resolve_ref(args.head)
    changed = tuple(source.changed_files(base, head))
    request = ComparisonRequest(
        repo=repo_id, source=args.repo, pr=args.pr, base_sha=base, head_sha=head,
        base_ref=args.base, head_ref=args.head, model=args.model, seed=args.seed, epochs=args.epochs,
        affinity=args.affinity, changed_files=changed, cap=args.cap, budget_samples=args.budget,
        requested_at=datetime.now(timezone.utc).isoformat(),
    )
    print(f"comparing {repo_id} {args.head} ({head[:7]}) against {args.base} ({base[:7]}) "
          f"with {args.model} in a {args.backend} sandbox; {len(changed)} changed file(s)", flush=True)
    resources = None
    if args.backend != "bubblewrap" or args.workers:
        from evalrunner_assets.driver import default_resources

        resources = default_resources(sandbox=SandboxResource(backend_name=args.backend,
                                                              max_workers=args.workers or 0))
    from evalrunner_assets.driver import ComparisonStopped

    try:
        result = run_comparison(request, resources=resources, on_step=_progress_printer())
    except ComparisonStopped as exc:
        print(f"evalrunner compare: stopped: {exc}", file=sys.stderr, flush=True)
        return 3
    except KeyboardInterrupt:
        print("evalrunner compare: cancelled; every sandbox was stopped, completed windows stay landed "
              "and the same command resumes", file=sys.stderr, flush=True)
        return 130
    _print_outcome(result)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from evalrunner_assets.example_repo import build_example_repo

    path = home.home() / "example-repo"
    if not (path / ".git").is_dir():
        print(f"building the example agent repo at {path}", flush=True)
        build_example_repo(path)
    args.repo, args.repo_id, args.base, args.head = str(path), "example/support-agent", "main", args.variant
    args.pr = "demo"
    return cmd_compare(args)


def cmd_sql(args: argparse.Namespace) -> int:
    from lake import open_lake
    from lake.query import QueryError, run_sql

    text = args.query if args.query != "-" else sys.stdin.read()

    def skipped(exc: Exception) -> None:
        print(f"evalrunner sql: left out: {exc}", file=sys.stderr, flush=True)

    try:
        out = run_sql(open_lake(home.lake_root()), text, args.format, args.out, on_problem=skipped)
    except QueryError as exc:
        print(f"evalrunner sql: {exc}", file=sys.stderr)
        return 2
    if out:
        print(out)
    return 0


def cmd_lake_verify(args: argparse.Namespace) -> int:
    from lake import open_lake
    from lake.integrity import verify_lake

    the_lake = open_lake(home.lake_root())
    report = verify_lake(the_lake, repair=args.repair)
    for record, problem in report.problems:
        done = "quarantined" if record in report.quarantined else "run with --repair to quarantine it"
        print(f"{problem} [{done}]")
    for record in report.unverifiable:
        print(f"{record}: version-1 record without Parquet digests (checked by row count only)")
    print(f"{report.records} batch records: {report.ok} ok, {len(report.problems)} failed verification, "
          f"{len(report.quarantined)} quarantined ({the_lake.url(the_lake.layout.batches_root())})")
    return 0 if report.clean else 1


def cmd_view(args: argparse.Namespace) -> int:
    from lake import open_lake
    from lake.viewer import view_command

    cmd = view_command(open_lake(home.lake_root()), host=args.host, port=args.port)
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd)


def cmd_serve(args: argparse.Namespace) -> int:
    import signal

    from lake import open_lake
    from sensors.webhook import serve

    dagster = None
    if not args.webhook_only:
        env = dict(os.environ, DAGSTER_HOME=str(home.dagster_home()))
        home.dagster_home().mkdir(parents=True, exist_ok=True)
        (home.dagster_home() / "dagster.yaml").touch(exist_ok=True)
        dagster = subprocess.Popen(
            ["dagster", "dev", "-m", "evalrunner_assets.definitions", "-p", str(args.dagster_port)], env=env
        )

    def _stop(signum: int, frame: Any) -> None:
        # Turn SIGTERM into an exception so `finally` runs and `dagster dev` is stopped too.
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _stop)
    try:
        # The receiver writes the inbox of the same lake the sensors read.
        serve(host=args.host, port=args.port, insecure=args.insecure, lake=open_lake(home.lake_root()))
    finally:
        if dagster is not None:
            dagster.terminate()
            try:
                dagster.wait(timeout=30)
            except subprocess.TimeoutExpired:
                dagster.kill()
    return 0


def cmd_example_repo(args: argparse.Namespace) -> int:
    from evalrunner_assets.example_repo import VARIANTS, build_example_repo

    ex = build_example_repo(Path(args.dest), args.variant or VARIANTS)
    print(json.dumps({"path": str(ex.path), "base": ex.base_sha,
                      **{name: v.sha for name, v in ex.variants.items()}}, indent=2))
    return 0


def _add_run_options(p: argparse.ArgumentParser) -> None:
    from evalrunner_assets.pipeline.spec import DEFAULT_MODEL

    p.add_argument("--model", default=DEFAULT_MODEL, help="Inspect model, e.g. openai/gpt-4o (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample order and the model")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--cap", type=int, default=256, help="most pairs per task (default: %(default)s)")
    p.add_argument("--budget", type=int, default=None, help="most samples in all (both arms)")
    p.add_argument("--affinity", choices=("off", "order", "prune"), default="order",
                   help="changed-file affinity: run matched tasks first, or skip unmatched ones")
    p.add_argument("--workers", type=int, default=0,
                   help="sandboxes running at once (default: cores locally, the pod cap on Kubernetes)")
    p.add_argument("--backend", choices=("bubblewrap", "unsafe-local", "kubernetes"), default="bubblewrap",
                   help="sandbox backend (unsafe-local has no isolation and is refused under CI)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evalrunner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="judge the bundled example agent's PR variant against its base")
    p.add_argument("--variant", default="improve-runbook",
                   choices=("improve-runbook", "regress-escalation", "no-op-wording"))
    _add_run_options(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("compare", help="judge HEAD against BASE of a repository")
    p.add_argument("--repo", required=True, help="local path or clone URL")
    p.add_argument("--repo-id", default=None, help="owner/name (default: from the URL, or local/<dir>)")
    p.add_argument("--base", required=True, help="base ref or SHA")
    p.add_argument("--head", required=True, help="head ref or SHA")
    p.add_argument("--pr", default="local", help="PR number or a name for this comparison")
    _add_run_options(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("sql", help="run SQL over the lake's tables (samples, events, batches, …)")
    p.add_argument("query", help="SQL text, or - to read it from stdin")
    p.add_argument("--format", choices=("table", "csv", "json", "parquet"), default="table")
    p.add_argument("--out", default=None, help="write to this file (required for parquet)")
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser("lake", help="lake maintenance: verify every batch against its record")
    lake_sub = p.add_subparsers(dest="lake_command", required=True)
    v = lake_sub.add_parser("verify", help="check every file each batch record vouches for (size, sha256)")
    v.add_argument("--repair", action="store_true",
                   help="quarantine every batch that fails (its window runs again on the next request)")
    v.set_defaults(func=cmd_lake_verify)

    p = sub.add_parser("view", help="open Inspect's log viewer on the lake's raw logs")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.set_defaults(func=cmd_view)

    p = sub.add_parser("serve", help="run the GitHub webhook receiver beside `dagster dev`")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8787)
    p.add_argument("--dagster-port", type=int, default=3000)
    p.add_argument("--webhook-only", action="store_true", help="only the receiver (e.g. in Kubernetes)")
    p.add_argument("--insecure", action="store_true", help="accept unsigned deliveries (loopback only)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("example-repo", help="build the example agent repo with its PR variants")
    p.add_argument("dest")
    p.add_argument("--variant", action="append", default=None)
    p.set_defaults(func=cmd_example_repo)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Dagster labels some of the APIs the code location uses as beta/preview; that is for the
    # people who maintain it, not for every command-line run.
    warnings.filterwarnings("ignore", message=r".*is currently in (beta|preview)")
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
