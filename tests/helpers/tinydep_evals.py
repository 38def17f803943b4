"""Evals that import a dependency the repository declares (``tinydep``, a wheel the tests serve
from the package index stand-in): an ``.evals/list`` that imports it and a task file that does."""

from __future__ import annotations

LIST = """#!/usr/bin/env python3
import json, tinydep
print(json.dumps({"version": 1, "environment": {"requirements": "evals/requirements.txt"},
                  "tasks": [{"id": "t/answer", "spec": "evals/t.py@answer"}]}))
"""
TASK = """from inspect_ai import Task, task
from inspect_ai.dataset import Sample
import tinydep


@task
def answer():
    return Task(dataset=[Sample(id=f"s{i}", input=str(tinydep.ANSWER + i), target="x") for i in range(3)])
"""
