"""Entry point for Inspect (``[project.entry-points.inspect_ai]``): importing it registers every
Inspect provider evalrunner ships, so Inspect resolves them from its CLI (inside sandboxes too)
as well as in-process:

- model providers ``simagent`` (the bundled example agent) and ``simcoder`` (the SWE example's
  coding model);
- tool-sandbox providers ``bubblewrap`` (``sandbox="bubblewrap"``) and ``evalrunner-k8s`` (one
  pod per sample).

Kept import-light: Inspect imports every entry point when it looks up a name it does not know,
so a model provider's module is only imported when a ``simagent/...`` or ``simcoder/...`` model
is created, and neither sandbox provider loads the Kubernetes client until a pod is made.
"""

from inspect_ai.model import ModelAPI, modelapi


@modelapi(name="simagent")
def simagent() -> type[ModelAPI]:
    from evalrunner_assets.simagent import SimulatedAgentAPI

    return SimulatedAgentAPI


@modelapi(name="simcoder")
def simcoder() -> type[ModelAPI]:
    # The SWE example's simulated coding model (the agent versions of examples/swe-tinystats).
    from evalrunner_assets.swe.simcoder import SimulatedCoderAPI

    return SimulatedCoderAPI


# The sandbox providers register with `@sandboxenv` where their classes are defined; importing
# the two modules here is what registers them through this entry point.
from evalrunner_assets.execution import inspect_sandbox as _inspect_sandbox  # noqa: E402, F401
from evalrunner_assets.execution.kubernetes import inspect_sandbox as _inspect_k8s_sandbox  # noqa: E402, F401
