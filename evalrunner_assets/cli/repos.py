"""``evalrunner repos``: where the repositories the webhook receiver hears about are fetched
from (record one, list them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evalrunner_assets import home
from evalrunner_assets.cli.options import Add
from evalrunner_assets.errors import UserError

ADD = "repos add"  # the command its errors name


def cmd_repos_add(args: argparse.Namespace) -> int:
    from evalrunner_assets.github.inbox import InboxError, check_repo_full_name
    from lake import LAYOUT, open_lake
    from resources import RepoResource

    try:
        check_repo_full_name(args.repo, "repository")
    except InboxError as exc:
        raise UserError(str(exc), command=ADD) from exc
    remote = "://" in args.source or args.source.startswith("git@")
    if not remote and not (Path(args.source) / ".git").exists() and not (Path(args.source) / "HEAD").is_file():
        raise UserError(f"{args.source!r} is neither a clone URL nor a local git repository", command=ADD)
    the_lake = open_lake(home.lake_root())
    RepoResource().register(the_lake, args.repo, args.source, repoint=args.repoint)
    print(f"{args.repo} is fetched from {args.source} ({the_lake.url(LAYOUT.repo_source(args.repo))})")
    return 0


def cmd_repos_list(args: argparse.Namespace) -> int:
    from lake import open_lake
    from resources.repo import RepoResource

    the_lake = open_lake(home.lake_root())
    sources = RepoResource().registered(the_lake) if the_lake.exists("repos") else []
    width = max((len(r) for r, _ in sources), default=0)
    for repo, source in sources:
        print(f"{repo:<{width}}  {source}")
    if not sources:
        print(f"no repository sources recorded in {the_lake.url('repos')}", file=sys.stderr)
    return 0


def add_parsers(add: Add) -> None:
    p = add("repos", help="where repositories the webhook receiver hears about are fetched from")
    repos_sub = p.add_subparsers(dest="repos_command", required=True)
    repos_add = repos_sub.add_parser(
        "add",
        help="record the clone URL or local path of owner/name (repos/<owner>/<name>.json in the lake)",
        description="Record where owner/name is fetched from. Without an entry the PR sensor clones "
        "$EVALRUNNER_GIT_BASE_URL/owner/name.git (default https://github.com).",
    )
    repos_add.add_argument("repo", help="owner/name, as in the deliveries' repository.full_name")
    repos_add.add_argument("source", help="clone URL (https://…, git@…) or path of a local git repository")
    repos_add.add_argument(
        "--repoint",
        action="store_true",
        help="point an id already recorded for another source at this one (results under the id then "
        "come from the new repository)",
    )
    repos_add.set_defaults(func=cmd_repos_add)
    repos_list = repos_sub.add_parser("list", help="every recorded repository id and where it is fetched from")
    repos_list.set_defaults(func=cmd_repos_list)
