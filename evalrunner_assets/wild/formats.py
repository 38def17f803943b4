"""Readers for traces captured in the wild, each into one normalised :class:`Trace`.

Three formats (docs/wild.md):

- an **Inspect log** (``.eval`` or ``.json``, read with ``inspect_ai.log.read_eval_log``): one
  trace per sample that failed (a score of ``I``/0/False, or an error);
- **OpenAI-style chat JSONL**: one conversation per line (``{"messages": [...], "tools": [...],
  "outcome": "failure", ...}``), or one message per line with an optional closing
  ``{"outcome": ...}`` line; assistant ``tool_calls`` and ``tool`` messages are kept;
- **OpenTelemetry GenAI spans** as JSON (OTLP ``resourceSpans`` or a list of spans), grouped by
  trace id: ``gen_ai.input.messages``/``gen_ai.output.messages`` (or the older
  ``gen_ai.prompt``/``gen_ai.completion``), tool spans (``gen_ai.tool.name``,
  ``gen_ai.tool.call.arguments``/``result``); a trace failed when a span's status is ERROR or it
  has ``error.type``.

A file that is none of these, holds no conversation, or holds no failure raises an
:class:`InputError` subclass naming the file; nothing is read partially.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evalrunner_assets.errors import InputError

FAILED_OUTCOMES = frozenset({"fail", "failed", "failure", "incorrect", "error", "wrong", "bad", "thumbs_down"})
PASSED_OUTCOMES = frozenset({"pass", "passed", "success", "correct", "ok", "good", "thumbs_up"})


class TraceError(InputError):
    """A trace file evalrunner cannot import (exit 2); the message names the file."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UnknownTraceFormat(TraceError):
    """The file is not an Inspect log, chat JSONL or OpenTelemetry GenAI spans."""


class EmptyTrace(TraceError):
    """The file holds no conversation."""


