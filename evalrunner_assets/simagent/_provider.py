"""The Inspect model provider ``simagent/<name>``: the simulated agent behind Inspect's ModelAPI.

It answers instantly (no sleeps), counts tokens itself (≈4 characters per token; no tiktoken,
whose encoding download fails offline) and registers its price with Inspect so logs carry a
``total_cost``. The seed is Inspect's ``--seed`` (``GenerateConfig.seed``), 0 when unset.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelAPI,
    ModelCost,
    ModelInfo,
    ModelOutput,
    ModelUsage,
    StopReason,
    set_model_info,
)
from inspect_ai.tool import ToolCall, ToolChoice, ToolInfo

from ._agent import Answer, CallTool, Conversation, ToolExchange, incident_key, next_step
from ._price import SIMAGENT_PRICE, TokenPrice  # noqa: F401  (re-exported)
from ._profiles import simulated_model

PROVIDER = "simagent"
DEFAULT_SEED = 0
CHARS_PER_TOKEN = 4
CONTEXT_WINDOW_TOKENS = 200_000


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


class SimulatedAgentAPI(ModelAPI):
    """``simagent/<name>``: a seeded, tool-calling stand-in for an LLM (see ``_behaviour``)."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, [], config)
        if model_args:
            raise ValueError(
                f"{PROVIDER}/{model_name} takes no model args (got {sorted(model_args)}); set the seed with --seed"
            )
        self.simulated = simulated_model(model_name)
        price = self.simulated.price
        set_model_info(
            f"{PROVIDER}/{model_name}",
            ModelInfo(
                organization="evalrunner (simulated)",
                model=model_name,
                context_length=CONTEXT_WINDOW_TOKENS,
                cost=ModelCost(
                    input=price.input_usd_per_mtok,
                    output=price.output_usd_per_mtok,
                    input_cache_write=price.input_usd_per_mtok,
                    input_cache_read=price.input_usd_per_mtok,
                ),
            ),
        )

    def max_connections(self) -> int:
        # No network and no latency: concurrency only adds scheduling overhead.
        return 32

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        # tool_choice "none" withholds the tools, as a real provider would.
        conversation = conversation_from_messages(input, [] if tool_choice == "none" else tools)
        seed = config.seed if config.seed is not None else DEFAULT_SEED
        sample_id, epoch = _active_sample(conversation.request)
        step = next_step(conversation, seed=seed, sample_id=sample_id, epoch=epoch, model=self.simulated)
        stop_reason: StopReason

        if isinstance(step, CallTool):
            call_id = (
                "call_"
                + hashlib.sha256(
                    f"{sample_id}|{epoch}|{len(conversation.exchanges)}|{step.function}".encode()
                ).hexdigest()[:16]
            )
            message = ChatMessageAssistant(
                content=step.note,
                tool_calls=[ToolCall(id=call_id, function=step.function, arguments=step.arguments)],
                model=self.model_name,
                source="generate",
            )
            stop_reason = "tool_calls"
            output_text = step.note + json.dumps(step.arguments)
        else:
            assert isinstance(step, Answer)
            message = ChatMessageAssistant(content=step.text, model=self.model_name, source="generate")
            stop_reason = "stop"
            output_text = step.text

        input_tokens = _input_tokens(input, tools)
        output_tokens = max(1, estimate_tokens(output_text))
        return ModelOutput(
            model=self.model_name,
            choices=[ChatCompletionChoice(message=message, stop_reason=stop_reason)],
            usage=ModelUsage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                total_tokens=input_tokens + output_tokens,
            ),
            time=0.0,
        )


def conversation_from_messages(messages: list[ChatMessage], tools: list[ToolInfo]) -> Conversation:
    """What the simulated agent reads: its instructions, the request and the tool exchanges."""
    system = "\n\n".join(m.text for m in messages if isinstance(m, ChatMessageSystem))
    request = next((m.text for m in messages if isinstance(m, ChatMessageUser)), "")
    calls: dict[str, ToolCall] = {
        call.id: call for m in messages if isinstance(m, ChatMessageAssistant) for call in (m.tool_calls or [])
    }
    exchanges = []
    for m in messages:
        if isinstance(m, ChatMessageTool):
            call = calls.get(m.tool_call_id or "")
            exchanges.append(
                ToolExchange(
                    function=m.function or (call.function if call else ""),
                    arguments=dict(call.arguments) if call else {},
                    result=m.text,
                    error=m.error.message if m.error else None,
                )
            )
    return Conversation(
        system=system,
        request=request,
        exchanges=tuple(exchanges),
        tools=frozenset(tool.name for tool in tools),
    )


def _active_sample(request: str) -> tuple[str, int]:
    """The running sample's id and epoch; outside an eval, the incident id named in the request
    (or a digest of the request) and epoch 1."""
    try:
        from inspect_ai.log._samples import sample_active

        active = sample_active()
    except ImportError:  # private API moved: fall back to the request itself
        active = None
    if active is not None and active.sample.id is not None:
        return str(active.sample.id), int(active.epoch)
    key = incident_key(request) or hashlib.sha256(request.encode()).hexdigest()[:16]
    return key, 1


def _input_tokens(messages: list[ChatMessage], tools: list[ToolInfo]) -> int:
    text = sum(len(m.text) for m in messages)
    for m in messages:
        if isinstance(m, ChatMessageAssistant):
            text += sum(len(json.dumps(call.arguments)) for call in (m.tool_calls or []))
    text += sum(len(tool.model_dump_json(exclude_none=True)) for tool in tools)
    return max(1, math.ceil(text / CHARS_PER_TOKEN))
