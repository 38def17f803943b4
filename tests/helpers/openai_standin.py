"""A stand-in for the OpenAI and Anthropic HTTP APIs on loopback, for tests — not a model.

No model API is reachable here, so this server answers the request shapes Inspect's
``openai/…`` provider sends (``POST /v1/chat/completions``, streamed or not, and
``POST /v1/responses``) and Anthropic's ``POST /v1/messages`` (streamed or not), with the response shapes those
SDKs parse, ``usage`` included. Answers are deterministic functions of the request:

- a grading prompt (one that asks for ``GRADE: C`` / ``GRADE: I``) gets ``GRADE: C``;
- anything else gets ``ANSWER: <the last user message, upper-cased>``.

Token counts are whitespace-separated words (prompt: every message's text; completion: the
answer), so a test can predict them. Faults are injected for the next N requests
(:meth:`OpenAIStandIn.fail_next`) or for every request until further notice
(:meth:`OpenAIStandIn.fail_always`: a provider that is down, or refuses the key). Every
request's ``Authorization``/``x-api-key``, arrival and end (``at``, ``done_at``) and answered
tokens (``tokens``) are recorded, and the most requests in flight at once are counted (an
optional per-request delay makes overlap observable).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Fault:
    status: int
    retry_after: str | None


@dataclass
class StandInState:
    faults: list[_Fault] = field(default_factory=list)
    always: _Fault | None = None  # every request fails so (after the queued faults)
    always_after: int = 0  # … once this many requests have been answered
    by_model: dict[str, _Fault] = field(default_factory=dict)  # requests naming this model fail so
    requests: list[dict[str, Any]] = field(default_factory=list)  # path, auth, model, status
    in_flight: int = 0
    max_in_flight: int = 0
    delay_s: float = 0.0
    # When set, every request waits (after it is counted in flight) until ``hold`` is set;
    # ``arrived`` is released once per request as it starts waiting.
    hold: threading.Event | None = None
    arrived: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    lock: threading.Lock = field(default_factory=threading.Lock)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def answer_for(messages: list[dict[str, Any]]) -> str:
    """The stand-in's deterministic answer to a conversation."""
    texts = [_text(m.get("content")) for m in messages]
    if any("GRADE: C" in t and "GRADE: I" in t for t in texts):
        return "The submission matches the criterion.\n\nGRADE: C"
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    return f"ANSWER: {(users[-1] if users else '').strip().upper()}"


