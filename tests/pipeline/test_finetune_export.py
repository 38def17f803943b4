"""Fine-tune training sets from a real small lake (real Inspect logs landed as batches): the
selection, the chat-JSONL format, redaction, errors naming the input, the atomic write; and the
trainer hook with a stand-in trainer script."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from evalrunner_assets.driver import finetune as finetune_run
from evalrunner_assets.pipeline import finetune as ft
from lake import BatchKey, land_batch, open_lake
from tests.helpers.inspect_models import probe_batch_key, probe_logs

REPO = "acme/agent"
MAIN = "b" * 40  # on main: the probe's base log (s1, s3 right; s2 wrong; s3 calls a tool)
BRANCH = "a" * 40  # a PR head, not on main


def key(commit: str, epochs: int) -> BatchKey:
    return probe_batch_key(REPO, commit, epochs)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory):
    logs = probe_logs(tmp_path_factory.mktemp("inspect-logs"))
    lake = open_lake(str(tmp_path_factory.mktemp("lake")))
    land_batch(lake, key(MAIN, 1), logs["base"].read_bytes())
    land_batch(lake, key(BRANCH, 2), logs["head"].read_bytes())
    return lake


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_export_writes_the_passing_main_samples_as_openai_chat_jsonl(lake, tmp_path):
    out = tmp_path / "train.jsonl"
    ts = ft.export_training_set(lake, REPO, out, commits=[MAIN], env={})
    lines = _lines(out)
    assert ts.rows == len(lines) == 2  # s1 and s3: s2 answered wrong, the PR head is not on main
    for line in lines:
        assert list(line) == ["messages"]
        assert [m["role"] for m in line["messages"]][0] == "user"
        assert line["messages"][-1]["role"] == "assistant"
        assert all(isinstance(m["content"], str) for m in line["messages"])
    by_question = {line["messages"][0]["content"]: line["messages"] for line in lines}
    assert set(by_question) == {"Please say apple.", "Please use tool and say fig."}
    tool_use = by_question["Please use tool and say fig."]
    call = next(m for m in tool_use if m.get("tool_calls"))["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "lookup"
    topic = json.loads(call["function"]["arguments"])["topic"]
    assert topic.startswith("fig")
    result = next(m for m in tool_use if m["role"] == "tool")
    assert result["tool_call_id"] == call["id"] and result["content"] == topic
    assert tool_use[-1]["content"].endswith(topic)
    # The provenance beside the file: the selection, its parameters, the lake snapshot, the digest.
    recorded = ft.load_training_set(out)
    assert recorded.digest == hashlib.sha256(out.read_bytes()).hexdigest()
    assert recorded.selection == "sql/finetune_training_samples.sql" and "from samples" in recorded.sql
    assert recorded.params == {"repo": REPO, "commits": [MAIN]}
    assert recorded.batches == 2 and len(recorded.lake_snapshot) == 64


def test_env_values_and_credential_lookalikes_are_redacted(lake, tmp_path):
    out = tmp_path / "train.jsonl"
    ft.export_training_set(lake, REPO, out, commits=[MAIN], env={"EVALRUNNER_DEMO_SECRET": "say apple", "X": "fig"})
    text = out.read_text(encoding="utf-8")
    assert "say apple" not in text and "Please [REDACTED]." in text
    assert "fig" in text  # only EVALRUNNER_* values are secrets
    samples = {
        "key sk-proj-AbCdEf0123456789xyz ok": "key [REDACTED] ok",
        "ghp_" + "a" * 36: "[REDACTED]",
        "use github_pat_" + "B" * 30: "use [REDACTED]",
        "AKIAABCDEFGHIJKLMNOP": "[REDACTED]",
        "xoxb-1234567890-abcdef": "[REDACTED]",
        "Authorization: Bearer abcdef0123456789abcd": "Authorization: Bearer [REDACTED]",
        'api_key="s3cr3tvalue99"': 'api_key="[REDACTED]"',
        "PASSWORD: hunter22hunter": "PASSWORD: [REDACTED]",
        "eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeK": "[REDACTED]",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----": "[REDACTED]",
        "the token budget is 4096 tokens; skip-list": "the token budget is 4096 tokens; skip-list",
    }
    for before, after in samples.items():
        assert ft.redact(before) == after, before


def test_an_empty_selection_names_the_selection_and_writes_nothing(lake, tmp_path):
    out = tmp_path / "train.jsonl"
    with pytest.raises(ft.FinetuneError) as err:
        ft.export_training_set(lake, REPO, out, commits=["c" * 40], env={})
    assert "sql/finetune_training_samples.sql found no samples for acme/agent (1 commit(s)" in str(err.value)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_failing_or_incomplete_custom_selection_names_its_file(lake, tmp_path):
    bad = tmp_path / "bad.sql"
    bad.write_text("select no_such_column from samples where repo = $repo")
    with pytest.raises(ft.FinetuneError, match=rf"selection {bad} failed: .*no_such_column"):
        ft.export_training_set(lake, REPO, tmp_path / "o.jsonl", commits=[MAIN], sql_file=bad, env={})
    partial = tmp_path / "partial.sql"
    partial.write_text("select sample_id, epoch from samples")
    with pytest.raises(ft.FinetuneError, match=rf"selection {partial} returns no raw_path column"):
        ft.export_training_set(lake, REPO, tmp_path / "o.jsonl", commits=[MAIN], sql_file=partial, env={})
    with pytest.raises(ft.FinetuneError, match="cannot read the training-set selection"):
        ft.export_training_set(lake, REPO, tmp_path / "o.jsonl", commits=[MAIN], sql_file=tmp_path / "nope.sql")


def test_a_custom_selection_picks_its_own_samples(lake, tmp_path):
    mine = tmp_path / "errors_too.sql"
    mine.write_text(
        "select s.sample_id, s.epoch, b.raw_path from samples s join batches b using (batch) "
        "where s.repo = $repo and s.sample_id = 's2'"
    )
    ts = ft.export_training_set(lake, REPO, tmp_path / "o.jsonl", commits=[], sql_file=mine, env={})
    assert ts.rows == 3  # s2 of main (1 epoch) and of the PR head (2 epochs)
    assert ts.params == {"repo": REPO, "commits": []} and ts.selection == str(mine)


def test_a_failed_write_leaves_the_previous_training_set_whole(lake, tmp_path, monkeypatch):
    out = tmp_path / "train.jsonl"
    out.write_text("previous\n")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        ft.export_training_set(lake, REPO, out, commits=[MAIN], env={})
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl"]  # no temporary file left


def test_a_changed_training_set_is_refused_at_registration(lake, tmp_path):
    out = tmp_path / "train.jsonl"
    ft.export_training_set(lake, REPO, out, commits=[MAIN], env={})
    with out.open("a") as fh:
        fh.write('{"messages": []}\n')
    with pytest.raises(ft.FinetuneError, match="changed since it was exported"):
        ft.load_training_set(out)
    with pytest.raises(ft.FinetuneError, match="has no provenance"):
        stray = tmp_path / "stray.jsonl"
        stray.write_text("{}\n")
        ft.load_training_set(stray)


def test_the_trainer_hook_returns_the_model_id_a_stand_in_trainer_prints(tmp_path):
    standin_trainer = tmp_path / "standin_trainer.py"
    standin_trainer.write_text(
        "import sys\n"
        "lines = open(sys.argv[1]).read().splitlines()\n"
        "print(f'trained on {len(lines)} conversations')\n"
        "print('simagent/support-agent-ft')\n"
    )
    data = tmp_path / "train.jsonl"
    data.write_text('{"messages": []}\n' * 3)
    command = f"{sys.executable} {standin_trainer}"
    assert finetune_run.train(data, env={finetune_run.TRAINER_ENV: command}) == "simagent/support-agent-ft"
    failing = tmp_path / "failing_trainer.py"
    failing.write_text("import sys\nprint('quota exceeded', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(ft.FinetuneError, match="exited 3: quota exceeded"):
        finetune_run.train(data, f"{sys.executable} {failing}")
    with pytest.raises(ft.FinetuneError, match="set EVALRUNNER_FINETUNE_TRAINER or pass --model"):
        finetune_run.train(data, env={})


def test_fine_tune_names_are_checked_before_they_become_lake_paths():
    from lake import LAYOUT
    from lake.layout import LakePathError

    assert LAYOUT.finetune(REPO, "runbook-v1") == "ft/acme/agent/runbook-v1/finetune.json"
    assert LAYOUT.finetune_notification(REPO, "runbook-v1") == "ft/acme/agent/runbook-v1/notification.md"
    with pytest.raises(LakePathError):
        LAYOUT.finetune(REPO, "../escape")
    with pytest.raises(LakePathError):
        LAYOUT.finetune("not-a-repo", "runbook-v1")


def _record(repo: str, name: str, model: str) -> ft.FineTune:
    return ft.FineTune(
        name=name, repo=repo, base_model="simagent/support-agent", model=model, candidate=f"ft-{name}", training_set={}
    )


def test_fine_tune_names_are_per_repository_and_the_first_layout_stays_readable(tmp_path):
    from lake import LAYOUT

    lake = open_lake(str(tmp_path / "lake"))
    ft.save_finetune(lake, _record(REPO, "runbook-v1", "simagent/a"))
    ft.save_finetune(lake, _record("other/agent", "runbook-v1", "simagent/b"))  # same name, other repository
    # A record written before names were per repository: ft/<name>/finetune.json.
    legacy = _record(REPO, "older", "simagent/c").to_dict()
    lake.write_bytes("ft/older/finetune.json", json.dumps(legacy).encode())
    assert lake.exists(LAYOUT.finetune(REPO, "runbook-v1")) and lake.exists(
        LAYOUT.finetune("other/agent", "runbook-v1")
    )
    mine = ft.load_finetunes(lake, REPO)
    assert {k: f.model for k, f in mine.items()} == {(REPO, "older"): "simagent/c", (REPO, "runbook-v1"): "simagent/a"}
    assert set(ft.load_finetunes(lake)) == {(REPO, "older"), (REPO, "runbook-v1"), ("other/agent", "runbook-v1")}
    assert ft.load_finetune(lake, "other/agent", "runbook-v1").model == "simagent/b"
    with pytest.raises(
        ft.FinetuneError, match=r"other/agent has no fine-tune named 'older' \(registered: runbook-v1\)"
    ):
        ft.load_finetune(lake, "other/agent", "older")
    # Saving the legacy record again puts it at the per-repository path, which wins from then on.
    ft.save_finetune(lake, _record(REPO, "older", "simagent/d"))
    assert ft.load_finetune(lake, REPO, "older").model == "simagent/d"


def test_finetune_export_and_list_on_the_command_line(tmp_path, monkeypatch, capsys):
    from evalrunner_assets import cli
    from evalrunner_assets.example_repo import build_example_candidates

    build_example_candidates(tmp_path / "repo")
    monkeypatch.setenv("EVALRUNNER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVALRUNNER_LAKE", raising=False)
    where = ["--repo", str(tmp_path / "repo"), "--repo-id", "example/support-agent"]
    out = tmp_path / "train.jsonl"
    assert cli.main(["finetune", "export", *where, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "sql/finetune_training_samples.sql found no samples for example/support-agent (2 commit(s)" in err
    assert not out.exists()
    assert cli.main(["finetune", "list"]) == 0
    assert capsys.readouterr().out == ""


def test_finetune_activate_on_the_command_line_names_what_is_missing(tmp_path, monkeypatch, capsys):
    from evalrunner_assets import cli

    monkeypatch.setenv("EVALRUNNER_HOME", str(tmp_path / "home"))
    for name in (
        "EVALRUNNER_LAKE",
        "EVALRUNNER_GITHUB_TOKEN",
        "EVALRUNNER_GITHUB_TOKEN_FILE",
        "EVALRUNNER_GITHUB_APP_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["finetune", "activate", "--repo-id", REPO, "--name", "runbook-v1"]) == 2
    assert "acme/agent has no fine-tune named 'runbook-v1' (registered: none)" in capsys.readouterr().err
    ft.save_finetune(open_lake(str(tmp_path / "home" / "lake")), _record(REPO, "runbook-v1", "simagent/x"))
    assert cli.main(["finetune", "activate", "--repo-id", REPO, "--name", "runbook-v1"]) == 2
    assert (
        "opening the activation PR of runbook-v1 needs GitHub: set EVALRUNNER_GITHUB_TOKEN" in capsys.readouterr().err
    )
