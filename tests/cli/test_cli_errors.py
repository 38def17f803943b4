"""What `evalrunner` prints when a command cannot succeed, as a person sees it: the real console
script in a subprocess, on throwaway git repositories, with real bubblewrap discovery.

A user error is one or two lines on stderr naming the input, exit code 2 and no traceback
(unless --debug); Ctrl-C is exit 130 at any moment, a long DuckDB query included."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.evalrunner_cli import EVALRUNNER, TIMEOUT, cli_env
from tests.helpers.git_repos import commit_files, git
from tests.helpers.github_standin import free_port
from tests.helpers.signals import default_sigint

BAD_LISTS = {
    "list-exits-non-zero": (
        "#!/bin/sh\necho 'cannot find the task files' >&2\nexit 3\n",
        ["exited with code 3", "cannot find the task files"],
    ),
    "list-prints-invalid-json": ("#!/bin/sh\necho '{not json'\n", ["not valid JSON", "line 1 column 2"]),
    "list-violates-the-schema": (
        '#!/bin/sh\necho \'{"version": 1, "tasks": [{"id": "t"}]}\'\n',
        ["$.tasks[0]", "'spec' is a required property"],
    ),
    # a user error (exit 2), not the outage the sandbox's failure to start it read as (exit 3)
    "list-has-windows-line-endings": (
        "#!/bin/sh\r\necho '{}'\r\n",
        ["Windows (CRLF) line endings", "'/bin/sh\\r'"],
    ),
    "list-names-a-missing-interpreter": (
        "#!/usr/local/bin/no-such-shell\necho '{}'\n",
        ["could not be started", "no-such-shell", "No such file or directory"],
    ),
    "list-imports-a-missing-module": (
        "#!/usr/bin/env python3\nimport evalrunner_no_such_module_xyz\n",
        ["ModuleNotFoundError", "evalrunner_no_such_module_xyz"],
    ),
}


@dataclass
class Case:
    """One user error: the arguments after `evalrunner`, and what stderr must name."""

    argv: list[str]
    names: list[str]
    env: dict[str, str] = field(default_factory=dict)


def _repo_with_list(path: Path, list_text: str) -> Path:
    """A repository whose base (``main``) and head (``pr``) commits both carry ``list_text`` as
    `.evals/list`."""
    commit_files(path, {".evals/list": list_text, "README.md": "base\n"}, executable=(".evals/list",))
    commit_files(path, {"README.md": "head\n"})
    git(path, "branch", "pr")
    git(path, "checkout", "-q", "HEAD~1")
    git(path, "branch", "-f", "main", "HEAD")  # main is the base: base and head are two commits
    return path


def _case(name: str, tmp_path: Path) -> Case:
    if name in BAD_LISTS:
        text, names = BAD_LISTS[name]
        repo = _repo_with_list(tmp_path / name, text)
        return Case(["compare", "--repo", str(repo), "--base", "main", "--head", "pr"], [".evals/list", *names])
    good = tmp_path / "good"
    if name in ("bad-ref", "bad-cap"):
        commit_files(good, {"README.md": "x\n"})
    if name == "bad-ref":
        return Case(
            ["compare", "--repo", str(good), "--base", "main", "--head", "no-such-branch"], ["--head", "no-such-branch"]
        )
    if name == "missing-repo-path":
        missing = str(tmp_path / "nope")
        return Case(["compare", "--repo", missing, "--base", "main", "--head", "pr"], ["--repo", missing])
    if name == "repo-is-not-git":
        plain = tmp_path / "plain"
        plain.mkdir()
        return Case(
            ["compare", "--repo", str(plain), "--base", "main", "--head", "pr"],
            ["--repo", str(plain), "not a git repository"],
        )
    if name == "repo-is-a-subdirectory":
        # a monorepo's agent directory: read from the root, its .evals/list would be ignored
        commit_files(tmp_path / "mono", {"agents/qa/.evals/list": "#!/bin/sh\n", "README.md": "x\n"})
        sub = str(tmp_path / "mono" / "agents" / "qa")
        return Case(
            ["compare", "--repo", sub, "--base", "main", "--head", "main"],
            ["--repo", "subdirectory 'agents/qa/'", f"give --repo the repository's root, {tmp_path / 'mono'} "],
        )
    if name == "bad-cap":
        return Case(["compare", "--repo", str(good), "--base", "main", "--head", "main", "--cap", "3"], ["--cap", "3"])
    if name == "alpha-not-an-error-rate":
        return Case(
            ["compare", "--repo", ".", "--base", "main", "--head", "main", "--alpha", "0.7"], ["--alpha", "0.7"]
        )
    if name == "cap-not-a-number":
        return Case(
            ["compare", "--repo", ".", "--base", "main", "--head", "main", "--cap", "lots"], ["--cap", "'lots'"]
        )
    if name in ("base-is-head", "base-and-head-are-one-commit"):
        sha = commit_files(good, {"README.md": "x\n"})
        head = "main" if name == "base-is-head" else "pr"
        git(good, "branch", "pr")
        return Case(
            ["compare", "--repo", str(good), "--base", "main", "--head", head],
            [f"--base main and --head {head}", sha[:12], "--head"],
        )
    if name == "fail-on-not-a-verdict":
        return Case(
            ["compare", "--repo", ".", "--base", "main", "--head", "pr", "--fail-on", "regressed,unchanged"],
            ["--fail-on", "'unchanged' is not a verdict", "regressed, broken, inconclusive, or never"],
        )
    if name == "fail-on-never-with-a-verdict":
        return Case(
            ["demo", "--fail-on", "never,broken"], ["--fail-on", "'never,broken'", "never means no verdict blocks"]
        )
    if name == "backfill-epochs-zero":
        return Case(["backfill", "--repo", ".", "--last", "3", "--epochs", "0"], ["--epochs", "0 is below 1"])
    if name == "backfill-half-width-too-wide":
        return Case(["backfill", "--repo", ".", "--last", "3", "--half-width", "0.7"], ["--half-width", "0.7"])
    if name == "backfill-cap-not-a-number":
        return Case(["backfill", "--repo", ".", "--last", "3", "--cap", "lots"], ["--cap", "'lots'"])
    if name == "sql-syntax-error":
        (tmp_path / "home" / "lake").mkdir(parents=True)
        return Case(["sql", "selec count(*) from samples"], ["syntax error", "selec"])
    if name == "sql-on-a-missing-lake":
        return Case(["sql", "select 1"], ["no lake at", str(tmp_path / "home" / "lake")])
    if name == "view-on-a-missing-lake":
        lake = str(tmp_path / "elsewhere" / "lake")
        return Case(["view"], ["no lake at", lake], env={"EVALRUNNER_LAKE": lake})
    if name == "serve-without-a-webhook-secret":
        return Case(
            ["serve", "--webhook-only", "--port", str(free_port())], ["EVALRUNNER_WEBHOOK_SECRET", "--insecure"]
        )
    if name == "serve-with-a-web-url-that-is-no-url":
        return Case(
            ["serve", "--webhook-only", "--insecure", "--port", str(free_port())],
            ["EVALRUNNER_WEB_URL='evalrunner.example.com/web'", "is not an http(s) URL"],
            env={"EVALRUNNER_WEB_URL": "evalrunner.example.com/web"},
        )
    if name == "serve-with-an-inspect-view-url-that-is-no-url":
        return Case(
            ["serve", "--webhook-only", "--insecure", "--port", str(free_port())],
            ["EVALRUNNER_INSPECT_VIEW_URL='127.0.0.1:7575'", "is not an http(s) URL"],
            env={"EVALRUNNER_INSPECT_VIEW_URL": "127.0.0.1:7575"},
        )
    if name == "serve-with-an-inspect-view-port-that-is-no-port":
        return Case(
            ["serve", "--webhook-only", "--insecure", "--port", str(free_port()), "--inspect-view-port", "70000"],
            ["--inspect-view-port 70000 is not a port"],
        )
    raise AssertionError(name)


def _run(argv: list[str], tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [EVALRUNNER, *argv],
        env=cli_env(tmp_path / "home", **env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


FAST = [
    "bad-ref",
    "missing-repo-path",
    "repo-is-not-git",
    "repo-is-a-subdirectory",
    "bad-cap",
    "cap-not-a-number",
    "alpha-not-an-error-rate",
    "base-is-head",
    "base-and-head-are-one-commit",
    "fail-on-not-a-verdict",
    "fail-on-never-with-a-verdict",
    "backfill-epochs-zero",
    "backfill-half-width-too-wide",
    "backfill-cap-not-a-number",
    "sql-syntax-error",
    "sql-on-a-missing-lake",
    "view-on-a-missing-lake",
    "serve-without-a-webhook-secret",
    "serve-with-a-web-url-that-is-no-url",
    "serve-with-an-inspect-view-url-that-is-no-url",
    "serve-with-an-inspect-view-port-that-is-no-port",
]
IN_SANDBOX = [pytest.param(name, marks=pytest.mark.slow) for name in BAD_LISTS]


@pytest.mark.parametrize("name", FAST + IN_SANDBOX)
@pytest.mark.slow
def test_a_user_error_is_two_lines_naming_the_input_with_exit_code_2(name: str, tmp_path: Path) -> None:
    case = _case(name, tmp_path)
    done = _run(case.argv, tmp_path, case.env)
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert 1 <= len(lines) <= 2, done.stderr
    for expected in case.names:
        assert expected in done.stderr, (expected, lines)


@pytest.mark.parametrize("name", ["bad-ref", pytest.param("list-imports-a-missing-module", marks=pytest.mark.slow)])
@pytest.mark.slow
def test_debug_prints_the_traceback_of_a_user_error(name: str, tmp_path: Path) -> None:
    case = _case(name, tmp_path)
    done = _run(["--debug", *case.argv], tmp_path, case.env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback (most recent call last)" in done.stderr
    assert case.names[-1] in done.stderr.splitlines()[-2]  # the two lines still end the output


@pytest.mark.slow
def test_debug_after_the_command_and_from_the_environment(tmp_path: Path) -> None:
    case = _case("bad-ref", tmp_path)
    after = _run([*case.argv, "--debug"], tmp_path, case.env)
    from_env = _run(case.argv, tmp_path, {**case.env, "EVALRUNNER_DEBUG": "1"})
    for done in (after, from_env):
        assert done.returncode == 2 and "Traceback (most recent call last)" in done.stderr, done.stderr[-2000:]


def test_ctrl_c_during_a_long_sql_query_exits_130_without_a_traceback(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "lake").mkdir(parents=True)
    # Far more rows than can be summed before the signal: the query is cancelled, not finished.
    query = "select sum(hash(range)) from range(1000000000000)"
    proc = subprocess.Popen(
        [EVALRUNNER, "sql", query],
        env=cli_env(home),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        started = proc.stderr.readline()  # type: ignore[union-attr]  # printed once the query runs
        assert "query running" in started, started + proc.stderr.read()  # type: ignore[union-attr]
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "cancelled" in err, err
    assert out == ""
    print(f"exited {time.monotonic() - sent:.2f}s after SIGINT")


@pytest.mark.slow
def test_serve_starts_dagster_from_its_own_environment_without_it_on_path(tmp_path: Path) -> None:
    import urllib.request

    port, dagster_port = free_port(), free_port()
    env = cli_env(tmp_path / "home", PATH="/usr/bin:/bin")  # the venv's bin/ is not on PATH
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [EVALRUNNER, "serve", "--insecure", "--port", str(port), "--dagster-port", str(dagster_port)]
        + ["--inspect-view-port", str(free_port())],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{dagster_port}/server_info", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the Dagster webserver never answered"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) in (0, 128 + signal.SIGTERM)
    finally:
        # Whatever is left of the group this test started (webserver, daemon, code servers).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


@pytest.mark.slow
def test_tasks_whose_every_window_failed_name_their_cause_in_the_terminal(tmp_path: Path) -> None:
    from evalrunner_assets.example_repo import build_example_repo

    repo = tmp_path / "repo"
    build_example_repo(repo, [])
    # The PR's solver imports a module nothing provides: every sample of every task fails.
    triage = repo / "evals" / "triage.py"
    text = triage.read_text()
    marker = "    async def solve(state: TaskState, generate: Generate) -> TaskState:\n"
    assert marker in text
    triage.write_text(text.replace(marker, marker + "        import evalrunner_no_such_module_xyz  # noqa\n", 1))
    git(repo, "checkout", "-q", "-b", "broken")
    commit_files(repo, {}, message="solver imports a missing module")

    done = _run(["compare", "--repo", str(repo), "--base", "main", "--head", "broken", "--cap", "16"], tmp_path, {})
    # 4: a verdict that blocks the merge (the PR regressed or broke its tasks); 3: the breaker
    assert done.returncode in (0, 3, 4), done.stderr[-3000:]
    if done.returncode == 4:
        assert "blocks the merge (--fail-on regressed,broken): exit code 4" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    out = done.stdout.splitlines()
    failed = out[out.index("failed (first cause, as the comparison records it):") + 1 :]
    for task in ("triage/runbook_lookup", "triage/escalation_policy", "triage/summary_quality"):
        line = next(ln for ln in failed if ln.strip().startswith(task))
        # The cause the comparison records: the exception itself, or (when the PR's code is held
        # responsible per sample) that every head sample raised.
        assert "head:" in line and ("evalrunner_no_such_module_xyz" in line or "every sample raised" in line), line


def test_an_interrupted_duckdb_query_surfaces_as_keyboard_interrupt() -> None:
    """The pipeline's DuckDB calls (``lake.duck``) turn an interrupted query into the
    ``KeyboardInterrupt`` the comparison's cancellation handling expects. The interrupt is
    delivered with DuckDB's own ``interrupt()`` once the query is burning CPU."""
    import threading

    import duckdb

    from lake.duck import interruptible

    con = duckdb.connect()
    con.execute("set enable_progress_bar = false")
    before = time.process_time()

    def interrupt_once_running() -> None:
        while time.process_time() - before < 0.5:  # only the query's threads use CPU here
            time.sleep(0.01)
        con.interrupt()

    threading.Thread(target=interrupt_once_running, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        with interruptible():
            con.sql("select sum(hash(range)) from range(1000000000000)").to_arrow_table()
    con.close()


def _saved_request(tmp_path: Path, **settings: object) -> tuple[Path, object]:
    """A repository with a head branch `pr`, and a comparison of it already requested in the
    home's lake (as an earlier `evalrunner compare` leaves it) with ``settings``."""
    from evalrunner_assets.pipeline.spec import ComparisonRequest, save_request
    from lake import open_lake
    from lake.batch import RunSettings

    repo = tmp_path / "agent"
    base = commit_files(repo, {"README.md": "base\n"})
    git(repo, "checkout", "-q", "-b", "pr")
    head = commit_files(repo, {"README.md": "head\n"})
    fields: dict = {"budget_samples": 64, **settings}
    request = ComparisonRequest.build(
        repo="local/agent",
        source=str(repo),
        pr="local",
        base_sha=base,
        head_sha=head,
        base_ref="main",
        head_ref="pr",
        settings=RunSettings(model="simagent/support-agent", seed=0, epochs=fields.pop("epochs", 1)),
        **fields,
    )
    save_request(open_lake(str(tmp_path / "home" / "lake")), request)
    return repo, request


@pytest.mark.slow
def test_comparing_a_head_again_with_other_settings_is_refused_naming_them(tmp_path: Path) -> None:
    # Silently resuming with the first run's settings printed the old verdict as if for these.
    repo, _ = _saved_request(tmp_path)
    argv = ["compare", "--repo", str(repo), "--base", "main", "--head", "pr", "--epochs", "3", "--seed", "5"]
    done = _run(argv, tmp_path, {})
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--seed 5 (it ran with 0); --epochs 3 (it ran with 1)" in lines[0]
    assert "--pr" in lines[1]
    # The error rate is part of the design: another one would change the boundaries mid-way.
    done = _run([*argv[:7], "--alpha", "0.1"], tmp_path, {})
    assert done.returncode == 2 and "--alpha 0.1 (it ran with 0.05)" in done.stderr, done.stderr[-3000:]


def test_comparing_a_head_again_with_a_new_budget_replaces_the_old_limits(tmp_path: Path, monkeypatch) -> None:
    from evalrunner_assets.cli.compare import _same_comparison_again
    from evalrunner_assets.pipeline.spec import load_request
    from lake import open_lake

    _, saved = _saved_request(tmp_path)
    monkeypatch.setenv("EVALRUNNER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVALRUNNER_LAKE", raising=False)
    _same_comparison_again(saved.model_copy(update={"budget_samples": 200, "budget_usd": 1.5}))
    now = load_request(open_lake(str(tmp_path / "home" / "lake")), saved.repo, saved.pr, saved.head_sha)
    assert (now.budget_samples, now.budget_usd) == (200, 1.5)
    assert now.model_copy(update={"budget_samples": 64, "budget_usd": None}) == saved


@pytest.mark.slow
def test_a_model_inspect_does_not_know_stops_the_comparison_as_a_user_error_naming_it(tmp_path: Path) -> None:
    """Every window fails the same way when --model names a provider the repository's environment
    lacks; that is the request's mistake, not an outage: exit 2, the model named, no traceback."""
    from evalrunner_assets.example_repo import build_example_repo

    repo = tmp_path / "repo"
    build_example_repo(repo, ["no-op-wording"])
    argv = ["compare", "--repo", str(repo), "--base", "main", "--head", "no-op-wording"]
    done = _run([*argv, "--model", "nosuchprovider/v1", "--cap", "16"], tmp_path, {})
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    first = done.stderr.strip().splitlines()[0]
    assert "the model 'nosuchprovider/v1' is not known to Inspect" in first, done.stderr
    assert "no model provider named 'nosuchprovider'" in first and "outage" not in first
    assert "--model" in done.stderr.strip().splitlines()[1]
