"""Inspect log → lake: validate, land the raw log, write ``samples`` and ``events`` Parquet, commit.

``land_batch`` writes, in order: the raw log (byte-for-byte) → the samples file → the events
file → the batch record. The record is the commit marker: readers take the set of table files
from the records (see ``lake.duck``), so a table file without a record is never read. Every file
is written atomically under a name derived from the batch key, and a failure after a table file
was written removes it again, so a failed landing leaves no Parquet file behind.

How logs are read. ``read_eval_log`` validates every sample and event with pydantic: measured on
a 2-core machine with 14-event samples, ~0.9k samples/s. So a full landing of an ``.eval`` log
reads the archive directly (``lake.eval_archive``: the zip's members sliced and decompressed
here, JSON parsed by orjson, only the header validated by Inspect's ``EvalLog``) and builds the
rows from the plain dicts (``lake.raw_rows``), the same rows, column for column, that the
objects give. That reader is checked: it reads only the log format versions and the archive
layout it knows, and a log it does not recognize (another version, a member or sample field it
does not know, a ``.json`` log, a damaged archive) is read by ``inspect_ai.log`` as before, so a
damaged log gets the same ``LogIngestError``. ``tests/lake/test_eval_archive_reader.py`` compares both
paths' tables on real logs; ``./dev bench ingest`` measures both. ``ingest_log_file`` (ad-hoc
use) still reads through ``inspect_ai.log``; with ``events=False`` it reads only the sample
summaries (one JSON member, no events, ~12k samples/s).

A log whose status is not ``success`` (``error``, ``cancelled``, or a never-finished
``started``) is an infrastructure failure, not evidence about the agent: its raw log and a batch
record with that status and the log's error message are landed, no rows are written, and
``LogStatusError`` (carrying the record) is raised. A later landing of the same key replaces it.
One exception: a log whose status is ``error`` *because a sample raised* (the log's error is one
of its samples' errors — a solver, tool or scorer of the repository, with the task's own
``fail_on_error``) is the agent's failure: its rows land like a successful log's, errored
samples included (:func:`log_error_is_sample_error`).

Each row carries the sample's ``input_digest`` (``evalrunner_assets.sample_digest``; what
pairing compares) and, for an errored sample, ``error_where``: the innermost solver, scorer or
tool span open when it raised.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.sample_digest import digest_of_sample
from lake.batch import BatchKey, RunSettings, canonical_json
from lake.layout import Window
from lake.row_values import (
    error_text,
    error_where,
    event_text,
    event_values,
    sample_constants,
    score_value,
    sum_opt,
)
from lake.schema import (
    EVENTS_SCHEMA,
    SAMPLES_SCHEMA,
    BatchRecord,
)
from lake.storage import Lake


class LogIngestError(EvalrunnerError, ValueError):
    """An Inspect log could not be landed; the message names the file and the problem."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem


class LogStatusError(LogIngestError):
    """The log's status is not ``success``; ``record`` is the error batch record that was landed."""

    def __init__(self, source: str, problem: str, record: BatchRecord | None = None) -> None:
        super().__init__(source, problem)
        self.record = record


class BatchConflictError(LogIngestError):
    """A committed batch with the same key exists and holds a different log; ``record`` is the
    committed one (this log was discarded: the first committed landing wins)."""

    def __init__(self, source: str, problem: str, record: BatchRecord | None = None) -> None:
        super().__init__(source, problem)
        self.record = record


# -- reading -----------------------------------------------------------------------------------


LogFormat = Literal["eval", "json"]


def _log_format(data: bytes) -> LogFormat | None:
    if data[:4] == b"PK\x03\x04":
        return "eval"
    if data.lstrip()[:1] == b"{":
        return "json"
    return None


