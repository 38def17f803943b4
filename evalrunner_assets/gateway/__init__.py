"""The model gateway: real model keys stay with the controller; sandboxes get scoped tokens.

See :mod:`evalrunner_assets.gateway._gateway` for what it does and
:mod:`evalrunner_assets.gateway._backend` for how sandboxes reach it.
"""

from evalrunner_assets.execution.sandbox import GATEWAY_ENV_NAMES
from evalrunner_assets.gateway._backend import GatewayBackend, with_gateway
from evalrunner_assets.gateway._circuit import CircuitTrip, ProviderCircuit
from evalrunner_assets.gateway._gateway import (
    BUDGET_STATUS,
    PROVIDER_DOWN_STATUS,
    PROVIDERS,
    SANDBOX_GATEWAY_PORT,
    GatewayError,
    GatewaySettings,
    GatewayUsage,
    ModelGateway,
    Scope,
    provider_of,
    start_gateway,
)

__all__ = [
    "BUDGET_STATUS",
    "CircuitTrip",
    "GATEWAY_ENV_NAMES",
    "PROVIDERS",
    "PROVIDER_DOWN_STATUS",
    "SANDBOX_GATEWAY_PORT",
    "GatewayBackend",
    "GatewayError",
    "GatewaySettings",
    "GatewayUsage",
    "ModelGateway",
    "ProviderCircuit",
    "Scope",
    "provider_of",
    "start_gateway",
    "with_gateway",
]
