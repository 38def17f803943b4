"""The model gateway: the controller holds the model keys; sandboxes hold scoped tokens.

One :class:`ModelGateway` per comparison (or per process). Each sandbox gets a :class:`Scope`:
its own unix socket (bound into that sandbox only, relayed to a loopback port there — see
``execution/channel.py``) and a random token that is valid on that socket only, only while a
window runs (:meth:`Scope.begin` … :meth:`Scope.end`), and never again once the scope is closed.
Inspect's providers inside the sandbox talk to it unchanged: the sandbox's ``OPENAI_BASE_URL``
/ ``ANTHROPIC_BASE_URL`` point at the relayed port and its ``OPENAI_API_KEY`` /
``ANTHROPIC_API_KEY`` hold the scoped token (:meth:`Scope.sandbox_env`). The gateway checks
the token, replaces it with the real key and forwards the request upstream.

On the way it
- meters every response's usage (tokens per model, and cost from the price table) into the
  scope's current window (:meth:`Scope.end` returns the window's :class:`GatewayUsage`);
- enforces a dollar budget shared by all scopes: every upstream attempt is checked after it
  has taken its concurrency slot, so once the spend reaches the budget no call starts and the
  overshoot is at most the calls already in flight (``max_concurrency`` per provider, each
  costing what it costs); refused requests get HTTP 402 and a message saying so, and the
  window's usage counts the refusals (the pipeline records a budget stop, not an agent failure);
- retries upstream 408/409/429/5xx answers and connection errors itself, through the
  provider's circuit (``gateway/_circuit.py``: one probe at a time while the provider fails,
  honouring ``Retry-After`` up to ``max_retry_wait_s``; open on a persistent outage or a
  refused key), and answers the sandbox with a status nobody retries (424, ``x-should-retry:
  false``) once it gives up, so retries are made once, not multiplied by the SDK's and
  Inspect's own. A request is retried until the provider answers or its circuit opens; only
  while other calls succeed does one request give up after ``max_retries``;
- bounds the requests in flight to each provider (a semaphore per provider).

Streams (``"stream": true``) are relayed chunk by chunk; their usage is read from the
server-sent events as they pass. Retries happen only before the first byte is relayed.

The real keys live only in this process: read from the host environment (``OPENAI_API_KEY``,
``ANTHROPIC_API_KEY``; upstream base URLs ``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``) and put
only on upstream requests. Nothing the gateway sends back to a sandbox carries them.
"""

from __future__ import annotations

import functools
import hmac
import http.server
import json
import os
import random
import secrets
import shutil
import socketserver
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from evalrunner_assets.errors import InputError
from evalrunner_assets.execution.sandbox import Channel
from evalrunner_assets.gateway import settings as env_settings
from evalrunner_assets.gateway._circuit import (
    AUTH_STATUSES,
    TRIP_AFTER_S,
    TRIP_FAILURES,
    CircuitOpen,
    CircuitTrip,
    ProviderCircuit,
)
from evalrunner_assets.pricing import PriceTable

# The loopback port the gateway has inside every sandbox (each sandbox has its own loopback).
SANDBOX_GATEWAY_PORT = 18400
BUDGET_STATUS = 402
# What a sandbox is answered when the gateway gives up on the provider (its circuit is open, or
# one request kept failing): a status neither the SDKs nor Inspect retry, so retries are made
# once, here, and never multiplied by the sandbox's own.
PROVIDER_DOWN_STATUS = 424


class GatewayError(InputError, RuntimeError):
    """The gateway cannot serve what was asked (a provider without a key, a bad setting)."""


@dataclass(frozen=True)
class Provider:
    """One upstream API family the gateway forwards to."""

    name: str  # "openai" | "anthropic": the prefix of Inspect's model names and of the route
    key_env: str  # host variable holding the real key
    base_env: str  # host variable overriding the upstream base URL
    default_base: str
    paths: tuple[str, ...]  # request paths (after the base URL) that are forwarded
    # How the sandbox's SDK is pointed at the gateway: (base-URL variable, suffix), key variable.
    sandbox_base_env: str
    sandbox_base_suffix: str
    sandbox_key_env: str

    def upstream_headers(self, key: str) -> dict[str, str]:
        if self.name == "anthropic":
            return {"x-api-key": key}
        return {"authorization": f"Bearer {key}"}


