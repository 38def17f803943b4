"""The bundled example agent repo, run for real: its builder, its `.evals/list`, and its Inspect
tasks on the simulated model — base and pull-request variants."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import read_eval_log
from inspect_ai.scorer import value_to_float
from scipy.stats import binom

from evalrunner_assets.example_repo import (
    VARIANTS,
    ExampleRepoError,
    build_example_repo,
)
from evalrunner_assets.simagent import SIMAGENT_PRICE, decide

# End to end: real Inspect runs in sandboxes (or thousands of PRs on a real instance).
pytestmark = pytest.mark.slow

VENV_BIN = Path(sys.executable).parent
MANIFEST_SCHEMA = Path(__file__).resolve().parents[2] / "evalrunner_assets" / "discovery" / "manifest.schema.json"
TASKS = ("runbook_lookup", "escalation_policy", "summary_quality")
BASE_PROBABILITY = {"runbook_lookup": 0.60, "escalation_policy": 0.80, "summary_quality": 0.90}
VARIANT_PROBABILITY = {
    "improve-runbook": {**BASE_PROBABILITY, "runbook_lookup": 0.85},
    "regress-escalation": {**BASE_PROBABILITY, "escalation_policy": 0.55},
    "no-op-wording": BASE_PROBABILITY,
}
# Samples run through Inspect per (tree, task); the remaining incidents are covered by the
# simulated model's decision function, which every Inspect run below is checked against.
WINDOW = [f"INC-{n:04d}" for n in range(1, 101)]
ALL_INCIDENTS = [f"INC-{n:04d}" for n in range(1, 301)]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull},
    ).stdout.strip()


def _export(repo: Path, ref: str, dest: Path) -> Path:
    """The commit's files without .git, as the pipeline hands them to a sandbox."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref], cwd=repo, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest() + oct(path.stat().st_mode)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    } | {path.relative_to(root).as_posix() + "/": "dir" for path in root.rglob("*") if path.is_dir()}


def _load_triage(tree: Path):
    """The tree's own evals module (without writing bytecode into the tree)."""
    name = "triage_" + hashlib.sha256(str(tree).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, tree / "evals" / "triage.py")
    module = importlib.util.module_from_spec(spec)
    previous, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = previous
    return module


def _predicted(prompt: str, task: str, ids: list[str]) -> dict[str, bool]:
    return {i: decide(task, prompt, seed=0, sample_id=i, epoch=1).succeeds for i in ids}


def _within_999(successes: int, n: int, p: float) -> bool:
    low, high = binom.interval(0.999, n, p)
    return low <= successes <= high


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    root = tmp_path_factory.mktemp("example")
    repo = build_example_repo(root / "repo")
    trees = {"base": _export(repo.path, repo.base_sha, root / "trees" / "base")}
    for name in VARIANTS:
        trees[name] = _export(repo.path, repo.sha(name), root / "trees" / name)
    return repo, trees, root


@pytest.fixture(scope="module")
def runs(example):
    """Inspect runs in-process on WINDOW: every task on base, and on each variant the tasks the
    variant's skill file could affect. Returns {(tree, task): EvalLog}, and checks that running
    wrote nothing into any tree (tasks run from read-only exports in production)."""
    repo, trees, root = example
    plan = {
        "base": TASKS,
        "improve-runbook": ("runbook_lookup",),
        "regress-escalation": ("escalation_policy",),
        "no-op-wording": ("runbook_lookup",),
    }
    before = {name: _tree_digest(tree) for name, tree in trees.items()}
    logs = {}
    for name, tasks in plan.items():
        specs = [f"{trees[name]}/evals/triage.py@{task}" for task in tasks]
        results = inspect_eval(
            specs,
            model="simagent/support-agent",
            log_dir=str(root / "logs" / name),
            sample_id=WINDOW,
            display="none",
            log_realtime=False,
        )
        for task, log in zip(tasks, results):
            assert log.eval.task.endswith(task)
            logs[(name, task)] = log
    after = {name: _tree_digest(tree) for name, tree in trees.items()}
    assert after == before, "running the tasks wrote into the repo export"
    return logs


def _outcomes(log) -> dict[str, bool]:
    outcomes = {}
    for sample in log.samples:
        assert sample.error is None, f"{sample.id}: {sample.error}"
        (score,) = sample.scores.values()
        outcomes[str(sample.id)] = value_to_float()(score.value) == 1.0
    return outcomes


