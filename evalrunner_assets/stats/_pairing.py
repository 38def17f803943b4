"""Pair head and base sample rows of one task by sample id and input digest (the Statistics page, evalrunner_assets/stats/README.md).

The pairing rule lives in SQL, once: ``sql/input_scores_of.sql`` (each arm's epochs reduced per
input) and ``sql/paired_inputs_of.sql`` (head vs base per input). The lake's ``paired_inputs``
view applies it to every committed row; :func:`pair_task` applies the same text through DuckDB
to the rows it is given (the comparison engine gives it the rows of the batches it selected),
then orders the pairs for the statistics. This module adds no rule of its own: it checks what
it receives and builds a :class:`Pairing` from the rule's per-input rows.

The rule: an input pairs when both arms scored its sample id and, where either arm knows the
sample's input digest, both digests are equal. Samples without ids carry Inspect's positional
ids, so an id alone does not say the inputs are the same; a mismatch is counted
(``changed_inputs``), never paired. Errored epochs (the sample raised in the repository's
code) score 0; see the stats README.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import sql

if TYPE_CHECKING:
    import duckdb

from evalrunner_assets.sample_order import seeded_order
from evalrunner_assets.stats._errors import PairingError

_REQUIRED = ("sample_id", "epoch", "score", "error")


# The columns the pairing rule reads (sql/input_scores_of.sql), as each arm's relation carries them.
_RULE_SCHEMA = pa.schema(
    [
        ("repo", pa.string()),
        ("commit", pa.string()),
        ("task", pa.string()),
        ("sample_id", pa.string()),
        ("epoch", pa.int64()),
        ("score", pa.float64()),
        ("error", pa.string()),
        ("error_where", pa.string()),
        ("input_digest", pa.string()),
    ]
)
# The value the rows' repo column gets here: each relation holds one arm (its commit column
# says which) of the tasks named in its task column.
_REPO = ""

Rows: TypeAlias = Iterable[Mapping[str, Any]] | pa.Table  # one arm: mappings, or an Arrow table


def _rows_table(rows: Iterable[Mapping[str, Any]], side: str, task: str) -> pa.Table:
    """In-memory rows as the rule's relation, after checking each row's types."""
    ids: list[str] = []
    epochs: list[int] = []
    scores: list[float | None] = []
    errors: list[str | None] = []
    wheres: list[str | None] = []
    digests: list[str | None] = []
    for index, row in enumerate(rows):
        missing = [k for k in _REQUIRED if k not in row]
        if missing:
            raise PairingError(f"{side} row {index} lacks {', '.join(missing)}; rows need {', '.join(_REQUIRED)}")
        sid, epoch, score, error = row["sample_id"], row["epoch"], row["score"], row["error"]
        if isinstance(sid, bool) or not isinstance(sid, (str, int)):
            raise PairingError(f"{side} row {index}: sample_id must be a string, got {sid!r}")
        sid = str(sid)
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)):
            raise PairingError(f"{side} sample {sid!r}: epoch must be an integer, got {epoch!r}")
        digest = row.get("input_digest")
        if digest is not None and not isinstance(digest, str):
            raise PairingError(
                f"{side} sample {sid!r} epoch {epoch}: input_digest must be a string or None, got {digest!r}"
            )
        if error is not None and not isinstance(error, str):
            raise PairingError(f"{side} sample {sid!r} epoch {epoch}: error must be a string or None, got {error!r}")
        if (
            not error
            and score is not None
            and (isinstance(score, bool) or not isinstance(score, (int, float, np.integer, np.floating)))
        ):
            raise PairingError(f"{side} sample {sid!r} epoch {epoch}: score must be a number in [0, 1], got {score!r}")
        where = row.get("error_where")
        ids.append(sid)
        epochs.append(int(epoch))
        scores.append(None if score is None or error else float(score))
        errors.append(error)
        wheres.append(where if isinstance(where, str) else None)
        digests.append(digest)
    n = len(ids)
    return pa.table(
        [
            pa.array([_REPO] * n, pa.string()),
            pa.array([side] * n, pa.string()),
            pa.array([task] * n, pa.string()),
            pa.array(ids, pa.string()),
            pa.array(epochs, pa.int64()),
            pa.array(scores, pa.float64()),
            pa.array(errors, pa.string()),
            pa.array(wheres, pa.string()),
            pa.array(digests, pa.string()),
        ],
        schema=_RULE_SCHEMA,
    )


def _arrow_table(rows: pa.Table, side: str, task: str) -> pa.Table:
    """An Arrow table of sample rows (e.g. the lake's ``comparison_samples``) as the rule's
    relation: its columns cast to the rule's types; repo, commit and task set for this arm."""
    missing = [k for k in _REQUIRED if k not in rows.column_names]
    if missing:
        raise PairingError(f"{side} rows lack {', '.join(missing)}; rows need {', '.join(_REQUIRED)}")
    n = rows.num_rows
    columns = []
    for name in _RULE_SCHEMA.names:
        type_ = _RULE_SCHEMA.field(name).type
        if name in ("repo", "commit", "task"):
            value = {"repo": _REPO, "commit": side, "task": task}[name]
            columns.append(pa.repeat(pa.scalar(value, type_), n))
        elif name not in rows.column_names:
            columns.append(pa.nulls(n, type_))
        else:
            column = rows.column(name)
            if name == "epoch" and not pa.types.is_integer(column.type):
                raise PairingError(f"{side} rows: epoch must be an integer column, got {column.type}")
            if name == "score" and not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
                raise PairingError(f"{side} rows: score must be a numeric column in [0, 1], got {column.type}")
            if name in ("sample_id", "epoch") and column.null_count:
                raise PairingError(f"{side} rows: {name} is null in {column.null_count} row(s)")
            columns.append(column.cast(type_))
    return pa.table(columns, schema=_RULE_SCHEMA)


def _arm_relation(rows: Rows, side: str, task: str = "") -> pa.Table:
    table = _arrow_table(rows, side, task) if isinstance(rows, pa.Table) else _rows_table(rows, side, task)
    _check_values(table, side)
    return table


def _check_values(table: pa.Table, side: str) -> None:
    """What the rule takes for granted: scores of unerrored epochs in [0, 1] (value_to_float
    mapped them) and one row per (sample_id, epoch)."""
    if not table.num_rows:
        return
    score = table.column("score")
    unerrored = pc.equal(pc.coalesce(table.column("error"), ""), "")
    outside = pc.and_(unerrored, pc.or_(pc.is_nan(score), pc.or_(pc.less(score, 0.0), pc.greater(score, 1.0))))
    if pc.any(outside).as_py():
        bad = table.filter(pc.fill_null(outside, False)).slice(0, 1).to_pylist()[0]
        raise PairingError(
            f"{side} sample {bad['sample_id']!r} epoch {bad['epoch']}: score {bad['score']!r} is outside [0, 1]; "
            "map scores with value_to_float first"
        )
    seen: set[tuple[str, int]] = set()
    for key in zip(table.column("sample_id").to_pylist(), table.column("epoch").to_pylist()):
        if key in seen:
            raise PairingError(
                f"{side} sample {key[0]!r} epoch {key[1]} appears twice; each (sample_id, epoch) must be unique per side"
            )
        seen.add(key)


@functools.cache
def _query_text(name: str) -> str:
    return sql.load(name)


_database_lock = threading.Lock()
_database: tuple[int, duckdb.DuckDBPyConnection] | None = None  # (owning pid, connection)


def _cursor() -> duckdb.DuckDBPyConnection:
    """A connection of its own (a cursor) to this process's one DuckDB database, which holds the
    pairing rule's macros. One database per process, not per thread: each adds 70-400 MB of
    address space here, and a sandbox's limits are set between fork and exec (RLIMIT_AS), where
    a parent grown past the limit makes the child crash; a forked child opens its own."""
    global _database
    with _database_lock:
        if _database is None or _database[0] != os.getpid():
            import duckdb  # here, not at import: seeded_order's users (the samplers) never pair

            con = duckdb.connect(config={"threads": 1})  # small queries; one thread is enough
            for name in sql.PAIRING_RULE:
                con.execute(sql.load(name))
            _database = (os.getpid(), con)
        return _database[1].cursor()


def _run_rule(query: str, relations: Mapping[str, pa.Table], params: Mapping[str, Any] | None = None) -> pa.Table:
    """Run ``sql/<query>.sql`` over the given Arrow relations, registered under their names on
    a cursor of its own (registrations are per cursor, so concurrent calls do not meet)."""
    cursor = _cursor()
    try:
        for name, table in relations.items():
            cursor.register(name, table)
        return cursor.sql(_query_text(query), params=dict(params or {})).to_arrow_table()
    finally:
        cursor.close()


def _causes(errors: list[str | None], wheres: list[str | None]) -> tuple[tuple[str, str | None, int], ...]:
    """(error, where, inputs) of the errored inputs' first errors, most frequent first."""
    counts = Counter(zip(errors, wheres))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0] or "", kv[0][1] or ""))
    return tuple((err or "", where, n) for (err, where), n in ranked)


