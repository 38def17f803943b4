"""The model gateway against a stand-in upstream on loopback (no model API is reachable here):
real HTTP on both sides, the caller speaking to the gateway's own unix socket as a sandbox's
relay does."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from evalrunner_assets.execution.sandbox import GATEWAY_ENV_NAMES
from evalrunner_assets.gateway import PROVIDERS, GatewaySettings, GatewayUsage, ModelGateway
from evalrunner_assets.gateway._circuit import WAIT_RESOLUTION_S  # the window counts as spanned within it
from evalrunner_assets.pricing import PriceTable
from tests.helpers.openai_standin import OpenAIStandIn

KEY = "sk-standin-REAL-KEY-0123456789"
ANT_KEY = "sk-ant-standin-REAL-KEY-9876543210"


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("sandbox", timeout=60)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(self._path)


def post(
    scope,
    path: str,
    body: dict,
    *,
    token: str | None = None,
    header: str = "authorization",
    socket_path: str | None = None,
) -> tuple[int, bytes]:
    conn = _UnixHTTPConnection(socket_path or scope.socket_path)
    tok = scope.token if token is None else token
    headers = {"content-type": "application/json", header: f"Bearer {tok}" if header == "authorization" else tok}
    conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "reset my password"}]}


@pytest.fixture()
def upstream():
    with OpenAIStandIn() as up:
        yield up


def gateway_for(up: OpenAIStandIn, sleeps: list[float] | None = None, **kw) -> ModelGateway:
    settings = GatewaySettings(
        keys={"openai": KEY, "anthropic": ANT_KEY},
        bases={"openai": up.openai_base, "anthropic": up.anthropic_base},
        **kw,
    )
    return ModelGateway(settings, sleep=(sleeps.append if sleeps is not None else time.sleep))


def test_gateway_swaps_the_scoped_token_for_the_real_key_and_meters_usage(upstream):
    with gateway_for(upstream) as gw, gw.open_scope() as scope:
        scope.begin()
        status, data = post(scope, "/openai/v1/chat/completions", CHAT)
        usage = scope.end()
    assert status == 200, data
    assert json.loads(data)["choices"][0]["message"]["content"] == "ANSWER: RESET MY PASSWORD"
    assert KEY.encode() not in data
    assert upstream.state.requests[0]["authorization"] == f"Bearer {KEY}"
    assert scope.token not in json.dumps(upstream.state.requests)
    # The stand-in counts words: 3 prompt words, 4 answer words.
    assert usage.models == {
        "openai/gpt-4o": {"requests": 1, "input_tokens": 3, "output_tokens": 4, "total_tokens": 7, "cost_usd": None}
    }
    assert usage.requests == 1 and usage.retries == 0


def test_anthropic_messages_are_forwarded_with_the_real_x_api_key(upstream):
    body = {"model": "claude-sonnet-4-0", "max_tokens": 100, "messages": [{"role": "user", "content": "hi there"}]}
    with gateway_for(upstream) as gw, gw.open_scope() as scope:
        scope.begin()
        status, data = post(scope, "/anthropic/v1/messages", body, header="x-api-key")
        usage = scope.end()
    assert status == 200, data
    assert upstream.state.requests[0]["x-api-key"] == ANT_KEY
    assert upstream.state.requests[0]["authorization"] is None
    assert usage.models["anthropic/claude-sonnet-4-0"]["input_tokens"] == 2


def test_a_streamed_answer_is_relayed_and_its_usage_read_from_the_events(upstream):
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with gateway_for(upstream) as gw, gw.open_scope() as scope:
        scope.begin()
        status, data = post(scope, "/openai/v1/chat/completions", body)
        usage = scope.end()
    assert status == 200
    assert b"ANSWER: RESET MY PASSWORD" in data and b"[DONE]" in data
    assert usage.models["openai/gpt-4o"]["total_tokens"] == 7


def test_the_token_is_refused_outside_a_window_after_close_and_on_another_scopes_socket(upstream):
    with gateway_for(upstream) as gw:
        a, b = gw.open_scope(), gw.open_scope()
        status, data = post(a, "/openai/v1/chat/completions", CHAT)  # no window running
        assert status == 401 and b"invalid or expired gateway token" in data
        a.begin()
        b.begin()
        assert post(a, "/openai/v1/chat/completions", CHAT)[0] == 200
        # a's token on b's socket (each sandbox holds only its own socket anyway)
        assert post(b, "/openai/v1/chat/completions", CHAT, token=a.token)[0] == 401
        assert post(a, "/openai/v1/chat/completions", CHAT, token="sk-guess")[0] == 401
        a.end()
        assert post(a, "/openai/v1/chat/completions", CHAT)[0] == 401
        socket_path = a.socket_path
        a.close()
        with pytest.raises(OSError):
            post(a, "/openai/v1/chat/completions", CHAT, socket_path=socket_path)
        b.close()
    assert len(upstream.state.requests) == 1


def test_only_model_endpoints_are_forwarded(upstream):
    with gateway_for(upstream) as gw, gw.open_scope() as scope:
        scope.begin()
        status, data = post(scope, "/openai/v1/files", {})
        assert status == 404 and b"does not forward" in data
        status, _ = post(scope, "/elsewhere/v1/chat/completions", CHAT)
        assert status == 404
        usage = scope.end()
    assert upstream.state.requests == []
    assert usage.refused == 2


def test_a_429_storm_is_retried_honouring_retry_after_then_succeeds(upstream):
    sleeps: list[float] = []
    upstream.fail_next(3, 429, retry_after="2")
    with gateway_for(upstream, sleeps) as gw, gw.open_scope() as scope:
        scope.begin()
        status, data = post(scope, "/openai/v1/chat/completions", CHAT)
        usage = scope.end()
    assert status == 200, data
    assert sleeps == [2.0, 2.0, 2.0]
    assert [r["status"] for r in upstream.state.requests] == [429, 429, 429, 200]
    assert usage.retries == 3 and usage.retry_wait_s == 6.0 and usage.requests == 1


def test_a_server_error_is_retried_with_backoff_then_succeeds(upstream):
    sleeps: list[float] = []
    upstream.fail_next(2, 503)
    with gateway_for(upstream, sleeps, backoff_base_s=0.01) as gw, gw.open_scope() as scope:
        scope.begin()
        status, _ = post(scope, "/openai/v1/chat/completions", CHAT)
        usage = scope.end()
    assert status == 200
    assert len(sleeps) == 2 and all(0 < s <= 0.04 for s in sleeps)
    assert usage.retries == 2


class FakeTime:
    """A clock that only the gateway's own waits move (no real sleeping in these tests)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    def clock(self) -> float:
        return self.now


