"""`evalrunner` command line: demo, compare, backfill, candidates, finetune, sql, lake verify, view, serve, repos, inbox, envs, example-repo, swe."""

from __future__ import annotations

import argparse
import builtins
import json
import os
import re
import subprocess
import sys
import time
import traceback
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from evalrunner_assets import home
from evalrunner_assets.errors import DEBUG_ENV, EXIT_BLOCKED, LakeNotFound, UserError, debug_enabled, explain

if TYPE_CHECKING:
    from evalrunner_assets.documents.comparison import ComparisonDocument


def _repo_id(source: str, explicit: str | None) -> str:
    if explicit:
        return explicit
    m = re.search(r"[:/]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$", source)
    if "://" in source or source.startswith("git@"):
        if not m:
            raise UserError(f"--repo: cannot tell owner/name from {source!r}", hint="pass --repo-id owner/name")
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


def _resolve(source: Any, flag: str, ref: str) -> str:
    from evalrunner_assets.execution.repo import RepoError

    try:
        return source.resolve_ref(ref)
    except RepoError as exc:
        lister = (
            f"git ls-remote {source.source}"
            if "://" in source.source or "@" in source.source
            else f"git -C {source.source} branch -a"
        )
        raise UserError(
            f"{flag}: {exc}", hint=f"give {flag} a branch, tag or commit SHA of that repository (`{lister}` lists them)"
        ) from exc


