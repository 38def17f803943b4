"""DuckDB over the lake: one connection helper that creates the views defined in ``sql/``.

Views:
- ``batches``  — one row per batch record (``sql/batches_view.sql``);
- ``samples``  — rows of committed batches only (``sql/samples_view.sql``);
- ``events``   — likewise (``sql/events_view.sql``);
- ``input_scores`` — each input's epochs reduced by the pairing rule (``sql/input_scores_view.sql``);
- ``paired_inputs(repo, head, base)`` — a parameterised view (table macro): head vs base per
  input by the pairing rule (``sql/paired_inputs_view.sql``). The rule itself is the table
  macros ``input_scores_of`` / ``paired_inputs_of`` (``sql.PAIRING_RULE``), which the comparison
  engine applies to the rows of the batches it selected.

The set of Parquet files comes from the batch records, not from a glob: a table file whose
record was never written (a landing that failed) is invisible, and each file's size is checked
against its record before it is read (``lake.integrity``; a mismatched batch is left out and
reported). The typed empty tables the views start from are built from the pyarrow schemas in
code (``samples_schema``, ``events_schema``), never read from a file: nothing outside the lake is
read as data. They also make files written before a column existed read it as null. A batch
record that cannot be read is reported (naming the file and what to do) and left out; queries
that do not need it still work. Call ``refresh(con, lake)`` to see batches landed after
``connect``.

For ``gs://`` lakes the lake's gcsfs filesystem is registered on the connection (DuckDB's own
cloud extensions are downloaded at run time and are unavailable offline).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb
import pyarrow as pa

import sql
from lake.integrity import LakeIntegrityError, check_sizes, load_record
from lake.schema import (
    ANNOTATIONS_SCHEMA,
    CANDIDATE_PAIRS_SCHEMA,
    CANDIDATE_ROWS_SCHEMA,
    EVENTS_SCHEMA,
    SAMPLES_SCHEMA,
    SERIES_ROWS_SCHEMA,
    BatchRecord,
    batches_table,
)
from lake.storage import Lake

log = logging.getLogger("evalrunner.lake")

OnProblem = Callable[[LakeIntegrityError], None]


def warn_problem(exc: LakeIntegrityError) -> None:
    """Default: one warning line naming the file and what to do; the batch is left out."""
    log.warning("%s (left out of the views)", exc)


def raise_problem(exc: LakeIntegrityError) -> None:
    raise exc


VIEWS = ("batches_view", "samples_view", "events_view", *sql.PAIRING_RULE, "input_scores_view", "paired_inputs_view")


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


def read_records(lake: Lake, on_problem: OnProblem = warn_problem) -> list[BatchRecord]:
    """Every readable batch record in the lake, in path order (an unreadable one goes to
    ``on_problem`` and is left out)."""
    rels = lake.glob(lake.layout.batch_glob())
    if not rels:
        return []
    paths = [lake.path(rel) for rel in rels]
    blobs: Any = lake.read_many(rels) if not lake.is_local else None
    records = []
    for rel, path in zip(rels, paths):
        try:
            if blobs is None or blobs.get(path) is None:  # fsspec may key by a prefixed path
                records.append(load_record(lake, rel))
            else:
                records.append(_parse_record(lake, rel, blobs[path]))
        except FileNotFoundError:  # quarantined or replaced since it was listed
            continue
        except LakeIntegrityError as exc:
            on_problem(exc)
    return records


def _parse_record(lake: Lake, rel: str, data: bytes) -> BatchRecord:
    from pydantic import ValidationError

    try:
        return BatchRecord.model_validate_json(data)
    except ValidationError:
        return load_record(lake, rel)  # reads it again and names the problem


def read_batch_records(lake: Lake, keys: Any) -> list[BatchRecord]:
    """The records of the given batches (``BatchKey``s) that exist, in the order given."""
    out = []
    for key in keys:
        rel = lake.layout.batch_record(key.repo, key.commit, key.task, key.window, key.digest)
        if lake.exists(rel):
            out.append(load_record(lake, rel))
    return out


def refresh(
    con: duckdb.DuckDBPyConnection,
    lake: Lake,
    records: list[BatchRecord] | None = None,
    on_problem: OnProblem = warn_problem,
) -> list[BatchRecord]:
    """Point the views at the lake's current committed batches (or only at ``records``);
    returns the records used. A batch whose files do not have their recorded sizes (or an
    unreadable record) goes to ``on_problem`` and is left out."""
    if records is None:
        records = read_records(lake, on_problem)
    good: list[BatchRecord] = []
    for r in records:
        try:
            if r.status == "ok":
                check_sizes(lake, r)
        except LakeIntegrityError as exc:
            on_problem(exc)
            continue
        good.append(r)
    committed = [r for r in good if r.status == "ok"]
    samples = [lake.url(r.samples_path) for r in committed if r.samples_path]
    events = [lake.url(r.events_path) for r in committed if r.events_path]
    with interruptible():
        _point(con, "samples_parquet", samples, SAMPLES_SCHEMA)
        _point(con, "events_parquet", events, EVENTS_SCHEMA)
        con.register("batch_records", batches_table(good))
    return good


def _point(con: duckdb.DuckDBPyConnection, name: str, files: list[str], schema: pa.Schema) -> None:
    """``name``: the rows of exactly ``files`` (the typed empty table when there are none)."""
    if files:
        rel = con.read_parquet(files, union_by_name=True, hive_partitioning=False)
    else:
        rel = con.from_arrow(schema.empty_table())
    rel.create_view(name, replace=True)


def connect(
    lake: Lake,
    *,
    database: str = ":memory:",
    records: list[BatchRecord] | None = None,
    on_problem: OnProblem = warn_problem,
    views: Sequence[str] = (*VIEWS, "cohort_series", "candidates", "annotations", "trajectory_features"),
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the lake's views (``batches``, ``samples``, ``events``, …);
    with ``records``, the views cover only those batches (reading a few batches of a large lake
    without listing every record). ``views``: the ``sql/`` definitions to create, in order (a
    caller that runs one query names just what it reads; creating each costs milliseconds).
    ``candidates`` stands for ``candidate_rows`` and ``candidate_pairs`` of every repository
    (``register_candidates``), ``annotations`` for the notes on trajectories
    (``register_annotations``)."""
    con = duckdb.connect(database)
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    # Typed empty tables from the schemas in code: every view has every column, even over an
    # empty lake or files written before a column existed.
    con.register("samples_schema", SAMPLES_SCHEMA.empty_table())
    con.register("events_schema", EVENTS_SCHEMA.empty_table())
    refresh(con, lake, records, on_problem)
    with interruptible():
        for name in views:
            if name == "cohort_series":
                register_series(con, lake)
            elif name == "candidates":
                register_candidates(con, lake)
            elif name == "annotations":
                register_annotations(con, lake)
            else:
                con.execute(sql.load(name))
    return con


