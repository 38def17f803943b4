"""A sandbox backend that gives every sandbox its own gateway scope.

:func:`with_gateway` wraps a backend: each cold window run (labelled ``window``; discovery and
id listing get nothing) and each warm session gets a fresh
:class:`~evalrunner_assets.gateway._gateway.Scope` — a channel to its own gateway socket and the
gateway variables (base URLs, scoped token) in ``SandboxRequest.gateway_env`` — and the token is
honoured only while a run or a warm call is in progress; the scope is closed (token revoked,
socket removed) when the run ends or the session closes. Each result carries the gateway's usage
of that run or call in ``SandboxResult.gateway_usage``.

The wrapper keeps the inner backend's name and runtime digest: going through the gateway does not
change what a window is (the model is already part of its batch key).
"""

from __future__ import annotations

import threading
from dataclasses import replace

from evalrunner_assets.execution.sandbox import (
    SandboxBackend,
    SandboxRequest,
    SandboxResult,
    WarmSession,
)
from evalrunner_assets.gateway._gateway import SANDBOX_GATEWAY_PORT, ModelGateway, Scope


def _port_for(backend: SandboxBackend) -> int:
    """The gateway's port inside the sandbox: fixed where each sandbox has its own loopback;
    a free host port for unsafe-local, whose sandboxes share the host's."""
    if backend.name != "unsafe-local":
        return SANDBOX_GATEWAY_PORT
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scoped(request: SandboxRequest, scope: Scope, port: int) -> SandboxRequest:
    return replace(
        request,
        channels=tuple(request.channels) + (scope.channel(port),),
        gateway_env={**request.gateway_env, **scope.sandbox_env(port)},
    )


class GatewayBackend(SandboxBackend):
    """Runs through ``inner``; every sandbox reaches the model gateway and nothing else."""

    def __init__(self, inner: SandboxBackend, gateway: ModelGateway) -> None:
        self.inner = inner
        self.gateway = gateway
        self.name = inner.name

    def preflight(self) -> None:
        self.inner.preflight()

    def runtime_digest(self) -> str:
        return self.inner.runtime_digest()

    def run(self, request: SandboxRequest, cancel: threading.Event | None = None) -> SandboxResult:
        if "window" not in request.labels:
            # Discovery and id listing call no model: they get no channel to the gateway.
            return self.inner.run(request, cancel=cancel)
        with self.gateway.open_scope(request.labels) as scope:
            scope.begin()
            try:
                result = self.inner.run(_scoped(request, scope, _port_for(self.inner)), cancel=cancel)
            finally:
                usage = scope.end()
        result.gateway_usage = usage.to_dict()
        return result


class GatewayWarmBackend(GatewayBackend):
    """:class:`GatewayBackend` over a backend with warm sessions."""

    def open_session(self, request: SandboxRequest) -> WarmSession:
        scope = self.gateway.open_scope(request.labels)
        try:
            session = self.inner.open_session(_scoped(request, scope, _port_for(self.inner)))
        except BaseException:
            scope.close()
            raise
        return _GatewaySession(session, scope)


class _GatewaySession:
    def __init__(self, session: WarmSession, scope: Scope) -> None:
        self.session, self.scope = session, scope

    def call(self, payload: dict, *, timeout: float, cancel: threading.Event | None = None) -> SandboxResult:
        # Only eval windows call models; listing ids and the start-up probe never need the token.
        metered = payload.get("op") == "eval"
        if metered:
            self.scope.begin()
        try:
            result = self.session.call(payload, timeout=timeout, cancel=cancel)
        finally:
            usage = self.scope.end() if metered else None
        if usage is not None:
            result.gateway_usage = usage.to_dict()
        return result

    def close(self) -> None:
        try:
            self.session.close()
        finally:
            self.scope.close()


def with_gateway(backend: SandboxBackend, gateway: ModelGateway) -> SandboxBackend:
    """``backend`` with every sandbox given its own gateway scope (see the module docstring)."""
    from evalrunner_assets.execution.sandbox import SandboxBackend as _Base

    if type(backend).open_session is _Base.open_session:
        return GatewayBackend(backend, gateway)
    return GatewayWarmBackend(backend, gateway)