class NoFailure(TraceError):
    """The file's conversations all succeeded: there is nothing for an eval to catch."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model produced it


@dataclass(frozen=True)
class Message:
    role: str  # system | user | assistant | tool
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None  # the tool's name on a tool message


@dataclass(frozen=True)
class Trace:
    """One failed conversation, whatever format it came in."""

    source: str  # the file (and the sample / line / trace id within it)
    format: str  # inspect | chat-jsonl | otel-genai
    messages: tuple[Message, ...]
    failure: str  # why it counts as failed, in the source's words
    tools: tuple[str, ...] = ()  # tool names offered to the model
    metadata: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)  # captured files: path -> text

    def texts(self) -> Iterable[str]:
        """Every string of the trace (what redaction must cover)."""
        yield self.failure
        for m in self.messages:
            yield m.content
            for c in m.tool_calls:
                yield c.arguments
        yield from self.metadata.values()
        yield from self.environment.values()

    def with_messages(self, messages: tuple[Message, ...]) -> Trace:
        return replace(self, messages=messages)


# --- detection ------------------------------------------------------------------------------


def read_traces(path: Path) -> list[Trace]:
    """The failed traces in ``path``; raises a :class:`TraceError` naming it otherwise."""
    if not path.is_file():
        raise TraceError(f"{path}: no such file", "give the path of an Inspect log, a chat JSONL or OTel spans JSON")
    if path.suffix == ".eval":
        return _inspect(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as exc:
        raise UnknownTraceFormat(f"{path}: not a text trace ({exc.__class__.__name__})", _FORMATS_HINT) from None
    return _text_traces(path, text, on_inspect=lambda: _inspect(path))


def read_trace_text(text: str, source: str = "pasted trace") -> list[Trace]:
    """The failed traces in ``text`` (chat JSONL or OpenTelemetry spans JSON, e.g. pasted into
    the bug-report page), named ``source``; nothing is read from or written to disk. An Inspect
    log is a file: it is refused here with the command that reads it."""

    def inspect_log() -> list[Trace]:
        raise UnknownTraceFormat(
            f"{source}: an Inspect log is read from its file", "run `evalrunner wild import LOG` where the log is"
        )

    return _text_traces(Path(source), text, on_inspect=inspect_log)


def _text_traces(path: Path, text: str, *, on_inspect: Any) -> list[Trace]:
    if not text.strip():
        raise EmptyTrace(f"{path}: the file is empty", _FORMATS_HINT)
    whole: Any = None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        pass
    if isinstance(whole, dict) and "eval" in whole and ("samples" in whole or "status" in whole):
        return list(on_inspect())
    if isinstance(whole, dict) and ("resourceSpans" in whole or "spans" in whole) or _is_span_list(whole):
        return _otel(path, whole)
    return _chat_jsonl(path, text)


_FORMATS_HINT = (
    "evalrunner wild import reads Inspect logs (.eval/.json), OpenAI-style chat JSONL, or OpenTelemetry "
    "GenAI spans as JSON (see docs/wild.md)"
)


def _is_span_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(s, dict) and "attributes" in s for s in value)


def _finish(path: Path, fmt: str, found: list[Trace], conversations: int) -> list[Trace]:
    if conversations == 0:
        raise EmptyTrace(f"{path}: no conversation in this {fmt} file", _FORMATS_HINT)
    if not found:
        raise NoFailure(
            f"{path}: none of its {conversations} conversation(s) failed; there is nothing for an eval to catch",
            "import the trace of a failure (an incorrect score, an outcome of 'failure', or an ERROR span)",
        )
    return found


# --- chat JSONL -----------------------------------------------------------------------------


def _content(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        parts = []
        for p in value:
            if isinstance(p, dict):
                parts.append(str(p.get("text") or p.get("content") or ""))
            else:
                parts.append(str(p))
        return "\n".join(x for x in parts if x)
    return json.dumps(value, sort_keys=True)


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _chat_message(raw: dict[str, Any]) -> Message:
    role = str(raw.get("role", ""))
    calls = []
    for i, c in enumerate(raw.get("tool_calls") or []):
        fn = c.get("function", c)
        calls.append(
            ToolCall(str(c.get("id") or f"call_{i}"), str(fn.get("name", "")), _arguments(fn.get("arguments", {})))
        )
    return Message(
        role=role,
        content=_content(raw.get("content")),
        tool_calls=tuple(calls),
        tool_call_id=raw.get("tool_call_id"),
        name=raw.get("name"),
    )


def _outcome(record: dict[str, Any]) -> tuple[bool | None, str]:
    """(failed?, why) from a record's outcome fields; None when it says nothing."""
    for key in ("outcome", "label", "feedback", "status", "result"):
        value = record.get(key)
        if isinstance(value, str) and value.strip().lower() in FAILED_OUTCOMES:
            reason = record.get("reason") or record.get("comment") or record.get("failure") or value
            return True, str(reason)
        if isinstance(value, str) and value.strip().lower() in PASSED_OUTCOMES:
            return False, ""
    if record.get("failed") is True:
        return True, str(record.get("reason") or "failed")
    if record.get("failed") is False:
        return False, ""
    score = record.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        return (score <= 0, f"score {score}") if score <= 0 else (False, "")
    return None, ""


def _strings(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v, sort_keys=True) for k, v in value.items()}


def _tool_names(tools: Any) -> tuple[str, ...]:
    names = []
    for t in tools or []:
        if isinstance(t, dict):
            fn = t.get("function", t)
            if fn.get("name"):
                names.append(str(fn["name"]))
    return tuple(names)


