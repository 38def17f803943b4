"""Inspect tasks as people write them, end to end through `evalrunner compare` (real git, real
bubblewrap sandboxes, real Inspect with the offline simulated model, the real lake):

- small equivalents of inspect_ai's `examples/`: `hello_world` (one sample, no id), a
  `theory_of_mind`-style `json_dataset` without ids, a `security_guide`-style `csv_dataset`
  without ids and a `MemoryDataset` of multiple-choice samples without ids. On identical evals
  they end UNCHANGED or INCONCLUSIVE, never IMPROVED/REGRESSED, with reasons that name the real
  limit ("cannot be decided (1 sample)", "dataset exhausted (20 samples)");
- a head that inserts a sample at the top of a dataset without ids: every later positional id
  now names another input, and those ids are reported as changed inputs, never paired;
- a head whose solver raises on every sample: the agent's failure, not the infrastructure's —
  BROKEN with the cause in the terminal, the PR comment and the check run, no failure record,
  the outage breaker untouched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalrunner_assets.example_repo import EXAMPLE_REPO_SOURCE
from tests.helpers.compare_runs import comparison_doc, lake, run_compare
from tests.helpers.git_repos import commit_files, git

pytestmark = pytest.mark.slow

HELLO_WORLD = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import exact
from inspect_ai.solver import generate


@task
def hello_world():
    return Task(
        dataset=[Sample(input="Just reply with Hello World", target="Hello World")],
        solver=[generate()],
        scorer=exact(),
    )
"""

# A theory_of_mind-style task: a JSON-lines dataset without ids, a prompt chain, a text scorer.
THEORY_OF_MIND = """
from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import includes
from inspect_ai.solver import chain_of_thought, generate, system_message


@task
def theory_of_mind():
    return Task(
        dataset=json_dataset("theory_of_mind.jsonl"),
        solver=[system_message("Answer the question."), chain_of_thought(), generate()],
        scorer=includes(),
    )
"""

SECURITY_GUIDE = """
from inspect_ai import Task, task
from inspect_ai.dataset import FieldSpec, csv_dataset
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, system_message


@task
def security_guide():
    return Task(
        dataset=csv_dataset("security_guide.csv", FieldSpec(input="question", target="answer")),
        solver=[system_message("You are a security expert."), generate()],
        scorer=includes(),
    )
"""

POPULARITY = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import choice
from inspect_ai.solver import multiple_choice

QUESTIONS = [
    ("Which tool do you use for incident triage?", ["runbook", "spreadsheet", "fax"], "A"),
    ("Which page do you check first?", ["status", "weather", "sports"], "A"),
    ("Who do you page for a severity 1?", ["on-call", "nobody", "the intern"], "A"),
    ("What do you write after the incident?", ["summary", "poem", "nothing"], "A"),
    ("Which channel carries updates?", ["status page", "radio", "billboard"], "A"),
    ("How often do you post updates?", ["regularly", "never", "yearly"], "A"),
]


@task
def popularity():
    return Task(
        dataset=MemoryDataset([Sample(input=q, choices=c, target=t) for q, c, t in QUESTIONS]),
        solver=[multiple_choice()],
        scorer=choice(),
    )
