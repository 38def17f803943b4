"""A simulated, seeded, tool-calling Inspect model provider for the bundled example agent.

``--model simagent/<any-name>`` (e.g. ``simagent/support-agent``) resolves through the
``inspect_ai`` entry point. Behaviour, cues and success probabilities: ``_behaviour``; the policy
that turns a decision into tool calls and an answer: ``_agent``; the Inspect provider: ``_provider``.
"""

from typing import TYPE_CHECKING

from ._agent import Answer, CallTool, Conversation, ToolExchange, next_step
from ._behaviour import (
    BEHAVIOUR_MODELS,
    BEHAVIOURS,
    Behaviour,
    BehaviourModel,
    Cue,
    Decision,
    cues_present,
    decide,
    success_probability,
)
from ._price import SIMAGENT_PRICE, TokenPrice
from ._profiles import SIMULATED_MODELS, STANDARD_MODEL, SimulatedModel, simulated_model

if TYPE_CHECKING:
    from ._provider import CHARS_PER_TOKEN, DEFAULT_SEED, PROVIDER, SimulatedAgentAPI

# The provider imports Inspect (~1.5 s); its names load on first use, so reading the price does not.
_PROVIDER_NAMES = ("CHARS_PER_TOKEN", "DEFAULT_SEED", "PROVIDER", "SimulatedAgentAPI")


def __getattr__(name: str) -> object:
    if name in _PROVIDER_NAMES:
        from . import _provider

        return getattr(_provider, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Answer",
    "BEHAVIOUR_MODELS",
    "BEHAVIOURS",
    "Behaviour",
    "BehaviourModel",
    "CHARS_PER_TOKEN",
    "CallTool",
    "Conversation",
    "Cue",
    "DEFAULT_SEED",
    "Decision",
    "PROVIDER",
    "SIMAGENT_PRICE",
    "SIMULATED_MODELS",
    "STANDARD_MODEL",
    "SimulatedModel",
    "SimulatedAgentAPI",
    "TokenPrice",
    "ToolExchange",
    "cues_present",
    "decide",
    "next_step",
    "simulated_model",
    "success_probability",
]