def _system_prompt(log) -> str:
    (prompt,) = {sample.messages[0].text for sample in log.samples}
    return prompt


# ---------------------------------------------------------------------------------------------
# The builder
# ---------------------------------------------------------------------------------------------


def test_builder_makes_a_base_commit_and_one_branch_per_variant(example):
    repo, trees, _ = example
    assert _git(repo.path, "rev-parse", "main") == repo.base_sha
    assert _git(repo.path, "rev-parse", "HEAD") == repo.base_sha
    assert _git(repo.path, "status", "--porcelain") == ""
    assert set(repo.variants) == set(VARIANTS)
    for name, variant in repo.variants.items():
        assert _git(repo.path, "rev-parse", variant.branch) == variant.sha
        assert _git(repo.path, "rev-parse", f"{variant.sha}^") == repo.base_sha
        changed = _git(repo.path, "diff", "--name-only", repo.base_sha, variant.sha)
        assert changed == "skills/triage/SKILL.md", name
        assert _git(repo.path, "log", "-1", "--format=%s", variant.sha) == variant.message.splitlines()[0]
    mode = _git(repo.path, "ls-tree", repo.base_sha, ".evals/list").split()[0]
    assert mode == "100755"
    assert not (trees["base"] / ".git").exists()


def test_builder_shas_are_the_same_without_git_config_and_for_any_variant_subset(example, tmp_path):
    repo, _, _ = example
    clean_env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin"}  # no HOME, no git identity anywhere
    result = subprocess.run(
        [sys.executable, "-m", "evalrunner_assets.example_repo", str(tmp_path / "again"), "--variant", "no-op-wording"],
        env=clean_env,
        capture_output=True,
        text=True,
        check=True,
    )
    built = json.loads(result.stdout)
    assert built["base"]["sha"] == repo.base_sha
    assert built["variants"] == {"no-op-wording": {"branch": "no-op-wording", "sha": repo.sha("no-op-wording")}}


def test_builder_refuses_unknown_variants_and_non_empty_destinations(tmp_path):
    with pytest.raises(ExampleRepoError, match="unknown variant 'make-it-better'.*improve-runbook"):
        build_example_repo(tmp_path / "x", ["make-it-better"])
    assert not (tmp_path / "x").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    with pytest.raises(ExampleRepoError, match="not an empty directory"):
        build_example_repo(tmp_path / "full", [])


# ---------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------