def gateway_on_fake_time(up: OpenAIStandIn, t: FakeTime, **kw) -> ModelGateway:
    settings = GatewaySettings(
        keys={"openai": KEY, "anthropic": ANT_KEY},
        bases={"openai": kw.pop("openai_base", up.openai_base), "anthropic": up.anthropic_base},
        **kw,
    )
    return ModelGateway(settings, sleep=t.sleep, clock=t.clock)


def test_a_provider_answering_429_on_every_call_opens_its_circuit_and_the_answer_is_not_retried(upstream):
    t = FakeTime()
    trips = []
    upstream.fail_next(50, 429, retry_after="3600")
    with gateway_on_fake_time(upstream, t, max_retries=2, max_retry_wait_s=5.0) as gw, gw.open_scope() as scope:
        gw.on_provider_down(trips.append)
        scope.begin()
        status, data = post(scope, "/openai/v1/chat/completions", CHAT)
        again, _ = post(scope, "/openai/v1/chat/completions", CHAT)
        usage = scope.end()
    # Retry-After 3600 is capped at 5 s; the circuit opens at the 8th failure (35 s ≥ 20 s).
    assert t.sleeps == [5.0] * 7
    assert len(upstream.state.requests) == 8
    assert status == again == 424  # neither the SDKs nor Inspect retry it
    err = json.loads(data)["error"]
    assert err["code"] == "provider_down"
    assert "model provider openai is down: 8 consecutive failed calls over 35s" in err["message"]
    assert "8× 429" in err["message"]
    (trip,) = trips
    assert trip.kind == "outage" and trip.failures == {"429": 8} and trip.upstream_calls == 8
    assert gw.upstream_calls()["openai"] == 8
    assert usage.retries == 7 and usage.requests == 0


def test_a_provider_refusing_connections_opens_its_circuit(upstream):
    import socket as socket_mod

    closed = socket_mod.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: every connection is refused
    t = FakeTime()
    with (
        gateway_on_fake_time(upstream, t, openai_base=f"http://127.0.0.1:{port}/v1") as gw,
        gw.open_scope() as scope,
    ):
        scope.begin()
        status, data = post(scope, "/openai/v1/chat/completions", CHAT)
        scope.end()
    assert status == 424
    trip = gw.provider_trip
    assert trip is not None and trip.kind == "outage" and trip.failures == {"ConnectError": trip.streak}
    assert trip.streak >= 8 and trip.window_s >= 20.0 - WAIT_RESOLUTION_S
    assert f"{trip.streak}× ConnectError" in json.loads(data)["error"]["message"]