def _chat_jsonl(path: Path, text: str) -> list[Trace]:
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            raise UnknownTraceFormat(f"{path}: line {number} is not JSON", _FORMATS_HINT) from None
        if not isinstance(value, dict):
            raise UnknownTraceFormat(f"{path}: line {number} is not a JSON object", _FORMATS_HINT)
        records.append((number, value))
    if not records:
        raise EmptyTrace(f"{path}: the file is empty", _FORMATS_HINT)
    if all("messages" in r for _, r in records):
        found: list[Trace] = []
        for number, r in records:
            if not isinstance(r["messages"], list):
                raise UnknownTraceFormat(f"{path}: line {number}: 'messages' is not a list", _FORMATS_HINT)
            messages = tuple(_chat_message(m) for m in r["messages"] if isinstance(m, dict))
            if not any(m.content or m.tool_calls for m in messages):
                continue
            failed, why = _outcome(r)
            if failed:
                found.append(
                    Trace(f"{path.name}:{number}", "chat-jsonl", messages, why, _tool_names(r.get("tools")),
                          _strings(r.get("metadata")), _strings(r.get("environment")))
                )  # fmt: skip
        conversations = sum(1 for _, r in records if r["messages"])
        return _finish(path, "chat JSONL", found, conversations)
    # One message per line, optionally closed by an outcome record.
    message_lines = [r for _, r in records if "role" in r]
    others = [(n, r) for n, r in records if "role" not in r]
    if not message_lines or len(others) > 1 or (others and others[0][0] != records[-1][0]):
        first = others[0][0] if others else records[0][0]
        raise UnknownTraceFormat(
            f"{path}: line {first} is neither a chat message (role, content) nor a conversation (messages)",
            _FORMATS_HINT,
        )
    messages = tuple(_chat_message(m) for m in message_lines)
    failed, why = _outcome(others[0][1]) if others else (None, "")
    conversations = 1 if any(m.content or m.tool_calls for m in messages) else 0
    found = [Trace(path.name, "chat-jsonl", messages, why)] if failed and conversations else []
    return _finish(path, "chat JSONL", found, conversations)


# --- OpenTelemetry GenAI --------------------------------------------------------------------


def _otlp_value(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_otlp_value(x) for x in v["arrayValue"].get("values", [])]
    return v


def _attributes(span: dict[str, Any]) -> dict[str, Any]:
    attrs = span.get("attributes") or {}
    if isinstance(attrs, list):  # OTLP JSON: [{"key": ..., "value": {...}}]
        return {str(a.get("key")): _otlp_value(a.get("value")) for a in attrs if isinstance(a, dict)}
    return dict(attrs) if isinstance(attrs, dict) else {}


def _spans(whole: Any) -> list[dict[str, Any]]:
    if isinstance(whole, list):
        return [s for s in whole if isinstance(s, dict)]
    if "spans" in whole:
        return [s for s in whole["spans"] if isinstance(s, dict)]
    spans = []
    for rs in whole.get("resourceSpans") or []:
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
            spans += [s for s in ss.get("spans") or [] if isinstance(s, dict)]
    return spans


def _otel_messages(value: Any) -> list[Message]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [Message("user", value)]
    if isinstance(value, dict):
        value = [value]
    out = []
    for m in value or []:
        if not isinstance(m, dict):
            continue
        if "parts" in m:  # semantic conventions: {"role", "parts": [{"type": "text"|"tool_call"|...}]}
            texts, calls, call_id = [], [], None
            for p in m["parts"] or []:
                kind = p.get("type")
                if kind == "text":
                    texts.append(str(p.get("content", "")))
                elif kind == "tool_call":
                    calls.append(
                        ToolCall(str(p.get("id", "")), str(p.get("name", "")), _arguments(p.get("arguments", {})))
                    )
                elif kind == "tool_call_response":
                    call_id = p.get("id")
                    texts.append(_content(p.get("response") if "response" in p else p.get("result")))
            role = "tool" if call_id is not None and m.get("role") in ("tool", "user") else str(m.get("role", ""))
            out.append(Message(role, "\n".join(texts), tuple(calls), call_id))
        else:
            out.append(_chat_message(m))
    return out


def _span_failed(span: dict[str, Any], attrs: dict[str, Any]) -> str | None:
    status = span.get("status") or {}
    code = status.get("code", status.get("status_code")) if isinstance(status, dict) else status
    if code in (2, "2", "ERROR", "STATUS_CODE_ERROR", "error"):
        return str(
            (status.get("message") if isinstance(status, dict) else None)
            or attrs.get("error.type")
            or "span status ERROR"
        )
    if attrs.get("error.type"):
        return str(attrs["error.type"])
    return None


