"""Entry point for Inspect (``[project.entry-points.inspect_ai]``): importing registers providers.

Kept import-light: Inspect imports every entry point when it looks up a name it does not know,
so the provider module itself is only imported when a ``simagent/...`` model is created.
"""

from inspect_ai.model import ModelAPI, modelapi


@modelapi(name="simagent")
def simagent() -> type[ModelAPI]:
    from ._provider import SimulatedAgentAPI

    return SimulatedAgentAPI


# The bubblewrap tool-sandbox provider (`sandbox="bubblewrap"`), registered on import through
# this same entry point, so Inspect resolves it from the CLI as well as in-process.
from evalrunner_assets.execution import inspect_sandbox as _inspect_sandbox  # noqa: E402, F401