def test_a_refused_key_opens_the_circuit_at_once_naming_the_variable(upstream):
    t = FakeTime()
    trips = []
    upstream.fail_next(5, 401)
    with gateway_on_fake_time(upstream, t) as gw, gw.open_scope() as scope:
        gw.on_provider_down(trips.append)
        scope.begin()
        status, data = post(scope, "/openai/v1/chat/completions", CHAT)
        again, _ = post(scope, "/openai/v1/chat/completions", CHAT)
        scope.end()
    assert status == again == 424 and t.sleeps == []
    assert len(upstream.state.requests) == 1  # not retried, and nothing more is sent
    (trip,) = trips
    assert trip.kind == "auth" and trip.hint() is not None and "OPENAI_API_KEY" in trip.hint()
    assert "model provider openai refused the key in OPENAI_API_KEY: HTTP 401" in json.loads(data)["error"]["message"]
    assert KEY not in data.decode()


def test_a_few_failures_then_success_close_the_circuit_again(upstream):
    t = FakeTime()
    upstream.fail_next(4, 500)
    with gateway_on_fake_time(upstream, t) as gw, gw.open_scope() as scope:
        scope.begin()
        status, _ = post(scope, "/openai/v1/chat/completions", CHAT)
        later, _ = post(scope, "/openai/v1/chat/completions", CHAT)
        scope.end()
    assert status == later == 200
    assert gw.provider_trip is None and not gw.circuits["openai"].failing
    assert len(t.sleeps) == 4  # one probe per backoff step, then straight through


def test_while_a_provider_fails_its_calls_go_one_at_a_time_until_the_circuit_opens(upstream):
    t = FakeTime()
    upstream.fail_always(500)
    hold = upstream.state.hold = threading.Event()
    results: list[int] = []
    with gateway_on_fake_time(upstream, t, max_concurrency=6) as gw, gw.open_scope() as scope:
        scope.begin()
        threads = [
            threading.Thread(target=lambda: results.append(post(scope, "/openai/v1/chat/completions", CHAT)[0]))
            for _ in range(6)
        ]
        for th in threads:
            th.start()
        for _ in range(6):  # all six reach the provider before it answers the first
            assert upstream.state.arrived.acquire(timeout=60)
        upstream.state.hold = None
        hold.set()
        for th in threads:
            th.join(timeout=60)
        scope.end()
    assert results == [424] * 6
    trip = gw.provider_trip
    assert trip is not None and trip.window_s >= 20.0 - WAIT_RESOLUTION_S
    # Six calls failed at once; after them one probe at a time until the failures span 20 s
    # (spaced 0.5, 1, 2, 4, 4 … s less at most a quarter of jitter: at most 9 probes) — not six
    # requests each retrying on its own (6 × 5 = 30 calls).
    assert len(upstream.state.requests) == trip.streak == gw.upstream_calls()["openai"]
    assert trip.streak <= 6 + 9, trip.streak
    assert len(t.sleeps) == trip.streak - 6


def test_one_request_that_keeps_failing_while_others_succeed_gives_up_after_its_retries(upstream):
    upstream.fail_model("gpt-poison", 500)
    stop = threading.Event()
    with gateway_for(upstream, max_retries=2, backoff_base_s=0.01) as gw, gw.open_scope() as scope:
        scope.begin()

        def others() -> None:
            while not stop.is_set():
                post(scope, "/openai/v1/chat/completions", CHAT)

        background = threading.Thread(target=others)
        background.start()
        try:
            status, data = post(scope, "/openai/v1/chat/completions", {**CHAT, "model": "gpt-poison"})
        finally:
            stop.set()
            background.join(timeout=60)
        scope.end()
    assert status == 424
    # Probes go to waiting requests in turn, so the others' answers end each of its failure
    # streaks: it gives up after its own retries, and the provider is not taken for down.
    assert (
        "openai answered 500 to this request 3 times while other calls succeeded"
        in json.loads(data)["error"]["message"]
    )
    assert [r["model"] for r in upstream.state.requests].count("gpt-poison") == 3
    assert gw.provider_trip is None


def test_requests_in_flight_per_provider_are_bounded(upstream):
    hold = upstream.state.hold = threading.Event()
    arrived = upstream.state.arrived
    results: list[int] = []
    with gateway_for(upstream, max_concurrency=2) as gw, gw.open_scope() as scope:
        scope.begin()
        threads = [
            threading.Thread(target=lambda: results.append(post(scope, "/openai/v1/chat/completions", CHAT)[0]))
            for _ in range(6)
        ]
        for t in threads:
            t.start()
        # Two requests reach the stand-in and are held there; the bound keeps the rest waiting.
        assert arrived.acquire(timeout=60) and arrived.acquire(timeout=60)
        assert not arrived.acquire(timeout=0.5)
        assert gw.in_flight["openai"] == 2
        hold.set()
        for t in threads:
            t.join(timeout=60)
        scope.end()
    assert results == [200] * 6
    assert upstream.state.max_in_flight == 2
    assert gw.max_in_flight["openai"] == 2