def register_series(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    """The ``cohort_series`` view over the series points' row files (small: read into memory)."""
    import pyarrow.parquet as pq

    rels = lake.glob(lake.layout.series_rows_glob())
    tables = [_with_columns(pq.read_table(lake.fs.open(lake.path(rel), "rb")), SERIES_ROWS_SCHEMA) for rel in rels]
    rows = pa.concat_tables(tables) if tables else SERIES_ROWS_SCHEMA.empty_table()
    con.register("series_rows", rows)
    con.execute(sql.load("cohort_series"))


def _with_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``'s column order, a column it was written without as nulls (a
    file from before the column existed)."""
    columns = [
        table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type) for f in schema
    ]
    return pa.Table.from_arrays(columns, names=schema.names).cast(schema)


def _small_table(lake: Lake, rels: list[str], schema: pa.Schema) -> pa.Table:
    import pyarrow.parquet as pq

    tables = [pq.read_table(lake.fs.open(lake.path(rel), "rb")).cast(schema) for rel in rels]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def register_candidates(con: duckdb.DuckDBPyConnection, lake: Lake, repo: str | None = None) -> None:
    """``candidate_rows`` (one row per candidate measurement and task / suite) and
    ``candidate_pairs`` (the suite comparisons of every two candidates) of ``repo``, or of every
    repository when None (both carry a ``repo`` column): small, read into memory."""
    layout = lake.layout
    con.register(
        "candidate_rows", _small_table(lake, lake.glob(layout.candidate_rows_glob(repo)), CANDIDATE_ROWS_SCHEMA)
    )
    if repo is None:
        pairs = lake.glob(layout.candidate_pairs_glob())
    else:
        pairs = [layout.candidate_pairs(repo)] if lake.exists(layout.candidate_pairs(repo)) else []
    con.register("candidate_pairs", _small_table(lake, pairs, CANDIDATE_PAIRS_SCHEMA))


def register_annotations(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    """``annotations``: every note a source (the trajectory miner, ...) attached to a
    trajectory; join it to ``events`` on (repo, commit, task, batch, sample_id, epoch, seq)."""
    _point(con, "annotations", [lake.url(rel) for rel in lake.glob(lake.layout.annotations_glob())], ANNOTATIONS_SCHEMA)


def connect_candidates(lake: Lake, repo: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with just the candidate tables of ``repo`` (the frontier reads no
    sample rows, so no batch record is listed)."""
    con = duckdb.connect(":memory:")
    register_candidates(con, lake, repo)
    return con


def query(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None) -> pa.Table:
    """Run the named query from ``sql/`` with bound ``params``; an Arrow table."""
    with interruptible():
        return con.sql(sql.load(name), params=params or {}).to_arrow_table()