PROVIDERS: dict[str, Provider] = {
    "openai": Provider(
        name="openai",
        key_env=env_settings.OPENAI_KEY.env,
        base_env=env_settings.OPENAI_BASE.env,
        default_base=env_settings.OPENAI_BASE.default,
        paths=("/chat/completions", "/responses", "/responses/input_tokens", "/embeddings"),
        sandbox_base_env="OPENAI_BASE_URL",
        sandbox_base_suffix="/openai/v1",
        sandbox_key_env="OPENAI_API_KEY",
    ),
    "anthropic": Provider(
        name="anthropic",
        key_env=env_settings.ANTHROPIC_KEY.env,
        base_env=env_settings.ANTHROPIC_BASE.env,
        default_base=env_settings.ANTHROPIC_BASE.default,
        paths=("/v1/messages", "/v1/messages/count_tokens"),
        sandbox_base_env="ANTHROPIC_BASE_URL",
        sandbox_base_suffix="/anthropic",
        sandbox_key_env="ANTHROPIC_API_KEY",
    ),
}
# The variables the gateway sets in a sandbox are exactly those the sandbox backends allow,
# execution.sandbox.GATEWAY_ENV_NAMES (re-exported by this package; a test checks they agree).
# Request headers passed upstream (everything else, credentials included, is dropped).
_FORWARD_HEADERS = (
    "content-type",
    "accept",
    "openai-beta",
    "anthropic-version",
    "anthropic-beta",
    "user-agent",
    "openai-organization",
    "openai-project",
)
_RESPONSE_HEADERS = ("content-type", "retry-after", "request-id", "x-request-id")
_RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
MAX_BODY_BYTES = 64 * 1024**2


def provider_of(model: str) -> Provider | None:
    """The gateway provider serving an Inspect model name (``openai/gpt-4o``), if any."""
    return PROVIDERS.get(model.split("/", 1)[0]) if "/" in model else None


@dataclass
class GatewaySettings:
    """How the gateway forwards. Keys and base URLs come from the host environment unless given."""

    keys: dict[str, str] = field(default_factory=dict)  # provider -> real key
    bases: dict[str, str] = field(default_factory=dict)  # provider -> upstream base URL
    budget_usd: float | None = None
    max_concurrency: int = env_settings.CONCURRENCY.default  # requests in flight per provider
    max_retries: int = 4
    max_retry_wait_s: float = 30.0  # longest single wait (a longer Retry-After is capped)
    backoff_base_s: float = 0.5
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0  # a provider that does not accept connections fails fast
    # The provider's circuit (gateway/_circuit.py): open after this many consecutive failed
    # attempts spanning at least this long, with no success in between.
    trip_failures: int = TRIP_FAILURES
    trip_after_s: float = TRIP_AFTER_S
    prices: PriceTable | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kw: Any) -> GatewaySettings:
        """Keys, upstreams and concurrency from the environment (gateway/settings.py; read now,
        default ``os.environ``); ``kw`` are the other fields, and a ``max_concurrency`` there wins."""
        try:
            read = env_settings.gateway_env_settings(env, max_concurrency=kw.get("max_concurrency"))
        except env_settings.GatewaySettingError as exc:
            raise GatewayError(str(exc)) from None
        keys = {"openai": read.openai_key, "anthropic": read.anthropic_key}
        bases = {"openai": read.openai_base, "anthropic": read.anthropic_base}
        kw["max_concurrency"] = read.max_concurrency
        return cls(keys={p: k for p, k in keys.items() if k}, bases=bases, **kw)

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise GatewayError(f"gateway concurrency must be at least 1, got {self.max_concurrency}")
        if self.trip_failures < 1 or not (self.trip_after_s >= 0):
            raise GatewayError(
                f"the gateway's circuit needs at least 1 failure and a non-negative window, got "
                f"{self.trip_failures} and {self.trip_after_s!r}s"
            )
        if self.max_retries < 0:
            raise GatewayError(f"gateway retries must be 0 or more, got {self.max_retries}")
        if self.budget_usd is not None and not (self.budget_usd >= 0):
            raise GatewayError(f"budget {self.budget_usd!r} USD must be a non-negative number")