def _repo_source(repo_id: str, repo: str) -> Any:
    from evalrunner_assets.execution.repo import RepoError, RepoSource, RepoSubdirectory

    try:
        source = RepoSource(repo_id, repo, cache_dir=str(home.repo_cache()))
        source.ensure_mirror()
    except RepoSubdirectory as exc:
        raise UserError(
            f"--repo: {exc}",
            hint=f"give --repo the repository's root, {exc.top} (.evals/list there may name a "
            "subdirectory as a task's workdir)",
        ) from exc
    except RepoError as exc:
        raise UserError(f"--repo: {exc}", hint="give --repo the path of a git checkout or a clone URL") from exc
    return source


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
    from evalrunner_assets.driver.comparison import run_comparison
    from evalrunner_assets.pipeline.spec import DEFAULT_MODEL, ComparisonRequest
    from lake.batch import RunSettings
    from resources import SandboxResource

    repo_id = _repo_id(args.repo, args.repo_id)
    _check_repo_id(repo_id, args.repo)
    source = _repo_source(repo_id, args.repo)
    base, head = _resolve(source, "--base", args.base), _resolve(source, "--head", args.head)
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
    if args.backend != "bubblewrap" or args.workers:
        from resources import default_resources

        resources = default_resources(sandbox=SandboxResource(backend_name=args.backend, max_workers=args.workers or 0))

    # The outage breaker (ComparisonStopped, exit 3), a gateway that cannot start (exit 2) and
    # Ctrl-C (exit 130) end up in main's handler like every other error.
    def on_lease_wait(holder: Any) -> None:
        print(
            f"waiting: this comparison is being run by {holder.describe()}; it continues from what that "
            "one lands once it ends",
            flush=True,
        )

    result = run_comparison(
        request,
        resources=resources,
        on_step=_progress_printer(),
        model_gateway=True if args.model_gateway else None,
        on_lease_wait=on_lease_wait,
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


# What --fail-on names, by the run verdict (a comparison ended before a decision is undecided:
# inconclusive). BROKEN: a task the PR broke.
FAIL_ON_VERDICTS = ("regressed", "broken", "inconclusive")
FAIL_ON_DEFAULT = "regressed,broken"


def blocks_merge(verdict: str, fail_on: frozenset[str]) -> bool:
    """Whether a comparison's run verdict is one ``--fail-on`` names (IMPROVED and UNCHANGED never are)."""
    name = "inconclusive" if verdict in ("RUNNING", "INCONCLUSIVE") else verdict.lower()
    return name in fail_on and name in FAIL_ON_VERDICTS


def _fail_on(text: str) -> frozenset[str]:
    """An argparse type: ``never``, or a comma-separated list of verdicts that block a merge."""
    names = [name.strip().lower() for name in text.split(",")]
    if names == ["never"]:
        return frozenset()
    choices = f"give a comma-separated list of {', '.join(FAIL_ON_VERDICTS)}, or never"
    for name in names:
        if name == "never":
            raise argparse.ArgumentTypeError(f"{text!r}: never means no verdict blocks; give it alone")
        if name not in FAIL_ON_VERDICTS:
            what = f"{name!r} is not a verdict" if name else f"{text!r} has an empty name"
            raise argparse.ArgumentTypeError(f"{what}: {choices}")
    return frozenset(names)


def cmd_backfill(args: argparse.Namespace) -> int:
    from evalrunner_assets.driver.backfill import run_backfill
    from evalrunner_assets.pipeline import series
    from evalrunner_assets.pipeline.series_progress import ProgressDisplay, SeriesProgress
    from evalrunner_assets.report.series_markdown import render_point_table
    from lake import LAYOUT, open_lake
    from resources import SandboxResource

    repo_id = _repo_id(args.repo, args.repo_id)
    settings = series.SeriesSettings(
        model=args.model or series.DEFAULT_MODEL,
        model_override=args.model is not None,
        seed=args.seed,
        epochs=args.epochs,
        half_width=args.half_width,
        cap=args.cap,
    )
    resources = None
    if args.backend != "bubblewrap" or args.workers:
        from resources import default_resources

        resources = default_resources(sandbox=SandboxResource(backend_name=args.backend, max_workers=args.workers or 0))
    print(
        f"backfilling the cohort series of {repo_id} {args.branch} (±{args.half_width:g} or "
        f"{args.cap} inputs per eval and point)",
        flush=True,
    )
    # A duplicate of stdout: while the Dagster run executes, its compute-log capture redirects
    # file descriptor 1, and the progress line would land in the run's log instead.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    display = ProgressDisplay(SeriesProgress(0, 0), out, tty=sys.stdout.isatty())
    try:
        result = run_backfill(
            repo_id,
            args.repo,
            branch=args.branch,
            settings=settings,
            since=args.since,
            last=args.last,
            every=args.every,
            resources=resources,
            progress=display,
        )
    finally:
        display.finish()
        out.close()
    print(
        f"{len(result.commits)} commit(s), {result.measured} measured now, "
        f"{len(result.commits) - result.measured} already measured; {result.runs} Dagster run(s)"
    )
    print()
    print(render_point_table(result.points))
    if result.points:
        print("latest: " + " · ".join(series.reading(result.points[-1])))
    the_lake = open_lake(home.lake_root())
    print(f"chart: {the_lake.url(LAYOUT.series_chart(repo_id, args.branch, 'png'))}")
    print('SQL  : evalrunner sql "select * from cohort_series"')
    return 0


def cmd_series_register(args: argparse.Namespace) -> int:
    from evalrunner_assets.driver.backfill import register_commits

    repo_id = _repo_id(args.repo, args.repo_id)
    _check_repo_id(repo_id, args.repo)
    commits = register_commits(
        repo_id, args.repo, branch=args.branch, since=args.since, last=args.last, every=args.every
    )
    print(
        f"{len(commits)} commit(s) of {repo_id} {args.branch} are main_commits partitions "
        f"({commits[0].sha[:7]} … {commits[-1].sha[:7]}), none measured: select a range of the "
        "cohort_series asset's partitions in the Dagster UI (`evalrunner serve`) and backfill it, "
        "or run `evalrunner backfill` with the same selection"
    )
    return 0


def _model_args(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"evalrunner candidates add: --model-arg {pair!r} is not KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _agent_config_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` pairs as overrides: each VALUE is parsed as YAML (so JSON too:
    ``[triage, runbook]``, ``'{"a": 1}'``, ``true``, ``3``; anything else is a string)."""
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"evalrunner candidates add: --set {pair!r} is not KEY=VALUE")
        key = key.strip()
        if key in out:
            raise SystemExit(f"evalrunner candidates add: --set {key} is given twice")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            from evalrunner_assets.discovery import yaml_problem

            raise SystemExit(
                f"evalrunner candidates add: --set {key}: {value!r} is not valid YAML ({yaml_problem(exc)})"
            ) from exc
    return out


def cmd_candidates(args: argparse.Namespace) -> int:
    from evalrunner_assets.driver import candidates as candidates_run
    from evalrunner_assets.pipeline import candidates as cands
    from evalrunner_assets.report.frontier_markdown import (
        render_frontier_table,
        render_promotion,
        render_steps_table,
    )
    from lake import LAYOUT, open_lake
    from resources import SandboxResource

    repo_id = _repo_id(args.repo, args.repo_id)
    from evalrunner_assets.driver.comparison import default_resources

    sandbox = None
    if getattr(args, "backend", "bubblewrap") != "bubblewrap" or getattr(args, "workers", 0):
        sandbox = SandboxResource(backend_name=args.backend, max_workers=args.workers or 0)
    resources = default_resources(**({"sandbox": sandbox} if sandbox is not None else {}))
    the_lake = resources["lake"].open()
    try:
        if args.action == "add":
            resources["repos"].register(the_lake, repo_id, args.repo)
            candidate = cands.Candidate(
                name=args.name,
                ref=args.ref,
                model=args.model,
                model_args=_model_args(args.model_arg),
                description=args.description,
                agent_config=_agent_config_overrides(args.set),
            )
            cands.parse_candidates(  # the same schema as the file: one set of rules
                {
                    "version": 1,
                    "reference": args.name,
                    "candidates": [
                        {k: v for k, v in candidate.to_dict().items() if v is not None} | {"ref": args.ref or "HEAD"}
                    ],
                },
                source="evalrunner candidates add",
            )
            resolved = candidates_run.add_candidate(resources, repo_id, candidate, reference=args.reference)
            print(f"added candidate {args.name} of {repo_id}: {the_lake.url(LAYOUT.candidate(repo_id, args.name))}")
            if resolved is not None and resolved.overrides is not None:
                print(
                    f"its agent config overrides ({', '.join(candidate.agent_config)}) on {resolved.base_commit[:12]} "
                    f"are commit {resolved.commit[:12]} ({resolved.overrides['git_ref']})"
                )
            return 0
        if args.action == "list":
            candidates_run.declare_from_repo(resources, repo_id, args.repo)
            reference, _ = cands.load_settings(the_lake, repo_id)
            for name, c in cands.load_candidates(the_lake, repo_id).items():
                where = cands.candidate_provenance(the_lake, repo_id, name).get("declared_in", "?")
                mark = " (reference)" if name == reference else ""
                model = c.model or "the agent config's model"
                overrides = f" · overrides {', '.join(c.agent_config)}" if c.agent_config else ""
                print(f"{name}{mark}: ref {c.ref or 'HEAD'}{overrides} · {model} · declared in {where}")
            return 0
        print(f"measuring the candidates of {repo_id}", flush=True)
        result = candidates_run.measure_candidates(repo_id, args.repo, names=args.name or None, resources=resources)
    except cands.CandidateError as exc:
        print(f"evalrunner candidates: {exc}", file=sys.stderr)
        return 2
    for doc in result.measurements.values():
        print(cands.reading(doc))
    frontier = result.frontier
    print()
    print(render_frontier_table(frontier["rows"]))
    print(render_steps_table(frontier["steps"]))
    print(render_promotion(frontier["promotion"]))
    lake = open_lake(home.lake_root())
    print(f"chart: {lake.url(LAYOUT.continuum_frontier(repo_id, 'png'))}")
    print(f"gate : {lake.url(LAYOUT.promotion(repo_id))}")
    return 0


def cmd_finetune(args: argparse.Namespace) -> int:
    from evalrunner_assets.driver import finetune as finetune_run
    from evalrunner_assets.driver.comparison import default_resources
    from evalrunner_assets.pipeline import candidates as cands
    from evalrunner_assets.pipeline.finetune import FinetuneError
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
        repo_id = _repo_id(args.repo, args.repo_id)
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
    except (FinetuneError, cands.CandidateError, GitHubError) as exc:
        print(f"evalrunner finetune: {exc}", file=sys.stderr)
        return 2
    print(done.notification)
    print(f"notification: {done.finetune.notification}")
    if done.finetune.issue_url:
        print(f"issue       : {done.finetune.issue_url}")
    if done.activation is not None:
        print(f"activation  : PR #{done.activation.number} {done.activation.url}")
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


def _existing_lake() -> Any:
    """The configured lake, refused when there is nothing there yet."""
    from lake import open_lake

    the_lake = open_lake(home.lake_root())
    if not the_lake.fs.exists(the_lake.root):
        where = "EVALRUNNER_LAKE" if os.environ.get("EVALRUNNER_LAKE") else "EVALRUNNER_HOME"
        raise LakeNotFound(
            f"no lake at {the_lake.root} (from {where}); run `evalrunner compare` or "
            "`evalrunner demo` first, or point EVALRUNNER_LAKE at an existing lake"
        )
    return the_lake


def cmd_sql(args: argparse.Namespace) -> int:
    from lake.query import run_sql

    text = args.query if args.query != "-" else sys.stdin.read()

    def still_running() -> None:
        print("evalrunner sql: query running… (Ctrl-C cancels it)", file=sys.stderr, flush=True)

    def skipped(exc: Exception) -> None:
        print(f"evalrunner sql: left out: {exc}", file=sys.stderr, flush=True)

    out = run_sql(_existing_lake(), text, args.format, args.out, on_slow=still_running, on_problem=skipped)
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

    cmd = view_command(_existing_lake(), host=args.host, port=args.port)
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd)


# `dagster dev` is the documented way to run the UI and daemon together here; its notice that
# `dg dev` supersedes it is not for our users. (-W filters match a message's start; categories
# from packages cannot be named before the package is imported, so messages are used.)
_QUIET_DAGSTER_DEV = ("ignore:Function `dev_command` is superseded",)


def _telemetry_off(dagster_yaml: Path) -> None:
    """No usage telemetry and no telemetry banner, unless the instance file already says."""
    text = dagster_yaml.read_text()
    if not re.search(r"^telemetry:", text, re.MULTILINE):
        sep = "" if not text or text.endswith("\n") else "\n"
        dagster_yaml.write_text(f"{text}{sep}telemetry:\n  enabled: false\n")


def cmd_serve(args: argparse.Namespace) -> int:
    import signal

    from evalrunner_assets.http.webhook import SECRET_ENV, SECRET_FILE_ENV, load_webhook_secret, serve
    from lake import open_lake

    # Before anything starts: a receiver that cannot start should not leave `dagster dev` behind.
    if not args.insecure and load_webhook_secret() is None:
        raise UserError(
            f"no webhook secret: set {SECRET_ENV} (or {SECRET_FILE_ENV}) to the secret of the GitHub webhook",
            hint="or pass --insecure to accept unsigned deliveries on loopback (local testing only)",
        )
    dagster = None
    if not args.webhook_only:
        dagster_home = home.ensure_dagster_home()
        _telemetry_off(dagster_home / "dagster.yaml")
        env = dict(
            os.environ,
            DAGSTER_HOME=str(dagster_home),
            PYTHONWARNINGS=",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), *_QUIET_DAGSTER_DEV])),
        )
        # The `dagster` of this very environment, whatever PATH says (`dagster dev` starts the
        # webserver and the daemon with its own interpreter in turn).
        dagster = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dagster",
                "dev",
                "-m",
                "evalrunner_assets.definitions",
                "-p",
                str(args.dagster_port),
            ],
            env=env,
            # It is stopped with SIGINT (below), which a shell leaves ignored in background jobs.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

    def _stop(signum: int, frame: Any) -> None:
        # Turn SIGTERM into an exception so `finally` runs and `dagster dev` is stopped too.
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _stop)
    try:
        # The receiver writes the inbox of the same lake the sensors read.
        the_lake = open_lake(home.lake_root())
        extra: list[Any] = []
        if not args.no_run_api:
            from evalrunner_assets.driver.swe import api_routes

            extra = api_routes(the_lake)
        serve(host=args.host, port=args.port, insecure=args.insecure, lake=the_lake, extra_routes=extra)
    finally:
        if dagster is not None:
            # SIGINT, not SIGTERM: `dagster dev` stops its webserver, daemon and code servers on
            # an interrupt; terminated, it leaves them running.
            dagster.send_signal(signal.SIGINT)
            try:
                dagster.wait(timeout=30)
            except subprocess.TimeoutExpired:
                dagster.kill()
    return 0


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


def cmd_repos_add(args: argparse.Namespace) -> int:
    from evalrunner_assets.github.inbox import InboxError, check_repo_full_name
    from lake import LAYOUT, open_lake
    from resources import RepoResource

    try:
        check_repo_full_name(args.repo, "repository")
    except InboxError as exc:
        print(f"evalrunner repos add: {exc}", file=sys.stderr)
        return 2
    remote = "://" in args.source or args.source.startswith("git@")
    if not remote and not (Path(args.source) / ".git").exists() and not (Path(args.source) / "HEAD").is_file():
        print(
            f"evalrunner repos add: {args.source!r} is neither a clone URL nor a local git repository", file=sys.stderr
        )
        return 2
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


def _check_repo_id(repo_id: str, source: str) -> None:
    """Refuse, before any work, a --repo-id already recorded for another repository."""
    from lake import open_lake
    from resources.repo import RepoResource

    RepoResource().check_source(open_lake(home.lake_root()), repo_id, source)


def cmd_envs(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from evalrunner_assets.execution.kubernetes import KubernetesBackend, KubernetesSandboxConfig
    from resources import SandboxResource

    try:
        sandbox = SandboxResource.from_env()
    except ValueError as exc:
        raise UserError(str(exc), hint="fix the variable (deploy/k8s/40-lake-and-config.yaml sets it)") from exc
    options = {**sandbox.kubernetes_options(), "image": sandbox.k8s_image or "unused-by-prune"}
    for option, field in (
        ("namespace", "namespace"),
        ("kubeconfig", "kubeconfig"),
        ("context", "kube_context"),
        ("retain_days", "env_retain_days"),
    ):
        if getattr(args, option) is not None:
            options[field] = getattr(args, option)
    try:
        config = KubernetesSandboxConfig(**options)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(
            f"{'.'.join(str(x) for x in first['loc']) or 'settings'}: {first['msg']}",
            hint="see `evalrunner envs prune --help`",
        ) from exc
    if config.env_retain_days == 0:
        print(f"retention is 0 days (never): environment claims in {config.namespace} are kept")
        return 0
    decisions = KubernetesBackend(config).prune_environments(dry_run=args.dry_run)
    for d in decisions:
        print(f"{d.action:<12} {d.claim}  {d.reason}")
    deleted = sum(d.action in ("deleted", "would delete") for d in decisions)
    verb = "would be deleted (dry run: nothing was)" if args.dry_run else "deleted"
    print(
        f"{len(decisions)} environment claim(s) in {config.namespace}: {deleted} {verb}, "
        f"retention {config.env_retain_days:g} days"
    )
    return 0


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
        print("evalrunner inbox replay: name the deliveries to replay, or pass --all (not both)", file=sys.stderr)
        return 2
    wanted = [f.delivery_id for f in letters] if args.all else args.deliveries
    failed = 0
    for delivery_id in wanted:
        try:
            entry = replay_dead_letter(the_lake, delivery_id)
        except InboxError as exc:
            print(f"evalrunner inbox replay: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{delivery_id}: queued again as {the_lake.url(entry)}")
    return 2 if failed else 0


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


def _between_0_and_half(what: str) -> Any:
    """An argparse type: a number strictly between 0 and 0.5 (an error rate, a half-width)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0.0 < value < 0.5:
            raise argparse.ArgumentTypeError(f"{value} is not {what}: give a number between 0 and 0.5, e.g. 0.05")
        return value

    return parse


_error_rate = _between_0_and_half("an error rate")
_half_width = _between_0_and_half("a half-width")


def _count(minimum: int, why: str = "") -> Any:
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}{why}; give {minimum} or more")
        return value

    return parse


