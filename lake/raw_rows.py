"""The ``samples`` and ``events`` rows of an ``.eval`` archive's plain sample dicts.

The same rows ``lake.ingest`` builds from ``inspect_ai.log``'s validated objects, computed from
the JSON Inspect wrote: defaults pydantic would fill are filled here, and derived values
(``ModelOutput.completion``, ``ChatMessage.text``) follow Inspect's definitions. What this
module does not reproduce field by field is handed to Inspect's models in small pieces: a
chat-message input is validated (for its digest), and an event of a kind or shape the fast
branches below do not cover is validated alone and read like ``inspect_ai.log``'s. A shape even
that rejects raises :class:`UnrecognizedArchive`, and the whole log is read by ``inspect_ai.log``.
``tests/lake/test_eval_archive_reader.py`` compares both paths' tables on real logs.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from itertools import accumulate
from typing import Any, NamedTuple

import pyarrow as pa
import zstandard

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.sample_digest import sample_input_digest
from lake import read_pool
from lake.batch import BatchKey
from lake.eval_archive import (
    EvalArchive,
    Member,
    UnrecognizedArchive,
    sample_dict,
    sample_fields,
    sample_order,
    unpack_member,
)
from lake.row_values import (
    event_text,
    event_values,
    innermost_span,
    jsonish,
    sample_constants,
    score_value,
    sum_opt,
)
from lake.schema import EVENTS_SCHEMA, SAMPLES_SCHEMA

_TS = pa.timestamp("us", tz="UTC")
# json.dumps(value, sort_keys=True) builds an encoder per call; this is the same encoder, built once
_sorted_json = json.JSONEncoder(sort_keys=True).encode

# The columns the reader fills, in the order it fills them; the batch-key constants are added per table.
SAMPLE_ROW = (
    "sample_id",
    "epoch",
    "score",
    "score_raw",
    "scorer",
    "scores",
    "error",
    "limit_type",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "input_tokens_cache_read",
    "input_tokens_cache_write",
    "reasoning_tokens",
    "cost_usd",
    "total_time_s",
    "working_time_s",
    "started_at",
    "completed_at",
    "sample_uuid",
    "input_digest",
    "error_where",
)
EVENT_ROW = (
    "sample_id",
    "epoch",
    "seq",
    "event",
    "timestamp",
    "working_start",
    "span_id",
    "role",
    "model",
    "tool_function",
    "tool_arguments",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "error",
    "text",
    "text_truncated",
)


class _Validate(EvalrunnerError):
    """This event's shape is not one the fast branches read: validate it with Inspect's model."""


@cache
def _to_float() -> Any:
    from inspect_ai.scorer import value_to_float

    return value_to_float()


@cache
def _adapters() -> tuple[Any, Any]:
    from typing import Annotated

    from inspect_ai.event import Event
    from inspect_ai.model import ChatMessage
    from pydantic import Field, TypeAdapter

    return (
        TypeAdapter(Annotated[Event, Field(discriminator="event")]),  # EvalSample.events' item
        TypeAdapter(str | list[ChatMessage]),  # EvalSample.input
    )


def _context() -> dict[str, Any]:
    # a new one each time: it carries a message cache, which must not outlive one validation
    from inspect_ai._util.constants import get_deserializing_context

    return get_deserializing_context()


def _ts(value: Any) -> datetime | None:
    """An ISO timestamp as Inspect reads it: naive ones are UTC."""
    if value is None:
        return None
    dt = datetime.fromisoformat(value)
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def _stamp(value: Any) -> str | None:
    """An ISO timestamp kept as text: :func:`_timestamps` converts a whole column at once."""
    if value is None or type(value) is str:
        return value
    raise UnrecognizedArchive(f"timestamp {value!r} is not a string")


def _timestamps(values: Sequence[str | None]) -> pa.Array:
    """ISO timestamps as the UTC column pydantic's datetimes give: parsed by Arrow when every
    one carries its offset (what Inspect writes), else one by one, naive ones taken as UTC."""
    try:
        return pa.array(values, type=pa.string()).cast(_TS)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        try:
            return pa.array([_ts(v) for v in values], type=_TS)
        except ValueError as exc:
            raise UnrecognizedArchive(f"timestamp: {exc}") from exc


def _message(err: Any) -> str | None:
    """The message of an EvalError / ToolCallError dict (None for no error)."""
    if err is None:
        return None
    message = err["message"]
    if type(message) is not str or not message:  # the object path would print the model instead
        raise _Validate
    return message


def _text_of(message: dict[str, Any]) -> str:
    """``ChatMessage.text``: the str content, or the text parts joined by newlines."""
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content if part["type"] == "text")


def _fast_event(ev: dict[str, Any], kind: str) -> tuple[Any, ...]:
    """(role, model, fn, args, calls, itok, otok, ttok, err, text) as ``lake.ingest.event_values``
    computes them from the validated event; raises for a shape it does not read."""
    role = model = fn = args = calls = itok = otok = ttok = err = None
    text: str | None = None
    if kind in ("span_end", "step"):
        pass
    elif kind == "span_begin" or kind == "subtask":
        text = ev["name"]
    elif kind == "model":
        model = ev["model"]
        out = ev["output"]
        role = "assistant"
        choices = out.get("choices") or []
        msg = choices[0]["message"] if choices else None
        text = out.get("completion") or (_text_of(msg) if msg is not None else "")
        tcs = (msg.get("tool_calls") or []) if msg is not None else []
        calls = len(tcs)
        if tcs:
            fn, args = tcs[0]["function"], jsonish(tcs[0]["arguments"])
        usage = out.get("usage")
        if usage is not None:
            itok, otok, ttok = usage.get("input_tokens", 0), usage.get("output_tokens", 0), usage.get("total_tokens", 0)
        err = ev.get("error")
        if err is not None and type(err) is not str:
            raise _Validate
    elif kind == "state" or kind == "store":
        text = ", ".join(ch["path"] for ch in ev["changes"])
    elif kind == "score":
        score = ev["score"]
        text = jsonish(score["value"])
        explanation = score.get("explanation")
        if explanation:
            text += f" {explanation}"
    elif kind == "tool":
        role, fn, args = "tool", ev["function"], jsonish(ev["arguments"])
        result = ev.get("result", "")
        if type(result) is str:
            text = result
        elif type(result) is list and all(part["type"] == "text" for part in result):
            text = "\n".join(part["text"] for part in result)
        else:
            raise _Validate
        err = _message(ev.get("error"))
    elif kind == "sample_init":
        inp = ev["sample"]["input"]
        if type(inp) is not str:
            raise _Validate
        role, text = "user", inp
    elif kind == "error":
        err = _message(ev["error"])
        text = err
    elif kind == "logger":
        text = ev["message"]["message"]
    elif kind == "info":
        data = ev.get("data")
        text = data if isinstance(data, str) else jsonish(data)
    elif kind == "input":
        role, text = "user", ev["input"]
    elif kind == "sandbox":
        text = " ".join(x for x in (ev["action"], ev.get("cmd") or ev.get("file") or "") if x)
    elif kind == "approval":
        text = " ".join(x for x in (ev["decision"], ev.get("explanation") or "") if x)
    else:
        raise _Validate
    if text is not None and type(text) is not str:
        raise _Validate
    return role, model, fn, args, calls, itok, otok, ttok, err, text


def _validated_event(ev: dict[str, Any]) -> tuple[Any, ...]:
    """The event read the way ``inspect_ai.log`` reads it: validated alone by Inspect's model."""
    adapter, _ = _adapters()
    try:
        obj = adapter.validate_python(ev, context=_context())
    except Exception as exc:  # Inspect's reader would reject the whole log: let it say why
        raise UnrecognizedArchive(f"event {ev.get('event')!r}: {type(exc).__name__}") from exc
    return (obj.timestamp.isoformat(), obj.working_start, obj.span_id) + event_values(obj)


