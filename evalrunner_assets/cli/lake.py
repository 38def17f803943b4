"""The lake's read side and upkeep: ``evalrunner sql`` (SQL over its tables), ``evalrunner lake
verify`` (every batch against its record) and ``evalrunner view`` (Inspect's log viewer)."""

from __future__ import annotations

import argparse
import subprocess
import sys

from evalrunner_assets import home
from evalrunner_assets.cli.common import existing_lake
from evalrunner_assets.cli.options import Add


def cmd_sql(args: argparse.Namespace) -> int:
    from lake.query import run_sql

    text = args.query if args.query != "-" else sys.stdin.read()

    def still_running() -> None:
        print("evalrunner sql: query running… (Ctrl-C cancels it)", file=sys.stderr, flush=True)

    def skipped(exc: Exception) -> None:
        print(f"evalrunner sql: left out: {exc}", file=sys.stderr, flush=True)

    out = run_sql(existing_lake(), text, args.format, args.out, on_slow=still_running, on_problem=skipped)
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
    print(
        f"{report.records} batch records: {report.ok} ok, {len(report.problems)} failed verification, "
        f"{len(report.quarantined)} quarantined ({the_lake.url(the_lake.layout.batches_root())})"
    )
    return 0 if report.clean else 1


def cmd_view(args: argparse.Namespace) -> int:
    from lake.viewer import view_command

    cmd = view_command(existing_lake(), host=args.host, port=args.port, annotated=args.annotated)
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd)


def add_parsers(add: Add) -> None:
    p = add("sql", help="run SQL over the lake's tables (samples, events, batches, …)")
    p.add_argument("query", help="SQL text, or - to read it from stdin")
    p.add_argument("--format", choices=("table", "csv", "json", "parquet"), default="table")
    p.add_argument("--out", default=None, help="write to this file (required for parquet)")
    p.set_defaults(func=cmd_sql)

    p = add("lake", help="lake maintenance: verify every batch against its record")
    lake_sub = p.add_subparsers(dest="lake_command", required=True)
    v = lake_sub.add_parser("verify", help="check every file each batch record vouches for (size, sha256)")
    v.add_argument(
        "--repair",
        action="store_true",
        help="quarantine every batch that fails (its window runs again on the next request)",
    )
    v.set_defaults(func=cmd_lake_verify)


def add_view_parser(add: Add) -> None:
    p = add("view", help="open Inspect's log viewer on the lake's raw logs")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument(
        "--annotated",
        action="store_true",
        help="the annotated copies of the raw logs instead: the samples the miner noted, its notes in "
        "their metadata and transcript",
    )
    p.set_defaults(func=cmd_view)
