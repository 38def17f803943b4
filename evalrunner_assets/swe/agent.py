"""The agent loop (in the controller) and the agent versions it runs.

An agent version (a file, ``agent.json``: ``{"versions": {name: {...}}}``) names the model it
drives -- any model Inspect can call: ``anthropic/...``, ``openai/...``,
``openai-api/<service>/<model>`` with ``model_base_url`` -- and its prices per million tokens.
The loop asks that model for the next action through Inspect's model API, with one ``bash``
tool and a per-step timeout; it runs each tool call in the attempt's sandbox (an Inspect
``SandboxEnvironment``: bubblewrap, or a workspace pod on Kubernetes; the repo at its pinned
commit, no network) and hands the model back only the tool result. It stops when the model
answers without a tool call, at ``max_steps``, when a model call passes ``step_timeout_s``, or
when the next call could pass the run's budget.

The bundled example's versions name ``simcoder/<version>``, the simulated coding model of
:mod:`evalrunner_assets.swe.simcoder` (an Inspect model provider): they take this same path.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    get_model,
)
from inspect_ai.tool import ToolCall, ToolInfo, ToolParam, ToolParams
from inspect_ai.util import SandboxEnvironment

from evalrunner_assets.swe.model import SweError, SweTask

OBSERVATION_CHARS = 4000
EXAMPLE_DIR = Path(__file__).resolve().parent.parent.parent / "examples" / "swe-tinystats"
AGENT_ENV = "EVALRUNNER_SWE_AGENT"
DEFAULT_MAX_TOKENS = 4096
DEFAULT_MAX_RETRIES = 2
MODEL_CONNECTIONS = 1024
# A call is booked before it is made at this many input tokens per prompt character (plus a
# fixed allowance for the tool schema and message framing) and ``max_tokens`` output tokens,
# then settled to the usage the model reports: no tokenizer counts fewer than 1 per 2 chars.
RESERVE_TOKENS_PER_CHAR = 0.5
RESERVE_FIXED_TOKENS = 512

SYSTEM_PROMPT = (
    "You are a software engineer fixing a bug in a repository. You work through one tool, "
    "`bash`, which runs a shell command in the repository's working directory and returns its "
    "output. The sandbox has no network. When you have fixed the bug, answer without a tool call."
)
# The task's id is part of the prompt (the simulated model reads it; see swe.simcoder).
TASK_PROMPT = "Task {task_id} in {repo} at commit {commit}.\n\n{problem}"

BASH_TOOL = ToolInfo(
    name="bash",
    description="Run a shell command (bash -c) in the repository's working directory; returns stdout and stderr.",
    parameters=ToolParams(
        properties={"cmd": ToolParam(type="string", description="the shell command")},
        required=["cmd"],
    ),
)


def agent_definition() -> Path:
    """The agent definition file: ``$EVALRUNNER_SWE_AGENT`` or the example's."""
    return Path(os.environ.get(AGENT_ENV) or EXAMPLE_DIR / "agent.json")