@dataclass(frozen=True)
class Pairing:
    """Paired per-input scores of one task, in the pre-committed order they are consumed."""

    sample_ids: tuple[str, ...]
    head: tuple[float, ...]
    base: tuple[float, ...]
    errored_head: int = 0
    errored_base: int = 0
    unpaired_head: tuple[str, ...] = ()
    unpaired_base: tuple[str, ...] = ()
    errored_epochs_head: int = 0
    errored_epochs_base: int = 0
    # Ids both arms ran whose input digests differ: not the same input, so never paired.
    changed_inputs: tuple[str, ...] = ()
    unscored_head: int = 0
    unscored_base: int = 0
    inputs_head: int = 0  # distinct inputs each arm ran (rows seen), the denominator of errors
    inputs_base: int = 0
    # (error, where, inputs) per arm, most frequent first: what the errored inputs raised.
    error_causes_head: tuple[tuple[str, str | None, int], ...] = ()
    error_causes_base: tuple[tuple[str, str | None, int], ...] = ()
    _deltas: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (len(self.sample_ids) == len(self.head) == len(self.base)):
            raise PairingError(
                f"sample_ids, head and base must have equal lengths, got {len(self.sample_ids)}, {len(self.head)}, {len(self.base)}"
            )
        head = np.asarray(self.head, dtype=np.float64)
        base = np.asarray(self.base, dtype=np.float64)
        if head.size and (
            np.any(~np.isfinite(head))
            or np.any(~np.isfinite(base))
            or head.min() < 0
            or head.max() > 1
            or base.min() < 0
            or base.max() > 1
        ):
            raise PairingError("paired scores must be finite numbers in [0, 1]")
        object.__setattr__(self, "_deltas", head - base)

    @classmethod
    def from_scores(
        cls, head: Sequence[float], base: Sequence[float], sample_ids: Sequence[str] | None = None
    ) -> Pairing:
        """A pairing from per-input scores already in their pre-committed order."""
        ids = tuple(str(s) for s in sample_ids) if sample_ids is not None else tuple(str(i) for i in range(len(head)))
        return cls(ids, tuple(float(x) for x in head), tuple(float(x) for x in base))

    @property
    def n_pairs(self) -> int:
        return len(self.sample_ids)

    @property
    def deltas(self) -> np.ndarray:
        """head - base per pair, in order (a read-only copy)."""
        out = self._deltas.copy()
        out.setflags(write=False)
        return out

    def prefix(self, n: int) -> Pairing:
        """The first ``n`` pairs (what the sequence had seen at that look)."""
        return replace(self, sample_ids=self.sample_ids[:n], head=self.head[:n], base=self.base[:n])

    def swapped(self) -> Pairing:
        """The same pairs with head and base exchanged."""
        return replace(
            self,
            head=self.base,
            base=self.head,
            errored_head=self.errored_base,
            errored_base=self.errored_head,
            unpaired_head=self.unpaired_base,
            unpaired_base=self.unpaired_head,
            errored_epochs_head=self.errored_epochs_base,
            errored_epochs_base=self.errored_epochs_head,
            unscored_head=self.unscored_base,
            unscored_base=self.unscored_head,
            inputs_head=self.inputs_base,
            inputs_base=self.inputs_head,
            error_causes_head=self.error_causes_base,
            error_causes_base=self.error_causes_head,
        )

    def error_share(self, arm: str) -> float:
        """Share of the inputs ``arm`` ran that raised (0 when it ran none)."""
        errored, inputs = (
            (self.errored_head, self.inputs_head) if arm == "head" else (self.errored_base, self.inputs_base)
        )
        return errored / inputs if inputs else 0.0

    def error_cause(self, arm: str) -> str | None:
        """ "16/16 samples raised RuntimeError('boom') in solver 'agent'" for ``arm``; None
        when none of its samples raised."""
        errored, inputs = (
            (self.errored_head, self.inputs_head) if arm == "head" else (self.errored_base, self.inputs_base)
        )
        causes = self.error_causes_head if arm == "head" else self.error_causes_base
        if not errored or not causes:
            return None
        error, where, count = causes[0]
        text = " ".join(error.split())
        text = text if len(text) <= 160 else text[:157] + "..."
        place = ""
        if where:
            kind, _, name = where.partition(":")
            place = f" in {kind} {name!r}" if name else f" in {kind}"
        noun = "sample" if inputs == 1 else "samples"
        if count == errored:
            return f"{errored}/{inputs} {noun} raised {text}{place}"
        kinds = {(_exception_type(e), w) for e, w, _ in causes}
        if len(kinds) == 1 and _exception_type(error):
            # One exception type at one place with per-sample messages: name the type, not one
            # of its messages beside "7 other causes".
            return (
                f"{errored}/{inputs} {noun} raised {_exception_type(error)}{place} "
                f"({len(causes)} different messages, e.g. {text})"
            )
        return f"{errored}/{inputs} {noun} raised errors ({count} {text}{place}; {len(causes) - 1} other cause(s))"

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.n_pairs,
            "errored_head": self.errored_head,
            "errored_base": self.errored_base,
            "errored_epochs_head": self.errored_epochs_head,
            "errored_epochs_base": self.errored_epochs_base,
            "unpaired_head": len(self.unpaired_head),
            "unpaired_base": len(self.unpaired_base),
            "unpaired_head_ids": list(self.unpaired_head),
            "unpaired_base_ids": list(self.unpaired_base),
            "changed_inputs": len(self.changed_inputs),
            "changed_input_ids": list(self.changed_inputs),
            "unscored_head": self.unscored_head,
            "unscored_base": self.unscored_base,
            "inputs_head": self.inputs_head,
            "inputs_base": self.inputs_base,
            "error_head": self.error_cause("head"),
            "error_base": self.error_cause("base"),
        }


