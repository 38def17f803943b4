"""``evalrunner compare`` (judge HEAD against BASE of a repository) and ``evalrunner demo``
(the same on the bundled example agent), with their progress lines and outcome."""

from __future__ import annotations

import argparse
import builtins
import os
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from evalrunner_assets import home
from evalrunner_assets.cli.common import check_repo_id, repo_id_of, repo_source, resolve
from evalrunner_assets.cli.options import (
    FAIL_ON_DEFAULT,
    FAIL_ON_VERDICTS,
    REPO_HELP,
    Add,
    add_fail_on,
    add_repo_id,
    add_run_options,
    sandbox_override,
)
from evalrunner_assets.errors import EXIT_BLOCKED, UserError

if TYPE_CHECKING:
    from evalrunner_assets.documents.comparison import ComparisonDocument
    from evalrunner_assets.pipeline.lease import Lease


def _progress_printer() -> Any:
    started = time.monotonic()
    # Progress goes to a duplicate of stdout: while a Dagster run executes, its compute-log
    # capture redirects file descriptor 1 itself, and lines printed from other threads would
    # land in that run's log instead of the terminal.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)

    def print(*args: Any, **kwargs: Any) -> None:  # noqa: A001 - the printer's own target
        kwargs.pop("flush", None)
        builtins.print(*args, file=out, **kwargs)

    def on_step(step: Any, result: ComparisonDocument | None) -> None:
        elapsed = time.monotonic() - started
        if step.kind == "manifest":
            print(f"[{elapsed:6.1f}s] learnt evals of {step.commit}", flush=True)
        elif step.kind == "samples":
            print(
                f"[{elapsed:6.1f}s] ran {step.task} @ {step.commit.split('@')[1][:7]} windows {', '.join(step.windows)}",
                flush=True,
            )
        elif result is not None:
            from evalrunner_assets.report.markdown import format_usd

            money = format_usd(result.spend_usd) if result.spend_known else "unknown"
            labels = ", ".join(f"{t.split('/')[-1]}={d.decision.label}" for t, d in result.tasks.items())
            print(
                f"[{elapsed:6.1f}s] {result.verdict}: samples {result.samples_run} of "
                f"{result.samples_possible} planned at most · spend {money} · {labels}",
                flush=True,
            )

    return on_step


def _print_outcome(result: ComparisonDocument) -> None:
    from evalrunner_assets.report import render_summary
    from lake import LAYOUT, open_lake

    the_lake = open_lake(home.lake_root())
    repo, pr, head = result.repo, result.pr, result.head_sha
    print()
    print(render_summary(result))
    failed = _failed_task_lines(result)
    if failed:
        print("failed (first cause, as the comparison records it):")
        print("\n".join(failed))
    print()
    print(f"comparison JSON : {the_lake.url(LAYOUT.comparison(repo, pr, head))}")
    print(f"PR comment      : {the_lake.url(LAYOUT.comparison_artifact(repo, pr, head, 'comment.md'))}")
    print(f"chart           : {the_lake.url(LAYOUT.comparison_artifact(repo, pr, head, 'chart.png'))}")
    print(f"Inspect logs    : {the_lake.url(LAYOUT.raw_prefix(repo))}  (evalrunner view)")
    print(f"Dagster instance: {home.dagster_home()}  (evalrunner serve)")
    print('SQL             : evalrunner sql "select task, commit, avg(score) from samples group by all"')


def _failed_task_lines(result: ComparisonDocument) -> list[str]:
    """One line per task whose windows failed, or all of whose samples on an arm raised, with
    the cause the comparison document holds (it says which failures are whose)."""
    lines = []
    for task, doc in result.ordered_tasks():
        failures = doc.failures
        causes = [f"{arm}: {_one_line(cause)}" for arm, cause in sorted(failures.items())]
        for arm in ("head", "base"):
            acc = doc.arm(arm)
            if arm not in failures and acc.samples and acc.errors == acc.samples:
                causes.append(f"{arm}: every sample raised an error ({acc.errors} of {acc.samples})")
        if causes:
            lines.append(f"  {task:<32} " + "; ".join(causes))
    return lines