def _otel(path: Path, whole: Any) -> list[Trace]:
    spans = _spans(whole)
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_trace.setdefault(
            str(s.get("traceId") or s.get("trace_id") or s.get("context", {}).get("trace_id") or ""), []
        ).append(s)
    found, conversations = [], 0
    for trace_id, group in by_trace.items():
        group.sort(
            key=lambda s: (
                int(s.get("startTimeUnixNano") or 0) if str(s.get("startTimeUnixNano") or "0").isdigit() else 0
            )
        )
        messages: list[Message] = []
        seen_inputs = 0
        failure, tools, meta = None, [], {}
        for s in group:
            attrs = _attributes(s)
            if not any(k.startswith("gen_ai.") for k in attrs):
                failure = failure or _span_failed(s, attrs)
                continue
            failure = failure or _span_failed(s, attrs)
            if attrs.get("gen_ai.request.model"):
                meta["model"] = str(attrs["gen_ai.request.model"])
            tool = attrs.get("gen_ai.tool.name")
            if tool and attrs.get("gen_ai.operation.name", "execute_tool") == "execute_tool":
                tools.append(str(tool))
                if "gen_ai.tool.call.result" in attrs:
                    messages.append(Message("tool", _content(attrs["gen_ai.tool.call.result"]), (),
                                            str(attrs.get("gen_ai.tool.call.id") or ""), str(tool)))  # fmt: skip
                continue
            inputs = _otel_messages(attrs.get("gen_ai.input.messages", attrs.get("gen_ai.prompt")))
            # Each chat span repeats the conversation so far: keep only what is new.
            messages += inputs[seen_inputs:] if len(inputs) >= seen_inputs else inputs
            seen_inputs = max(seen_inputs, len(inputs))
            outputs = _otel_messages(attrs.get("gen_ai.output.messages", attrs.get("gen_ai.completion")))
            messages += [replace(m, role=m.role or "assistant") for m in outputs]
            seen_inputs += len(outputs)
        if not any(m.content or m.tool_calls for m in messages):
            continue
        conversations += 1
        if failure:
            label = f"{path.name}:{trace_id[:16]}" if trace_id else path.name
            found.append(Trace(label, "otel-genai", tuple(messages), failure, tuple(dict.fromkeys(tools)), meta))
    return _finish(path, "OpenTelemetry GenAI", found, conversations)


# --- Inspect logs ---------------------------------------------------------------------------


def _score_failed(value: Any) -> bool:
    if isinstance(value, str):
        return value.upper() in ("I", "INCORRECT", "F", "FAIL")
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value <= 0
    if isinstance(value, dict):
        return any(_score_failed(v) for v in value.values())
    return False


def _inspect(path: Path) -> list[Trace]:
    try:
        from inspect_ai.log import read_eval_log

        log = read_eval_log(str(path))
    except Exception as exc:  # noqa: BLE001 - any reader failure is an unreadable input
        raise UnknownTraceFormat(f"{path}: not a readable Inspect log ({type(exc).__name__})", _FORMATS_HINT) from None
    samples = log.samples or []
    found, conversations = [], 0
    for sample in samples:
        messages = []
        for m in sample.messages:
            calls = tuple(
                ToolCall(c.id, c.function, json.dumps(c.arguments, sort_keys=True))
                for c in (getattr(m, "tool_calls", None) or [])
            )
            messages.append(
                Message(m.role, m.text if hasattr(m, "text") else _content(m.content), calls,
                        getattr(m, "tool_call_id", None), getattr(m, "function", None))
            )  # fmt: skip
        if not any(m.content or m.tool_calls for m in messages):
            continue
        conversations += 1
        why = None
        if sample.error is not None:
            why = f"error: {sample.error.message}"
        for name, score in (sample.scores or {}).items():
            if why is None and _score_failed(score.value):
                why = f"{name} scored {score.value}" + (f": {score.explanation}" if score.explanation else "")
        if why is None:
            continue
        meta = {"task": str(log.eval.task), "model": str(log.eval.model)}
        target = sample.target if isinstance(sample.target, str) else "\n".join(sample.target)
        if target:
            meta["target"] = target
        found.append(Trace(f"{path.name}:{sample.id}", "inspect", tuple(messages), why, (), meta))
    return _finish(path, "Inspect log", found, conversations)
