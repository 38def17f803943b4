"""Capital-city quiz: the agent's answer must name the capital (normalised with quizkit)."""

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState, generate, system_message
from quizkit import same_answer

HERE = Path(__file__).parent


@scorer(metrics=[accuracy(), stderr()])
def capital_match():
    async def score(state: TaskState, target: Target) -> Score:
        given = state.output.completion
        return Score(value=CORRECT if same_answer(given, target.text) else INCORRECT, answer=given)

    return score


@task
def capitals():
    return Task(
        dataset=json_dataset(str(HERE / "data" / "capitals.jsonl")),
        solver=[system_message((HERE / "prompts" / "system.md").read_text()), generate()],
        scorer=capital_match(),
    )