def _one_line(text: Any, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _same_comparison_again(request: Any) -> Any:
    """A comparison already asked for (same repository, --pr and head) resumes as it was asked:
    another base, model, seed, epochs, cap or affinity is refused (it would mix two measurements
    in one comparison); new --budget/--budget-usd limits replace the old ones."""
    from evalrunner_assets.pipeline.spec import (
        load_request,
        request_conflicts,
        request_path,
        save_request,
        with_limits_of,
    )
    from lake import open_lake

    the_lake = open_lake(home.lake_root())
    if not the_lake.exists(request_path(request.repo, request.pr, request.head_sha)):
        return request
    saved = load_request(the_lake, request.repo, request.pr, request.head_sha)
    conflicts = request_conflicts(saved, request)
    if conflicts:
        raise UserError(
            f"{request.repo} --pr {request.pr} @ {request.head_sha[:7]} was already compared with other "
            f"settings: {'; '.join(conflicts)}",
            hint="run it with the same options to resume it, or give --pr a new name to compare with these",
        )
    if with_limits_of(saved, request) != saved:
        save_request(the_lake, with_limits_of(saved, request))
    return request


def cmd_compare(args: argparse.Namespace) -> int:
    # The driver (Dagster and the pipeline: seconds to import) only once the inputs are known
    # good, so a mistyped --repo or ref is reported at once.
    from evalrunner_assets.pipeline.spec import DEFAULT_MODEL, ComparisonRequest
    from lake.batch import RunSettings

    repo_id = repo_id_of(args.repo, args.repo_id)
    check_repo_id(repo_id, args.repo)
    source = repo_source(repo_id, args.repo)
    base, head = resolve(source, "--base", args.base), resolve(source, "--head", args.head)
    if base == head:
        same = "the same ref" if args.base == args.head else "the same commit"
        raise UserError(
            f"--base {args.base} and --head {args.head} are {same} ({base[:12]}): there is nothing to compare",
            hint="give --head the PR's branch or commit and --base the branch it merges into",
        )
    changed = tuple(source.changed_files(base, head))
    request = ComparisonRequest.build(
        repo=repo_id,
        source=args.repo,
        pr=args.pr,
        base_sha=base,
        head_sha=head,
        base_ref=args.base,
        head_ref=args.head,
        settings=RunSettings(model=args.model or DEFAULT_MODEL, seed=args.seed, epochs=args.epochs),
        model_override=args.model is not None,
        affinity=args.affinity,
        changed_files=changed,
        cap=args.cap,
        alpha=args.alpha,
        budget_samples=args.budget,
        budget_usd=args.budget_usd,
        requested_at=datetime.now(UTC).isoformat(),
    )
    request = _same_comparison_again(request)
    # The instance is opened beside the first sandboxes; one it cannot write would only be
    # found once they ran. (Only here: `serve --webhook-only` may run on a read-only DAGSTER_HOME.)
    home.ensure_writable(home.ensure_dagster_home())
    print(
        f"comparing {repo_id} {args.head} ({head[:7]}) against {args.base} ({base[:7]}) "
        f"with {args.model or 'the model each agent config names'} in a {args.backend} sandbox; "
        f"{len(changed)} changed file(s)",
        flush=True,
    )
    resources = None
    sandbox = sandbox_override(args)
    if sandbox is not None:
        from resources import default_resources

        resources = default_resources(sandbox=sandbox)

    # The outage breaker (ComparisonStopped, exit 3), a gateway that cannot start (exit 2) and
    # Ctrl-C (exit 130) end up in main's handler like every other error.
    from evalrunner_assets.driver.comparison import EngineOptions, run_comparison

    def on_lease_wait(holder: Lease) -> None:
        print(
            f"waiting: this comparison is being run by {holder.describe()}; it continues from what that "
            "one lands once it ends",
            flush=True,
        )

    result = run_comparison(
        request,
        resources=resources,
        options=EngineOptions(
            on_step=_progress_printer(),
            model_gateway=True if args.model_gateway else None,
            on_lease_wait=on_lease_wait,
        ),
    )
    _print_outcome(result)
    if result.status == "budget_spent":
        print(f"evalrunner compare: {result.stopped_reason}", file=sys.stderr, flush=True)
    if blocks_merge(result.verdict, args.fail_on):
        named = ",".join(v for v in FAIL_ON_VERDICTS if v in args.fail_on)
        print(
            f"evalrunner {args.command}: {result.verdict} blocks the merge (--fail-on {named}): exit code {EXIT_BLOCKED}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_BLOCKED
    return 0


def blocks_merge(verdict: str, fail_on: frozenset[str]) -> bool:
    """Whether a comparison's run verdict is one ``--fail-on`` names (IMPROVED and UNCHANGED never are)."""
    name = "inconclusive" if verdict in ("RUNNING", "INCONCLUSIVE") else verdict.lower()
    return name in fail_on and name in FAIL_ON_VERDICTS


def cmd_demo(args: argparse.Namespace) -> int:
    from evalrunner_assets.example_repo import build_example_repo

    path = home.home() / "example-repo"
    if not (path / ".git").is_dir():
        print(f"building the example agent repo at {path}", flush=True)
        build_example_repo(path)
    args.repo, args.repo_id, args.base, args.head = str(path), "example/support-agent", "main", args.variant
    args.pr = "demo"
    return cmd_compare(args)


def add_parsers(add: Add) -> None:
    p = add("demo", help="judge the bundled example agent's PR variant against its base")
    p.add_argument(
        "--variant", default="improve-runbook", choices=("improve-runbook", "regress-escalation", "no-op-wording")
    )
    add_run_options(p)
    add_fail_on(p, "never", "a tour: it ends with 0 on any verdict unless told otherwise")
    p.set_defaults(func=cmd_demo)

    p = add("compare", help="judge HEAD against BASE of a repository")
    p.add_argument("--repo", required=True, help=REPO_HELP)
    add_repo_id(p)
    p.add_argument("--base", required=True, help="base ref or SHA")
    p.add_argument("--head", required=True, help="head ref or SHA")
    p.add_argument("--pr", default="local", help="PR number or a name for this comparison")
    add_run_options(p)
    add_fail_on(p, FAIL_ON_DEFAULT, "a merge gate for any CI runner")
    p.set_defaults(func=cmd_compare)