def pair_task(head_rows: Rows, base_rows: Rows, order: Sequence[str | int] | None = None) -> Pairing:
    """Pair one task's head and base rows by sample id and input digest.

    The rule is SQL, run here through DuckDB on the rows given (``sql/paired_inputs_of.sql``,
    the same text the lake's ``paired_inputs`` view applies to every committed row): each arm's
    epochs are averaged per sample id first (the input is the unit); an errored epoch scores 0.
    Inputs with an epoch neither scored nor errored are excluded on that side and counted
    (``unscored_*``); ids run on one side only are counted as unpaired; ids run on both whose
    ``input_digest`` differs (one side without a digest while the other has one counts as
    different; rows without digests on both sides pair by id) are counted as
    ``changed_inputs``, never paired.

    ``head_rows`` / ``base_rows``: one task's rows of each arm, as mappings (``sample_id``,
    ``epoch``, ``score``, ``error``, optional ``error_where`` and ``input_digest``) or as an Arrow
    table with those columns (what the engine reads from the lake). Pairs follow ``order`` (the
    task's seeded sample order, the same for both arms); without it, :func:`seeded_order` with
    seed 0 is used. Every paired id must appear in ``order``, since the confidence sequence is
    only valid in a pre-committed order.
    """
    return pair_tasks({"": (head_rows, base_rows, order)})[""]