def _diagnose(source: str, data: bytes, exc: BaseException) -> LogIngestError:
    """Name the first cause: empty, corrupt zip, zip without a log, bad UTF-8, bad JSON, not a log."""
    fmt = _log_format(data)
    if fmt == "eval":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                bad = zf.testzip()
                names = set(zf.namelist())
        except Exception as zexc:  # BadZipFile, EOFError, zlib/zstd errors from damaged members
            return LogIngestError(source, f"truncated or corrupt .eval zip ({_short(zexc)})")
        if bad is not None:
            return LogIngestError(source, f"corrupt .eval zip (member {bad!r} fails its CRC)")
        if "header.json" not in names and "_journal/start.json" not in names:
            return LogIngestError(source, "zip is not an Inspect log (no header.json or _journal/start.json member)")
        return LogIngestError(source, f"not a readable Inspect .eval log: {_short(exc)}")
    if fmt == "json":
        try:
            json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as uexc:
            return LogIngestError(source, f"not valid UTF-8 at byte {uexc.start}")
        except json.JSONDecodeError as jexc:
            return LogIngestError(source, f"not valid JSON at position {jexc.pos} ({jexc.msg})")
        if isinstance(exc, ValidationError):
            return LogIngestError(source, f"JSON is not an Inspect log: {_short(exc)}")
        return LogIngestError(source, f"not a readable Inspect .json log: {_short(exc)}")
    return LogIngestError(source, f"not an Inspect log: neither a .eval zip nor JSON (starts with {data[:8]!r})")


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:297] + "..."


def read_log_bytes(data: bytes, source: str) -> tuple[LogFormat, Any]:
    """Parse ``data`` with ``inspect_ai.log``; returns (format, EvalLog) or raises LogIngestError."""
    from inspect_ai.log import read_eval_log

    if not data:
        raise LogIngestError(source, "empty file (0 bytes): the log was never written or was truncated")
    fmt = _log_format(data)
    if not fmt:
        raise _diagnose(source, data, ValueError("unknown format"))
    try:
        log = read_eval_log(io.BytesIO(data), format=fmt)
    except Exception as exc:  # inspect raises assorted errors: classify them
        raise _diagnose(source, data, exc) from exc
    return fmt, log


def _read_for_landing(
    data: bytes, source: str
) -> tuple[LogFormat, Any, list[Any], Callable[[BatchKey], tuple[pa.Table, pa.Table, int]]]:
    """(format, header EvalLog, the samples' errors, a function of the batch key building the
    tables). An ``.eval`` archive ``lake.eval_archive`` recognizes is read directly (no pydantic
    per sample); any other log, or a damaged one, through ``inspect_ai.log`` (read_log_bytes)."""
    if data and _log_format(data) == "eval":
        from lake.eval_archive import UnrecognizedArchive
        from lake.raw_rows import read_archive_rows

        try:
            rows = read_archive_rows(data)
        except UnrecognizedArchive:
            pass
        else:

            def archive_tables(key: BatchKey) -> tuple[pa.Table, pa.Table, int]:
                try:
                    return rows.tables(key)
                except UnrecognizedArchive:  # a column Arrow cannot take as the reader left it
                    return _tables(key, read_log_bytes(data, source)[1])

            return "eval", rows.header, rows.sample_errors, archive_tables
    fmt, log = read_log_bytes(data, source)
    return fmt, log, [smp.error for smp in log.samples or []], lambda key: _tables(key, log)


# -- rows --------------------------------------------------------------------------------------


