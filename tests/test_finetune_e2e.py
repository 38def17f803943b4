"""A fine-tune end to end on a real Dagster instance, real bubblewrap sandboxes and the loopback
GitHub stand-in: measure the reference, export its passing main-branch conversations, train
with a stand-in trainer (a script that prints the simulated fine-tune's model id, not a real
training job), register: the fine-tune is measured as a candidate on the reference's inputs and
the notification table lands in the lake and as a GitHub issue.

The simulated fine-tune learned the runbook cue (0.85 vs 0.60 on runbook_lookup, the same
elsewhere) at twice the standard price (tests/test_candidates_frontier.py has the table)."""

from __future__ import annotations

import json
import sys

import dagster as dg
import pytest
from _pipeline_fixtures import evalrunner_home
from github_standin import GitHubStandin

from evalrunner_assets import finetune_run
from evalrunner_assets.candidates_run import measure_candidates
from evalrunner_assets.example_repo import build_example_candidates
from evalrunner_assets.pipeline import finetune as ft
from lake import LAYOUT
from resources import GitHubResource

REPO = "example/support-agent"
TASKS = ("triage/escalation_policy", "triage/runbook_lookup", "triage/summary_quality")
FT_MODEL = "simagent/support-agent-ft"
TOKEN = "finetune-e2e-token"

# 2 candidates × 3 evals × 64 inputs in sandboxes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    example = build_example_candidates(root / "repo")
    standin_trainer = root / "standin_trainer.py"
    standin_trainer.write_text(
        "import sys\n"
        "rows = sum(1 for _ in open(sys.argv[1]))\n"
        "print(f'stand-in trainer: {rows} conversations')\n"
        f"print({FT_MODEL!r})\n"
    )
    token_file = root / "github-token"
    token_file.write_text(TOKEN + "\n")
    with (
        evalrunner_home(root / "home") as home,
        GitHubStandin(token=TOKEN) as standin,
        pytest.MonkeyPatch.context() as mp,
    ):
        for name in ("EVALRUNNER_GITHUB_TOKEN", "EVALRUNNER_GITHUB_APP_ID", "EVALRUNNER_GITHUB_API_URL"):
            mp.delenv(name, raising=False)
        mp.setenv(finetune_run.TRAINER_ENV, f"{sys.executable} {standin_trainer}")
        standin.add_repo(REPO)
        resources = home.resources()
        resources["github"] = GitHubResource(
            base_url=standin.base_url, token_file=str(token_file), backoff_seconds=0.05, throttle=False
        )
        instance = dg.DagsterInstance.ephemeral()
        measure_candidates(REPO, str(example.path), names=["main"], instance=instance, resources=resources)
        training_set = root / "train.jsonl"
        exported = finetune_run.export(resources, REPO, str(example.path), training_set)
        done = finetune_run.register(
            resources,
            REPO,
            str(example.path),
            "runbook-v1",
            base_model="simagent/support-agent",
            training_set=training_set,
            training_cost_usd=12.5,
            instance=instance,
        )
        yield {
            "done": done,
            "exported": exported,
            "training_set": training_set,
            "lake": home.lake(),
            "standin": standin,
            "example": example,
            "instance": instance,
        }


def test_the_training_set_holds_the_reference_passing_main_conversations(registered):
    exported = registered["exported"]
    lines = registered["training_set"].read_text().splitlines()
    assert exported.rows == len(lines) > 64  # 3 evals × 64 inputs at 0.60 / 0.80 / 0.90
    assert registered["example"].base_sha in exported.params["commits"]
    first = json.loads(lines[0])["messages"]
    assert first[0]["role"] in ("system", "user") and first[-1]["role"] == "assistant"


def test_the_registry_records_the_model_its_provenance_and_cost(registered, capsys):
    from evalrunner_assets import cli

    record = ft.load_finetune(registered["lake"], REPO, "runbook-v1")
    assert record.registered_at
    assert record.model == FT_MODEL and record.base_model == "simagent/support-agent"
    assert record.trainer and "standin_trainer.py" in record.trainer
    assert record.training_set["digest"] == registered["exported"].digest
    assert record.training_set["rows"] == registered["exported"].rows
    assert record.training_cost_usd == 12.5 and record.candidate == "ft-runbook-v1"
    assert record.notification and record.notification.endswith(LAYOUT.finetune_notification(REPO, "runbook-v1"))
    assert cli.main(["finetune", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed == [
        f"runbook-v1: {FT_MODEL} (base simagent/support-agent) · {REPO} · "
        f"{record.training_set['rows']} rows · suite {record.measurement['suite']['mean']:.2f}"
    ]


def test_the_fine_tune_is_measured_on_the_reference_inputs(registered):
    docs = registered["done"].measurements
    current, measured = docs["main"], docs["ft-runbook-v1"]
    assert measured["settings"]["model"] == FT_MODEL
    assert {t: measured["tasks"][t]["windows"] for t in TASKS} == {t: current["tasks"][t]["windows"] for t in TASKS}
    flags = measured["vs_reference"]["tasks"]
    assert flags["triage/runbook_lookup"]["label"] == "improved"
    assert {flags[t]["label"] for t in TASKS if t != "triage/runbook_lookup"} == {"unchanged"}
    ratio = measured["suite"]["cost_per_sample"] / current["suite"]["cost_per_sample"]
    assert ratio == pytest.approx(2.0, rel=0.1)


def test_the_notification_table_lands_in_the_lake_and_as_a_github_issue(registered):
    lake = registered["lake"]
    markdown = lake.read_bytes(LAYOUT.finetune_notification(REPO, "runbook-v1")).decode()
    assert markdown == registered["done"].notification
    lines = markdown.splitlines()
    header = lines.index("| eval | current | ft | Δ (CI) | cost/sample |")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[header + 2 : header + 6]}
    assert set(rows) == {*TASKS, "**suite**"}
    runbook = rows["triage/runbook_lookup"].split(" | ")
    assert runbook[3].startswith("+") and runbook[3].endswith("improved")
    assert "(current $" in runbook[4]
    assert rows["triage/escalation_policy"].split(" | ")[3].endswith("unchanged")
    issues = registered["standin"].issues_on(REPO)
    assert len(issues) == 1 and issues[0]["body"] == markdown
    assert issues[0]["title"] == f"Fine-tune runbook-v1: {FT_MODEL} against main"
    assert ft.load_finetune(lake, REPO, "runbook-v1").issue_url == issues[0]["html_url"]
