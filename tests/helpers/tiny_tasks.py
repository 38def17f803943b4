"""The tiny Inspect task file the runner tests commit to a throwaway repository (``acme/tiny``),
and the run config of one of its tasks."""

from __future__ import annotations

from evalrunner_assets.execution.inspect_runner import TaskRunConfig
from lake.batch import RunSettings

# A task needs no model: its solver answers itself, so `--model none/none` suffices and no
# tokenizer download is needed. Even-numbered samples are answered correctly.
TASKS = """
import os, time
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import match
from inspect_ai.solver import solver

DATA = [Sample(id=f"s{i}", input=f"say {i}", target=str(i)) for i in range(20)]

@solver
def answer(mode="even"):
    async def solve(state, generate):
        n = int(state.input_text.split()[-1])
        if mode == "raise":
            raise RuntimeError(f"planned failure in {state.sample_id}")
        if mode == "exit":
            os._exit(0)
        if mode == "sleep":
            time.sleep(3600)
        if mode == "garbage":
            with open(os.path.join(os.environ["EVALRUNNER_OUT"], "zz-forged.eval"), "wb") as f:
                f.write(b"not a zip")
        state.output = ModelOutput.from_content("none", str(n) if n % 2 == 0 else "wrong")
        return state
    return solve

@task
def tiny():
    return Task(dataset=DATA, solver=answer(), scorer=match())

@task
def broken():
    return Task(dataset=DATA, solver=answer("raise"), scorer=match())

@task
def exits():
    return Task(dataset=DATA, solver=answer("exit"), scorer=match())

@task
def sleeper():
    return Task(dataset=DATA, solver=answer("sleep"), scorer=match())

@task
def forger():
    return Task(dataset=DATA, solver=answer("garbage"), scorer=match())

@task
def unknown_sandbox():
    return Task(dataset=DATA, solver=answer(), scorer=match(), sandbox="no_such_sandbox_xyz")

@task
def no_ids():
    # Samples as most public Inspect tasks write them: no ids (Inspect numbers them 1..n).
    return Task(dataset=[Sample(input=f"say {i}", target=str(i)) for i in range(6)], solver=answer(), scorer=match())
"""


def cfg(task: str, **kw) -> TaskRunConfig:
    return TaskRunConfig(
        repo="acme/tiny",
        task=f"evals/{task}",
        spec=f"evals/tasks.py@{task}",
        **kw,
        settings=RunSettings(model="none/none", seed=7),
    )
