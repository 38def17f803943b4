"""The guarantee of evalrunner wild import: a corpus with planted personal values (names,
emails, phones, IBANs, cards, addresses, order ids, keys, internal hosts) is imported and a PR
opened on the stand-in GitHub; no planted value appears in any file written, the PR's files or
body, the lake/home, the logs, or the terminal output."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import pytest

from bench._wild_corpus import leaks, write_corpus
from evalrunner_assets.cli import main
from evalrunner_assets.example_repo import build_example_repo
from tests.helpers.github_standin import GitHubStandin

REPO = "example/support-agent"


def _all_text(root: Path) -> str:
    parts = []
    for p in root.rglob("*"):
        if p.is_file():
            parts.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


@pytest.mark.slow
def test_no_planted_value_leaves_redaction_through_the_standin_github(tmp_path, capsys, caplog, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("EVALRUNNER_HOME", str(home))
    repo = build_example_repo(tmp_path / "repo", variants=()).path
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    corpus_path = tmp_path / "corpus" / "traces.jsonl"
    corpus_path.parent.mkdir()
    corpus = write_corpus(corpus_path, 25, seed=5)
    assert leaks(corpus_path.read_text(), corpus)  # the check can fail: the input holds them all
    standin = GitHubStandin(token="wild-token")
    standin.add_repo(REPO, git_dir=bare)
    caplog.set_level(logging.DEBUG)
    with standin:
        monkeypatch.setenv("EVALRUNNER_GITHUB_TOKEN", "wild-token")
        monkeypatch.setenv("EVALRUNNER_GITHUB_API_URL", standin.base_url)
        code = main(["wild", "import", str(corpus_path), "--repo", str(repo), "--repo-id", REPO, "--yes",
                     "--cohort", "customer-reported/2026-Q4", "--expect-contains", "refund",
                     "--html", str(tmp_path / "out" / "preview.html")])  # fmt: skip
        out = capsys.readouterr()
        assert code == 0, out.err
        [pull] = standin.pulls_on(REPO)
        head = pull["head"]["sha"]
        changed = standin.git(REPO, "diff", "--name-only", pull["base"]["sha"], head).splitlines()
        pr_files = "\n".join(standin.git(REPO, "show", f"{head}:{p}") for p in changed)
        data_files = [standin.git(REPO, "show", f"{head}:{p}") for p in changed if p.endswith(".json")]
    assert ".evals/list" in changed and any(p.startswith("evals/wild/") for p in changed)
    assert "customer-reported/2026-Q4" in pr_files and "{{person_1}}" in pr_files
    # Every trace is a source of one eval (near-duplicates merged; the distractor sentences differ).
    assert sum(json.loads(text)["sources"] for text in data_files) == 25
    assert pull["body"].count("| `wild/") == len(data_files)
    assert leaks(pr_files, corpus) == []
    assert leaks(pull["body"] + pull["title"], corpus) == []
    assert leaks(out.out + out.err, corpus) == []
    assert leaks("\n".join(r.getMessage() for r in caplog.records), corpus) == []
    assert leaks(_all_text(tmp_path / "out"), corpus) == []
    assert not home.exists() or leaks(_all_text(home), corpus) == []
    # The local checkout is untouched: the eval went out as a PR only.
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""
