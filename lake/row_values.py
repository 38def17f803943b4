"""What one sample's or event's row says, from Inspect's validated objects: shared by the
``inspect_ai.log`` path (``lake.ingest``) and the direct ``.eval`` reader (``lake.raw_rows``)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from lake.batch import BatchKey
from lake.schema import EXCERPT_CHARS

ATTACHMENT = "attachment://"


def error_text(err: Any) -> str | None:
    if err is None:
        return None
    if isinstance(err, str):
        return err
    return getattr(err, "message", None) or str(err)


_SPAN_KINDS = ("solver", "scorer", "tool")


def error_where(sample: Any) -> str | None:
    """'<type>:<name>' of the innermost solver/scorer/tool span the sample's exception passed
    through; None without an error or such a span.

    Inspect closes the spans an exception unwinds before it records the error event, so the
    candidates, innermost first, are the spans ended just before that event (log lines between
    them aside), then the spans still open there (at the end of the transcript when there is no
    error event)."""
    if sample.error is None:
        return None
    return innermost_span(
        [
            (ev.event, ev.id, ev.type, ev.name)
            if ev.event == "span_begin"
            else (ev.event, ev.id if ev.event == "span_end" else None, None, None)
            for ev in getattr(sample, "events", None) or []
        ]
    )


def innermost_span(events: Sequence[tuple[str, Any, Any, Any]]) -> str | None:
    """:func:`error_where` over a transcript given as (event kind, span id, span type, span name)
    tuples (id, type and name are read for span_begin and span_end only)."""
    at = next((i for i, ev in enumerate(events) if ev[0] == "error"), len(events))
    begun: dict[str, tuple[str, str]] = {}
    still_open: list[str] = []
    for kind, span, type_, name in events[:at]:
        if kind == "span_begin":
            begun[span] = (type_ or "", name)
            still_open.append(span)
        elif kind == "span_end" and span in still_open:
            still_open.remove(span)
    unwound: list[str] = []
    for kind, span, _, _ in reversed(events[:at]):
        if kind in ("logger", "info"):  # Inspect logs the exception as it unwinds
            continue
        if kind != "span_end":
            break
        unwound.insert(0, span)
    for span in unwound + list(reversed(still_open)):
        kind, name = begun.get(span, ("", ""))
        if kind in _SPAN_KINDS:
            return f"{kind}:{name}"
    return None


def sum_opt(values: Iterable[int | None]) -> int | None:
    total, seen = 0, False
    for v in values:
        if v is not None:
            total += v
            seen = True
    return total if seen else None


# The strings Inspect's value_to_float() maps (besides numbers): C, P, I, N and yes/true/no/false.
_SCORE_WORDS = frozenset({"C", "P", "I", "N"})
_SCORE_BOOLEANS = frozenset({"yes", "true", "no", "false"})


def score_value(raw: Any, to_float: Any) -> float | None:
    """A primary score's value in [0, 1] as ``value_to_float`` maps it, or None: for a value
    outside [0, 1], NaN, a list or dict, or a string it does not know (Inspect would log
    "Unable to convert value to float" and call it 0 — a letter grade "A" is not a failure)."""
    if isinstance(raw, str):
        text = raw.strip()
        if text not in _SCORE_WORDS and text.lower() not in _SCORE_BOOLEANS:
            try:
                if not math.isfinite(float(text)):
                    return None
            except ValueError:
                return None
    elif not isinstance(raw, (int, float, bool)):
        return None
    try:
        mapped = float(to_float(raw))
    except (TypeError, ValueError):
        return None
    return mapped if 0.0 <= mapped <= 1.0 else None


def sample_constants(key: BatchKey, header: Any) -> dict[str, Any]:
    """The samples columns that are the same on every row of a batch."""
    kr = key.as_record()
    return {
        "repo": key.repo,
        "commit": key.commit,
        "task": key.task,
        "batch": key.digest,
        "window": key.window.name,
        "window_start": key.window.start,
        "window_stop": key.window.stop,
        "spec": kr["spec"],
        "model_args": kr["model_args"],
        "config_digest": kr["config_digest"],
        "backend": kr["backend"],
        "runtime_digest": kr["runtime_digest"],
        "seed": kr["seed"],
        "epochs": kr["epochs"],
        "model": header.eval.model,
        "log_status": header.status,
        "eval_id": header.eval.eval_id,
    }


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            text = getattr(item, "text", None)
            if text is None:
                text = getattr(item, "reasoning", None)
            if text is not None:
                parts.append(text)
        return "\n".join(parts)
    return str(content)


# json.dumps(value, sort_keys=True, default=str), with the encoder built once rather than per call
_jsonish_encode = json.JSONEncoder(sort_keys=True, default=str).encode


def jsonish(value: Any) -> str:
    try:
        return _jsonish_encode(value)
    except (TypeError, ValueError):
        return str(value)


def event_text(text: str | None, attachments: dict[str, str]) -> tuple[str | None, bool]:
    """An event's text as the lake keeps it: an ``attachment://`` reference resolved from the
    sample's attachments, cut to ``EXCERPT_CHARS``; and whether it was cut."""
    if text is None:
        return None, False
    if text.startswith(ATTACHMENT):
        text = attachments.get(text[len(ATTACHMENT) :], text)
    if len(text) > EXCERPT_CHARS:
        return text[:EXCERPT_CHARS], True
    return text, False


def event_values(ev: Any) -> tuple[Any, ...]:
    """(role, model, tool function, tool arguments, tool calls, input/output/total tokens, error,
    text) of a validated Inspect event; the text before attachments are resolved and it is cut."""
    kind = ev.event
    role = model = fn = args = calls = itok = otok = ttok = err = None
    text: str | None = None
    if kind == "model":
        model = ev.model
        out = ev.output
        role = "assistant"
        text = out.completion if out is not None else None
        msg = out.message if out is not None and out.choices else None
        tcs = (msg.tool_calls or []) if msg is not None else []
        calls = len(tcs)
        if tcs:
            fn, args = tcs[0].function, jsonish(tcs[0].arguments)
        usage = out.usage if out is not None else None
        if usage is not None:
            itok, otok, ttok = usage.input_tokens, usage.output_tokens, usage.total_tokens
        err = error_text(ev.error)
    elif kind == "tool":
        role, fn, args = "tool", ev.function, jsonish(ev.arguments)
        text = content_text(ev.result)
        err = error_text(ev.error)
    elif kind == "score":
        score = ev.score
        text = jsonish(score.value)
        if score.explanation:
            text += f" {score.explanation}"
    elif kind == "error":
        err = error_text(ev.error)
        text = err
    elif kind == "sample_init":
        role = "user"
        inp = ev.sample.input
        text = inp if isinstance(inp, str) else "\n".join(m.text for m in inp)
    elif kind == "input":
        role, text = "user", ev.input
    elif kind == "logger":
        text = ev.message.message
    elif kind == "info":
        text = ev.data if isinstance(ev.data, str) else jsonish(ev.data)
    elif kind in ("span_begin", "subtask"):
        text = ev.name
    elif kind in ("state", "store"):
        # the JSON-patch paths say what changed; the values can be whole transcripts
        text = ", ".join(ch.path for ch in ev.changes)
    elif kind == "sandbox":
        text = " ".join(x for x in (ev.action, ev.cmd or ev.file or "") if x)
    elif kind == "approval":
        text = " ".join(x for x in (ev.decision, ev.explanation or "") if x)
    return role, model, fn, args, calls, itok, otok, ttok, err, text