def read_definition(path: str | Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SweError(f"agent definition {str(path)!r} is not a readable JSON file: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("versions"), dict):
        raise SweError(f"agent definition {str(path)!r} must be a JSON object with a 'versions' object")
    return doc


@dataclass(frozen=True)
class AgentVersion:
    """One version of an agent: the model it calls and how that model's tokens are priced."""

    name: str
    model: str
    model_base_url: str | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    price_in: float = 3.0  # dollars per million input tokens
    price_out: float = 15.0  # dollars per million output tokens
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_retries: int = DEFAULT_MAX_RETRIES

    @classmethod
    def load(cls, path: str | Path, version: str) -> AgentVersion:
        versions = read_definition(path)["versions"]
        if version not in versions:
            raise SweError(f"agent version {version!r} is not defined in {path} (known: {', '.join(sorted(versions))})")
        v = versions[version]
        where = f"agent version {version!r} in {path}"
        model = v.get("model")
        if not isinstance(model, str) or "/" not in model:
            raise SweError(f"{where}: 'model' must name an Inspect model, provider/name (e.g. 'simcoder/{version}')")
        base_url = v.get("model_base_url")
        if base_url is not None and not isinstance(base_url, str):
            raise SweError(f"{where}: 'model_base_url' must be a string")
        args = v.get("model_args", {})
        if not isinstance(args, dict):
            raise SweError(f"{where}: 'model_args' must be an object")
        try:
            price_in = float(v.get("price_in_per_mtok", 3.0))
            price_out = float(v.get("price_out_per_mtok", 15.0))
            max_tokens = int(v.get("max_tokens", DEFAULT_MAX_TOKENS))
            max_retries = int(v.get("max_retries", DEFAULT_MAX_RETRIES))
        except (TypeError, ValueError) as exc:
            raise SweError(f"{where}: prices, 'max_tokens' and 'max_retries' must be numbers: {exc}") from exc
        if price_in < 0 or price_out < 0 or max_tokens < 1 or max_retries < 0:
            raise SweError(f"{where}: prices and 'max_retries' must be >= 0 and 'max_tokens' >= 1")
        return cls(version, model, base_url, dict(args), price_in, price_out, max_tokens, max_retries)

    def price(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.price_in + tokens_out * self.price_out) / 1e6


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
    model: str = ""
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    final_message: str = ""
    messages: list[ChatMessage] = field(default_factory=list)

    def commands(self) -> list[str]:
        return [s.action for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return {
            "stop_reason": self.stop_reason,
            "cost_usd": self.cost_usd,
            "model": self.model,
            "model_calls": self.model_calls,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "final_message": self.final_message,
            "steps": [asdict(s) for s in self.steps],
        }


class Budget(Protocol):
    """The run's shared budget: ``reserve`` books an amount before a call (False: it does not
    fit), ``settle`` replaces a reservation by what the call cost."""

    def reserve(self, amount: float) -> bool: ...

    def settle(self, reserved: float, actual: float) -> None: ...


def attempt_seed(seed: int, agent_version: str, task_id: str, sample_idx: int) -> int:
    """The attempt's seed (GenerateConfig.seed), from (run seed, version, task, sample index):
    a signed 64-bit integer, which every provider that takes a seed accepts."""
    h = hashlib.sha256(f"{seed}\0{agent_version}\0{task_id}\0{sample_idx}".encode()).digest()
    return int.from_bytes(h[:8], "big", signed=True)


def task_prompt(task: SweTask) -> str:
    return TASK_PROMPT.format(task_id=task.id, repo=task.repo, commit=task.commit, problem=task.problem)


def _prompt_chars(messages: list[ChatMessage]) -> int:
    total = len(BASH_TOOL.model_dump_json())
    for m in messages:
        total += len(m.text)
        if isinstance(m, ChatMessageAssistant):
            total += sum(len(json.dumps(c.arguments)) for c in m.tool_calls or [])
    return total


def _command(call: ToolCall) -> tuple[str | None, str]:
    """(the shell command, "") or (None, the error the model is told)."""
    if call.parse_error:
        return None, f"the tool call's arguments could not be parsed: {call.parse_error}"
    if call.function != "bash":
        return None, f"there is no tool {call.function!r}; the only tool is 'bash'"
    cmd = call.arguments.get("cmd")
    if not isinstance(cmd, str) or not cmd.strip():
        return None, "the bash tool needs a non-empty string argument 'cmd'"
    return cmd, ""


async def run_agent(
    version: AgentVersion,
    task: SweTask,
    sandbox: SandboxEnvironment,
    seed: int,
    *,
    max_steps: int,
    step_timeout_s: float,
    budget: Budget,
    exec_timeout_s: int = 120,
) -> AgentOutcome:
    """The agent loop: model call (with a timeout) → tool calls in the sandbox → observations.

    Every model call is booked against ``budget`` before it is made (a reservation from the
    prompt's size and ``max_tokens``) and settled to the usage the model reports; a call that
    does not fit stops the attempt (``budget``). A call that times out stays booked at its
    reservation: its usage is unknown and it may still be billed. Other model errors (refused
    credentials, an unreachable endpoint after ``max_retries``) propagate: the attempt lands no
    row and a resubmission runs it again."""
    outcome = AgentOutcome(model=version.model)
    model = get_model(version.model, base_url=version.model_base_url, memoize=False, **version.model_args)
    config = GenerateConfig(
        max_tokens=version.max_tokens,
        seed=seed,
        timeout=max(1, math.ceil(step_timeout_s)),
        max_retries=version.max_retries,
        # Each attempt has one call in flight, so the run's workers bound the connections. A
        # lower cap would make attempts wait on Inspect's connection semaphore, which the
        # attempts (each its own event loop, on its own thread) cannot share safely.
        max_connections=MODEL_CONNECTIONS,
    )
    messages: list[ChatMessage] = [ChatMessageSystem(content=SYSTEM_PROMPT), ChatMessageUser(content=task_prompt(task))]
    outcome.messages = messages
    async with model:
        while True:
            if len(outcome.steps) >= max_steps:
                outcome.stop_reason = "max_steps"
                return outcome
            reserved = version.price(
                math.ceil(_prompt_chars(messages) * RESERVE_TOKENS_PER_CHAR) + RESERVE_FIXED_TOKENS, version.max_tokens
            )
            if not budget.reserve(reserved):
                outcome.stop_reason = "budget"
                return outcome
            started = time.monotonic()
            try:
                output = await asyncio.wait_for(
                    model.generate(messages, tools=[BASH_TOOL], config=config), timeout=step_timeout_s
                )
            except TimeoutError:
                outcome.cost_usd += reserved
                outcome.stop_reason = "step_timeout"
                return outcome
            outcome.model_calls += 1
            if output.usage is not None:
                tokens_in, tokens_out = output.usage.input_tokens, output.usage.output_tokens
                cost = version.price(tokens_in, tokens_out)
            else:  # the provider reported no usage: keep the reservation
                tokens_in = tokens_out = 0
                cost = reserved
            budget.settle(reserved, cost)
            outcome.cost_usd += cost
            outcome.tokens_in += tokens_in
            outcome.tokens_out += tokens_out
            reply = output.message
            messages.append(reply)
            if not reply.tool_calls:
                outcome.final_message = reply.text
                outcome.stop_reason = "done"
                return outcome
            for i, call in enumerate(reply.tool_calls):
                if len(outcome.steps) >= max_steps:
                    outcome.stop_reason = "max_steps"
                    return outcome
                cmd, error = _command(call)
                exit_code: int | None = None
                if cmd is None:
                    observation = error
                else:
                    try:
                        result = await sandbox.exec(["bash", "-c", cmd], timeout=exec_timeout_s)
                    except TimeoutError:
                        observation = f"the command did not finish within {exec_timeout_s} s and was stopped"
                    else:
                        exit_code = result.returncode
                        observation = (result.stdout + result.stderr)[-OBSERVATION_CHARS:]
                messages.append(ChatMessageTool(content=observation, tool_call_id=call.id, function=call.function))
                first = i == 0  # the call's tokens and cost are booked on its first tool call
                outcome.steps.append(
                    Step(
                        len(outcome.steps),
                        cmd if cmd is not None else json.dumps({"function": call.function, **call.arguments}),
                        observation,
                        exit_code,
                        tokens_in if first else 0,
                        tokens_out if first else 0,
                        cost if first else 0.0,
                        time.monotonic() - started,
                    )
                )
