"""Model gateway overhead per model call (p50/p99), against calling the upstream directly.

Upstream: the loopback stand-in of the OpenAI API (``tests/helpers/openai_standin.py``; no model API is
reachable here), answering a one-message chat completion at once. Baseline, measured in the same
run: an ``httpx`` client (keep-alive, as the ``openai`` SDK uses) posting straight to the
stand-in. Candidate: the same client posting the way a sandboxed process does — to a loopback
port served by the channel relay (``execution/channel.py``), which copies the connection to the
gateway scope's unix socket; the gateway checks the scoped token, meters, takes a concurrency
slot and forwards with the real key. Calls are sequential, so the numbers are latency, not
throughput. The relay here runs in this process on the host's loopback instead of inside a
sandbox's network namespace: the same code and the same copies.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported in main: the bench's start-up is not measured, but kept light
    import httpx

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "reset my password"}]}


def _percentiles(samples: list[float]) -> tuple[float, float]:
    s = sorted(samples)
    return statistics.median(s), s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]


def _timed_calls(client: httpx.Client, url: str, headers: dict[str, str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = client.post(url, json=BODY, headers=headers)
        r.read()
        if r.status_code != 200:
            raise RuntimeError(f"benchmark call failed: {r.status_code} {r.text[:200]}")
        out.append(time.perf_counter() - t)
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench gateway_overhead")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="200 calls, for a smoke run")
    args = parser.parse_args(argv)
    n = 200 if args.quick else args.calls

    import httpx

    from evalrunner_assets.execution.channel import _serve_tcp_to_unix
    from evalrunner_assets.gateway import GatewaySettings, ModelGateway
    from tests.helpers.openai_standin import OpenAIStandIn

    key = "sk-bench-not-a-real-key"
    with (
        OpenAIStandIn() as up,
        ModelGateway(
            GatewaySettings(keys={"openai": key}, bases={"openai": up.openai_base, "anthropic": up.anthropic_base})
        ) as gw,
    ):
        scope = gw.open_scope({"bench": "gateway_overhead"})
        scope.begin()
        relay = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        relay.bind(("127.0.0.1", 0))
        relay.listen(128)
        threading.Thread(target=_serve_tcp_to_unix, args=(relay, scope.socket_path), daemon=True).start()
        via = f"http://127.0.0.1:{relay.getsockname()[1]}/openai/v1/chat/completions"
        direct = f"{up.openai_base}/chat/completions"
        with httpx.Client(trust_env=False, timeout=60) as client:
            # Warm both paths (connections, imports), then alternate blocks so drift hits both.
            _timed_calls(client, direct, {"authorization": f"Bearer {key}"}, 20)
            _timed_calls(client, via, {"authorization": f"Bearer {scope.token}"}, 20)
            base: list[float] = []
            cand: list[float] = []
            block = max(1, n // 10)
            while len(base) < n:
                base += _timed_calls(client, direct, {"authorization": f"Bearer {key}"}, block)
                cand += _timed_calls(client, via, {"authorization": f"Bearer {scope.token}"}, block)
        usage = scope.end()
        relay.close()
        scope.close()

    b50, b99 = _percentiles(base)
    c50, c99 = _percentiles(cand)
    print(f"calls per path: {len(base)} (sequential, one-message chat completions, keep-alive client)")
    print(f"baseline  direct to the upstream       p50 {b50 * 1e3:7.3f} ms   p99 {b99 * 1e3:7.3f} ms")
    print(f"candidate relay + gateway + upstream   p50 {c50 * 1e3:7.3f} ms   p99 {c99 * 1e3:7.3f} ms")
    print(f"ratio (candidate / baseline)           p50 {c50 / b50:7.2f}x     p99 {c99 / b99:7.2f}x")
    print(f"gateway overhead per call              p50 {(c50 - b50) * 1e3:7.3f} ms   p99 {(c99 - b99) * 1e3:7.3f} ms")
    print(f"metered by the gateway: {usage.requests} requests, {usage.to_dict()['total_tokens']} tokens")


if __name__ == "__main__":
    main(sys.argv[1:])