def _add_run_options(p: argparse.ArgumentParser) -> None:
    from evalrunner_assets.execution import sandbox_settings
    from evalrunner_assets.pipeline.spec import DEFAULT_MODEL, ComparisonRequest

    min_pairs = ComparisonRequest.model_fields["min_pairs"].default
    p.add_argument(
        "--model",
        default=None,
        help="Inspect model for both commits, e.g. openai/gpt-4o (default: the model each commit's agent config "
        f"names in `model:`, else {DEFAULT_MODEL})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the sample order and the model")
    p.add_argument("--epochs", type=_count(1), default=1)
    p.add_argument(
        "--cap",
        type=_count(min_pairs, " (the pairs a task needs before any decision)"),
        default=256,
        help="most pairs per task (default: %(default)s)",
    )
    p.add_argument(
        "--alpha",
        type=_error_rate,
        default=ComparisonRequest.model_fields["alpha"].default,
        help="chance of any false IMPROVED or REGRESSED task in the comparison, split over its tasks "
        "and both directions (default: %(default)s; 2x this bounds each direction alone by it)",
    )
    p.add_argument("--budget", type=_count(1), default=None, help="most samples in all (both arms)")
    p.add_argument(
        "--budget-usd",
        type=float,
        default=None,
        help="most dollars of model calls, enforced by the model gateway (needs the model's "
        "price in the price table, $EVALRUNNER_PRICES)",
    )
    p.add_argument(
        "--model-gateway",
        action="store_true",
        help="run the model gateway even when --model is not openai/… or anthropic/… (e.g. "
        "for a model-graded scorer); keys are read from OPENAI_API_KEY / ANTHROPIC_API_KEY",
    )
    p.add_argument(
        "--affinity",
        choices=("off", "order", "prune"),
        default="order",
        help="changed-file affinity: run matched tasks first, or skip unmatched ones",
    )
    p.add_argument(
        "--workers",
        type=_count(0),
        default=0,
        help="sandboxes running at once (default: cores locally, the pod cap on Kubernetes: "
        f"{sandbox_settings.MAX_CONCURRENT_PODS.default})",
    )
    p.add_argument(
        "--backend",
        choices=sandbox_settings.BACKEND.choices,
        default=sandbox_settings.BACKEND.default,
        help=sandbox_settings.BACKEND.help,
    )