def pair_tasks(tasks: Mapping[str, tuple[Rows, Rows, Sequence[str | int] | None]]) -> dict[str, Pairing]:
    """:func:`pair_task` for several tasks at once, ``{task: (head_rows, base_rows, order)}``:
    one DuckDB query for all of them (a query costs milliseconds however few rows it reads, and
    the engine pairs every task whose batches changed after each window)."""
    if not tasks:
        return {}
    heads = [_arm_relation(head, "head", task) for task, (head, _, _) in tasks.items()]
    bases = [_arm_relation(base, "base", task) for task, (_, base, _) in tasks.items()]
    inputs = _run_rule(
        "paired_arm_rows",
        {"head_rows": pa.concat_tables(heads), "base_rows": pa.concat_tables(bases)},
        {"repo": _REPO, "head": "head", "base": "base"},
    )
    if len(tasks) == 1:
        ((task, (_, _, order)),) = tasks.items()
        return {task: _pairing_of(inputs, order)}
    task_column = inputs.column("task")
    return {
        task: _pairing_of(inputs.filter(pc.equal(task_column, task)), order) for task, (_, _, order) in tasks.items()
    }


def _pairing_of(inputs: pa.Table, order: Sequence[str | int] | None) -> Pairing:
    """The :class:`Pairing` of the rule's per-input rows (``sql/paired_arm_rows.sql``), pairs in
    the pre-committed ``order``."""
    status = inputs.column("pair_status")

    def ids_with(value: str) -> list[str]:
        return inputs.column("sample_id").filter(pc.equal(status, value)).to_pylist()

    paired_rows = inputs.filter(pc.equal(status, "paired"))
    paired_ids: list[str] = paired_rows.column("sample_id").to_pylist()
    if order is None:
        ordered = seeded_order(paired_ids, 0)
    else:
        position: dict[str, int] = {}
        for i, sid in enumerate(order):
            position.setdefault(str(sid), i)
        missing = sorted(set(paired_ids) - position.keys())
        if missing:
            shown = ", ".join(repr(m) for m in missing[:5])
            raise PairingError(
                f"{len(missing)} paired sample ids are not in `order` (e.g. {shown}); pass the task's full seeded sample order"
            )
        ordered = sorted(paired_ids, key=position.__getitem__)
    row_of = {sid: i for i, sid in enumerate(paired_ids)}
    head_scores = paired_rows.column("head_score").to_numpy()
    base_scores = paired_rows.column("base_score").to_numpy()
    take = np.fromiter((row_of[s] for s in ordered), dtype=np.int64, count=len(ordered))

    def arm(side: str) -> dict[str, Any]:
        epochs = inputs.column(f"{side}_epochs").to_numpy()
        errors = inputs.column(f"{side}_errors").to_numpy()
        unscored = inputs.column(f"{side}_unscored").to_numpy()
        errored = inputs.filter(pc.greater(inputs.column(f"{side}_errors"), 0))
        return {
            f"errored_{side}": int(np.count_nonzero(errors)),
            f"errored_epochs_{side}": int(errors.sum()),
            f"unscored_{side}": int(np.count_nonzero(unscored)),
            f"inputs_{side}": int(np.count_nonzero(epochs)),
            f"error_causes_{side}": _causes(
                errored.column(f"{side}_first_error").to_pylist(),
                errored.column(f"{side}_first_error_where").to_pylist(),
            ),
        }

    return Pairing(
        sample_ids=tuple(ordered),
        head=tuple(head_scores[take].tolist()),
        base=tuple(base_scores[take].tolist()),
        unpaired_head=tuple(sorted(ids_with("head_only"))),
        unpaired_base=tuple(sorted(ids_with("base_only"))),
        changed_inputs=tuple(sorted(ids_with("changed_input"))),
        **arm("head"),
        **arm("base"),
    )


def arm_input_means(rows: Rows) -> tuple[dict[str, float], int]:
    """One arm on its own, by the pairing rule (``sql/input_scores_of.sql``, run through
    DuckDB): each input's mean over its epochs (an errored epoch scores 0, an input with an
    unscored epoch is left out), and how many inputs raised."""
    table = _run_rule("arm_input_scores", {"arm_rows": _arm_relation(rows, "arm")})
    scored = table.filter(pc.is_valid(table.column("score")))
    means = dict(zip(scored.column("sample_id").to_pylist(), scored.column("score").to_pylist()))
    errored = int(np.count_nonzero(table.column("errored_epochs").to_numpy()))
    return means, errored


_EXCEPTION_TYPE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:\(|:|$)")


def _exception_type(error: str) -> str:
    """ "ValueError" for "ValueError('bad row 3')" or "ValueError: bad row 3"; "" otherwise."""
    match = _EXCEPTION_TYPE.match(error)
    return match.group(1) if match else ""