"""


def theory_rows(n: int) -> list[dict[str, str]]:
    # Some targets are words the offline model's fixed reply contains, so scores vary by sample.
    return [
        {
            "input": f"Story {i}: Sally puts the ball in the basket and leaves. Where will she look?",
            "target": "triage" if i % 3 == 0 else "basket",
        }
        for i in range(n)
    ]


def jsonl(rows: list[dict[str, str]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


SECURITY_CSV = "question,answer\n" + "".join(
    f"How should secret number {i} be stored?,{'runbooks' if i % 2 else 'vault'}\n" for i in range(12)
)


@pytest.fixture(scope="module")
def examples_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("inspect-examples") / "repo"
    commit_files(
        repo,
        {
            "hello_world.py": HELLO_WORLD,
            "theory_of_mind.py": THEORY_OF_MIND,
            "theory_of_mind.jsonl": jsonl(theory_rows(20)),
            "security_guide.py": SECURITY_GUIDE,
            "security_guide.csv": SECURITY_CSV,
            "popularity.py": POPULARITY,
            "README.md": "Inspect examples\n",
        },
        "base",
    )
    # Identical evals on a head that changes only prose.
    git(repo, "checkout", "-q", "-b", "docs-only")
    commit_files(repo, {"README.md": "Inspect examples, reworded\n"}, "docs")
    # A head that inserts one story at the top of the dataset: positional ids shift by one.
    git(repo, "checkout", "-q", "main")
    git(repo, "checkout", "-q", "-b", "insert-story")
    commit_files(
        repo,
        {
            "theory_of_mind.jsonl": jsonl(
                [{"input": "A new first story. Where is the ball?", "target": "basket"}] + theory_rows(20)
            )
        },
        "insert",
    )
    git(repo, "checkout", "-q", "main")
    return repo


def tasks_by_name(doc: dict) -> dict[str, dict]:
    """The comparison's task documents keyed by the Inspect task's name."""
    return {tid.rsplit("@", 1)[-1].rsplit("/", 1)[-1]: d for tid, d in doc["tasks"].items()}


def test_inspect_example_tasks_without_ids_run_end_to_end_and_never_claim_a_change(
    tmp_path: Path, examples_repo: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = run_compare(home, examples_repo, "--head", "docs-only", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = comparison_doc(home)
    assert doc["verdict"] in ("UNCHANGED", "INCONCLUSIVE"), doc["final_verdict"]
    tasks = tasks_by_name(doc)
    assert set(tasks) == {"hello_world", "theory_of_mind", "security_guide", "popularity"}
    for name, t in tasks.items():
        d = t["decision"]
        assert d["label"] in ("unchanged", "inconclusive"), (name, d["label"], d["reason"])
        # Every sample ran on both arms under Inspect's positional ids and paired by its input.
        assert d["pairs"] == t["pairs_possible"] == t["head"]["samples"] == t["base"]["samples"], name
        assert d["pairing"]["changed_inputs"] == 0 and t["changed_inputs_listed"] == 0, name
        assert not t["failures"], (name, t["failures"])
    assert tasks["hello_world"]["decision"]["reason"].startswith("cannot be decided (1 sample)")
    assert tasks["theory_of_mind"]["decision"]["reason"] == "dataset exhausted (20 samples) before the interval settled"
    assert tasks["security_guide"]["decision"]["reason"] == "dataset exhausted (12 samples) before the interval settled"
    assert not any("cap" in (t["decision"]["reason"] or "") for t in tasks.values())
    # The scores differ by sample (the task is not trivially all-equal) but tie between the arms.
    assert 0 < tasks["theory_of_mind"]["decision"]["head_mean"] < 1
    # The terminal says why, in the same words as the comment.
    assert "cannot be decided (1 sample)" in done.stdout and "dataset exhausted (20 samples)" in done.stdout
    # The sandbox listed the positional ids with their input digests (commit facts).
    facts = json.loads(next(lake(home).glob("raw/*/*/*/tasks.json")).read_text())
    tom = next(v for k, v in facts["tasks"].items() if k.endswith("theory_of_mind"))
    assert tom["sample_ids"] == [str(i) for i in range(1, 21)]
    assert len(set(tom["input_digests"])) == 20


def test_a_sample_inserted_before_positional_ids_is_reported_as_changed_inputs_never_paired(
    tmp_path: Path, examples_repo: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = run_compare(home, examples_repo, "--head", "insert-story", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = comparison_doc(home)
    assert doc["verdict"] in ("UNCHANGED", "INCONCLUSIVE"), doc["final_verdict"]
    tom = tasks_by_name(doc)["theory_of_mind"]
    pairing = tom["decision"]["pairing"]
    # Base ids 1..20 and head ids 1..21: every shared id now names a different story.
    assert tom["changed_inputs_listed"] == 20
    assert pairing["changed_inputs"] > 0 and tom["decision"]["pairs"] == 0
    assert pairing["changed_inputs"] + pairing["unpaired_head"] == tom["head"]["samples"]
    assert (
        f"theory_of_mind/theory_of_mind: {pairing['changed_inputs']} sample id(s) ran different inputs "
        "on head and base (not paired)"
    ) in doc["final_verdict"]["reasons"]
    comment = next((lake(home) / "comparisons").rglob("*.comment.md")).read_text()
    assert (
        "**Changed inputs**" in comment and f"`theory_of_mind/theory_of_mind`: {pairing['changed_inputs']}" in comment
    )
    # The other tasks did not change and pair as before.
    assert tasks_by_name(doc)["security_guide"]["decision"]["pairing"]["changed_inputs"] == 0


SOLVE = "        state.messages.insert(0, ChatMessageSystem(content=prompt))\n        return state\n"
RAISES = "        raise RuntimeError('boom')\n"


def test_a_head_whose_solver_raises_is_broken_by_the_pr_with_its_cause_shown(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE_REPO_SOURCE, repo)
    commit_files(repo, {}, "base")
    git(repo, "checkout", "-q", "-b", "raise-in-solver")
    triage = repo / "evals" / "triage.py"
    assert SOLVE in triage.read_text()
    commit_files(repo, {"evals/triage.py": triage.read_text().replace(SOLVE, RAISES)}, "head raises")
    home = tmp_path / "home"
    home.mkdir()
    done = run_compare(home, repo, "--head", "raise-in-solver", "--cap", "16", timeout=600)
    assert done.returncode == 4, done.stderr[-3000:]  # BROKEN blocks the merge (--fail-on's default)
    doc = comparison_doc(home)
    assert doc["verdict"] == "BROKEN", doc["final_verdict"]
    cause = "head: 16/16 samples raised RuntimeError('boom') in solver 'agent_instructions'"
    for task, t in doc["tasks"].items():
        assert t["decision"]["pairing"]["error_head"] == cause.removeprefix("head: "), task
        assert t["head"]["errors"] == 16 and t["base"]["errors"] == 0
        assert not t["failures"]
        assert t["decision"]["label"] == "broken" and t["decision"]["broken_arms"] == ["head"]
    # Not infrastructure: no failure record, the breaker never counted it.
    assert not (lake(home) / "failures").exists()
    assert "breaker" not in doc and doc["execution"]["failed_attempts"] == 0
    # The cause is in the terminal, the PR comment and the check run.
    assert cause in done.stdout
    artifacts = lake(home) / "comparisons"
    comment = next(artifacts.rglob("*.comment.md")).read_text()
    assert cause in comment and "Errors raised by this repository's code" in comment
    # Every task's cause is among the verdict's reasons.
    assert all(
        any(r.startswith(f"{task}: broken by this PR: {cause}") for r in doc["final_verdict"]["reasons"])
        for task in doc["tasks"]
    ), doc["final_verdict"]["reasons"]
    check_run = json.loads(next(artifacts.rglob("*.check_run.json")).read_text())
    assert check_run["conclusion"] == "failure"
    assert cause in json.dumps(check_run)


# A repository's own scorer, as people write one: a float per sample. The head's scorer returns
# 1.5 for a wrong answer (outside [0, 1]) and the PR also adds one task and removes another.
GRADED = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import Score, mean, scorer
from inspect_ai.solver import solver

WRONG = 0.25


@solver
def answer():
    async def solve(state, generate):
        n = int(state.input_text.split()[-1])
        state.output = ModelOutput.from_content("none", str(n) if n % 3 else "wrong")
        return state

    return solve


@scorer(metrics=[mean()])
def graded():
    async def score(state, target):
        return Score(value=1.0 if state.output.completion == target.text else WRONG)

    return score


def _task():
    return Task(dataset=[Sample(input=f"say {i}", target=str(i)) for i in range(16)], solver=answer(), scorer=graded())
"""