@dataclass
class GatewayUsage:
    """What one window (or one scope) sent through the gateway."""

    requests: int = 0  # requests answered by the upstream (after retries)
    retries: int = 0  # upstream attempts repeated after a 429/5xx/connection error
    retry_wait_s: float = 0.0  # time spent waiting between those attempts
    upstream_errors: int = 0  # answers relayed with an error status (after retries)
    budget_refusals: int = 0  # requests refused because the budget was spent
    refused: int = 0  # requests refused for another reason (bad token, path, provider)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # model -> tokens, cost_usd

    def add_tokens(self, model: str, tokens: dict[str, int], cost: float | None) -> None:
        m = self.models.setdefault(
            model, {"requests": 0, "input_tokens": 0, "output_tokens": 0, "total_tokens": 0, "cost_usd": 0.0}
        )
        m["requests"] += 1
        for k in ("input_tokens", "output_tokens", "total_tokens"):
            m[k] += int(tokens.get(k, 0))
        m["cost_usd"] = None if cost is None or m["cost_usd"] is None else round(m["cost_usd"] + cost, 9)

    @property
    def cost_usd(self) -> float | None:
        costs = [m["cost_usd"] for m in self.models.values()]
        return None if any(c is None for c in costs) else round(sum(costs), 9)

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "retries": self.retries,
            "retry_wait_s": round(self.retry_wait_s, 3),
            "upstream_errors": self.upstream_errors,
            "budget_refusals": self.budget_refusals,
            "refused": self.refused,
            "input_tokens": sum(m["input_tokens"] for m in self.models.values()),
            "output_tokens": sum(m["output_tokens"] for m in self.models.values()),
            "total_tokens": sum(m["total_tokens"] for m in self.models.values()),
            "cost_usd": self.cost_usd,
            "models": {k: dict(v) for k, v in sorted(self.models.items())},
        }


class _Budget:
    def __init__(self, limit_usd: float | None) -> None:
        self.limit = limit_usd
        self.spent = 0.0
        self.unpriced = 0  # answered calls whose cost is unknown (no price): the spend is a floor
        self.lock = threading.Lock()

    def spent_out(self) -> bool:
        with self.lock:
            return self.limit is not None and self.spent >= self.limit

    def charge(self, cost: float | None) -> None:
        with self.lock:
            if cost is None:
                self.unpriced += 1
            else:
                self.spent += cost


def _usage_tokens(provider: str, usage: Mapping[str, Any] | None) -> dict[str, int]:
    """Tokens of one answer as Inspect counts them (input, output, total)."""
    if not isinstance(usage, Mapping):
        return {}

    def n(key: str) -> int:
        v = usage.get(key)
        return int(v) if isinstance(v, (int, float)) else 0

    if provider == "anthropic":
        inp = n("input_tokens") + n("cache_creation_input_tokens") + n("cache_read_input_tokens")
        out = n("output_tokens")
        return {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out}
    inp = n("prompt_tokens") or n("input_tokens")
    out = n("completion_tokens") or n("output_tokens")
    return {"input_tokens": inp, "output_tokens": out, "total_tokens": n("total_tokens") or inp + out}


