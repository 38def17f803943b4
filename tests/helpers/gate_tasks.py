"""A task file of deterministic tasks that call no model (``qa/kept`` answers every fourth
sample wrong), and the solver lines tests replace in it to change or break a head."""

from __future__ import annotations

TASKS = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import Score, mean, scorer
from inspect_ai.solver import solver


@solver
def answer():
    async def solve(state, generate):
        n = int(state.input_text.split()[-1])
        state.output = ModelOutput.from_content("none", str(n) if n % 4 else "wrong")
        return state

    return solve


@solver
def answer_raising():
    async def solve(state, generate):
        raise RuntimeError('boom')

    return solve


@scorer(metrics=[mean()])
def graded():
    async def score(state, target):
        return Score(value=1.0 if state.output.completion == target.text else 0.0)

    return score


def _task(n=16, solver=None):
    samples = [Sample(input=f"say {i}", target=str(i), id=f"s{i}") for i in range(n)]
    return Task(dataset=samples, solver=solver or answer(), scorer=graded())


@task
def kept():
    return _task()
"""
SOLVE = "        n = int(state.input_text.split()[-1])\n"
RAISES = "        raise RuntimeError('boom')\n"