def words(text: str) -> int:
    return len(text.split())


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        state = self.server.state
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        with state.lock:
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            fault = state.by_model.get(str(body.get("model")))
            if fault is None:
                down = state.always if len(state.requests) >= state.always_after else None
                fault = state.faults.pop(0) if state.faults else down
            self._record: dict[str, Any] = {
                "path": self.path,
                "authorization": self.headers.get("authorization"),
                "x-api-key": self.headers.get("x-api-key"),
                "model": body.get("model"),
                "status": fault.status if fault else 200,
                "at": time.monotonic(),  # when it arrived (this process's clock)
            }
            state.requests.append(self._record)
        try:
            if state.hold is not None:
                state.arrived.release()
                state.hold.wait(timeout=60)
            if state.delay_s:
                time.sleep(state.delay_s)
            if fault is not None:
                err = json.dumps({"error": {"message": f"stand-in fault {fault.status}", "type": "standin"}}).encode()
                self.send_response(fault.status)
                if fault.retry_after is not None:
                    self.send_header("retry-after", fault.retry_after)
                self._json(err)
                return
            if self.path == "/v1/chat/completions":
                self._chat(body)
            elif self.path == "/v1/responses":
                self._responses(body)
            elif self.path == "/v1/messages":
                self._messages(body)
            else:
                self.send_response(404)
                self._json(b'{"error": {"message": "no such route"}}')
        finally:
            with state.lock:
                state.in_flight -= 1
                self._record["done_at"] = time.monotonic()

    def _json(self, data: bytes) -> None:
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chat(self, body: dict[str, Any]) -> None:
        messages = body.get("messages") or []
        answer = answer_for(messages)
        prompt = sum(words(_text(m.get("content"))) for m in messages)
        usage = {"prompt_tokens": prompt, "completion_tokens": words(answer), "total_tokens": prompt + words(answer)}
        self._record["tokens"] = (prompt, words(answer))
        if body.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            base = {
                "id": "chatcmpl-standin",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body.get("model"),
            }
            events = [
                {
                    **base,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": answer}, "finish_reason": None}],
                },
                {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {**base, "choices": [], "usage": usage},
            ]
            for ev in [json.dumps(e) for e in events] + ["[DONE]"]:
                chunk = f"data: {ev}\n\n".encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_response(200)
        self._json(
            json.dumps(
                {
                    "id": "chatcmpl-standin",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": answer},
                            "finish_reason": "stop",
                            "logprobs": None,
                        }
                    ],
                    "usage": usage,
                }
            ).encode()
        )

    def _responses(self, body: dict[str, Any]) -> None:
        inp = body.get("input")
        messages = inp if isinstance(inp, list) else [{"role": "user", "content": str(inp or "")}]
        answer = answer_for(
            [{"role": m.get("role"), "content": m.get("content")} for m in messages if isinstance(m, dict)]
        )
        prompt = sum(words(_text(m.get("content"))) for m in messages if isinstance(m, dict))
        self._record["tokens"] = (prompt, words(answer))
        self.send_response(200)
        self._json(
            json.dumps(
                {
                    "id": "resp_standin",
                    "object": "response",
                    "created_at": 0,
                    "model": body.get("model"),
                    "status": "completed",
                    "output": [
                        {
                            "type": "message",
                            "id": "msg_standin",
                            "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": answer, "annotations": []}],
                        }
                    ],
                    "parallel_tool_calls": True,
                    "tool_choice": "auto",
                    "tools": [],
                    "usage": {
                        "input_tokens": prompt,
                        "output_tokens": words(answer),
                        "total_tokens": prompt + words(answer),
                        "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens_details": {"reasoning_tokens": 0},
                    },
                }
            ).encode()
        )

    def _messages(self, body: dict[str, Any]) -> None:
        messages = list(body.get("messages") or [])
        answer = answer_for(messages)
        prompt = sum(words(_text(m.get("content"))) for m in messages) + words(_text(body.get("system")))
        self._record["tokens"] = (prompt, words(answer))
        if body.get("stream"):
            msg = {
                "id": "msg_standin",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": 1},
            }
            events = [
                ("message_start", {"type": "message_start", "message": msg}),
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                ),
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": answer}},
                ),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                        "usage": {"output_tokens": words(answer)},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ]
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for name, ev in events:
                chunk = f"event: {name}\ndata: {json.dumps(ev)}\n\n".encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_response(200)
        self._json(
            json.dumps(
                {
                    "id": "msg_standin",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model"),
                    "content": [{"type": "text", "text": answer}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": prompt, "output_tokens": words(answer)},
                }
            ).encode()
        )


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    state: StandInState


class OpenAIStandIn:
    """The stand-in upstream on ``127.0.0.1:<port>``; use as a context manager."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = StandInState()
        self.port = self._server.server_address[1]
        self.openai_base = f"http://127.0.0.1:{self.port}/v1"  # as OPENAI_BASE_URL
        self.anthropic_base = f"http://127.0.0.1:{self.port}"  # as ANTHROPIC_BASE_URL
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def state(self) -> StandInState:
        return self._server.state

    def fail_next(self, n: int, status: int, retry_after: str | None = None) -> None:
        with self.state.lock:
            self.state.faults.extend(_Fault(status, retry_after) for _ in range(n))

    def fail_always(self, status: int | None, retry_after: str | None = None, *, after: int = 0) -> None:
        """Answer every request with ``status`` from now on, or once ``after`` requests have come
        (None: answer normally again)."""
        with self.state.lock:
            self.state.always = None if status is None else _Fault(status, retry_after)
            self.state.always_after = after

    def fail_model(self, model: str, status: int) -> None:
        """Answer every request naming ``model`` with ``status`` (one request that always fails)."""
        with self.state.lock:
            self.state.by_model[model] = _Fault(status, None)

    def statuses_since(self, start: int) -> list[int]:
        """The statuses answered to the requests after the first ``start``."""
        with self.state.lock:
            return [r["status"] for r in self.state.requests[start:]]

    def __enter__(self) -> OpenAIStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
