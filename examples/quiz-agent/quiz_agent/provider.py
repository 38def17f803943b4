"""``quizbot/<name>``: an offline, seeded stand-in for an LLM that answers capital-city questions.

How often it answers right depends on its instructions (the system prompt): precise
instructions make it reliable, vague ones make it guess. Each answer is a pure function of
(seed, question, epoch, instructions), so runs repeat exactly. It counts tokens itself
(about four characters per token) so Inspect never needs tiktoken.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from .knowledge import CAPITALS

# Phrases in the instructions that make the agent careful, and how much each one helps.
GUIDANCE = {"capital city": 0.3, "only the name": 0.25, "double-check": 0.2}
BASE_ACCURACY = 0.2


def accuracy_for(instructions: str) -> float:
    text = instructions.lower()
    return min(0.97, BASE_ACCURACY + sum(w for phrase, w in GUIDANCE.items() if phrase in text))


def _draw(*parts: object) -> float:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def answer(question: str, instructions: str, *, seed: int, epoch: int) -> str:
    country = next((c for c in CAPITALS if c.lower() in question.lower()), None)
    if country is None:
        return "I do not know."
    if _draw(seed, question, epoch, "right") < accuracy_for(instructions):
        return CAPITALS[country]
    others = sorted(v for k, v in CAPITALS.items() if k != country)
    return others[int(_draw(seed, question, epoch, "wrong") * len(others))]


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


class QuizBotAPI(ModelAPI):
    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, [], config)

    async def generate(
        self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig
    ) -> ModelOutput:
        instructions = "\n".join(m.text for m in input if isinstance(m, ChatMessageSystem))
        question = next((m.text for m in reversed(input) if isinstance(m, ChatMessageUser)), "")
        epoch = 1
        try:
            from inspect_ai.log._samples import sample_active

            active = sample_active()
            if active is not None:
                epoch = int(active.epoch)
        except ImportError:
            pass
        text = answer(question, instructions, seed=config.seed or 0, epoch=epoch)
        prompt_tokens = _tokens(instructions + question)
        output_tokens = _tokens(text)
        return ModelOutput(
            model=self.model_name,
            choices=[
                ChatCompletionChoice(
                    message=ChatMessageAssistant(content=text, model=self.model_name, source="generate"),
                    stop_reason="stop",
                )
            ],
            usage=ModelUsage(
                input_tokens=prompt_tokens, output_tokens=output_tokens, total_tokens=prompt_tokens + output_tokens
            ),
            time=0.0,
        )
