"""Readers never trust a file its batch record does not vouch for.

A batch record lists every file it commits with its size and sha256 (the raw log always; each
Parquet file from record version 2 on). Readers check:
- the size of every file whenever they build views over it (one ``stat`` each: cheap);
- the sha256 the first time this process reads a batch's files (:func:`verify_record`; what was
  verified is remembered per (path, size, version, digest), so a rewritten file is checked again);
- everything, always, in ``evalrunner lake verify`` and the ``task_samples`` asset check.

A mismatch is a :class:`LakeIntegrityError` naming the file, the expected and the found value.
The pipeline then *quarantines* the batch (:func:`quarantine`): its record moves to
``quarantine/`` with the reason, so the planner sees the batch as absent and the next request
runs it again; the bad rows are never used. A record that is not JSON or fails validation is a
:class:`CorruptRecordError`, handled the same way.

Version-1 records (no Parquet digests): the raw log is checked by size and sha256 as for any
record; each Parquet file must exist and, where a digest would be checked, parse with the row
count the record states. What cannot be checked is not taken on trust silently: ``lake verify``
reports such batches as ``unverifiable`` (a re-landing of the window writes a version-2 record).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from evalrunner_assets.errors import EvalrunnerError
from lake.layout import LAYOUT, Window
from lake.schema import BatchRecord
from lake.storage import Lake

log = logging.getLogger("evalrunner.lake")

REPAIR_HINT = "run `evalrunner lake verify --repair` to quarantine it (its window is then run again)"


class LakeIntegrityError(EvalrunnerError, RuntimeError):
    """A file in the lake is not what its batch record says; ``path`` is its lake URL."""

    def __init__(self, path: str, problem: str, *, record: str | None = None) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.record = record  # lake-relative path of the batch record that vouches for it


class CorruptRecordError(LakeIntegrityError):
    """A batch record is not JSON or not a valid record."""


# Batches this process quarantined: {"record": url, "reason": ...}, in order (for run summaries).
QUARANTINED: list[dict[str, str]] = []

# (url, size, version, sha256) of files whose digest this process has checked.
_verified: set[tuple[str, int, str, str]] = set()
MAX_REMEMBERED = 200_000
_verified_lock = threading.Lock()


def forget_verified() -> None:
    """Forget which files this process verified (tests; a long-lived process never needs to)."""
    with _verified_lock:
        _verified.clear()


def load_record(lake: Lake, rel: str) -> BatchRecord:
    """The batch record at ``rel``; :class:`CorruptRecordError` (naming the file and what to do)
    if it is not JSON or not a valid record."""
    data = lake.read_bytes(rel)
    try:
        return BatchRecord.model_validate_json(data)
    except ValidationError as exc:
        first: Mapping[str, Any] = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            what = f"not valid JSON ({first.get('msg', 'invalid')})"
        else:
            where = ".".join(str(p) for p in first.get("loc", ())) or "record"
            what = f"not a valid batch record ({where}: {first.get('msg', 'invalid')}; {exc.error_count()} error(s))"
        raise CorruptRecordError(lake.url(rel), f"{what}; {REPAIR_HINT}", record=rel) from exc


def _record_rel(lake: Lake, record: BatchRecord) -> str:
    from lake.layout import Window

    return lake.layout.batch_record(record.repo, record.commit, record.task, Window.parse(record.window), record.batch)


def check_sizes(lake: Lake, record: BatchRecord) -> None:
    """Every file ``record`` vouches for exists with the recorded size (one stat each)."""
    for rel, size, _, what in record.files():
        found = lake.stat(rel)
        if found is None:
            raise LakeIntegrityError(
                lake.url(rel), f"{what} is missing (its batch record vouches for it)", record=_record_rel(lake, record)
            )
        if size is not None and found[0] != size:
            raise LakeIntegrityError(
                lake.url(rel),
                f"{what} size differs: expected {size} bytes, found {found[0]}",
                record=_record_rel(lake, record),
            )


def verify_record(lake: Lake, record: BatchRecord, *, always: bool = False) -> None:
    """Check every file of ``record``: size, then sha256 (once per process per file version,
    or every time with ``always``). Raises :class:`LakeIntegrityError` on the first mismatch."""
    rec_rel = _record_rel(lake, record)
    for rel, size, sha, what in record.files():
        url = lake.url(rel)
        found = lake.stat(rel)
        if found is None:
            raise LakeIntegrityError(url, f"{what} is missing (its batch record vouches for it)", record=rec_rel)
        if size is not None and found[0] != size:
            raise LakeIntegrityError(
                url, f"{what} size differs: expected {size} bytes, found {found[0]}", record=rec_rel
            )
        memo = (url, found[0], found[1], sha or "")
        if not always:
            with _verified_lock:
                if memo in _verified:
                    continue
        data = lake.read_bytes(rel)
        if sha is not None:
            got = hashlib.sha256(data).hexdigest()
            if got != sha:
                raise LakeIntegrityError(url, f"{what} sha256 differs: expected {sha}, found {got}", record=rec_rel)
        else:  # a version-1 record: the file must at least be the Parquet file it says
            _check_parquet_rows(url, data, record, what, rec_rel)
        with _verified_lock:
            if len(_verified) >= MAX_REMEMBERED:  # a long-lived daemon: verify again rather than grow
                _verified.clear()
            _verified.add(memo)


def _check_parquet_rows(url: str, data: bytes, record: BatchRecord, what: str, rec_rel: str) -> None:
    import io

    import pyarrow.parquet as pq

    expected = record.sample_rows if what == "samples file" else record.event_rows
    try:
        rows = pq.read_metadata(io.BytesIO(data)).num_rows
    except Exception as exc:  # pyarrow raises assorted errors for damaged files
        raise LakeIntegrityError(
            url, f"{what} is not a readable Parquet file ({type(exc).__name__}: {exc})", record=rec_rel
        ) from exc
    if rows != expected:
        raise LakeIntegrityError(url, f"{what} row count differs: expected {expected}, found {rows}", record=rec_rel)


def quarantine(lake: Lake, rel: str, reason: str) -> str | None:
    """Move the batch record at ``rel`` to ``quarantine/`` with ``reason`` (copied first, then
    removed: a crash in between leaves it in both places, never in neither). Returns the
    quarantine path, or None if another process moved it first."""
    try:
        data = lake.read_bytes(rel)
    except FileNotFoundError:
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    target = lake.layout.quarantined(rel, stamp)
    entry = {
        "record_path": rel,
        "reason": reason,
        "quarantined_at": datetime.now(UTC).isoformat(),
        "record_text": data.decode("utf-8", errors="replace"),
    }
    lake.write_bytes(target, (json.dumps(entry, indent=1, sort_keys=True) + "\n").encode())
    lake.remove(rel)
    log.warning("quarantined batch %s: %s", lake.url(rel), reason)
    QUARANTINED.append({"record": lake.url(rel), "reason": reason, "moved_to": lake.url(target)})
    return target


@dataclass
class VerifyReport:
    """What ``evalrunner lake verify`` found."""

    records: int = 0
    ok: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)  # (record path, problem)
    unverifiable: list[str] = field(default_factory=list)  # version-1 records (no Parquet digests)
    quarantined: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems or len(self.quarantined) == len(self.problems)


def verify_lake(lake: Lake, *, repair: bool = False) -> VerifyReport:
    """Check every batch record and every file it vouches for (full sha256); with ``repair``,
    quarantine each batch that fails."""
    report = VerifyReport()
    for rel in lake.glob(lake.layout.batch_glob()):
        report.records += 1
        try:
            record = load_record(lake, rel)
            verify_record(lake, record, always=True)  # a landed failure vouches for its raw log only
        except LakeIntegrityError as exc:
            report.problems.append((lake.url(rel), str(exc)))
            if repair and quarantine(lake, rel, str(exc)) is not None:
                report.quarantined.append(lake.url(rel))
            continue
        report.ok += 1
        if record.status == "ok" and record.samples_path and record.samples_sha256 is None:
            report.unverifiable.append(lake.url(rel))
    return report


def task_records(lake: Lake, repo: str, commit: str, task: str) -> list[BatchRecord]:
    """The committed batch records of one (commit, task) that landed rows, in window order."""
    records = []
    for rel in lake.glob(LAYOUT.task_batch_records_glob(repo, commit, task)):
        try:
            record = load_record(lake, rel)
        except LakeIntegrityError:
            continue  # an unreadable record vouches for nothing (lake verify names it)
        if record.status == "ok":
            records.append(record)
    return sorted(records, key=lambda r: (Window.parse(r.window).start, r.batch))