class _Columns:
    """Row values appended column by column, in archive order: a column list per field rather
    than a tuple per row leaves the garbage collector a few dozen containers to scan, not one
    per event."""

    def __init__(self) -> None:
        self.samples: list[list[Any]] = [[] for _ in SAMPLE_ROW]
        self.events: list[list[Any]] = [[] for _ in EVENT_ROW]
        self.order: list[tuple[int, str]] = []
        self.errors: list[str | None] = []
        self.event_starts: list[int] = []

    def add(self, s: dict[str, Any]) -> None:
        """One sample dict of a recognized archive: its samples row and its events rows."""
        sid = str(s["id"])
        epoch = s["epoch"]
        try:
            error = _message(s.get("error"))
        except (_Validate, KeyError, TypeError) as exc:
            raise UnrecognizedArchive(f"sample {sid}: error without a message") from exc
        attachments = s.get("attachments") or {}
        # error_where reads the span structure, needed only for an errored sample
        spans: list[tuple[str, Any, Any, Any]] | None = [] if error is not None else None
        (
            c_sid,
            c_epoch,
            c_seq,
            c_kind,
            c_stamp,
            c_working_start,
            c_span_id,
            c_role,
            c_model,
            c_fn,
            c_args,
            c_calls,
            c_itok,
            c_otok,
            c_ttok,
            c_err,
            c_text,
            c_truncated,
        ) = (column.append for column in self.events)
        self.event_starts.append(len(self.events[0]))
        for seq, ev in enumerate(s.get("events") or []):
            kind = ev["event"]
            try:
                stamp, working_start, span_id = ev["timestamp"], ev["working_start"], ev.get("span_id")
                if type(stamp) is not str:
                    raise _Validate
                role, model, fn, args, calls, itok, otok, ttok, err, text = _fast_event(ev, kind)
            except (_Validate, KeyError, TypeError, AttributeError, ValueError, IndexError):
                stamp, working_start, span_id, role, model, fn, args, calls, itok, otok, ttok, err, text = (
                    _validated_event(ev)
                )
            if spans is not None:
                if kind == "span_begin" or kind == "span_end":
                    spans.append((kind, ev["id"], ev.get("type"), ev.get("name")))
                else:
                    spans.append((kind, None, None, None))
            text, truncated = event_text(text, attachments)
            c_sid(sid)
            c_epoch(epoch)
            c_seq(seq)
            c_kind(kind)
            c_stamp(stamp)
            c_working_start(working_start)
            c_span_id(span_id)
            c_role(role)
            c_model(model)
            c_fn(fn)
            c_args(args)
            c_calls(calls)
            c_itok(itok)
            c_otok(otok)
            c_ttok(ttok)
            c_err(err)
            c_text(text)
            c_truncated(truncated)
        try:
            row = _sample_row(s, sid, epoch, error, spans)
        except UnrecognizedArchive:
            raise
        except Exception as exc:  # a shape the object path would read differently
            raise UnrecognizedArchive(f"sample {sid}: {type(exc).__name__}: {exc}") from exc
        for column, value in zip(self.samples, row):
            column.append(value)
        self.order.append(sample_order(s))
        self.errors.append(error)


