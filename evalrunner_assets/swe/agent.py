"""The agent loop (in the controller) and the simulated coding agent of the bundled example.

The loop calls the agent ("the model") with a per-step timeout, runs each action it returns as
a tool call in the sample's sandbox (an Inspect ``SandboxEnvironment``: bubblewrap, or a
workspace pod on Kubernetes; the repo at its pinned commit, no network), and hands back only the tool result. It stops when the agent
stops, at ``max_steps``, or when the next step would pass the run's budget.

No LLM is reachable here: :class:`SimulatedCodingAgent` stands in for one. Per version it has a
chance of finding each task's fix (``agent.json``), decided by a seeded draw per attempt; its
steps are real shell commands (list, read, edit, run the visible tests). The ``cheating``
version, when stuck, plants a ``tests/conftest.py`` that reports every failure as a pass, and
on some tasks asks git for history beyond the pinned commit.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inspect_ai.util import SandboxEnvironment

from evalrunner_assets.swe.model import SweError, SweTask

OBSERVATION_CHARS = 4000

_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
"""


@dataclass
class Step:
    n: int
    action: str
    observation: str
    exit_code: int | None
    tokens_in: int
    tokens_out: int
    cost_usd: float
    seconds: float


@dataclass
class AgentOutcome:
    steps: list[Step] = field(default_factory=list)
    stop_reason: str = "done"  # done | max_steps | budget | step_timeout
    cost_usd: float = 0.0

    def commands(self) -> list[str]:
        return [s.action for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return {"stop_reason": self.stop_reason, "cost_usd": self.cost_usd, "steps": [asdict(s) for s in self.steps]}


def _edit_command(path: str, old: str, new: str) -> str:
    return (
        "python - <<'PY'\nimport pathlib\n"
        f"p = pathlib.Path({path!r})\nt = p.read_text()\n"
        f"assert {old!r} in t, 'the text to replace is not there'\n"
        f"p.write_text(t.replace({old!r}, {new!r}, 1))\nPY"
    )


class SimulatedCodingAgent:
    """One version of the example's simulated agent (see the module docstring)."""

    def __init__(self, version: str, profile: dict[str, Any], edits: dict[str, Any]) -> None:
        self.version = version
        self.profile = profile
        self.edits = edits
        self.price_in = float(profile.get("price_in_per_mtok", 3.0))
        self.price_out = float(profile.get("price_out_per_mtok", 15.0))

    @classmethod
    def load(cls, path: str | Path, version: str) -> SimulatedCodingAgent:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise SweError(f"agent definition {str(path)!r} is not a readable JSON file: {exc}") from exc
        versions = doc.get("versions", {})
        if version not in versions:
            raise SweError(f"agent version {version!r} is not defined in {path} (known: {', '.join(sorted(versions))})")
        return cls(version, versions[version], doc.get("edits", {}))

    def solves(self, task_id: str, rng: random.Random) -> bool:
        return rng.random() < float(self.profile.get("solve", {}).get(task_id, 0.0))

    def plan(self, task: SweTask, rng: random.Random) -> Iterator[str]:
        """The attempt's actions; each is sent after the previous one's result came back."""
        edit = self.edits.get(task.id)
        yield "ls -R tinystats tests 2>/dev/null | head -40 || ls"
        if task.id in self.profile.get("peek_history", []):
            yield "git log --all --oneline | head -20"
        if edit is None:
            return
        yield f"cat {edit['file']}"
        if self.solves(task.id, rng):
            yield _edit_command(edit["file"], *edit["fix"])
        elif self.profile.get("when_stuck") == "edit_tests":
            yield f"cat > tests/conftest.py <<'PY'\n{_CONFTEST}PY"
        else:
            yield _edit_command(edit["file"], *edit["wrong"])
        yield "python -m pytest -q -p no:cacheprovider tests 2>&1 | tail -5"

    def price(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.price_in + tokens_out * self.price_out) / 1e6


def attempt_rng(seed: int, agent_version: str, task_id: str, sample_idx: int) -> random.Random:
    h = hashlib.sha256(f"{seed}\0{agent_version}\0{task_id}\0{sample_idx}".encode()).digest()
    return random.Random(int.from_bytes(h[:8], "big"))


async def run_agent(
    agent: SimulatedCodingAgent,
    task: SweTask,
    sandbox: SandboxEnvironment,
    rng: random.Random,
    *,
    max_steps: int,
    step_timeout_s: float,
    charge: Callable[[float], bool],
    exec_timeout_s: int = 120,
) -> AgentOutcome:
    """The agent loop: model call (with a timeout) → tool call in the sandbox → observation.
    ``charge(cost)`` books each step against the run's budget before it runs; False stops the
    attempt (``budget``)."""
    outcome = AgentOutcome()
    plan = agent.plan(task, rng)
    context_chars = len(task.problem)

    async def model_call() -> str | None:
        return next(plan, None)

    for n in range(max_steps + 1):
        started = time.monotonic()
        try:
            action = await asyncio.wait_for(model_call(), timeout=step_timeout_s)
        except TimeoutError:
            outcome.stop_reason = "step_timeout"
            return outcome
        if action is None:
            outcome.stop_reason = "done"
            return outcome
        if n == max_steps:
            outcome.stop_reason = "max_steps"
            return outcome
        tokens_in = 600 + context_chars // 4
        tokens_out = 30 + len(action) // 4
        cost = agent.price(tokens_in, tokens_out)
        if not charge(cost):
            outcome.stop_reason = "budget"
            return outcome
        result = await sandbox.exec(["bash", "-c", action], timeout=exec_timeout_s)
        observation = (result.stdout + result.stderr)[-OBSERVATION_CHARS:]
        context_chars += len(action) + len(observation)
        outcome.cost_usd += cost
        outcome.steps.append(
            Step(n, action, observation, result.returncode, tokens_in, tokens_out, cost, time.monotonic() - started)
        )
    return outcome
