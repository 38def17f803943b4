"""Entry point for Inspect (``[project.entry-points.inspect_ai]``): importing registers providers.

Kept import-light: Inspect imports every entry point when it looks up a name it does not know,
so the provider module itself is only imported when a ``simagent/...`` model is created.
"""

from inspect_ai.model import ModelAPI, modelapi


@modelapi(name="simagent")
def simagent() -> type[ModelAPI]:
    from ._provider import SimulatedAgentAPI

    return SimulatedAgentAPI