def _sample_row(
    s: dict[str, Any], sid: str, epoch: int, error: str | None, spans: list[tuple[str, Any, Any, Any]] | None
) -> tuple[Any, ...]:
    value = raw = name = all_raw = None
    scores = s.get("scores") if error is None else None
    if scores:
        name, primary = next(iter(scores.items()))
        primary_raw = primary["value"]
        value = score_value(primary_raw, _to_float())
        raw = _sorted_json(primary_raw)
        all_raw = _sorted_json({k: v["value"] for k, v in scores.items()})
    limit = s.get("limit")
    usages = list((s.get("model_usage") or {}).values())
    costs = [u.get("total_cost") for u in usages]
    inp = s["input"]
    if isinstance(inp, str):
        digest = sample_input_digest(inp, s["target"], s.get("choices"), s.get("files"), s.get("setup"))
    else:  # chat messages: the digest reads Inspect's message models, so build them
        _, input_adapter = _adapters()
        messages = input_adapter.validate_python(inp, context=_context())
        digest = sample_input_digest(messages, s["target"], s.get("choices"), s.get("files"), s.get("setup"))
    return (
        sid,
        epoch,
        value,
        raw,
        name,
        all_raw,
        error,
        limit["type"] if limit is not None else None,
        sum(u.get("input_tokens", 0) for u in usages),
        sum(u.get("output_tokens", 0) for u in usages),
        sum(u.get("total_tokens", 0) for u in usages),
        sum_opt(u.get("input_tokens_cache_read") for u in usages),
        sum_opt(u.get("input_tokens_cache_write") for u in usages),
        sum_opt(u.get("reasoning_tokens") for u in usages),
        sum(costs) if costs and None not in costs else None,
        s.get("total_time"),
        s.get("working_time"),
        _stamp(s.get("started_at")),
        _stamp(s.get("completed_at")),
        s.get("uuid"),
        digest,
        innermost_span(spans) if spans is not None else None,
    )


@contextmanager
def _no_gc() -> Iterator[None]:
    # The parsed dicts hold no reference cycles, and the collections their allocations trigger
    # cost more than the parse itself (measured: 2.5x slower with gc on). The switch is
    # process-wide: another thread's garbage waits until the first reader to switch it off is done.
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class ArchivePart(NamedTuple):
    """The rows of some of an archive's samples, in archive order: the reader's columns as
    Arrow tables (no batch-key constants, which :meth:`ArchiveRows.tables` adds), and per sample
    its sort key, error and event count. What a landing process hands back (it pickles)."""

    samples: pa.Table
    events: pa.Table
    order: list[tuple[int, str]]
    errors: list[str | None]
    event_counts: list[int]


