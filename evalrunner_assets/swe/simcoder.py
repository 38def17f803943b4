"""``simcoder/<version>``: the bundled example's simulated coding model, an Inspect model provider.

No LLM is reachable here, so the example's agent versions name this model; the agent loop
calls it through Inspect's model API exactly as it would call a real one. Per version it has a
chance of finding each task's fix (the ``solve`` table of that version in the agent
definition), decided by a draw from the attempt's seed (``GenerateConfig.seed``); its replies
are ``bash`` tool calls with real shell commands (list, read, edit, run the visible tests),
one per model call, then an answer without a tool call. The ``cheating`` version, when stuck,
plants a ``tests/conftest.py`` that reports every failure as a pass, and on some tasks asks git
for history beyond the pinned commit.

The model is stateless: it reads the task id from the prompt and counts the tool results in
the conversation, so the same replies can be served over HTTP by a stand-in for an LLM API
(see the tests). The definition file is ``$EVALRUNNER_SWE_AGENT`` or the example's, or the
model arg ``definition``.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
)
from inspect_ai.tool import ToolCall, ToolChoice, ToolInfo

from evalrunner_assets.swe.agent import agent_definition, read_definition
from evalrunner_assets.swe.model import SweError

PROVIDER = "simcoder"
CHARS_PER_TOKEN = 4
# "Task <id> in ..." (agent.TASK_PROMPT)
_TASK_ID = re.compile(r"^Task ([a-z0-9][a-z0-9_.-]*) in ", re.MULTILINE)

_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
"""


def _edit_command(path: str, old: str, new: str) -> str:
    return (
        "python - <<'PY'\nimport pathlib\n"
        f"p = pathlib.Path({path!r})\nt = p.read_text()\n"
        f"assert {old!r} in t, 'the text to replace is not there'\n"
        f"p.write_text(t.replace({old!r}, {new!r}, 1))\nPY"
    )


def seeded_rng(seed: int | None) -> random.Random:
    """The attempt's random stream from its (signed 64-bit) seed."""
    return random.Random((seed or 0) % 2**64)


class SimulatedCoder:
    """One simulated version's behaviour (see the module docstring)."""

    def __init__(self, version: str, profile: dict[str, Any], edits: dict[str, Any]) -> None:
        self.version = version
        self.profile = profile
        self.edits = edits

    @classmethod
    def load(cls, path: str | Path, version: str) -> SimulatedCoder:
        doc = read_definition(path)
        profile = doc["versions"].get(version)
        if not isinstance(profile, dict) or "solve" not in profile:
            known = sorted(k for k, v in doc["versions"].items() if isinstance(v, dict) and "solve" in v)
            raise SweError(
                f"{PROVIDER}/{version}: {path} defines no simulated version {version!r} "
                f"(one with a 'solve' table; known: {', '.join(known)})"
            )
        return cls(version, profile, doc.get("edits", {}))

    def solves(self, task_id: str, rng: random.Random) -> bool:
        return rng.random() < float(self.profile.get("solve", {}).get(task_id, 0.0))

    def plan(self, task_id: str, rng: random.Random) -> Iterator[str]:
        """The attempt's commands, in order."""
        edit = self.edits.get(task_id)
        yield "ls -R tinystats tests 2>/dev/null | head -40 || ls"
        if task_id in self.profile.get("peek_history", []):
            yield "git log --all --oneline | head -20"
        if edit is None:
            return
        yield f"cat {edit['file']}"
        if self.solves(task_id, rng):
            yield _edit_command(edit["file"], *edit["fix"])
        elif self.profile.get("when_stuck") == "edit_tests":
            yield f"cat > tests/conftest.py <<'PY'\n{_CONFTEST}PY"
        else:
            yield _edit_command(edit["file"], *edit["wrong"])
        yield "python -m pytest -q -p no:cacheprovider tests 2>&1 | tail -5"

    def next_command(self, prompt: str, tool_results: int, seed: int | None) -> str | None:
        """The command after ``tool_results`` tool results for the task named in ``prompt``;
        None when the plan is done."""
        match = _TASK_ID.search(prompt)
        if match is None:
            raise SweError(f"{PROVIDER}/{self.version}: the prompt names no task ('Task <id> in ...')")
        plan = list(self.plan(match.group(1), seeded_rng(seed)))
        return plan[tool_results] if tool_results < len(plan) else None


def reply_usage(prompt_chars: int, reply_chars: int) -> tuple[int, int]:
    """Tokens as the simulated model counts them (about 4 characters each)."""
    return max(1, math.ceil(prompt_chars / CHARS_PER_TOKEN)), max(1, math.ceil(reply_chars / CHARS_PER_TOKEN))


class SimulatedCoderAPI(ModelAPI):
    """``simcoder/<version>`` (see the module docstring)."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),
        definition: str | None = None,
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, [], config)
        if model_args:
            raise ValueError(
                f"{PROVIDER}/{model_name} takes only the model arg 'definition' (got {sorted(model_args)})"
            )
        self.coder = SimulatedCoder.load(definition or agent_definition(), model_name)

    def max_connections(self) -> int:
        return 32

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        prompt = next((m.text for m in input if isinstance(m, ChatMessageUser)), "")
        results = sum(1 for m in input if isinstance(m, ChatMessageTool))
        can_call = tool_choice != "none" and any(t.name == "bash" for t in tools)
        command = self.coder.next_command(prompt, results, config.seed) if can_call else None
        if command is None:
            message = ChatMessageAssistant(content="Done.", model=self.model_name, source="generate")
            reply_chars = len(message.text)
        else:
            call_id = "call_" + hashlib.sha256(f"{config.seed}|{results}|{command}".encode()).hexdigest()[:16]
            message = ChatMessageAssistant(
                content="",
                tool_calls=[ToolCall(id=call_id, function="bash", arguments={"cmd": command})],
                model=self.model_name,
                source="generate",
            )
            reply_chars = len(command) + 16
        prompt_chars = sum(len(m.text) for m in input) + sum(len(t.model_dump_json()) for t in tools)
        prompt_chars += sum(
            len(str(c.arguments)) for m in input if isinstance(m, ChatMessageAssistant) for c in m.tool_calls or []
        )
        tokens_in, tokens_out = reply_usage(prompt_chars, reply_chars)
        return ModelOutput(
            model=self.model_name,
            choices=[ChatCompletionChoice(message=message, stop_reason="stop" if command is None else "tool_calls")],
            usage=ModelUsage(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out),
            time=0.0,
        )
