"""DuckDB over the lake: one connection helper that creates the views defined in ``sql/``.

Views:
- ``batches``  — one row per batch record (``sql/batches_view.sql``);
- ``samples``  — rows of committed batches only (``sql/samples_view.sql``);
- ``events``   — likewise (``sql/events_view.sql``);
- ``input_scores`` — epochs averaged per input (``sql/input_scores_view.sql``).

The set of Parquet files comes from the batch records, not from a glob: a table file whose
record was never written (a landing that failed) is invisible, and the file list is bound to the
connection as a DuckDB variable, never formatted into SQL. Each list starts with an empty Parquet
file of the current schema, so an empty lake yields empty views with the right columns, and files
written before a column existed read it as null. Call ``refresh(con, lake)`` to see batches landed
after ``connect``.

For ``gs://`` lakes the lake's gcsfs filesystem is registered on the connection (DuckDB's own
cloud extensions are downloaded at run time and are unavailable offline).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import sql
from lake.schema import EVENTS_SCHEMA, SAMPLES_SCHEMA, SERIES_ROWS_SCHEMA, BatchRecord, batches_table
from lake.storage import Lake

VIEWS = ("batches_view", "samples_view", "events_view", "input_scores_view")


@contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C during a DuckDB call stays a ``KeyboardInterrupt``.

    DuckDB's Python API notices a pending SIGINT while it executes, cancels the query and raises
    ``RuntimeError("Query interrupted")`` in place of the ``KeyboardInterrupt``; without this a
    Ctrl-C that lands mid-query would look like a failed query, not a cancellation."""
    try:
        yield
    except (RuntimeError, duckdb.InterruptException) as exc:
        if isinstance(exc, duckdb.InterruptException) or str(exc).strip() == "Query interrupted":
            raise KeyboardInterrupt("DuckDB query interrupted") from exc
        raise


def _schema_stub(name: str, schema: pa.Schema) -> str:
    """A local, empty Parquet file with ``schema`` (cached by the schema's digest)."""
    digest = hashlib.sha256(schema.serialize().to_pybytes()).hexdigest()[:16]
    directory = os.path.join(tempfile.gettempdir(), "evalrunner-lake-schemas")
    path = os.path.join(directory, f"{name}-{digest}.parquet")
    if not os.path.exists(path):
        os.makedirs(directory, exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        pq.write_table(schema.empty_table(), tmp)
        os.replace(tmp, path)
    return path


def read_records(lake: Lake) -> list[BatchRecord]:
    """Every batch record in the lake, in path order."""
    rels = lake.glob(lake.layout.batch_glob())
    if not rels:
        return []
    paths = [lake.path(rel) for rel in rels]
    blobs: Any = lake.fs.cat(paths) if not lake.is_local else None
    records = []
    for rel, path in zip(rels, paths):
        if blobs is None:
            data = lake.read_bytes(rel)
        else:
            data = blobs.get(path)
            if data is None:  # fsspec may key by protocol-less or prefixed path
                data = lake.read_bytes(rel)
        records.append(BatchRecord.model_validate_json(data))
    return records


def read_batch_records(lake: Lake, keys: Any) -> list[BatchRecord]:
    """The records of the given batches (``BatchKey``s) that exist, in the order given."""
    out = []
    for key in keys:
        rel = lake.layout.batch_record(key.repo, key.commit, key.task, key.window, key.digest)
        if lake.exists(rel):
            out.append(BatchRecord.model_validate_json(lake.read_bytes(rel)))
    return out


def refresh(
    con: duckdb.DuckDBPyConnection, lake: Lake, records: list[BatchRecord] | None = None
) -> list[BatchRecord]:
    """Point the views at the lake's current committed batches (or only at ``records``);
    returns the records used."""
    if records is None:
        records = read_records(lake)
    committed = [r for r in records if r.status == "ok"]
    samples = [_schema_stub("samples", SAMPLES_SCHEMA)]
    events = [_schema_stub("events", EVENTS_SCHEMA)]
    samples += [lake.url(r.samples_path) for r in committed if r.samples_path]
    events += [lake.url(r.events_path) for r in committed if r.events_path]
    with interruptible():
        con.execute("set variable samples_files = ?", [samples])
        con.execute("set variable events_files = ?", [events])
        con.register("batch_records", batches_table(records))
    return records


def connect(
    lake: Lake, *, database: str = ":memory:", records: list[BatchRecord] | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the lake's views (``batches``, ``samples``, ``events``, …);
    with ``records``, the views cover only those batches (reading a few batches of a large lake
    without listing every record)."""
    con = duckdb.connect(database)
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    refresh(con, lake, records)
    with interruptible():
        for name in VIEWS:
            con.execute(sql.load(name))
        register_series(con, lake)
    return con


def register_series(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    """The ``cohort_series`` view over the series points' row files (small: read into memory)."""
    rels = lake.glob(lake.layout.series_rows_glob())
    tables = [pq.read_table(lake.fs.open(lake.path(rel), "rb")) for rel in rels]
    rows = pa.concat_tables([t.cast(SERIES_ROWS_SCHEMA) for t in tables]) if tables else SERIES_ROWS_SCHEMA.empty_table()
    con.register("series_rows", rows)
    con.execute(sql.load("cohort_series"))


def query(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> pa.Table:
    """Run the named query from ``sql/`` with bound ``params``; an Arrow table."""
    with interruptible():
        return con.sql(sql.load(name), params=params or {}).to_arrow_table()
