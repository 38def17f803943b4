"""``evalrunner finetune``: export a training set from the lake, register a fine-tune (train,
measure, notify), open its activation PR, list them."""

from __future__ import annotations

import argparse

from evalrunner_assets.cli.common import repo_id_of
from evalrunner_assets.cli.options import Add, add_repo, add_repo_id
from evalrunner_assets.errors import UserError

# FinetuneError and CandidateError are input errors: main's handler says what to fix (exit 2).


def cmd_finetune(args: argparse.Namespace) -> int:
    from evalrunner_assets.driver import finetune as finetune_run
    from evalrunner_assets.driver.comparison import default_resources
    from resources.github import GitHubError

    resources = default_resources()
    try:
        if args.action == "list":
            for f in finetune_run.list_finetunes(resources, args.repo_id):
                suite = f.measurement.get("suite") or {}
                score = "not measured" if suite.get("mean") is None else f"suite {suite['mean']:.2f}"
                print(
                    f"{f.name}: {f.model} (base {f.base_model}) · {f.repo} · {f.training_set.get('rows')} rows · {score}"
                )
            return 0
        if args.action == "activate":
            opened = finetune_run.activate_finetune(resources, args.repo_id, args.name, base=args.base)
            print(f"activation PR #{opened.number}: {opened.url} ({opened.branch} → {opened.base_ref})")
            return 0
        repo_id = repo_id_of(args.repo, args.repo_id)
        if args.action == "export":
            ts = finetune_run.export(resources, repo_id, args.repo, args.out, sql_file=args.sql, branch=args.branch)
            print(f"wrote {ts.rows} conversation(s) to {ts.path} (sha256 {ts.digest[:12]}; provenance beside it)")
            return 0
        print(f"registering fine-tune {args.name} of {repo_id}", flush=True)
        done = finetune_run.register(
            resources,
            repo_id,
            args.repo,
            args.name,
            base_model=args.base_model,
            training_set=args.training_set,
            model=args.model,
            training_cost_usd=args.training_cost_usd,
            activate=args.activate,
        )
    except GitHubError as exc:  # here: what the person must fix (the token, the repository's access)
        raise UserError(str(exc)) from exc
    print(done.notification)
    print(f"notification: {done.finetune.notification}")
    if done.finetune.issue_url:
        print(f"issue       : {done.finetune.issue_url}")
    if done.activation is not None:
        print(f"activation  : PR #{done.activation.number} {done.activation.url}")
    return 0


def add_parsers(add: Add) -> None:
    p = add("finetune", help="fine-tunes: export a training set, register (train, measure, notify), list")
    actions = p.add_subparsers(dest="action", required=True)
    q = actions.add_parser("export", help="write a training set (chat JSONL) from the lake")
    add_repo(q)
    q.add_argument("--branch", default="main", help="whose first-parent commits the selection gets as $commits")
    q.add_argument("--sql", default=None, help="selection SQL file (default: sql/finetune_training_samples.sql)")
    q.add_argument("--out", required=True, help="the JSONL file to write (provenance goes beside it)")
    q.set_defaults(func=cmd_finetune)
    q = actions.add_parser("register", help="train (or take --model), measure against the reference, notify")
    add_repo(q)
    q.add_argument("--name", required=True, help="fine-tune name, e.g. runbook-v1")
    q.add_argument("--base-model", required=True, help="the model it was fine-tuned from")
    q.add_argument("--training-set", required=True, help="a file written by `evalrunner finetune export`")
    q.add_argument("--model", default=None, help="the trained model id (default: run $EVALRUNNER_FINETUNE_TRAINER)")
    q.add_argument("--training-cost-usd", type=float, default=None, help="what training cost")
    q.add_argument(
        "--activate",
        action="store_true",
        help="then open the activation PR (branch eval-runner/activate-<name>: the agent config's model: line)",
    )
    q.set_defaults(func=cmd_finetune)
    q = actions.add_parser("activate", help="open a registered fine-tune's one-line activation PR on GitHub")
    add_repo_id(q, required=True, help="owner/name of the repository the fine-tune is registered for")
    q.add_argument("--name", required=True, help="the fine-tune's name")
    q.add_argument("--base", default=None, help="the PR's base branch (default: the repository's default branch)")
    q.set_defaults(func=cmd_finetune)
    q = actions.add_parser("list", help="list registered fine-tunes")
    add_repo_id(q, help="only this repository's (owner/name; default: every repository)")
    q.set_defaults(func=cmd_finetune)