def test_scores_out_of_range_are_named_beside_the_verdict_and_added_or_removed_tasks_in_the_summary(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    base = GRADED + "\n@task\ndef kept():\n    return _task()\n\n@task\ndef old():\n    return _task()\n"
    commit_files(repo, {"evals/graded.py": base}, "base")
    git(repo, "checkout", "-q", "-b", "head")
    head = GRADED.replace("WRONG = 0.25", "WRONG = 1.5") + (
        "\n@task\ndef kept():\n    return _task()\n\n@task\ndef extra():\n    return _task()\n"
    )
    commit_files(repo, {"evals/graded.py": head}, "scorer out of range; a task added, one removed")
    home = tmp_path / "home"
    home.mkdir()
    done = run_compare(home, repo, "--head", "head", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = comparison_doc(home)
    assert list(doc["tasks"]) == ["evals/graded/kept"]
    assert doc["new_tasks"] == ["evals/graded/extra"] and doc["removed_tasks"] == ["evals/graded/old"]
    kept = doc["tasks"]["evals/graded/kept"]["decision"]
    # 6 of the 16 answers are wrong (n divisible by 3): on head their 1.5 is no score, so only
    # the 10 right ones pair. That is said, with the value, beside the verdict.
    assert kept["pairing"]["unscored_head"] == 6 and kept["pairs"] == 10
    reason = (
        "evals/graded/kept: head: 6/16 sample(s) have no score in [0, 1] (scorer 'graded' returned 1.5) "
        "and are left out of the pairing; a scorer must return a number in [0, 1], a boolean or C/P/I/N"
    )
    assert reason in doc["final_verdict"]["reasons"]
    assert f"why: {reason}" in done.stdout
    assert not any("base:" in r and "no score" in r for r in doc["final_verdict"]["reasons"])
    # Tasks outside the table are named in the terminal as in the PR comment.
    # The added task ran on head alone: its 10 scored answers are right (the 6 wrong ones score
    # 1.5 on head and are left out), measured but never paired.
    extra = doc["new_task_results"]["evals/graded/extra"]
    assert extra["status"] == "measured" and extra["inputs"] == 10 and extra["unscored"] == 6
    assert "  new: evals/graded/extra 1.00 (" in done.stdout
    assert "  removed on this PR: evals/graded/old\n" in done.stdout


NEEDS_ARGUMENT = """
from inspect_ai import Task, task


@task
def needs_level(level: int):
    return Task(dataset=[], solver=[], scorer=[])
"""


def test_a_task_failing_on_both_arms_is_said_to_fail_on_both_with_each_cause(tmp_path: Path) -> None:
    # A task with a required argument cannot be loaded (evalrunner passes none) on either arm:
    # it is broken on both (nothing this PR did), with the cause and the fix, never "base
    # succeeded", and the check run asks for action.
    repo = tmp_path / "repo"
    kept = "\n@task\ndef kept():\n    return _task()\n"
    commit_files(repo, {"evals/graded.py": GRADED + kept, "evals/levels.py": NEEDS_ARGUMENT}, "base")
    git(repo, "checkout", "-q", "-b", "head")
    commit_files(repo, {"evals/graded.py": GRADED.replace("WRONG = 0.25", "WRONG = 0.0") + kept}, "stricter")
    home = tmp_path / "home"
    home.mkdir()
    done = run_compare(home, repo, "--head", "head", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = comparison_doc(home)
    reasons = doc["final_verdict"]["reasons"]
    assert doc["verdict"] == "INCONCLUSIVE", doc["final_verdict"]
    assert doc["final_verdict"]["broken_on_both"] == ["evals/levels/needs_level"]
    cause = (
        "loading task 'evals/levels.py@needs_level' raised TypeError: "
        "needs_level() missing 1 required positional argument: 'level'; evalrunner passes no task "
        "arguments: give every parameter of the @task function a default"
    )
    assert (
        f"evals/levels/needs_level: broken on both head and base: the task cannot be loaded on either ({cause})"
        in reasons
    ), reasons
    assert f"evals/levels/needs_level: head: {cause}; base: {cause}" in reasons
    assert not any("while base succeeded" in r for r in reasons), reasons
    assert f"why: evals/levels/needs_level: head: {cause}" in done.stdout
    check = json.loads(next((lake(home) / "comparisons").rglob("*.check_run.json")).read_text())
    assert check["conclusion"] == "action_required" and "evals/levels/needs_level" in check["title"]


def test_with_several_epochs_the_samples_possible_count_every_epoch_as_samples_run_does(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    kept = "\n@task\ndef kept():\n    return _task()\n"
    commit_files(repo, {"evals/graded.py": GRADED + kept}, "base")
    git(repo, "checkout", "-q", "-b", "head")
    commit_files(repo, {"evals/graded.py": GRADED.replace("WRONG = 0.25", "WRONG = 0.0") + kept}, "stricter")
    home = tmp_path / "home"
    home.mkdir()
    done = run_compare(home, repo, "--head", "head", "--epochs", "2", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = comparison_doc(home)
    # 16 inputs × 2 epochs on each arm; the inputs (epochs averaged) are the pairs.
    assert doc["samples_run"] == doc["samples_possible"] == 64
    assert doc["tasks"]["evals/graded/kept"]["decision"]["pairs"] == 16
    assert "  samples 64 of 64 possible" in done.stdout


def test_a_pr_that_fixes_a_task_broken_on_the_base_leaves_it_out_of_the_verdict_with_the_bases_cause(
    tmp_path: Path,
) -> None:
    # No baseline to compare with: the task is not compared (the statistics' rule), the base's
    # cause is given, and the verdict comes from the tasks that could be compared.
    repo = tmp_path / "repo"
    kept = "\n@task\ndef kept():\n    return _task()\n"
    graded = GRADED.replace("range(16)", "range(160)")  # enough identical pairs to call unchanged
    commit_files(repo, {"evals/graded.py": graded + kept, "evals/levels.py": NEEDS_ARGUMENT}, "base")
    git(repo, "checkout", "-q", "-b", "head")
    fixed = NEEDS_ARGUMENT.replace("level: int", "level: int = 1").replace("dataset=[]", "dataset=_data()")
    fixed = fixed.replace(
        "from inspect_ai import Task, task\n",
        "from inspect_ai import Task, task\nfrom inspect_ai.dataset import Sample\n\n\n"
        "def _data():\n    return [Sample(input='x', target='y')]\n",
    )
    commit_files(repo, {"evals/levels.py": fixed}, "needs_level gets a default")
    home = tmp_path / "home"
    home.mkdir()
    done = run_compare(home, repo, "--head", "head", "--cap", "160", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = comparison_doc(home)
    reasons = doc["final_verdict"]["reasons"]
    # The verdict is kept's alone: identical on both arms.
    assert doc["verdict"] == "UNCHANGED", doc["final_verdict"]
    assert (
        "evals/levels/needs_level: not compared (failed on base while head succeeded: no baseline to compare with)"
        in reasons
    )
    assert any(
        # The repository's own code failing to load, named as such (not as a listing failure).
        r.startswith("evals/levels/needs_level: base: loading task 'evals/levels.py@needs_level' raised TypeError")
        for r in reasons
    ), reasons
    assert not any("while base succeeded" in r for r in reasons), reasons
