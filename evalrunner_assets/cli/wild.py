"""``evalrunner wild import``: failures reported in the wild, redacted, as evals in a cohort."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from evalrunner_assets.cli.options import Add
from evalrunner_assets.errors import InputError, UserError


def _scorer(args: argparse.Namespace) -> object:
    from evalrunner_assets.wild import Check, Rubric

    chosen = [k for k in ("expect_contains", "expect_regex", "expect_tool", "rubric") if getattr(args, k)]
    if len(chosen) != 1:
        raise UserError(
            "say what should have happened: give exactly one of --expect-contains, --expect-regex, --expect-tool "
            "(a deterministic check) or --rubric (model-graded)",
            command="wild import",
        )
    if args.rubric:
        return Rubric(args.rubric, args.grader_model)
    kind = chosen[0].removeprefix("expect_")
    return Check(kind, getattr(args, chosen[0]))


def _ask(question: str) -> bool:
    try:
        answer = input(question)
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def cmd_wild_import(args: argparse.Namespace) -> int:
    try:
        return _wild_import(args)
    except InputError as exc:
        if not getattr(exc, "command", None):
            exc.command = "wild import"  # type: ignore[attr-defined]  # named in the error's line
        raise


def _wild_import(args: argparse.Namespace) -> int:
    from evalrunner_assets.wild import prepare

    if not args.yes and not sys.stdin.isatty():
        raise UserError("nothing is written without a yes: run it in a terminal, or pass --yes", command="wild import")
    repo = Path(args.repo)
    if not (repo / ".evals" / "list").is_file():
        raise UserError(
            f"{repo}: no .evals/list here", "point --repo at the agent repository's checkout", command="wild import"
        )
    submission = prepare([Path(f) for f in args.files], scorer=_scorer(args), cohort=args.cohort, name=args.name)  # type: ignore[arg-type]
    submission.files(repo)  # a manifest that cannot take the eval refuses it (exit 2) before the preview
    html_path: Path | None = None
    if args.yes:
        # Nobody reviews an unattended run: the terminal and the page show only what is sent.
        if args.html is not None:
            html_path = Path(args.html or "wild-preview.html")
            html_path.parent.mkdir(parents=True, exist_ok=True)
            html_path.write_text(submission.html(show_originals=False), encoding="utf-8")
            print(f"preview: {html_path}")
    else:
        print(submission.diff(color=sys.stdout.isatty()))
        if args.html is not None:
            # The page shows the originals: a private file, removed once the person answers.
            fd, name = tempfile.mkstemp(prefix="evalrunner-wild-", suffix=".html")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(submission.html())
            html_path = Path(name)
            print(f"preview (removed once you answer): file://{html_path}")
        try:
            accepted = _ask(f"\n{submission.summary()}\nSubmit eval? [y/N] ")
        finally:
            if html_path is not None:
                html_path.unlink(missing_ok=True)
        if not accepted:
            print("nothing written or sent")
            return 0
    print(submission.summary())
    if args.repo_id:
        from resources.github import GitHubClient

        branch = args.branch or submission.default_branch()
        opened = submission.open_pr(GitHubClient.from_env(), args.repo_id, repo, branch, base=args.base)
        print(f"opened {opened.url} (#{opened.number}) from {opened.branch}")
    else:
        written = submission.write(repo)
        print(f"wrote {len(written)} file(s) into {repo}")
    return 0


def add_parsers(add: Add) -> None:
    p = add(
        "wild",
        help="evals from the wild: import a failure trace, redacted, as an eval in a cohort",
        description="Turn failures reported in the wild into evals: traces are read (Inspect logs, OpenAI-style "
        "chat JSONL, OpenTelemetry GenAI spans), personal data is redacted in memory (Presidio, regex and checksum "
        "recognizers), a preview shows what was found and what will be sent, and only after a yes is the eval "
        "written into the agent repository (or opened as a PR with --repo-id).",
    )
    sub = p.add_subparsers(dest="wild_command", required=True)
    imp = sub.add_parser("import", help="import trace files as evals (preview, then ask)")
    imp.add_argument("files", nargs="+", metavar="FILE", help="trace files (all are read before anything is shown)")
    imp.add_argument("--repo", default=".", help="the agent repository's checkout (default: .)")
    imp.add_argument("--repo-id", default=None, help="owner/name: open a PR there instead of writing the checkout")
    imp.add_argument("--branch", default=None, help="the PR's branch (default wild/<eval name>)")
    imp.add_argument("--base", default=None, help="the PR's base branch (default: the repository's default)")
    imp.add_argument("--cohort", default=None, help="cohort tag (default customer-reported/<year>-Q<quarter>)")
    imp.add_argument("--name", default=None, help="the eval's name (default: from its first request and a hash)")
    imp.add_argument("--expect-contains", default=None, help="scorer: the final answer contains this text")
    imp.add_argument("--expect-regex", default=None, help="scorer: the final answer matches this regex")
    imp.add_argument("--expect-tool", default=None, help="scorer: the agent calls this tool")
    imp.add_argument("--rubric", default=None, help="scorer: a model grades the answer against this rubric")
    imp.add_argument("--grader-model", default="openai/gpt-4o", help="the rubric's grader (default openai/gpt-4o)")
    imp.add_argument("--html", nargs="?", const="", default=None, metavar="FILE", help="also show an HTML preview")
    imp.add_argument("--yes", action="store_true", help="accept without asking (scripts); shows only what is sent")
    imp.set_defaults(func=cmd_wild_import)
