"""Capital-city quiz, judged two ways: by a rule (the answer names the capital, normalised with
quizkit) and by a grader model (``model_graded_fact``). The grader is a real model reached through
whatever ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` the environment gives — under evalrunner, its
model gateway with a scoped token (run with ``--model-gateway``; the real key stays on the host)."""

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, model_graded_fact, scorer, stderr
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


@task
def capitals_graded(grader: str = "openai/gpt-4o-mini"):
    return Task(
        dataset=json_dataset(str(HERE / "data" / "capitals.jsonl")),
        solver=[system_message((HERE / "prompts" / "system.md").read_text()), generate()],
        scorer=model_graded_fact(model=grader),
    )