class _StreamUsage:
    """Usage read from server-sent events as they pass (OpenAI chunks with ``usage``, the
    Responses API's ``response.completed``, Anthropic's ``message_start``/``message_delta``)."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.buf = b""
        self.tokens: dict[str, int] = {}
        self.model: str | None = None

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            try:
                event = json.loads(line[5:].strip())
            except ValueError:
                continue  # "[DONE]" and keep-alives
            if isinstance(event, dict):
                self._event(event)

    def _event(self, ev: dict[str, Any]) -> None:
        if self.provider == "anthropic":
            if ev.get("type") == "message_start" and isinstance(ev.get("message"), dict):
                u = _usage_tokens("anthropic", ev["message"].get("usage"))
                self.tokens = {"input_tokens": u.get("input_tokens", 0), "output_tokens": u.get("output_tokens", 0)}
            elif ev.get("type") == "message_delta" and isinstance(ev.get("usage"), dict):
                self.tokens["output_tokens"] = int(ev["usage"].get("output_tokens") or 0)
            self.tokens["total_tokens"] = self.tokens.get("input_tokens", 0) + self.tokens.get("output_tokens", 0)
        elif isinstance(ev.get("usage"), dict):
            self.tokens = _usage_tokens("openai", ev["usage"])
        elif ev.get("type") == "response.completed" and isinstance(ev.get("response"), dict):
            self.tokens = _usage_tokens("openai", ev["response"].get("usage"))


class Scope:
    """One sandbox's access to the gateway: its own socket, its own token, its own meter."""

    def __init__(self, gateway: ModelGateway, labels: Mapping[str, str]) -> None:
        self.gateway = gateway
        self.labels = dict(labels)
        self.token = "evgw-" + secrets.token_urlsafe(24)
        self.socket_path = os.path.join(gateway.socket_dir, f"scope-{secrets.token_hex(6)}.sock")
        self._lock = threading.Lock()
        self._active = False
        self._closed = False
        self._window = GatewayUsage()
        self.total = GatewayUsage()
        self._server = _UnixHTTPServer(self.socket_path, _Handler, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="evalrunner-gateway", daemon=True
        )
        self._thread.start()

    # -- what the sandbox gets -----------------------------------------------------------------

    def channel(self, port: int = SANDBOX_GATEWAY_PORT) -> Channel:
        return Channel(socket_path=self.socket_path, port=port)

    def sandbox_env(self, port: int = SANDBOX_GATEWAY_PORT) -> dict[str, str]:
        """Base URLs and the scoped token for Inspect's providers inside the sandbox."""
        env = {}
        for p in PROVIDERS.values():
            env[p.sandbox_base_env] = f"http://127.0.0.1:{port}{p.sandbox_base_suffix}"
            env[p.sandbox_key_env] = self.token
        return env

    # -- windows ---------------------------------------------------------------------------------

    def begin(self) -> None:
        """The token is honoured from now until :meth:`end` (one window)."""
        with self._lock:
            if self._closed:
                raise GatewayError("gateway scope is closed")
            self._window = GatewayUsage()
            self._active = True

    def end(self) -> GatewayUsage:
        """Stop honouring the token; the usage of the window that just ended."""
        with self._lock:
            self._active = False
            usage, self._window = self._window, GatewayUsage()
        return usage

    def close(self) -> None:
        """Revoke the token for good and remove the socket."""
        with self._lock:
            if self._closed:
                return
            self._active = False
            self._closed = True
        self._server.shutdown()
        self._server.server_close()
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass
        self.gateway._forget(self)

    def __enter__(self) -> Scope:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- accounting (called by the handler) ------------------------------------------------------

    @property
    def live(self) -> bool:
        """Whether a window of this scope is running (its calls are still wanted)."""
        with self._lock:
            return self._active and not self._closed

    def authorised(self, presented: str) -> bool:
        with self._lock:
            return self._active and hmac.compare_digest(presented.encode(), self.token.encode())

    def record(self, fn: Callable[[GatewayUsage], None]) -> None:
        with self._lock:
            fn(self._window)
            fn(self.total)


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    # A sandbox's samples connect many at once; socketserver's backlog of 5 refuses the rest.
    request_queue_size = 128

    def __init__(self, path: str, handler: type, scope: Scope) -> None:
        self.scope = scope
        super().__init__(path, handler)
        os.chmod(path, 0o600)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _UnixHTTPServer

    def address_string(self) -> str:  # unix sockets have no peer address
        return "sandbox"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._refuse(405, "the model gateway forwards POST requests only", count=True)

    def do_POST(self) -> None:  # noqa: N802
        scope = self.server.scope
        length = self.headers.get("content-length")
        try:
            size = int(length or "0")
        except ValueError:
            size = -1
        if size < 0 or size > MAX_BODY_BYTES:
            self._refuse(413, f"request body must have a Content-Length of at most {MAX_BODY_BYTES} bytes")
            return
        body = self.rfile.read(size)
        token = self.headers.get("x-api-key") or ""
        auth = self.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            token = auth[7:].strip()
        if not scope.authorised(token):
            self._refuse(
                401, "invalid or expired gateway token (tokens are valid only in their own sandbox while a window runs)"
            )
            return
        route, _, rest = self.path.lstrip("/").partition("/")
        provider = PROVIDERS.get(route)
        sub = "/" + rest.split("?", 1)[0]
        if provider is not None and provider.name == "openai":
            sub = sub[len("/v1") :] if sub.startswith("/v1/") else "?"
        if provider is None or sub not in provider.paths:
            self._refuse(404, f"the model gateway does not forward {self.path!r}")
            return
        scope.gateway.forward(self, scope, provider, sub, body)

    # -- answers -------------------------------------------------------------------------------

    def _refuse(
        self, status: int, message: str, *, count: bool = True, budget: bool = False, kind: str = "gateway_error"
    ) -> None:
        if count:
            self.server.scope.record(
                lambda u: setattr(
                    u,
                    "budget_refusals" if budget else "refused",
                    getattr(u, "budget_refusals" if budget else "refused") + 1,
                )
            )
        err_type = "budget_exceeded" if budget else kind
        body = json.dumps({"type": "error", "error": {"message": message, "type": err_type, "code": err_type}}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("x-should-retry", "false")  # the gateway's answer is final: SDKs obey this
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ModelGateway:
    """The controller's model gateway (see the module docstring). Use as a context manager."""

    def __init__(
        self,
        settings: GatewaySettings | None = None,
        *,
        socket_dir: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or GatewaySettings.from_env()
        self.prices = self.settings.prices or PriceTable.default()
        self.budget = _Budget(self.settings.budget_usd)
        # Owner pid in the name: a crashed controller's sockets are recognisable.
        self.socket_dir = tempfile.mkdtemp(prefix=f"evalrunner-gw-{os.getpid()}-", dir=socket_dir)
        os.chmod(self.socket_dir, 0o700)
        self._sleep = sleep
        self._slots = {name: threading.BoundedSemaphore(self.settings.max_concurrency) for name in PROVIDERS}
        timeout = httpx.Timeout(
            self.settings.timeout_s, connect=min(self.settings.connect_timeout_s, self.settings.timeout_s)
        )
        self._clients = {
            name: httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) for name in PROVIDERS
        }
        # Each provider's health across the whole comparison (every scope's calls).
        self._down_listeners: list[Callable[[CircuitTrip], None]] = []
        self.circuits = {
            p.name: ProviderCircuit(
                p.name,
                p.key_env,
                trip_failures=self.settings.trip_failures,
                trip_after_s=self.settings.trip_after_s,
                base_s=self.settings.backoff_base_s,
                max_wait_s=self.settings.max_retry_wait_s,
                clock=clock,
                sleep=sleep,
                on_open=self._provider_down,
            )
            for p in PROVIDERS.values()
        }
        self._scopes: set[Scope] = set()
        self._lock = threading.Lock()
        self.total = GatewayUsage()  # every scope's usage, for the comparison's summary
        self.in_flight = {name: 0 for name in PROVIDERS}
        self.max_in_flight = {name: 0 for name in PROVIDERS}

    # -- lifecycle -------------------------------------------------------------------------------

    def require(self, model: str) -> None:
        """Raise :class:`GatewayError` (saying how to fix it) if ``model`` cannot be served."""
        provider = provider_of(model)
        if provider is None:
            raise GatewayError(
                f"model {model!r} is not served by the model gateway (providers: {', '.join(sorted(PROVIDERS))})"
            )
        if provider.name not in self.settings.keys:
            raise GatewayError(
                f"model {model!r} needs {provider.key_env} set where evalrunner runs "
                "(the gateway holds it; sandboxes never see it)"
            )
        if self.settings.budget_usd is not None and self.prices.price(model) is None:
            raise GatewayError(
                f"a dollar budget needs a price for {model!r}: add it to the price table "
                '($EVALRUNNER_PRICES, a JSON file {"' + model + '": {"input": …, "output": …}} in $/Mtok)'
            )

    def open_scope(self, labels: Mapping[str, str] | None = None) -> Scope:
        scope = Scope(self, labels or {})
        with self._lock:
            self._scopes.add(scope)
        return scope

    def _forget(self, scope: Scope) -> None:
        s = scope.total
        with self._lock:
            if scope not in self._scopes:
                return  # closed twice: counted once
            self._scopes.discard(scope)
            t = self.total
            for k in ("requests", "retries", "retry_wait_s", "upstream_errors", "budget_refusals", "refused"):
                setattr(t, k, getattr(t, k) + getattr(s, k))
            for model, m in s.models.items():
                tm = t.models.setdefault(
                    model, {"requests": 0, "input_tokens": 0, "output_tokens": 0, "total_tokens": 0, "cost_usd": 0.0}
                )
                for k in ("requests", "input_tokens", "output_tokens", "total_tokens"):
                    tm[k] += m[k]
                tm["cost_usd"] = (
                    None if tm["cost_usd"] is None or m["cost_usd"] is None else tm["cost_usd"] + m["cost_usd"]
                )

    def on_provider_down(self, listener: Callable[[CircuitTrip], None]) -> None:
        """Call ``listener(trip)`` (from a gateway thread) when a provider's circuit opens; at once
        if one is open already."""
        with self._lock:
            self._down_listeners.append(listener)
        trip = self.provider_trip
        if trip is not None:
            listener(trip)

    def _provider_down(self, trip: CircuitTrip) -> None:
        with self._lock:
            listeners = list(self._down_listeners)
        for listener in listeners:
            listener(trip)

    @property
    def provider_trip(self) -> CircuitTrip | None:
        """The first provider circuit that opened, if any."""
        trips = [c.trip for c in self.circuits.values() if c.trip is not None]
        return min(trips, key=lambda t: t.opened_at) if trips else None

    def upstream_calls(self) -> dict[str, int]:
        """Upstream attempts per provider so far (retries included)."""
        return {name: c.upstream_calls for name, c in self.circuits.items()}

    @property
    def budget_spent(self) -> bool:
        return self.budget.spent_out()

    @property
    def spent_usd(self) -> float:
        return self.budget.spent

    @property
    def spend_known(self) -> bool:
        """Whether every call answered so far had a price (else ``spent_usd`` is a floor)."""
        return self.budget.unpriced == 0

    def close(self) -> None:
        with self._lock:
            scopes = list(self._scopes)
        for s in scopes:
            s.close()
        for c in self._clients.values():
            c.close()
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    def __enter__(self) -> ModelGateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- forwarding ------------------------------------------------------------------------------

    def _cost(self, model: str, tokens: Mapping[str, int]) -> float | None:
        price = self.prices.price(model)
        if price is None:
            return None
        return (tokens.get("input_tokens", 0) * price[0] + tokens.get("output_tokens", 0) * price[1]) / 1e6

    def _backoff(self, attempt: int, retry_after_s: float | None) -> float:
        wait = retry_after_s
        if wait is None:
            wait = self.settings.backoff_base_s * (2**attempt) * (0.5 + random.random() / 2)
        return min(wait, self.settings.max_retry_wait_s)

    def forward(self, h: _Handler, scope: Scope, provider: Provider, sub: str, body: bytes) -> None:
        key = self.settings.keys.get(provider.name)
        if key is None:
            h._refuse(
                503, f"the model gateway has no key for {provider.name} (set {provider.key_env} where evalrunner runs)"
            )
            return
        try:
            req_json = json.loads(body) if body else {}
        except ValueError:
            req_json = {}
        req_model = str(req_json.get("model") or "unknown") if isinstance(req_json, dict) else "unknown"
        model = f"{provider.name}/{req_model}"
        stream = isinstance(req_json, dict) and bool(req_json.get("stream"))
        if self.settings.budget_usd is not None and self.prices.price(model) is None:
            h._refuse(
                400, f"model {model!r} has no price, so the budget cannot be enforced; add it to $EVALRUNNER_PRICES"
            )
            return
        headers = {k: v for k, v in h.headers.items() if k.lower() in _FORWARD_HEADERS}
        headers.update(provider.upstream_headers(key))
        url = self.settings.bases[provider.name].rstrip("/") + sub
        client = self._clients[provider.name]
        circuit = self.circuits[provider.name]
        with self._slot(provider.name):
            attempt = 0
            successes_then: int | None = None  # the circuit's successes at this request's first failure
            failed_at, own_wait = 0.0, 0.0
            while True:
                try:
                    admission = circuit.admit(lambda: scope.live)
                except CircuitOpen as exc:
                    h._refuse(
                        PROVIDER_DOWN_STATUS, f"evalrunner model gateway: {exc}", count=False, kind="provider_down"
                    )
                    return
                if admission is None:
                    return  # the window ended while this request waited: nobody reads the answer
                if attempt:
                    gap = max(admission.waited_s + own_wait, time.monotonic() - failed_at)
                    scope.record(functools.partial(_add_retry, wait=round(gap, 3)))
                # Checked for every attempt, after the slot is taken: once the budget is spent no
                # call starts, so the overshoot is bounded by the calls already in flight.
                if self.budget.spent_out():
                    circuit.release(admission)
                    self._refuse_budget(h)
                    return
                failure: tuple[str, float | None] | None = None
                try:
                    resp = client.send(client.build_request("POST", url, headers=headers, content=body), stream=True)
                except httpx.HTTPError as exc:
                    failure = (type(exc).__name__, None)
                else:
                    if resp.status_code in AUTH_STATUSES:
                        detail = _error_code(resp)
                        resp.close()
                        circuit.refused_key(resp.status_code, detail)
                        scope.record(lambda u: setattr(u, "upstream_errors", u.upstream_errors + 1))
                        trip = circuit.trip
                        h._refuse(
                            PROVIDER_DOWN_STATUS,
                            f"evalrunner model gateway: {trip.describe() if trip else provider.name}",
                            count=False,
                            kind="provider_down",
                        )
                        return
                    if resp.status_code in _RETRY_STATUSES:
                        failure = (str(resp.status_code), _retry_after_s(resp.headers.get("retry-after")))
                        resp.read()
                        resp.close()
                    else:
                        circuit.success()
                if failure is None:
                    break
                circuit.failure(admission, *failure)
                failed_at = time.monotonic()
                if successes_then is None:
                    successes_then = circuit.successes
                if attempt >= self.settings.max_retries and circuit.successes != successes_then:
                    # Other calls to the provider succeed meanwhile: this request alone keeps
                    # failing. It is answered (not retried by the sandbox's SDK or Inspect).
                    scope.record(lambda u: setattr(u, "upstream_errors", u.upstream_errors + 1))
                    h._refuse(
                        PROVIDER_DOWN_STATUS,
                        f"evalrunner model gateway: {provider.name} answered {failure[0]} to this request "
                        f"{attempt + 1} times while other calls succeeded",
                        count=False,
                        kind="upstream_failed",
                    )
                    return
                attempt += 1
                own_wait = 0.0
                if not circuit.failing:
                    # Another call succeeded since: this request backs off on its own.
                    own_wait = self._backoff(attempt - 1, failure[1])
                    self._sleep(own_wait)
            try:
                self._relay(h, scope, provider, model, resp, stream)
            finally:
                resp.close()

    def _refuse_budget(self, h: _Handler) -> None:
        h._refuse(
            BUDGET_STATUS,
            f"evalrunner model budget of ${self.settings.budget_usd:g} is spent "
            f"(${self.budget.spent:.4f} used); no more model calls in this comparison",
            budget=True,
        )

    def _relay(
        self, h: _Handler, scope: Scope, provider: Provider, model: str, resp: httpx.Response, stream: bool
    ) -> None:
        # The meter is updated before the answer's last byte is sent: once the sandbox has its
        # answer, the window's usage already counts it (the window may end right after).
        ok = resp.status_code < 400
        h.send_response(resp.status_code)
        for k in _RESPONSE_HEADERS:
            if k in resp.headers:
                h.send_header(k, resp.headers[k])
        if stream and ok and "text/event-stream" in resp.headers.get("content-type", ""):
            usage = _StreamUsage(provider.name)
            h.send_header("transfer-encoding", "chunked")
            h.end_headers()
            gone = False
            for chunk in resp.iter_bytes():
                usage.feed(chunk)
                if chunk and not gone:
                    try:
                        h.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        h.wfile.flush()
                    except OSError:
                        gone = True  # the sandbox went away; what is used upstream is still metered
            self._meter(scope, model, usage.tokens, ok)
            if not gone:
                try:
                    h.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
            return
        data = resp.read()
        tokens: dict[str, int] = {}
        if ok:
            try:
                tokens = _usage_tokens(provider.name, (json.loads(data) or {}).get("usage"))
            except (ValueError, AttributeError):
                tokens = {}
        self._meter(scope, model, tokens, ok)
        h.send_header("content-length", str(len(data)))
        h.end_headers()
        try:
            h.wfile.write(data)
        except OSError:
            pass

    def _meter(self, scope: Scope, model: str, tokens: dict[str, int], ok: bool) -> None:
        if not ok:
            scope.record(lambda u: setattr(u, "upstream_errors", u.upstream_errors + 1))
            return
        cost = self._cost(model, tokens)
        self.budget.charge(cost)

        def meter(u: GatewayUsage) -> None:
            u.requests += 1
            u.add_tokens(model, tokens, cost)

        scope.record(meter)

    class _SlotCtx:
        def __init__(self, gw: ModelGateway, name: str) -> None:
            self.gw, self.name = gw, name

        def __enter__(self) -> None:
            self.gw._slots[self.name].acquire()
            with self.gw._lock:
                self.gw.in_flight[self.name] += 1
                self.gw.max_in_flight[self.name] = max(self.gw.max_in_flight[self.name], self.gw.in_flight[self.name])

        def __exit__(self, *exc: object) -> None:
            with self.gw._lock:
                self.gw.in_flight[self.name] -= 1
            self.gw._slots[self.name].release()

    def _slot(self, name: str) -> ModelGateway._SlotCtx:
        return ModelGateway._SlotCtx(self, name)


def _retry_after_s(value: str | None) -> float | None:
    """``Retry-After`` in seconds (an HTTP date is left to our own backoff)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _error_code(resp: httpx.Response) -> str:
    """A refusal's error type/code (``invalid_api_key``), never its message: a provider may echo
    part of the key there."""
    try:
        data = json.loads(resp.read()[:65536])
    except (ValueError, httpx.HTTPError):
        return ""
    err = data.get("error") if isinstance(data, dict) else None
    if not isinstance(err, dict):
        return ""
    parts = [str(err[k]) for k in ("type", "code") if isinstance(err.get(k), str) and err.get(k)]
    return " ".join(dict.fromkeys(p[:60] for p in parts if p.replace("_", "").isalnum()))


def _add_retry(u: GatewayUsage, wait: float) -> None:
    u.retries += 1
    u.retry_wait_s += wait


def start_gateway(model: str, budget_usd: float | None, wanted: bool | None = None) -> ModelGateway | None:
    """The gateway a comparison of ``model`` needs, started from the host environment (None when
    it needs none: ``wanted`` False, or None and ``model`` is not a gateway provider's)."""
    use = provider_of(model) is not None if wanted is None else wanted
    if not use:
        if budget_usd is not None:
            raise GatewayError(
                "a dollar budget (--budget-usd) is enforced by the model gateway: use an "
                "openai/… or anthropic/… model, or --model-gateway"
            )
        return None
    gateway = ModelGateway(GatewaySettings.from_env(budget_usd=budget_usd))
    try:
        if provider_of(model) is not None:
            gateway.require(model)
    except BaseException:
        gateway.close()
        raise
    return gateway
