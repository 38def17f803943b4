"""``evalrunner sql``: run SQL against the lake's views and render the result."""

from __future__ import annotations

import csv
import io
import json
import math
import threading
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal, TypeVar

import duckdb
import pyarrow.parquet as pq

from evalrunner_assets.errors import InputError
from lake.duck import OnProblem, connect, warn_problem
from lake.storage import Lake

Format = Literal["table", "csv", "json", "parquet"]
FORMATS: tuple[str, ...] = ("table", "csv", "json", "parquet")
T = TypeVar("T")


class QueryError(InputError, ValueError):
    """The SQL failed or the output request is invalid; the message says which."""


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def render_table(columns: list[str], rows: list[tuple[Any, ...]], max_width: int = 60) -> str:
    """A plain aligned text table (cells cut to ``max_width`` characters)."""

    def cut(text: str) -> str:
        text = text.replace("\n", "\\n")
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    cells = [[cut(_cell(v)) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    footer = f"({len(rows)} row{'s' if len(rows) != 1 else ''})"
    return "\n".join([line, rule, *body, footer]) + "\n"


def _cancellable(
    con: duckdb.DuckDBPyConnection, work: Callable[[], T], *, on_slow: Callable[[], None] | None, slow_after_s: float
) -> T:
    """``work()`` on a helper thread while this thread waits, so that a Ctrl-C here interrupts
    the query at once (DuckDB notices a pending SIGINT only at some points: a ``fetchall`` of
    an aggregate runs to its end first)."""
    outcome: dict[str, Any] = {}
    # An event, not Thread.join: a join interrupted by Ctrl-C can report a live thread as
    # finished (Python 3.11), and closing the connection under a running query aborts.
    done = threading.Event()

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="evalrunner-sql", daemon=True).start()
    try:
        if not done.wait(slow_after_s):
            if on_slow is not None:
                on_slow()
            done.wait()
    except KeyboardInterrupt:
        con.interrupt()
        done.wait(30)  # the query stops within milliseconds of the interrupt
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def run_sql(
    lake: Lake,
    sql_text: str,
    fmt: Format = "table",
    out: str | None = None,
    params: dict[str, Any] | list[Any] | None = None,
    *,
    on_slow: Callable[[], None] | None = None,
    slow_after_s: float = 1.0,
    on_problem: OnProblem = warn_problem,
) -> str:
    """Run ``sql_text`` over the lake's views; returns the rendered result.

    ``fmt='parquet'`` needs ``out`` (a local path) and returns a one-line summary. With ``out``
    the text formats are also written there. ``params`` are bound, never formatted in.
    ``on_slow`` is called once if the query is still running after ``slow_after_s`` seconds.
    Ctrl-C (``KeyboardInterrupt`` on the calling thread) cancels the query at once and is
    re-raised.
    A batch whose record cannot be read or whose files do not match it goes to ``on_problem``
    (default: a warning naming the file and what to do) and is left out of the views.
    """
    if fmt not in FORMATS:
        raise QueryError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "parquet" and not out:
        raise QueryError("format 'parquet' needs an output path (out=...)")
    con = connect(lake, on_problem=on_problem)
    try:
        # DuckDB draws its progress bar on stdout, into the result a caller may be redirecting.
        con.execute("set enable_progress_bar = false")

        def execute() -> tuple[list[str], Any]:
            try:
                rel = con.sql(sql_text, params=params)
                if rel is None:  # a statement without a result (e.g. create view)
                    return [], None
                if fmt == "parquet":
                    return list(rel.columns), rel.to_arrow_table()
                return list(rel.columns), rel.fetchall()
            except Exception as exc:  # duckdb raises its own error classes per phase
                if isinstance(exc, duckdb.InterruptException) or str(exc).strip() == "Query interrupted":
                    raise
                raise QueryError(f"SQL failed: {exc}") from exc

        columns, rows = _cancellable(con, execute, on_slow=on_slow, slow_after_s=slow_after_s)
        if rows is None:
            text = "OK\n"
        elif fmt == "parquet":
            pq.write_table(rows, out)
            return f"wrote {rows.num_rows} rows to {out}\n"
        else:
            if fmt == "table":
                text = render_table(columns, rows)
            elif fmt == "csv":
                buf = io.StringIO()
                writer = csv.writer(buf, lineterminator="\n")
                writer.writerow(columns)
                writer.writerows([["" if v is None else _jsonable(v) for v in r] for r in rows])
                text = buf.getvalue()
            else:
                records = [{c: _jsonable(v) for c, v in zip(columns, r)} for r in rows]
                text = json.dumps(records, indent=1, default=str) + "\n"
    finally:
        con.close()
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text)
    return text