def test_a_spent_budget_refuses_further_calls_with_a_clear_error(upstream):
    prices = PriceTable({"openai/gpt-4o": (1_000_000.0, 1_000_000.0)})  # $1 per token: 7 tokens = $7
    with gateway_for(upstream, budget_usd=10.0, prices=prices) as gw, gw.open_scope() as scope:
        scope.begin()
        assert post(scope, "/openai/v1/chat/completions", CHAT)[0] == 200  # $7 of $10
        assert post(scope, "/openai/v1/chat/completions", CHAT)[0] == 200  # $14: over, by one call
        status, data = post(scope, "/openai/v1/chat/completions", CHAT)
        usage = scope.end()
    assert status == 402
    err = json.loads(data)["error"]
    assert "budget of $10 is spent" in err["message"] and err["code"] == "budget_exceeded"
    assert usage.budget_refusals == 1 and usage.requests == 2
    assert usage.cost_usd == pytest.approx(14.0)
    assert len(upstream.state.requests) == 2


def test_a_budget_on_an_unpriced_model_is_refused_before_anything_runs(upstream):
    from evalrunner_assets.gateway import GatewayError

    with gateway_for(upstream, budget_usd=1.0, prices=PriceTable({})) as gw:
        with pytest.raises(GatewayError, match="EVALRUNNER_PRICES"):
            gw.require("openai/gpt-4o")
        gw.settings.keys.pop("openai")
        with pytest.raises(GatewayError, match="OPENAI_API_KEY"):
            gw.require("openai/gpt-4o")


def test_usage_totals_add_up_over_closed_scopes(upstream):
    with gateway_for(upstream) as gw:
        for _ in range(2):
            with gw.open_scope() as scope:
                scope.begin()
                post(scope, "/openai/v1/chat/completions", CHAT)
                scope.end()
        assert isinstance(gw.total, GatewayUsage)
        assert gw.total.requests == 2 and gw.total.models["openai/gpt-4o"]["total_tokens"] == 14


def test_a_dollar_budget_without_a_gateway_model_is_refused_with_the_fix():
    from evalrunner_assets.gateway import GatewayError, start_gateway

    assert start_gateway("simagent/support-agent", None) is None
    with pytest.raises(GatewayError, match="--model-gateway"):
        start_gateway("simagent/support-agent", 1.0)


def test_a_gateway_model_without_its_key_on_the_host_is_refused_with_the_fix(monkeypatch):
    from evalrunner_assets.gateway import GatewayError, start_gateway

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(GatewayError, match="needs ANTHROPIC_API_KEY set where evalrunner runs"):
        start_gateway("anthropic/claude-sonnet-4-0", None)


def test_the_sandbox_allows_exactly_the_variables_the_gateway_providers_set():
    # The names live with the sandbox (which checks them) and the providers live with the gateway.
    assert {n for p in PROVIDERS.values() for n in (p.sandbox_base_env, p.sandbox_key_env)} == GATEWAY_ENV_NAMES


def test_the_probe_timed_to_span_the_window_opens_the_circuit_though_its_clock_lands_an_ulp_short(monkeypatch):
    """One caller against a provider that always fails, on a clock only the circuit's waits move,
    with a fixed jitter: the probe timed to go as the 20 s window is spanned waits a wait rounded
    to the millisecond, and the clock's sum lands a rounding error short of 20 s (19.9999999999999).
    It opens the circuit; it used to send one more probe 0.5 s later (what CI saw: a streak one
    longer than the bound, over 20.4999999 s)."""
    from evalrunner_assets.gateway import _circuit

    monkeypatch.setattr(_circuit.random, "random", lambda: 0.001)
    t = FakeTime()
    circuit = _circuit.ProviderCircuit(
        "openai", "OPENAI_API_KEY", trip_failures=3, max_probe_gap_s=30.0, clock=t.clock, sleep=t.sleep
    )
    calls = 0
    with pytest.raises(_circuit.CircuitOpen) as opened:
        while True:
            admission = circuit.admit()
            assert admission is not None
            calls += 1
            circuit.failure(admission, "500")
    trip = opened.value.trip
    assert calls == trip.streak == 7, (calls, t.sleeps)
    assert abs(trip.window_s - 20.0) < 0.001, trip.window_s
