"""Annotated copies of a task's raw Inspect logs, for Inspect's own viewer.

The notes on trajectories (``annotations/…/<source>.parquet``) are rows in the lake; a person
reading a sample in ``inspect view`` sees the log, not the lake. So for every raw log with notes
on its samples a copy is written under ``LAYOUT.annotated_log(raw)`` in which each noted sample
carries them in its ``metadata`` (key ``evalrunner_annotations``: the viewer's Metadata tab) and,
in its transcript, an ``info`` event per note right after the event it is on (at the start for a
note on the whole trajectory). Samples without notes are copied as they are. The raw log is only
read: it is the evidence, byte for byte; the copy names it in the log's metadata.

A task's copies are rewritten from all of its notes (every source) each time; a log none of
whose samples has a note any more loses its copy.
"""

from __future__ import annotations

import io
import os
import posixpath
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

from lake.ingest import read_log_bytes
from lake.integrity import task_records
from lake.layout import LAYOUT
from lake.storage import Lake

METADATA_KEY = "evalrunner_annotations"  # on each noted sample of the copy
COPY_OF_KEY = "evalrunner_annotated_copy_of"  # on the copy's eval: the raw log's lake path
INFO_SOURCE = "evalrunner annotation"  # the title of the transcript's info events


@dataclass(frozen=True)
class AnnotatedLogs:
    """What one refresh wrote and removed (lake-relative paths)."""

    written: list[str]
    removed: list[str]


def task_notes(lake: Lake, repo: str, commit: str, task: str) -> list[dict[str, Any]]:
    """Every note any source attached to the task's trajectories at ``commit`` (rows of
    ``ANNOTATIONS_SCHEMA``)."""
    rows: list[dict[str, Any]] = []
    for rel in lake.glob(LAYOUT.task_annotations_glob(repo, commit, task)):
        rows += pq.read_table(io.BytesIO(lake.read_bytes(rel))).to_pylist()
    return rows


def write_annotated_logs(lake: Lake, repo: str, commit: str, task: str) -> AnnotatedLogs:
    """Write (or rewrite) the annotated copy of each of the task's raw logs that has notes, and
    remove the copies of those that have none."""
    by_batch: dict[str, list[dict[str, Any]]] = {}
    for row in task_notes(lake, repo, commit, task):
        by_batch.setdefault(row["batch"], []).append(row)
    written = []
    for record in task_records(lake, repo, commit, task):
        notes = by_batch.get(record.batch)
        if not notes or not record.raw_path:
            continue
        rel = LAYOUT.annotated_log(record.raw_path)
        lake.write_bytes(rel, annotated_copy(lake.read_bytes(record.raw_path), record.raw_path, notes))
        written.append(rel)
    kept = set(written)
    stale = [rel for glob in LAYOUT.task_annotated_logs_globs(repo, commit, task) for rel in lake.glob(glob)]
    stale = [rel for rel in stale if rel not in kept]
    for rel in stale:
        lake.remove(rel)
    return AnnotatedLogs(written, stale)


def annotated_copy(raw: bytes, raw_path: str, notes: Iterable[dict[str, Any]]) -> bytes:
    """The log ``raw`` (at lake path ``raw_path``) with ``notes`` on its samples, in the same
    format. A note names its sample by (sample_id, epoch) and its event by ``seq`` (the event's
    index in the raw sample's events, as ``events.seq``)."""
    from inspect_ai.event import InfoEvent

    fmt, log = read_log_bytes(raw, raw_path)
    by_sample: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in sorted(notes, key=lambda r: (r["seq"] is not None, r["seq"] or 0, r["source"], r["note"])):
        by_sample.setdefault((str(row["sample_id"]), int(row["epoch"])), []).append(row)
    log.eval.metadata = {**(log.eval.metadata or {}), COPY_OF_KEY: raw_path}
    for sample in log.samples or []:
        rows = by_sample.get((str(sample.id), int(sample.epoch)))
        if not rows:
            continue
        events = list(sample.events)
        sample.metadata = {
            **(sample.metadata or {}),
            METADATA_KEY: [_entry(row, events) for row in rows],
        }
        # Inserted from the last note back, so each seq still names the raw log's event (and
        # notes on one event keep their order).
        inserted = list(events)
        start = next((i for i, e in enumerate(events) if e.event == "sample_init"), 0 if events else -1)
        init = events[start] if events else None
        for row in reversed(rows):
            seq = row["seq"]
            at = _event_at(events, seq)
            anchor = at if at is not None else init
            info = InfoEvent(
                source=INFO_SOURCE,
                data=_info_text(row, at),
                span_id=anchor.span_id if anchor is not None else None,
                **({"timestamp": anchor.timestamp, "working_start": anchor.working_start} if anchor else {}),
            )
            # After the event the note is on; a note on the whole trajectory after the sample's
            # init, so it is the first thing the transcript says.
            position = (seq if at is not None and seq is not None else start) + 1
            inserted.insert(position, info)
        sample.events = inserted
    from inspect_ai.log import write_eval_log

    with tempfile.TemporaryDirectory(prefix="evalrunner-annotated-") as tmp:
        path = os.path.join(tmp, posixpath.basename(raw_path))
        write_eval_log(log, path, format=fmt)
        with open(path, "rb") as fh:
            return fh.read()


def _event_at(events: list[Any], seq: int | None) -> Any:
    """The raw sample's event a note's ``seq`` names (None: a note on the whole trajectory)."""
    return events[seq] if seq is not None and 0 <= seq < len(events) else None


def _entry(row: dict[str, Any], events: list[Any]) -> dict[str, Any]:
    seq = row["seq"]
    at = _event_at(events, seq)
    return {
        "note": row["note"],
        "finding": row["finding"],
        "source": row["source"],
        "seq": seq,
        "event": _describe(at) if at is not None else None,
        "created_at": row["created_at"],
    }


def _describe(event: Any) -> str:
    kind = getattr(event, "event", "event")
    if kind == "tool":
        return f"tool call {event.function}"
    if kind == "model":
        return f"model call {event.model}"
    return str(kind)


def _info_text(row: dict[str, Any], at: Any) -> str:
    where = f"on event {row['seq']} ({_describe(at)})" if at is not None else "on the whole trajectory"
    return f"**{row['source']}** {where}: {row['note']}"
