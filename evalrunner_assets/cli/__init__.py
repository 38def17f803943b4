"""`evalrunner` command line: demo, compare, backfill, candidates, finetune, sql, lake verify, view, serve, repos, inbox, envs, example-repo, swe, wild."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from typing import Any

from evalrunner_assets.cli import (
    backfill,
    candidates,
    compare,
    envs,
    example_repo,
    finetune,
    inbox,
    lake,
    mine,
    repos,
    serve,
    swe,
    wild,
)
from evalrunner_assets.cli.compare import blocks_merge
from evalrunner_assets.cli.options import DEBUG_HELP, FAIL_ON_VERDICTS, Parser
from evalrunner_assets.errors import DEBUG_ENV, EXIT_BLOCKED, debug_enabled, explain

__all__ = ["FAIL_ON_VERDICTS", "blocks_merge", "build_parser", "main"]

# Each command group adds its parsers, in the order `evalrunner --help` lists them.
_PARSERS = (
    compare.add_parsers,  # demo, compare
    backfill.add_parsers,  # backfill, series
    candidates.add_parsers,
    finetune.add_parsers,
    lake.add_parsers,  # sql, lake
    lake.add_view_parser,  # view
    mine.add_parsers,
    serve.add_parsers,
    swe.add_parsers,
    repos.add_parsers,
    inbox.add_parsers,
    envs.add_parsers,
    example_repo.add_parsers,
    wild.add_parsers,
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="evalrunner",
        description=__doc__,
        epilog="exit codes: 0 done, 2 a user error (the message says what to fix), "
        f"3 an outage (infrastructure), {EXIT_BLOCKED} a verdict compare's --fail-on blocks, 130 cancelled, 1 a bug",
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    # `--debug` also after the command (`evalrunner compare … --debug`); SUPPRESS keeps it from
    # resetting a --debug given before the command.
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    def add(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kwargs)

    for add_parsers in _PARSERS:
        add_parsers(add)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; every error a command raises is explained here, in one place
    (:func:`evalrunner_assets.errors.explain`): exit 2 for a user error, 3 for an outage, 130
    when cancelled, 1 for a bug; a traceback only with ``--debug``."""
    # Dagster labels some of the APIs the code location uses as beta/preview; that is for the
    # people who maintain it, not for every command-line run.
    warnings.filterwarnings("ignore", message=r".*is currently in (beta|preview)")
    command = "?"
    try:
        args = build_parser().parse_args(argv)
        command = args.command
        if args.debug:
            os.environ[DEBUG_ENV] = "1"  # read where the work runs (e.g. Dagster's log level)
        return int(args.func(args) or 0)
    except SystemExit:
        raise  # argparse's own exits (--help, a usage error: 2)
    except BaseException as exc:  # noqa: BLE001 - the one place errors become exit codes
        explanation = explain(exc, command)
        try:
            if debug_enabled() and explanation.exit_code != 130:
                traceback.print_exc()
            for line in explanation.lines:
                print(line, file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            pass  # a second Ctrl-C while reporting: still a cancellation
        return explanation.exit_code
