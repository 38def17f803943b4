"""Entry point for Inspect (``[project.entry-points.inspect_ai]``): importing registers providers.

Kept import-light: Inspect imports every entry point when it looks up a name it does not know,
so a provider module is only imported when a ``simagent/...`` or ``simcoder/...`` model is created.
"""

from inspect_ai.model import ModelAPI, modelapi


@modelapi(name="simagent")
def simagent() -> type[ModelAPI]:
    from ._provider import SimulatedAgentAPI

    return SimulatedAgentAPI


@modelapi(name="simcoder")
def simcoder() -> type[ModelAPI]:
    # The SWE example's simulated coding model (the agent versions of examples/swe-tinystats).
    from evalrunner_assets.swe.simcoder import SimulatedCoderAPI

    return SimulatedCoderAPI


# The tool-sandbox providers (`sandbox="bubblewrap"`, and `sandbox="evalrunner-k8s"`: one pod
# per sample), registered on import through this same entry point, so Inspect resolves them
# from the CLI as well as in-process. Neither loads the Kubernetes client until a pod is made.
from evalrunner_assets.execution import inspect_k8s_sandbox as _inspect_k8s_sandbox  # noqa: E402, F401
from evalrunner_assets.execution import inspect_sandbox as _inspect_sandbox  # noqa: E402, F401