def _arrow(names: Sequence[str], columns: list[list[Any]], schema: pa.Schema, stamps: frozenset[str]) -> pa.Table:
    arrays = []
    for name, values in zip(names, columns):
        if name in stamps:
            arrays.append(_timestamps(values))
            continue
        try:
            arrays.append(pa.array(values, type=schema.field(name).type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:  # e.g. an int past int64
            raise UnrecognizedArchive(f"column {name}: {exc}") from exc
    return pa.Table.from_arrays(arrays, names=list(names))


_SAMPLE_STAMPS = frozenset({"started_at", "completed_at"})
_EVENT_STAMPS = frozenset({"timestamp"})


def read_part(members: Sequence[Member], packed: Sequence[bytes]) -> ArchivePart:
    """The rows of ``members`` from their compressed bytes (:meth:`EvalArchive.packed`): run in
    the landing process or, for a large log, in several processes (:mod:`lake.read_pool`), so it
    takes only picklable arguments. Raises :class:`UnrecognizedArchive`."""
    fields = sample_fields()
    unzstd = zstandard.ZstdDecompressor()
    cols = _Columns()
    with _no_gc():
        for info, blob in zip(members, packed):
            cols.add(sample_dict(info, unpack_member(info, blob, unzstd), fields))
        samples = _arrow(SAMPLE_ROW, cols.samples, SAMPLES_SCHEMA, _SAMPLE_STAMPS)
        events = _arrow(EVENT_ROW, cols.events, EVENTS_SCHEMA, _EVENT_STAMPS)
    counts = [b - a for a, b in zip(cols.event_starts, cols.event_starts[1:] + [len(cols.events[0])])]
    return ArchivePart(samples, events, cols.order, cols.errors, counts)


class ArchiveRows:
    """Every sample's rows of a recognized archive, in ``inspect_ai.log``'s sample order."""

    def __init__(self, header: Any, parts: Sequence[ArchivePart]) -> None:
        self.header = header
        self._parts = list(parts)
        order = [key for part in self._parts for key in part.order]
        # inspect_ai.log sorts the samples; the rows are put in that order when tables are built
        self._perm = sorted(range(len(order)), key=order.__getitem__)
        self._errors = [e for part in self._parts for e in part.errors]

    @property
    def sample_errors(self) -> list[str | None]:
        return [self._errors[i] for i in self._perm]

    def tables(self, key: BatchKey) -> tuple[pa.Table, pa.Table, int]:
        """(samples, events, errored sample count), equal to ``lake.ingest._tables(key, log)``."""
        with _no_gc():
            return self._tables(key)

    def _tables(self, key: BatchKey) -> tuple[pa.Table, pa.Table, int]:
        parts, perm = self._parts, self._perm
        read_samples = pa.concat_tables([part.samples for part in parts])
        read_events = pa.concat_tables([part.events for part in parts])
        n, m = read_samples.num_rows, read_events.num_rows
        consts = sample_constants(key, self.header)
        samples = pa.Table.from_arrays(
            [
                read_samples.column(f.name) if f.name in _SAMPLE_COLUMNS else pa.array([consts[f.name]] * n, f.type)
                for f in SAMPLES_SCHEMA
            ],
            schema=SAMPLES_SCHEMA,
        )
        econsts = {"repo": key.repo, "commit": key.commit, "task": key.task, "batch": key.digest}
        events = pa.Table.from_arrays(
            [
                read_events.column(f.name) if f.name in _EVENT_COLUMNS else pa.array([econsts[f.name]] * m, f.type)
                for f in EVENTS_SCHEMA
            ],
            schema=EVENTS_SCHEMA,
        )
        if perm != list(range(n)):
            counts = [c for part in parts for c in part.event_counts]
            starts = list(accumulate(counts, initial=0))
            samples = samples.take(pa.array(perm, type=pa.int64()))
            rows = [j for i in perm for j in range(starts[i], starts[i] + counts[i])]
            events = events.take(pa.array(rows, type=pa.int64()))
        errored = sum(1 for e in self._errors if e is not None)
        return samples, events, errored


_SAMPLE_COLUMNS = frozenset(SAMPLE_ROW)
_EVENT_COLUMNS = frozenset(EVENT_ROW)


def warm_reader() -> None:
    """Load what :func:`read_part` loads on first use (a landing worker runs this once)."""
    sample_fields()
    _to_float()


def read_archive_rows(data: bytes, *, processes: int | None = None) -> ArchiveRows:
    """The rows of an ``.eval`` archive this reader recognizes; raises :class:`UnrecognizedArchive`.

    A log of many samples is parsed in up to ``processes`` processes (default: the
    ``EVALRUNNER_LAND_PROCESSES`` setting; 0 or 1 parse here): the parse is Python work under one
    interpreter lock, so threads landing logs side by side would otherwise share one core."""
    archive = EvalArchive(data)
    members = archive.sample_members
    packed = [archive.packed(info) for info in members]
    parts = read_pool.read_parts(read_part, warm_reader, members, packed, processes)
    return ArchiveRows(archive.header, parts)


__all__ = ["ArchivePart", "ArchiveRows", "read_archive_rows", "read_part", "warm_reader"]