def _iso_ts(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def log_error_is_sample_error(log_error: Any, sample_errors: Iterable[Any]) -> bool:
    """Whether a log's error is one of its samples' own errors: a sample raised and the task
    stopped on it (Inspect's ``fail_on_error``), so the failure is the agent's, not the harness's."""
    message = error_text(log_error)
    if not message:
        return False
    return any(error_text(e) == message for e in sample_errors if e is not None)


class _SampleColumns:
    """Column lists for the samples table, filled from EvalSample or EvalSampleSummary."""

    def __init__(self, key: BatchKey, header: Any) -> None:
        from inspect_ai.scorer import value_to_float

        self.to_float = value_to_float()
        self.cols: dict[str, list[Any]] = {f.name: [] for f in SAMPLES_SCHEMA}
        self.const = sample_constants(key, header)
        self.errored = 0
        self.n = 0

    def score(self, scores: dict[str, Any] | None) -> tuple[Any, ...]:
        if not scores:
            return None, None, None, None
        name, primary = next(iter(scores.items()))
        raw = primary.value
        value = score_value(raw, self.to_float)
        all_raw = {k: v.value for k, v in scores.items()}
        return value, json.dumps(raw, sort_keys=True), name, json.dumps(all_raw, sort_keys=True)

    def add(self, s: Any) -> None:
        c = self.cols
        self.n += 1
        error = error_text(s.error)
        if error is not None:
            self.errored += 1
        value, raw, name, all_raw = self.score(None if error is not None else s.scores)
        usages = list((s.model_usage or {}).values())
        c["sample_id"].append(str(s.id))
        c["epoch"].append(s.epoch)
        c["score"].append(value)
        c["score_raw"].append(raw)
        c["scorer"].append(name)
        c["scores"].append(all_raw)
        c["error"].append(error)
        limit = getattr(s, "limit", None)
        c["limit_type"].append(limit if isinstance(limit, str) or limit is None else limit.type)
        c["input_tokens"].append(sum(u.input_tokens for u in usages))
        c["output_tokens"].append(sum(u.output_tokens for u in usages))
        c["total_tokens"].append(sum(u.total_tokens for u in usages))
        c["input_tokens_cache_read"].append(sum_opt(u.input_tokens_cache_read for u in usages))
        c["input_tokens_cache_write"].append(sum_opt(u.input_tokens_cache_write for u in usages))
        c["reasoning_tokens"].append(sum_opt(u.reasoning_tokens for u in usages))
        costs = [u.total_cost for u in usages]
        c["cost_usd"].append(sum(costs) if costs and None not in costs else None)
        c["total_time_s"].append(s.total_time)
        c["working_time_s"].append(s.working_time)
        c["started_at"].append(_iso_ts(s.started_at))
        c["completed_at"].append(_iso_ts(s.completed_at))
        c["sample_uuid"].append(s.uuid)
        full = hasattr(s, "events")  # an EvalSample; summaries carry a thinned input and no events
        c["input_digest"].append(digest_of_sample(s) if full else None)
        c["error_where"].append(error_where(s) if full else None)

    def table(self) -> pa.Table:
        # per-batch constants are filled once here rather than appended per row
        cols = {**self.cols, **{k: [v] * self.n for k, v in self.const.items()}}
        return pa.Table.from_pydict(cols, schema=SAMPLES_SCHEMA)


class _EventColumns:
    def __init__(self, key: BatchKey) -> None:
        self.cols: dict[str, list[Any]] = {f.name: [] for f in EVENTS_SCHEMA}
        self.const = {"repo": key.repo, "commit": key.commit, "task": key.task, "batch": key.digest}
        self.n = 0

    def add_sample(self, sample: Any) -> None:
        c = self.cols
        sid = str(sample.id)
        attachments = sample.attachments or {}
        for seq, ev in enumerate(sample.events):
            kind = ev.event
            role, model, fn, args, calls, itok, otok, ttok, err, text = event_values(ev)
            text, truncated = event_text(text, attachments)
            self.n += 1
            c["sample_id"].append(sid)
            c["epoch"].append(sample.epoch)
            c["seq"].append(seq)
            c["event"].append(kind)
            c["timestamp"].append(ev.timestamp)
            c["working_start"].append(ev.working_start)
            c["span_id"].append(ev.span_id)
            c["role"].append(role)
            c["model"].append(model)
            c["tool_function"].append(fn)
            c["tool_arguments"].append(args)
            c["tool_calls"].append(calls)
            c["input_tokens"].append(itok)
            c["output_tokens"].append(otok)
            c["total_tokens"].append(ttok)
            c["error"].append(err)
            c["text"].append(text)
            c["text_truncated"].append(truncated)

    def table(self) -> pa.Table:
        cols = {**self.cols, **{k: [v] * self.n for k, v in self.const.items()}}
        return pa.Table.from_pydict(cols, schema=EVENTS_SCHEMA)


def _tables(key: BatchKey, log: Any, *, events: bool = True) -> tuple[pa.Table, pa.Table, int]:
    samples = _SampleColumns(key, log)
    evs = _EventColumns(key)
    for s in log.samples or []:
        samples.add(s)
        if events:
            evs.add_sample(s)
    return samples.table(), evs.table(), samples.errored


def parquet_bytes(table: pa.Table) -> bytes:
    """Deterministic Parquet bytes: the same rows give the same file."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=True, store_schema=True)
    return buf.getvalue()


# -- landing -----------------------------------------------------------------------------------


def _existing_record(lake: Lake, rel: str) -> BatchRecord | None:
    if not lake.exists(rel):
        return None
    from lake.integrity import load_record

    return load_record(lake, rel)


def _record(
    key: BatchKey,
    log: Any,
    *,
    fmt: LogFormat,
    sha: str,
    size: int,
    raw_path: str,
    run_meta: dict[str, Any] | None,
    **fields: Any,
) -> BatchRecord:
    stats = log.stats
    return BatchRecord(
        batch=key.digest,
        key=json.loads(canonical_json(key.as_record())),
        repo=key.repo,
        commit=key.commit,
        task=key.task,
        window=key.window.name,
        publishable=key.publishable,
        missing_fields=key.missing_fields,
        log_status=log.status,
        log_format=fmt,
        log_sha256=sha,
        log_bytes=size,
        raw_path=raw_path,
        eval_id=log.eval.eval_id,
        inspect_task=log.eval.task,
        model=log.eval.model,
        inspect_version=(log.eval.packages or {}).get("inspect_ai"),
        eval_created=str(log.eval.created) if log.eval.created else None,
        started_at=str(stats.started_at) if stats and stats.started_at else None,
        completed_at=str(stats.completed_at) if stats and stats.completed_at else None,
        run_meta=json.loads(canonical_json(run_meta or {})),
        **fields,
    )


def land_batch(
    lake: Lake,
    key: BatchKey,
    log_bytes: bytes,
    *,
    run_meta: dict[str, Any] | None = None,
    source: str | None = None,
) -> BatchRecord:
    """Validate an Inspect log, land it and its rows for ``key``, and commit the batch record.

    ``source`` names the log in errors (default: its lake path). Landing a key that is already
    committed with the same bytes returns the existing record and writes nothing; with other
    bytes it raises ``BatchConflictError`` (a batch is reused, never re-run). Raises
    ``LogIngestError`` for a log that cannot be read and ``LogStatusError`` (after landing the raw
    log and an error record) for a log whose status is not ``success``.
    """
    layout = lake.layout
    d = key.digest
    fmt_guess = _log_format(log_bytes) or "eval"
    sha = hashlib.sha256(log_bytes).hexdigest()
    # File names carry the log's digest: two processes landing this batch with different logs
    # (a nondeterministic run) never overwrite each other's files, and a reader never sees one
    # landing's rows under another landing's record.
    content = sha[:16]
    src = source or lake.url(layout.raw_log(key.repo, key.commit, key.task, key.window, d, fmt_guess, content))
    fmt, log, sample_errors, build_tables = _read_for_landing(log_bytes, src)
    raw_path = layout.raw_log(key.repo, key.commit, key.task, key.window, d, fmt, content)
    rec_path = layout.batch_record(key.repo, key.commit, key.task, key.window, d)

    existing = _existing_record(lake, rec_path)
    if existing is not None and existing.status == "ok":
        return _reuse_or_conflict(existing, sha, d, src)

    common: dict[str, Any] = dict(fmt=fmt, sha=sha, size=len(log_bytes), raw_path=raw_path, run_meta=run_meta)
    agent_error = log.status == "error" and log_error_is_sample_error(log.error, sample_errors)
    if log.status != "success" and not agent_error:
        message = error_text(log.error) or f"log status is {log.status!r} with no error message"
        lake.write_bytes(raw_path, log_bytes)
        record = _record(key, log, status=log.status, error=message, **common)
        lake.write_bytes(rec_path, record.to_json_bytes())
        raise LogStatusError(
            src, f"log status is {log.status!r} (infrastructure failure, no rows landed): {message}", record
        )

    samples, events, errored = build_tables(key)
    # encode before writing anything: an encoding failure leaves the lake untouched
    samples_data, events_data = parquet_bytes(samples), parquet_bytes(events)
    samples_path = layout.table_file("samples", key.repo, key.commit, key.task, key.window, d, content)
    events_path = layout.table_file("events", key.repo, key.commit, key.task, key.window, d, content)
    record = _record(
        key,
        log,
        status="ok",
        samples_path=samples_path,
        events_path=events_path,
        samples_sha256=hashlib.sha256(samples_data).hexdigest(),
        samples_bytes=len(samples_data),
        events_sha256=hashlib.sha256(events_data).hexdigest(),
        events_bytes=len(events_data),
        sample_rows=samples.num_rows,
        event_rows=events.num_rows,
        errored_samples=errored,
        **common,
    )
    written: list[str] = []
    try:
        for rel, data in ((raw_path, log_bytes), (samples_path, samples_data), (events_path, events_data)):
            written.append(rel)
            lake.write_bytes(rel, data)
        if existing is not None:
            # A landed failure (status error) of this key is replaced by a good landing.
            lake.write_bytes(rec_path, record.to_json_bytes())
        elif not lake.write_once(rec_path, record.to_json_bytes()):
            # Another process committed this batch between our check and our commit.
            winner = _existing_record(lake, rec_path)
            if winner is not None and winner.status == "ok":
                if winner.raw_path != raw_path:
                    for rel in written:
                        _remove_quietly(lake, rel)
                return _reuse_or_conflict(winner, sha, d, src)
            lake.write_bytes(rec_path, record.to_json_bytes())
        else:
            _remove_unvouched_tables(lake, key, d, keep={samples_path, events_path})
    except BaseException:
        if not _vouched_elsewhere(lake, rec_path, raw_path):
            for rel in written[1:]:  # the raw log stays (evidence); the tables are never left unvouched
                _remove_quietly(lake, rel)
        raise
    return record


def _remove_unvouched_tables(lake: Lake, key: BatchKey, digest: str, keep: set[str]) -> None:
    """After this landing committed the batch's record: delete the batch's table files that no
    record vouches for, left by an earlier landing killed between its files and its record (its
    log, a rerun's, had another digest, so other names). Only the winner of ``write_once`` does
    this: any other landing of the key loses the commit and removes its own files anyway."""
    layout = lake.layout
    for table in ("samples", "events"):
        exact = layout.table_file(table, key.repo, key.commit, key.task, key.window, digest)
        stem = exact[: -len(".parquet")]
        try:
            found = lake.glob(stem + ".*.parquet")
        except Exception:  # unvouched files are invisible to readers: leave them rather than fail a landing
            continue
        for rel in found:
            if rel not in keep and rel.startswith(stem + "."):
                _remove_quietly(lake, rel)


def _vouched_elsewhere(lake: Lake, rec_path: str, raw_path: str) -> bool:
    """Whether a committed record (another process's landing of the same log) uses these files."""
    try:
        existing = _existing_record(lake, rec_path)
    except Exception:  # the lake is failing us: leave the files rather than guess
        return True
    return existing is not None and existing.raw_path == raw_path


def _reuse_or_conflict(existing: BatchRecord, sha: str, digest: str, src: str) -> BatchRecord:
    """A committed batch is reused, never re-run: the same log returns its record; another log
    (a nondeterministic re-run, e.g. by a concurrent process) is refused."""
    if existing.log_sha256 == sha:
        return existing
    raise BatchConflictError(
        src,
        f"batch {digest} is already committed with a different log "
        f"(sha256 {existing.log_sha256[:12]}…, this one {sha[:12]}…); a batch is reused, never re-run",
        existing,
    )


def _remove_quietly(lake: Lake, rel: str) -> None:
    try:
        path = lake.path(rel)
        if lake.fs.exists(path):
            lake.fs.rm(path)
    except Exception:  # the record was never written, so the file is invisible anyway
        pass


def ingest_log_file(
    path: str | os.PathLike[str],
    key: BatchKey | None = None,
    *,
    events: bool = True,
) -> tuple[pa.Table, pa.Table]:
    """Rows of one Inspect log file for ad-hoc use: (samples, events) Arrow tables.

    Without ``key`` the batch-key columns are filled from the log (repo 'local/adhoc', a zero
    commit, task = the log's task name). ``events=False`` reads only the sample summaries
    (much faster) and returns an empty events table.
    """
    from inspect_ai.log import read_eval_log, read_eval_log_sample_summaries

    src = str(path)
    p = Path(src)
    if not p.is_file():
        raise LogIngestError(src, "no such file (never written?)")
    if p.stat().st_size == 0:
        raise LogIngestError(src, "empty file (0 bytes): the log was never written or was truncated")
    try:
        header = read_eval_log(src, header_only=True)
    except Exception as exc:
        raise _diagnose(src, p.read_bytes(), exc) from exc
    key = key or _adhoc_key(header)
    try:
        summaries = read_eval_log_sample_summaries(src)
        if events:
            log = read_eval_log(src)
    except Exception as exc:  # a damaged sample member surfaces only when it is read
        raise _diagnose(src, p.read_bytes(), exc) from exc
    if header.status != "success" and not (
        header.status == "error" and log_error_is_sample_error(header.error, [smp.error for smp in summaries])
    ):
        message = error_text(header.error) or "no error message"
        raise LogStatusError(src, f"log status is {header.status!r}: {message}")
    if not events:
        cols = _SampleColumns(key, header)
        for s in summaries:
            cols.add(s)
        return cols.table(), EVENTS_SCHEMA.empty_table()
    samples, evs, _ = _tables(key, log)
    return samples, evs


def _adhoc_key(header: Any) -> BatchKey:
    import re

    task = re.sub(r"[^A-Za-z0-9_.-]+", "_", header.eval.task or "task").strip(".") or "task"
    n = max(1, len(header.eval.dataset.sample_ids or []) or header.eval.dataset.samples or 1)
    return BatchKey(
        repo="local/adhoc",
        commit="0" * 40,
        task=task,
        spec=header.eval.task_file or header.eval.task or "",
        settings=RunSettings(
            model=header.eval.model,
            seed=int(getattr(header.eval.model_generate_config, "seed", None) or 0),
            epochs=int(header.eval.config.epochs or 1),
        ),
        window=Window(0, n),
    )


def land_log_file(
    lake: Lake, key: BatchKey, path: str | os.PathLike[str], *, run_meta: dict[str, Any] | None = None
) -> BatchRecord:
    """``land_batch`` for a log on local disk; errors name ``path``."""
    src = str(path)
    p = Path(src)
    if not p.is_file():
        raise LogIngestError(src, "no such file (the log was never written)")
    return land_batch(lake, key, p.read_bytes(), run_meta=run_meta, source=src)


__all__: Sequence[str] = (
    "BatchConflictError",
    "LogIngestError",
    "LogStatusError",
    "ingest_log_file",
    "land_batch",
    "land_log_file",
    "log_error_is_sample_error",
    "parquet_bytes",
    "read_log_bytes",
)