def _add_fail_on(p: argparse.ArgumentParser, default: str, why: str) -> None:
    # Not part of the request: it changes the exit code, not what is measured, so a rerun with
    # another --fail-on resumes the same comparison.
    p.add_argument(
        "--fail-on",
        type=_fail_on,
        default=_fail_on(default),
        metavar="VERDICTS",
        help=f"exit with code {EXIT_BLOCKED} when the verdict is one of these: a comma-separated list of "
        f"{', '.join(FAIL_ON_VERDICTS)}, or never (default: {default}; {why})",
    )


class _Parser(argparse.ArgumentParser):
    """Usage errors in two lines (what, and where to read more) with exit code 2, instead of the
    whole usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n  see `{self.prog} --help`\n")


DEBUG_HELP = f"print tracebacks and Dagster's own log lines (also {DEBUG_ENV}=1)"


def build_parser() -> argparse.ArgumentParser:
    from evalrunner_assets.execution import sandbox_settings

    parser = _Parser(
        prog="evalrunner",
        description=__doc__,
        epilog="exit codes: 0 done, 2 a user error (the message says what to fix), "
        f"3 an outage (infrastructure), {EXIT_BLOCKED} a verdict compare's --fail-on blocks, 130 cancelled, 1 a bug",
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    # `--debug` also after the command (`evalrunner compare … --debug`); SUPPRESS keeps it from
    # resetting a --debug given before the command.
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kwargs)

    p = add("demo", help="judge the bundled example agent's PR variant against its base")
    p.add_argument(
        "--variant", default="improve-runbook", choices=("improve-runbook", "regress-escalation", "no-op-wording")
    )
    _add_run_options(p)
    _add_fail_on(p, "never", "a tour: it ends with 0 on any verdict unless told otherwise")
    p.set_defaults(func=cmd_demo)

    p = add("compare", help="judge HEAD against BASE of a repository")
    p.add_argument("--repo", required=True, help="local path or clone URL")
    p.add_argument("--repo-id", default=None, help="owner/name (default: from the URL, or local/<dir>)")
    p.add_argument("--base", required=True, help="base ref or SHA")
    p.add_argument("--head", required=True, help="head ref or SHA")
    p.add_argument("--pr", default="local", help="PR number or a name for this comparison")
    _add_run_options(p)
    _add_fail_on(p, FAIL_ON_DEFAULT, "a merge gate for any CI runner")
    p.set_defaults(func=cmd_compare)

    def add_commit_selection(p: argparse.ArgumentParser) -> None:
        p.add_argument("--repo", required=True, help="local path or clone URL")
        p.add_argument("--repo-id", default=None, help="owner/name (default: from the URL, or local/<dir>)")
        p.add_argument("--branch", default="main", help="the branch whose first-parent history is measured")
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--since", default=None, help="commits since this date (ISO, e.g. 2025-01-31)")
        which.add_argument("--last", type=_count(1), default=None, help="the newest N commits")
        which.add_argument("--every", type=_count(1), default=None, help="every K-th commit, counted back from the tip")

    p = add("backfill", help="measure a branch's history as a cohort series (one point per commit)")
    add_commit_selection(p)
    p.add_argument(
        "--model",
        default=None,
        help="Inspect model every point runs (default: the one each commit's agent config names, else "
        "simagent/support-agent)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=_count(1), default=1)
    p.add_argument(
        "--half-width",
        type=_half_width,
        default=0.05,
        help="stop sampling an eval once its interval is within ± this (default: %(default)s)",
    )
    p.add_argument("--cap", type=_count(1), default=256, help="most inputs per eval and point (default: %(default)s)")
    p.add_argument("--workers", type=_count(0), default=0, help="sandboxes running at once (default: cores)")
    p.add_argument("--backend", choices=sandbox_settings.BACKEND.choices, default=sandbox_settings.BACKEND.default)
    p.set_defaults(func=cmd_backfill)

    p = add("series", help="the cohort series' commits: register a branch's history without measuring it")
    series_sub = p.add_subparsers(dest="series_command", required=True)
    q = series_sub.add_parser(
        "register",
        help="make a branch's first-parent commits known as main_commits partitions, measuring nothing",
        description="Register the chosen commits as partitions of cohort_series (oldest first) so a range "
        "can be selected and backfilled from the Dagster UI; nothing runs.",
    )
    add_commit_selection(q)
    q.set_defaults(func=cmd_series_register)

    p = add("candidates", help="candidate configurations: add, list, measure (frontier + promotion gate)")
    actions = p.add_subparsers(dest="action", required=True)
    for action, text in (
        ("add", "store one candidate (a ref of the agent repo and a model)"),
        ("list", "list a repository's candidates (its .evals/candidates.yaml and added ones)"),
        ("measure", "measure candidates on the same inputs, then the frontier and the promotion gate"),
    ):
        q = actions.add_parser(action, help=text)
        q.add_argument("--repo", required=True, help="local path or clone URL")
        q.add_argument("--repo-id", default=None, help="owner/name (default: from the URL, or local/<dir>)")
        if action == "add":
            q.add_argument("--name", required=True, help="candidate name, e.g. runbook-skill")
            q.add_argument("--ref", default=None, help="branch, tag or SHA it runs (default: the default branch)")
            q.add_argument(
                "--model",
                default=None,
                help="Inspect model (default: the one the agent config at --ref names, else simagent/support-agent)",
            )
            q.add_argument("--model-arg", action="append", default=[], help="KEY=VALUE model argument (repeatable)")
            q.add_argument(
                "--set",
                action="append",
                default=[],
                metavar="KEY=VALUE",
                help="override a top-level key of the agent config at --ref, VALUE parsed as YAML/JSON, e.g. "
                "--set 'skills=[triage, status-updates, runbook]' (repeatable; not model/model_args: use --model)",
            )
            q.add_argument("--description", default="", help="what the candidate changes")
            q.add_argument("--reference", action="store_true", help="make it the reference candidate")
        if action == "measure":
            q.add_argument("--name", action="append", default=[], help="measure only this candidate (repeatable)")
            q.add_argument("--workers", type=_count(0), default=0, help="sandboxes running at once (default: cores)")
            q.add_argument(
                "--backend", choices=sandbox_settings.BACKEND.choices, default=sandbox_settings.BACKEND.default
            )
        q.set_defaults(func=cmd_candidates)

    p = add("finetune", help="fine-tunes: export a training set, register (train, measure, notify), list")
    actions = p.add_subparsers(dest="action", required=True)
    q = actions.add_parser("export", help="write a training set (chat JSONL) from the lake")
    q.add_argument("--repo", required=True, help="local path or clone URL")
    q.add_argument("--repo-id", default=None, help="owner/name (default: from the URL, or local/<dir>)")
    q.add_argument("--branch", default="main", help="whose first-parent commits the selection gets as $commits")
    q.add_argument("--sql", default=None, help="selection SQL file (default: sql/finetune_training_samples.sql)")
    q.add_argument("--out", required=True, help="the JSONL file to write (provenance goes beside it)")
    q.set_defaults(func=cmd_finetune)
    q = actions.add_parser("register", help="train (or take --model), measure against the reference, notify")
    q.add_argument("--repo", required=True, help="local path or clone URL")
    q.add_argument("--repo-id", default=None, help="owner/name (default: from the URL, or local/<dir>)")
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
    q.add_argument("--repo-id", required=True, help="owner/name of the repository the fine-tune is registered for")
    q.add_argument("--name", required=True, help="the fine-tune's name")
    q.add_argument("--base", default=None, help="the PR's base branch (default: the repository's default branch)")
    q.set_defaults(func=cmd_finetune)
    q = actions.add_parser("list", help="list registered fine-tunes")
    q.add_argument("--repo-id", default=None, help="only this repository's (owner/name; default: every repository)")
    q.set_defaults(func=cmd_finetune)

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

    p = add("view", help="open Inspect's log viewer on the lake's raw logs")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.set_defaults(func=cmd_view)

    p = add(
        "serve",
        help="run the GitHub webhook receiver beside `dagster dev`",
        description="Run the GitHub webhook receiver (POST /webhooks/github) and, unless "
        "--webhook-only, the Dagster UI and daemon on the same home and lake.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address the webhook receiver binds")
    p.add_argument("--port", type=int, default=8787, help="port of the webhook receiver")
    p.add_argument("--dagster-port", type=int, default=3000, help="port of the Dagster UI")
    p.add_argument("--webhook-only", action="store_true", help="only the receiver (e.g. in Kubernetes)")
    p.add_argument(
        "--no-run-api",
        action="store_true",
        help="do not serve the SWE run API (/v1/runs, /v1/leaderboard; token from EVALRUNNER_API_TOKEN)",
    )
    p.add_argument("--insecure", action="store_true", help="accept unsigned deliveries (loopback only)")
    p.set_defaults(func=cmd_serve)

    p = add("swe", help="SWE-style task sets: register, run an agent version, read the leaderboard")
    swe = p.add_subparsers(dest="swe_command", required=True, parser_class=_Parser)
    s = swe.add_parser("example-repo", help="build the bundled tinystats repository (git) at DEST")
    s.add_argument("dest")
    s = swe.add_parser("register", help="register a task set and run its gold check")
    s.add_argument("--spec", required=True, help="task-set file (e.g. examples/swe-tinystats/taskset.json)")
    s.add_argument("--repo", required=True, help="where the repository is fetched from (path or URL)")
    s.add_argument("--gold-runs", type=_count(3, " (a gold check needs 3 runs or more)"), default=3)
    s.add_argument("--backend", default="bubblewrap", choices=("bubblewrap", "unsafe-local"))
    s = swe.add_parser("run", help="run an agent version on a task set in this process (waits; idempotent)")
    s.add_argument("--agent-version", required=True)
    s.add_argument("--task-set", required=True)
    s.add_argument("--samples", type=_count(1), default=1)
    s.add_argument("--budget-usd", type=float, required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--prompt-version", default="v1")
    s = swe.add_parser("leaderboard", help="print a task set's leaderboard as JSON")
    s.add_argument("--task-set", required=True)
    s.add_argument("--reference", default=None)
    p.set_defaults(func=cmd_swe)

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

    p = add("envs", help="repository environments on Kubernetes: delete claims past their retention")
    envs_sub = p.add_subparsers(dest="envs_command", required=True, parser_class=_Parser)
    q = envs_sub.add_parser(
        "prune",
        help="delete environment claims no pod has mounted for the retention (they are rebuilt on next use)",
        description="Delete the environment claims (evalrunner-env-<digest>) of the sandbox namespace whose last "
        "use is older than the retention, that no pod mounts and whose build Job does not exist; print each "
        "claim with what was done and why. Settings come from the evalrunner-env ConfigMap's variables "
        f"({sandbox_settings.NAMESPACE.env}, {sandbox_settings.ENV_RETAIN_DAYS.env}); the sampling sensor runs the same "
        "sweep every 10 minutes.",
    )
    q.add_argument("--dry-run", action="store_true", help="print what would be deleted; delete nothing")
    q.add_argument(
        "--retain-days",
        type=float,
        default=None,
        help=f"keep claims used within this many days (default: ${sandbox_settings.ENV_RETAIN_DAYS.env}, "
        f"else {sandbox_settings.ENV_RETAIN_DAYS.default:g})",
    )
    q.add_argument(
        "--namespace",
        default=None,
        help=f"sandbox namespace (default: ${sandbox_settings.NAMESPACE.env}, else {sandbox_settings.NAMESPACE.default})",
    )
    q.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
    q.add_argument("--context", default=None, help="kubeconfig context")
    q.set_defaults(func=cmd_envs)

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
        raise
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


if __name__ == "__main__":
    sys.exit(main())
