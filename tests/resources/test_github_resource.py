"""The GitHub client and resource (PyGithub) against a GitHub REST stand-in on loopback."""

from __future__ import annotations

import logging

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from evalrunner_assets.report import check_run_state
from resources._github_client import (
    CHECK_RUN_NAME,
    DEFAULT_MARKER,
    GitHubClient,
    GitHubCredentials,
    GitHubError,
)
from resources.github import GitHubResource
from tests.helpers.github_standin import GitHubStandin

REPO = "acme/support-agent"
TOKEN = "ghp_standin_token_value"
PR = 7
HEADS = ["1" * 40, "2" * 40, "3" * 40]
BASE = "b" * 40


@pytest.fixture
def gh():
    standin = GitHubStandin(token=TOKEN)
    standin.add_repo(REPO)
    standin.add_pull(REPO, PR, HEADS[0], BASE, files=[f"skills/s{i:03d}/SKILL.md" for i in range(350)])
    with standin:
        yield standin


def make_client(gh: GitHubStandin, **kw) -> GitHubClient:
    kw.setdefault("backoff_seconds", 0.01)
    kw.setdefault("throttle", False)
    return GitHubClient(GitHubCredentials(token=TOKEN), base_url=gh.base_url, **kw)


def report(client: GitHubClient, head: str, verdict: str, done: int, planned: int) -> tuple[int, int]:
    """What the report step does for one push: check run through completion, comment upserted."""
    status, conclusion, title = check_run_state("RUNNING", 0, planned)
    run_id = client.start_check_run(REPO, head, title, "sampling head and base")
    client.update_check_run(
        REPO,
        run_id,
        *check_run_state("RUNNING", done // 2, planned)[:2],
        title=check_run_state("RUNNING", done // 2, planned)[2],
        summary="halfway",
    )
    status, conclusion, title = check_run_state(verdict, done, planned)
    comment_id = client.upsert_pr_comment(REPO, PR, f"## evalrunner\n{verdict} at `{head[:7]}`")
    client.update_check_run(
        REPO, run_id, status, conclusion, title=title, summary=f"verdict {verdict}", text="| task | delta |\n|---|---|"
    )
    return run_id, comment_id


def test_three_pushes_keep_one_comment_and_complete_each_check_run(gh):
    client = make_client(gh)
    gh.add_comment(REPO, PR, "unrelated review comment")
    outcomes = []
    for head, verdict in zip(HEADS, ["IMPROVED", "REGRESSED", "UNCHANGED"]):
        gh.push(REPO, PR, head)
        outcomes.append(report(client, head, verdict, done=40, planned=40))

    comment_ids = {c for _, c in outcomes}
    ours = [c for c in gh.comments_on(REPO, PR) if DEFAULT_MARKER in c["body"]]
    assert len(comment_ids) == 1 and [c["id"] for c in ours] == list(comment_ids)
    assert len(gh.comments_on(REPO, PR)) == 2  # ours + the unrelated one
    assert ours[0]["body"].startswith(DEFAULT_MARKER) and "UNCHANGED at `3333333`" in ours[0]["body"]
    assert len(gh.calls("POST", "/comments")) == 1 and len(gh.calls("PATCH", "/issues/comments/")) == 2

    expected = {HEADS[0]: "success", HEADS[1]: "failure", HEADS[2]: "success"}
    for head, conclusion in expected.items():
        (run,) = gh.check_runs_for(REPO, head)
        assert run["name"] == CHECK_RUN_NAME
        assert run["_history"][0] == ("in_progress", None)
        assert run["_history"][-1] == ("completed", conclusion)
        assert run["completed_at"] is not None
    assert gh.check_runs_for(REPO, HEADS[1])[0]["output"]["title"] == "regressed · 40 samples"
    assert gh.check_runs_for(REPO, HEADS[2])[0]["output"]["text"].startswith("| task")


def test_one_check_run_per_head_found_whatever_its_status(gh):
    client = make_client(gh)
    first = client.start_check_run(REPO, HEADS[0], "running · 0 of 8 samples", "s")
    assert client.start_check_run(REPO, HEADS[0], "running · 0 of 8 samples", "s") == first
    decided = dict(title="inconclusive · 8 samples", summary="s", text="| t |\n|---|")
    assert client.report_check_run(REPO, HEADS[0], "completed", "neutral", **decided) == first
    patches = len(gh.calls("PATCH", "/check-runs/"))

    # `/eval more` on a decided head with nothing to run: the same verdict again is no write.
    assert client.report_check_run(REPO, HEADS[0], "completed", "neutral", **decided) == first
    assert len(gh.calls("PATCH", "/check-runs/")) == patches

    # More samples will run: the completed run is re-opened, not replaced by a second one.
    assert (
        client.report_check_run(
            REPO, HEADS[0], "in_progress", title="running · 8 of 16 samples", summary="more samples"
        )
        == first
    )
    (run,) = gh.check_runs_for(REPO, HEADS[0])
    assert (run["status"], run["conclusion"]) == ("in_progress", None)
    assert (
        client.report_check_run(REPO, HEADS[0], "completed", "success", title="improved · 16 samples", summary="s")
        == first
    )
    (run,) = gh.check_runs_for(REPO, HEADS[0])
    # (the second start with the same output wrote nothing either)
    assert run["_history"] == [
        ("in_progress", None),
        ("completed", "neutral"),
        ("in_progress", None),
        ("completed", "success"),
    ]
    assert len(gh.calls("POST", "/check-runs")) == 1
    # start_check_run on a completed head re-opens it too (it is called when samples will run).
    assert client.start_check_run(REPO, HEADS[0], "running · 16 of 24 samples", "s") == first
    assert [r["status"] for r in gh.check_runs_for(REPO, HEADS[0])] == ["in_progress"]


def test_check_run_state_mapping():
    assert check_run_state("RUNNING", 3, 10) == ("in_progress", None, "running · 3 of 10 samples")
    assert check_run_state("IMPROVED", 10, 10)[:2] == ("completed", "success")
    assert check_run_state("unchanged", 10, 10)[:2] == ("completed", "success")
    assert check_run_state("INCONCLUSIVE", 10, 10)[:2] == ("completed", "neutral")
    assert check_run_state("REGRESSED", 10, 10)[:2] == ("completed", "failure")
    with pytest.raises(ValueError, match="'MAYBE'"):
        check_run_state("MAYBE", 1, 1)


def test_a_marker_in_someone_elses_comment_is_not_edited(gh):
    client = make_client(gh)
    gh.add_comment(REPO, PR, f"quoting the bot: {DEFAULT_MARKER}", login="reviewer")
    cid = client.upsert_pr_comment(REPO, PR, "verdict")
    assert gh.state.comments[cid]["user"]["login"] == "evalrunner-user"
    assert client.upsert_pr_comment(REPO, PR, "verdict 2") == cid
    assert len(gh.comments_on(REPO, PR)) == 2


def test_changed_files_are_paginated_and_capped(gh):
    client = make_client(gh)
    files = client.changed_files(REPO, PR)
    assert files == [f"skills/s{i:03d}/SKILL.md" for i in range(300)]
    assert len(gh.calls("GET", "/files")) == 3  # 100 per page
    assert client.changed_files(REPO, PR, cap=5) == files[:5]


def test_transient_502s_and_rate_limits_are_retried(gh):
    slept: list[float] = []
    client = make_client(gh, sleep=slept.append)
    gh.inject(502, times=2, method="POST", path="/check-runs$")
    run_id = client.start_check_run(REPO, HEADS[0], "t", "s")
    assert len(gh.check_runs_for(REPO, HEADS[0])) == 1 and len(slept) == 2

    gh.inject(kind="primary", method="GET", path="/comments$")
    gh.inject(kind="secondary", method="PATCH", path="/check-runs/")
    gh.inject(kind="429", method="GET", path="/files$")
    client.upsert_pr_comment(REPO, PR, "x")
    client.update_check_run(REPO, run_id, "in_progress", title="t", summary="s")
    assert len(client.changed_files(REPO, PR, cap=1)) == 1
    primary_wait = slept[2]
    assert 0 < primary_wait <= 2.5  # until x-ratelimit-reset (the stand-in resets in ~1 s)
    assert slept[3:] == [0.0, 0.0]  # retry-after: 0


def test_a_create_whose_response_was_lost_is_not_duplicated(gh):
    client = make_client(gh, sleep=lambda s: None)
    gh.inject(kind="after", method="POST", path="/check-runs$")
    gh.inject(kind="after", method="POST", path="/comments$")
    run_id = client.start_check_run(REPO, HEADS[0], "t", "s")
    cid = client.upsert_pr_comment(REPO, PR, "body")
    assert [r["id"] for r in gh.check_runs_for(REPO, HEADS[0])] == [run_id]
    assert [c["id"] for c in gh.comments_on(REPO, PR)] == [cid]


def test_permanent_404_is_a_clear_github_error_without_retries(gh):
    client = make_client(gh, sleep=lambda s: pytest.fail("a 404 must not be retried"))
    with pytest.raises(GitHubError) as info:
        client.upsert_pr_comment(REPO, 999, "body")
    err = info.value
    assert err.status == 404 and not err.transient and err.repo == REPO
    assert "#999" in str(err) and REPO in str(err) and "not found" in str(err)
    assert len(gh.calls("GET", "/issues/999/comments")) == 1


def test_bad_credentials_are_a_clear_github_error(gh):
    client = GitHubClient(GitHubCredentials(token="wrong"), base_url=gh.base_url, throttle=False)
    with pytest.raises(GitHubError, match="HTTP 401: the credentials were rejected"):
        client.changed_files(REPO, PR)


def test_exhausted_retries_and_long_rate_limits_are_transient_errors(gh, caplog):
    client = make_client(gh, max_attempts=3, sleep=lambda s: None)
    gh.inject(503, times=3, path="/files$")
    with caplog.at_level(logging.WARNING, logger="evalrunner.github"):
        with pytest.raises(GitHubError, match="after 3 attempts") as info:
            client.changed_files(REPO, PR)
    assert info.value.transient
    assert TOKEN not in caplog.text and "HTTP 503" in caplog.text

    impatient = make_client(gh, max_rate_limit_wait_seconds=0.1)
    gh.inject(kind="primary", path="/files$")
    with pytest.raises(GitHubError, match="rate limited") as info:
        impatient.changed_files(REPO, PR)
    assert info.value.transient and info.value.status == 403


def test_github_app_auth_mints_an_installation_token(tmp_path, monkeypatch):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    standin = GitHubStandin(token=None, app_id=321, app_public_key=public, app_slug="evalrunner-app")
    standin.add_repo(REPO)
    standin.add_pull(REPO, PR, HEADS[0], BASE)
    key_file = tmp_path / "app.pem"
    key_file.write_text(pem)
    with standin:
        monkeypatch.setenv("EVALRUNNER_GITHUB_APP_ID", "321")
        monkeypatch.setenv("EVALRUNNER_GITHUB_PRIVATE_KEY_FILE", str(key_file))
        monkeypatch.setenv("EVALRUNNER_GITHUB_API_URL", standin.base_url)
        resource = GitHubResource(throttle=False, backoff_seconds=0.01)
        assert resource.is_configured() and resource.describe()["auth"] == "app"
        run_id = resource.start_check_run(REPO, HEADS[0], "running · 0 of 4 samples", "s")
        resource.update_check_run(REPO, run_id, "completed", "success", title="improved", summary="s")
        cid = resource.upsert_pr_comment(REPO, PR, "hello")
        assert resource.upsert_pr_comment(REPO, PR, "hello again") == cid
    assert standin.state.comments[cid]["user"]["login"] == "evalrunner-app[bot]"
    assert len(standin.calls("POST", "/access_tokens")) == 1  # one token, reused
    assert len(standin.calls("GET", "/installation")) == 1
    assert standin.check_runs_for(REPO, HEADS[0])[0]["_history"][-1] == ("completed", "success")
    assert pem not in repr(resource.credentials())


def test_resource_reads_a_mounted_token_file_and_is_unconfigured_without_one(gh, tmp_path, monkeypatch):
    for name in (
        "EVALRUNNER_GITHUB_TOKEN",
        "EVALRUNNER_GITHUB_TOKEN_FILE",
        "EVALRUNNER_GITHUB_APP_ID",
        "EVALRUNNER_GITHUB_PRIVATE_KEY",
        "EVALRUNNER_GITHUB_PRIVATE_KEY_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    assert not GitHubResource().is_configured()
    with pytest.raises(GitHubError, match="no GitHub credentials"):
        GitHubResource().get_client()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    resource = GitHubResource(base_url=gh.base_url, token_file=str(token_file), throttle=False)
    assert resource.describe() == {"auth": "token", "base_url": gh.base_url, "check_run": CHECK_RUN_NAME}
    assert resource.pull_request(REPO, PR).head_sha == HEADS[0]
    assert len(resource.changed_files(REPO, PR, cap=10)) == 10


def test_an_issue_is_opened_with_its_title_and_body_and_numbered_after_the_pulls(gh):
    client = make_client(gh)
    url = client.create_issue(REPO, "Fine-tune runbook-v1", "| eval | current |\n|---|---|")
    (issue,) = gh.issues_on(REPO)
    assert (issue["title"], issue["body"]) == ("Fine-tune runbook-v1", "| eval | current |\n|---|---|")
    assert issue["number"] == PR + 1 and url == issue["html_url"] and url.endswith(f"/issues/{PR + 1}")
    with pytest.raises(GitHubError) as info:
        client.create_issue("acme/missing", "t", "b")
    assert info.value.status == 404


def _bare_repo_with_agent_config(root) -> tuple[str, str]:
    """A bare git repository whose main holds agent.yaml (and a skill); (its path, main's SHA)."""
    import subprocess

    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@example.com",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@example.com",
    }
    work = root / "work"
    (work / "skills" / "t").mkdir(parents=True)
    (work / "agent.yaml").write_text("name: agent\nmodel: simagent/support-agent  # the model\nskills: [t]\n")
    (work / "skills" / "t" / "SKILL.md").write_text("be kind\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=work, env=env, check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(root / "bare.git")], env=env, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, env=env, check=True, capture_output=True, text=True)
    return str(root / "bare.git"), sha.stdout.strip()


def test_a_one_file_pr_on_the_github_com_mock_is_one_real_commit_and_a_retry_finds_it(tmp_path):
    git_dir, main = _bare_repo_with_agent_config(tmp_path)
    standin = GitHubStandin(token=TOKEN)
    standin.add_repo(REPO, git_dir=git_dir)
    edits = []

    def edit(path: str, text: str) -> str:
        edits.append(path)
        return text.replace("simagent/support-agent ", "simagent/support-agent-ft ")

    with standin:
        client = make_client(standin)
        kwargs = dict(
            branch="eval-runner/activate-v1",
            paths=("agent.yml", "agent.yaml", "agent.json"),
            edit=edit,
            message="Activate v1\n",
            title="Activate fine-tune v1",
            body="one line",
        )
        opened = client.open_file_change_pr(REPO, **kwargs)
        assert edits == ["agent.yaml"]  # agent.yml does not exist: the first that does is edited
        assert opened.created and opened.base_ref == "main" and opened.base_sha == main
        assert opened.path == "agent.yaml" and opened.branch == "eval-runner/activate-v1"
        # A real commit on the branch, its parent main, changing one line of one file.
        assert standin.git(REPO, "rev-parse", "refs/heads/eval-runner/activate-v1") == opened.head_sha
        assert standin.git(REPO, "rev-parse", f"refs/pull/{opened.number}/head") == opened.head_sha
        assert standin.git(REPO, "rev-parse", f"{opened.head_sha}^") == main
        assert standin.git(REPO, "diff", "--numstat", main, opened.head_sha) == "1\t1\tagent.yaml"
        shown = standin.git(REPO, "show", f"{opened.head_sha}:agent.yaml")
        assert "model: simagent/support-agent-ft  # the model" in shown
        pulls = standin.pulls_on(REPO)
        assert [(p["number"], p["head"]["sha"], p["base"]["sha"], p["title"]) for p in pulls] == [
            (opened.number, opened.head_sha, main, "Activate fine-tune v1")
        ]
        assert client.changed_files(REPO, opened.number) == ["agent.yaml"]
        # Again (a retry after a lost response): the open PR is found, nothing is committed twice.
        again = client.open_file_change_pr(REPO, **kwargs)
        assert not again.created and again.number == opened.number and again.head_sha == opened.head_sha
        assert len(standin.pulls_on(REPO)) == 1
        assert standin.git(REPO, "rev-list", "--count", "refs/heads/eval-runner/activate-v1") == "2"
        # An edit that refuses (e.g. the model is already active) opens nothing.
        with pytest.raises(ValueError, match="already active"):
            client.open_file_change_pr(
                REPO, **{**kwargs, "branch": "eval-runner/activate-v2", "edit": _refuse("already active")}
            )
        assert len(standin.pulls_on(REPO)) == 1
        with pytest.raises(GitHubError, match=r"none of agent.toml exists in acme/support-agent at main"):
            client.open_file_change_pr(REPO, **{**kwargs, "branch": "eval-runner/x", "paths": ("agent.toml",)})


def _refuse(message: str):
    def edit(path: str, text: str) -> str:
        raise ValueError(message)

    return edit