def test_evals_list_prints_a_valid_manifest_in_a_clean_environment_without_git(example):
    _, trees, _ = example
    tree = trees["base"]
    before = _tree_digest(tree)
    result = subprocess.run(
        ["./.evals/list"],
        cwd=tree,
        env={"PATH": f"{VENV_BIN}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads(result.stdout)
    jsonschema.Draft202012Validator(json.loads(MANIFEST_SCHEMA.read_text())).validate(manifest)
    assert manifest["version"] == 1
    assert [task["id"] for task in manifest["tasks"]] == [f"triage/{t}" for t in TASKS]
    module = _load_triage(tree)
    for task in manifest["tasks"]:
        file, function = task["spec"].split("@")
        assert (tree / task["workdir"] / file).is_file()
        assert callable(getattr(module, function)), task["spec"]
        assert task["cohort"] == "default" and task["paths"]
    assert _tree_digest(tree) == before


# ---------------------------------------------------------------------------------------------
# The tasks on the simulated model
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS)
def test_base_scores_match_the_documented_probabilities(runs, task):
    log = runs[("base", task)]
    assert log.status == "success"
    outcomes = _outcomes(log)
    assert sorted(outcomes) == WINDOW
    # The task's own scorer, judging the trajectory, agrees with the model's decision on every
    # sample: the tool calls and answer really carry the outcome.
    assert outcomes == _predicted(_system_prompt(log), task, WINDOW)
    assert _within_999(sum(outcomes.values()), len(WINDOW), BASE_PROBABILITY[task])


def test_logs_have_tool_calls_token_usage_and_cost(runs):
    for (tree, task), log in runs.items():
        (usage,) = log.stats.model_usage.values()
        assert usage.input_tokens > 0 and usage.output_tokens > 0, (tree, task)
        assert usage.total_cost == pytest.approx(SIMAGENT_PRICE.cost(usage.input_tokens, usage.output_tokens))
        tool_events = [e for s in log.samples for e in s.events if e.event == "tool"]
        assert tool_events, (tree, task)
        assert all(e.error is None for e in tool_events), (tree, task)
        assert log.eval.metadata["agent_config_sha256"] == hashlib.sha256(_system_prompt(log).encode()).hexdigest()


def test_improve_runbook_only_turns_failures_into_successes(runs):
    base, head = _outcomes(runs[("base", "runbook_lookup")]), _outcomes(runs[("improve-runbook", "runbook_lookup")])
    assert head == _predicted(_system_prompt(runs[("improve-runbook", "runbook_lookup")]), "runbook_lookup", WINDOW)
    assert not [i for i in WINDOW if base[i] and not head[i]], "a base success was lost"
    flips = sum(head[i] and not base[i] for i in WINDOW)
    assert _within_999(flips, len(WINDOW), 0.85 - 0.60)
    assert _within_999(sum(head.values()), len(WINDOW), 0.85)


def test_regress_escalation_only_turns_successes_into_failures(runs):
    base = _outcomes(runs[("base", "escalation_policy")])
    head = _outcomes(runs[("regress-escalation", "escalation_policy")])
    assert not [i for i in WINDOW if head[i] and not base[i]], "a base failure was fixed"
    lost = sum(base[i] and not head[i] for i in WINDOW)
    assert _within_999(lost, len(WINDOW), 0.80 - 0.55)


def test_no_op_wording_gives_identical_per_sample_outcomes(runs):
    no_op = runs[("no-op-wording", "runbook_lookup")]
    assert _system_prompt(no_op) != _system_prompt(runs[("base", "runbook_lookup")])
    assert _outcomes(no_op) == _outcomes(runs[("base", "runbook_lookup")])


def test_each_variant_moves_only_its_intended_task_on_all_incidents(example, runs):
    # Every Inspect run above agrees sample by sample with the model's decision function, so the
    # full 300 incidents of every (variant, task) pair are checked through it, using the system
    # prompt each tree's own evals build.
    _, trees, _ = example
    prompts = {name: _load_triage(tree).agent_system_prompt(tree) for name, tree in trees.items()}
    assert prompts["base"] == _system_prompt(runs[("base", "runbook_lookup")])
    for variant, probabilities in VARIANT_PROBABILITY.items():
        assert prompts[variant] != prompts["base"]
        for task in TASKS:
            base = _predicted(prompts["base"], task, ALL_INCIDENTS)
            head = _predicted(prompts[variant], task, ALL_INCIDENTS)
            if probabilities[task] == BASE_PROBABILITY[task]:
                assert head == base, (variant, task)
            else:
                assert head != base, (variant, task)
                assert _within_999(sum(head.values()), len(ALL_INCIDENTS), probabilities[task])


def test_inspect_seed_and_epochs_reach_the_simulated_model(example, tmp_path):
    _, trees, _ = example
    ids = WINDOW[:20]
    (log,) = inspect_eval(
        f"{trees['base']}/evals/triage.py@runbook_lookup",
        model="simagent/support-agent",
        log_dir=str(tmp_path),
        sample_id=ids,
        epochs=2,
        seed=7,
        display="none",
        log_realtime=False,
    )
    prompt = _system_prompt(log)
    for sample in log.samples:
        (score,) = sample.scores.values()
        expected = decide("runbook_lookup", prompt, seed=7, sample_id=str(sample.id), epoch=sample.epoch)
        assert (value_to_float()(score.value) == 1.0) == expected.succeeds, (sample.id, sample.epoch)
    by_epoch = {epoch: [s for s in log.samples if s.epoch == epoch] for epoch in (1, 2)}
    assert len(by_epoch[1]) == len(by_epoch[2]) == len(ids)


def test_inspect_cli_resolves_the_simulated_model_from_a_read_only_export(example, tmp_path):
    _, trees, _ = example
    tree = trees["base"]
    before = _tree_digest(tree)
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        [
            str(VENV_BIN / "inspect"),
            "eval",
            "evals/triage.py@escalation_policy",
            "--model",
            "simagent/support-agent",
            "--sample-id",
            "INC-0001,INC-0002,INC-0003",
            "--log-dir",
            str(tmp_path / "logs"),
            "--display",
            "none",
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (log_file,) = (tmp_path / "logs").glob("*.eval")
    log = read_eval_log(str(log_file))
    assert log.status == "success", log.error
    assert log.eval.model == "simagent/support-agent"
    assert sorted(str(s.id) for s in log.samples) == ["INC-0001", "INC-0002", "INC-0003"]
    assert all(s.scores and s.error is None for s in log.samples)
    assert _tree_digest(tree) == before
