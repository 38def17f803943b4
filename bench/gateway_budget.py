"""How far past ``--budget-usd`` the model gateway lets a comparison spend.

Upstream: the loopback stand-in of the OpenAI API (``tests/helpers/openai_standin.py``; no model API is
reachable here), answering every chat completion after a fixed delay, so calls overlap. Every
call costs the same (the stand-in's token counts at a price of $1 per token). Many callers (as
many sandboxes' samples do) post through one gateway whose concurrency per provider is
``workers``, until every one of them is refused with 402.

Candidate: the gateway as it is — the budget is checked for every attempt after it has taken a
concurrency slot, so once the spend reaches the budget no call starts and the overshoot is at
most the calls already in flight: ``workers - 1`` besides the call that crossed it.
Baseline, measured in the same run: the same gateway with the budget checked once, when a
request arrives (before it waits for a slot), which is how it worked before: every request
queued behind the slots was already admitted.

Printed per ``workers``: the calls answered past the one that crossed the budget (worst over
the repeats) for both, and the ratio.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import threading
from typing import Any

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "reset my password"}]}
CALL_USD = 7.0  # 3 prompt + 4 answer tokens at $1 per token
BUDGET_CALLS = 20  # the budget is crossed by the 21st call


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("sandbox", timeout=120)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(self._path)


def _post(scope: Any) -> int:
    conn = _UnixHTTPConnection(scope.socket_path)
    conn.request(
        "POST",
        "/openai/v1/chat/completions",
        body=json.dumps(CHAT).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {scope.token}"},
    )
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status


def _admitted_on_arrival(gateway: Any) -> None:
    """Make ``gateway`` check its budget once, when a request arrives (the baseline)."""
    budget = gateway.budget
    admitted = threading.local()
    spent_out = budget.spent_out

    def spent_out_for_this_request() -> bool:
        return False if getattr(admitted, "yes", False) else spent_out()

    forward = gateway.forward

    def forward_checked_on_arrival(h: Any, *args: Any) -> None:
        admitted.yes = False
        if spent_out():
            forward(h, *args)  # refused at once: the budget is spent
            return
        admitted.yes = True
        try:
            forward(h, *args)
        finally:
            admitted.yes = False

    budget.spent_out = spent_out_for_this_request
    gateway.forward = forward_checked_on_arrival


def _run(workers: int, callers: int, delay_s: float, baseline: bool) -> tuple[int, float]:
    """(calls answered past the crossing one, dollars over the budget) of one run."""
    from evalrunner_assets.gateway import GatewaySettings, ModelGateway
    from evalrunner_assets.pricing import PriceTable
    from tests.helpers.openai_standin import OpenAIStandIn

    budget = CALL_USD * BUDGET_CALLS + CALL_USD / 2
    with OpenAIStandIn() as up:
        up.state.delay_s = delay_s
        settings = GatewaySettings(
            keys={"openai": "sk-bench-not-a-real-key"},
            bases={"openai": up.openai_base, "anthropic": up.anthropic_base},
            budget_usd=budget,
            max_concurrency=workers,
            prices=PriceTable({"openai/gpt-4o": (1e6, 1e6)}),
        )
        with ModelGateway(settings) as gw, gw.open_scope({"bench": "gateway_budget"}) as scope:
            if baseline:
                _admitted_on_arrival(gw)
            scope.begin()

            def caller() -> None:
                while _post(scope) == 200:
                    pass

            threads = [threading.Thread(target=caller) for _ in range(callers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=300)
            scope.end()
            answered = sum(1 for r in up.state.requests if r["status"] == 200)
            return answered - (BUDGET_CALLS + 1), gw.spent_usd - budget


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench gateway_budget")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 repeats, for a smoke run")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else args.repeats

    print(
        f"budget ${CALL_USD * BUDGET_CALLS + CALL_USD / 2:g} (crossed by call {BUDGET_CALLS + 1}); "
        f"every call ${CALL_USD:g} and 20 ms upstream; callers = 4 × workers; worst of {repeats} runs"
    )
    print(f"{'workers':>7}  {'baseline over':>13}  {'candidate over':>14}  {'bound':>5}  {'ratio':>6}")
    for workers in (1, 2, 4, 8):
        base = [_run(workers, 4 * workers, 0.02, baseline=True) for _ in range(repeats)]
        cand = [_run(workers, 4 * workers, 0.02, baseline=False) for _ in range(repeats)]
        b, c = max(n for n, _ in base), max(n for n, _ in cand)
        ratio = f"{c / b:6.2f}" if b else "     –"
        print(f"{workers:>7}  {b:>7} calls  {c:>8} calls  {workers - 1:>5}  {ratio}")
        if c > workers - 1:
            raise SystemExit(f"the gateway overshot its bound: {c} calls past the budget with {workers} workers")


if __name__ == "__main__":
    main(sys.argv[1:])
