"""``evalrunner inbox``: the webhook inbox's dead letters (list them, replay them once the
cause is fixed)."""

from __future__ import annotations

import argparse
import sys

from evalrunner_assets import home
from evalrunner_assets.cli.options import Add
from evalrunner_assets.errors import UserError

REPLAY = "inbox replay"  # the command its errors name


def cmd_inbox(args: argparse.Namespace) -> int:
    from evalrunner_assets.github.inbox import InboxError, dead_letters, replay_dead_letter
    from lake import open_lake

    the_lake = open_lake(home.lake_root())
    letters = dead_letters(the_lake)
    if args.inbox_command == "list":
        if not letters:
            print(f"no dead letters in {the_lake.url('inbox')}")
        for f in letters:
            if f.letter is None:
                print(f"{f.delivery_id}  (unreadable: {f.error})")
            else:
                print(f"{f.delivery_id}  {f.letter.dead_lettered_at}  {f.letter.error_type}: {f.letter.reason[:200]}")
        return 0
    if args.all == bool(args.deliveries):
        raise UserError("name the deliveries to replay, or pass --all (not both)", command=REPLAY)
    wanted = [f.delivery_id for f in letters] if args.all else args.deliveries
    failed = 0
    for delivery_id in wanted:
        try:
            entry = replay_dead_letter(the_lake, delivery_id)
        except InboxError as exc:
            if len(wanted) == 1:
                raise UserError(str(exc), command=REPLAY) from exc
            # One of several: said here, and the rest are still replayed.
            print(f"evalrunner inbox replay: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{delivery_id}: queued again as {the_lake.url(entry)}")
    if failed:
        raise UserError(f"{failed} of {len(wanted)} dead letter(s) not replayed (see above)", command=REPLAY)
    return 0


def add_parsers(add: Add) -> None:
    p = add("inbox", help="the webhook inbox's dead letters: list them, replay them once the cause is fixed")
    inbox_sub = p.add_subparsers(dest="inbox_command", required=True)
    q = inbox_sub.add_parser("list", help="every dead letter with when and why it was moved out of the queue")
    q.set_defaults(func=cmd_inbox)
    q = inbox_sub.add_parser(
        "replay",
        help="put dead letters back into the queue (the PR sensor handles them on its next tick)",
        description="Replay deliveries that died on something passing (GitHub or the lake down, a bug since "
        "fixed). What they ask for is idempotent: a PR head already judged is not judged twice.",
    )
    q.add_argument("deliveries", nargs="*", help="delivery ids, as `evalrunner inbox list` shows them")
    q.add_argument("--all", action="store_true", help="replay every dead letter")
    q.set_defaults(func=cmd_inbox)
