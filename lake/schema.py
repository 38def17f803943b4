"""Persisted formats of the lake: the ``samples`` and ``events`` Parquet tables and the batch record.

Every column carries a description in its field metadata (key ``description``), so the same
text can be shown as a Dagster table schema or printed by ``describe()``.

Score conventions (samples):
- ``score`` is the *primary* scorer's value mapped to [0, 1] with
  ``inspect_ai.scorer.value_to_float()`` (C→1, P→0.5, I/N→0, booleans, numerics). The primary
  scorer is the first scorer in the sample's ``scores`` (Inspect keeps the task's scorer order).
  ``score`` is null when the sample errored, was not scored, or its value is not a scalar in
  [0, 1] (a list/dict value, or a number like 1.4) — the raw value is always in ``score_raw``.
- ``scores`` holds every scorer's raw value as a JSON object ``{scorer name: value}``.
- ``cost_usd`` is null unless every model usage entry of the sample reports a cost; an unknown
  cost is never written as 0.
"""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

# Batch record versions: 1 vouches for the raw log only (sha256 + size); 2 also records the
# sha256 and size of each Parquet file it commits (see lake.integrity for how 1 is checked).
SCHEMA_VERSION = 2
EXCERPT_CHARS = 2000

_TS = pa.timestamp("us", tz="UTC")


def _f(name: str, type_: pa.DataType, description: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable=nullable, metadata={"description": description})


_KEY_FIELDS = [
    _f("repo", pa.string(), "Repository id, 'owner/name'.", False),
    _f("commit", pa.string(), "Full 40-hex commit SHA the batch evaluated.", False),
    _f("task", pa.string(), "Task id within the repository (e.g. 'triage/runbook_lookup').", False),
    _f("batch", pa.string(), "Batch-key digest (16 hex): the identity of the run that produced the row.", False),
]

SAMPLES_SCHEMA = pa.schema(
    _KEY_FIELDS
    + [
        _f("window", pa.string(), "Sample window name, e.g. 'w000000-000008'.", False),
        _f(
            "window_start",
            pa.int64(),
            "First position (inclusive) of the window in the task's seeded sample order.",
            False,
        ),
        _f(
            "window_stop",
            pa.int64(),
            "Last position (exclusive) of the window in the task's seeded sample order.",
            False,
        ),
        _f("sample_id", pa.string(), "Inspect sample id, as a string (integer ids are written in decimal).", False),
        _f("epoch", pa.int64(), "Epoch number of this run of the sample (1-based).", False),
        _f(
            "score",
            pa.float64(),
            "Primary score mapped to [0, 1] by value_to_float(); null if errored, unscored or not a scalar in [0, 1].",
        ),
        _f("score_raw", pa.string(), "Primary scorer's raw value as JSON (e.g. '\"C\"', '0.5'); null if unscored."),
        _f("scorer", pa.string(), "Name of the primary scorer (the first in the sample's scores); null if unscored."),
        _f("scores", pa.string(), "Every scorer's raw value as a JSON object {scorer: value}; null if unscored."),
        _f("error", pa.string(), "Error message that halted the sample; null if none."),
        _f("limit_type", pa.string(), "Limit that halted the sample (e.g. 'token', 'time'); null if none."),
        _f("input_tokens", pa.int64(), "Input tokens summed over every model the sample called.", False),
        _f("output_tokens", pa.int64(), "Output tokens summed over every model the sample called.", False),
        _f("total_tokens", pa.int64(), "Total tokens summed over every model the sample called.", False),
        _f(
            "input_tokens_cache_read",
            pa.int64(),
            "Input tokens read from a prompt cache; null if no model reported it.",
        ),
        _f(
            "input_tokens_cache_write",
            pa.int64(),
            "Input tokens written to a prompt cache; null if no model reported it.",
        ),
        _f("reasoning_tokens", pa.int64(), "Reasoning tokens; null if no model reported it."),
        _f(
            "cost_usd",
            pa.float64(),
            "Cost in USD when every model usage entry reports one; null when unknown (never 0 for unknown).",
        ),
        _f("total_time_s", pa.float64(), "Wall-clock seconds the sample ran."),
        _f("working_time_s", pa.float64(), "Seconds spent working (clock time minus waits)."),
        _f("started_at", _TS, "When the sample started (UTC)."),
        _f("completed_at", _TS, "When the sample completed (UTC)."),
        _f("model", pa.string(), "Model the log says the task ran with (e.g. 'openai/gpt-4o')."),
        _f("spec", pa.string(), "Task spec of the batch key (what `inspect eval` was given).", False),
        _f("model_args", pa.string(), "Model arguments of the batch key, canonical JSON.", False),
        _f(
            "config_digest",
            pa.string(),
            "Agent config / prompt digest of the batch key ('' if missing: unpublishable).",
            False,
        ),
        _f("backend", pa.string(), "Sandbox backend of the batch key ('' if missing).", False),
        _f(
            "runtime_digest",
            pa.string(),
            "Sandbox runtime / dependency digest of the batch key ('' if missing).",
            False,
        ),
        _f("seed", pa.int64(), "Seed of the batch key (sample order and model seed).", False),
        _f("epochs", pa.int64(), "Epochs the batch key asked for.", False),
        _f(
            "log_status",
            pa.string(),
            "Status in the Inspect log header: 'success', or 'error' when a sample's own "
            "exception stopped the task (its rows land as errored samples).",
            False,
        ),
        _f("eval_id", pa.string(), "Inspect eval id of the log the row came from."),
        _f("sample_uuid", pa.string(), "Inspect's globally unique id for this sample run; null for old logs."),
        _f(
            "input_digest",
            pa.string(),
            "Digest of what defines the sample (input, target, choices, file names, setup; "
            "not metadata): evalrunner_assets.sample_digest. Pairing requires equal digests; null for rows read "
            "from sample summaries or landed before the column existed.",
        ),
        _f(
            "error_where",
            pa.string(),
            "Where an errored sample raised: '<span type>:<name>' of the innermost "
            "solver, scorer or tool span open at the error (e.g. 'solver:my_agent'); null without an error or a span.",
        ),
    ]
)

EVENTS_SCHEMA = pa.schema(
    _KEY_FIELDS
    + [
        _f("sample_id", pa.string(), "Inspect sample id, as a string.", False),
        _f("epoch", pa.int64(), "Epoch number (1-based).", False),
        _f("seq", pa.int64(), "Position of the event in the sample's transcript (0-based).", False),
        _f("event", pa.string(), "Event type: 'model', 'tool', 'score', 'error', 'span_begin', 'state', …", False),
        _f("timestamp", _TS, "When the event happened (UTC)."),
        _f("working_start", pa.float64(), "Working time (s) into the sample at which the event started."),
        _f("span_id", pa.string(), "Span the event belongs to; null if none."),
        _f(
            "role",
            pa.string(),
            "Message role the event speaks for: 'assistant' (model), 'tool' (tool), 'user' (sample init/input); else null.",
        ),
        _f("model", pa.string(), "Model called (model events); null otherwise."),
        _f(
            "tool_function",
            pa.string(),
            "Tool function: the tool called (tool events) or the first tool call requested (model events).",
        ),
        _f(
            "tool_arguments",
            pa.string(),
            "Tool arguments as JSON: of the call (tool events) or of the first requested call (model events).",
        ),
        _f("tool_calls", pa.int64(), "Number of tool calls a model event requested; null for other events."),
        _f("input_tokens", pa.int64(), "Input tokens of a model event; null otherwise."),
        _f("output_tokens", pa.int64(), "Output tokens of a model event; null otherwise."),
        _f("total_tokens", pa.int64(), "Total tokens of a model event; null otherwise."),
        _f("error", pa.string(), "Error message carried by the event (model/tool/error events); null if none."),
        _f(
            "text",
            pa.string(),
            f"Bounded text excerpt (≤ {EXCERPT_CHARS} chars): completion, tool result, score, message, …",
        ),
        _f("text_truncated", pa.bool_(), "True when ``text`` was cut to the bound.", False),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {"samples": SAMPLES_SCHEMA, "events": EVENTS_SCHEMA}


def describe(table: str) -> list[tuple[str, str, str]]:
    """(column, type, description) for every column of ``table``."""
    schema = SCHEMAS[table]
    return [(f.name, str(f.type), (f.metadata or {}).get(b"description", b"").decode()) for f in schema]


BatchStatus = Literal["ok", "error", "cancelled", "started"]


class BatchRecord(BaseModel):
    """The landing record of one batch, written last: a batch exists only if its record does.

    Its file lists the table files it committed; readers take the set of committed files from
    the records, so a table file without a record is never read.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = Field(default=SCHEMA_VERSION, description="Version of this record's format.")
    batch: str = Field(description="Batch-key digest (16 hex).")
    key: dict[str, Any] = Field(description="Every batch-key field (BatchKey.as_record()).")
    repo: str = Field(description="Repository id, 'owner/name'.")
    commit: str = Field(description="Commit SHA.")
    task: str = Field(description="Task id.")
    window: str = Field(description="Sample window name.")
    publishable: bool = Field(description="False when a reproducibility field of the key is missing.")
    missing_fields: list[str] = Field(description="Reproducibility fields the key lacks.")
    status: BatchStatus = Field(
        description="'ok' when the log's status is success and its rows were written; otherwise the "
        "log's own status ('error', 'cancelled', 'started'): an infrastructure failure with no rows."
    )
    error: str | None = Field(default=None, description="The log's error message when status is not 'ok'.")
    log_status: str = Field(description="Status in the Inspect log header.")
    log_format: Literal["eval", "json"] = Field(description="Format of the raw log.")
    log_sha256: str = Field(description="sha256 of the raw log bytes: re-landing must bring the same bytes.")
    log_bytes: int = Field(description="Size of the raw log in bytes.")
    raw_path: str = Field(description="Lake-relative path of the raw log.")
    samples_path: str | None = Field(
        default=None, description="Lake-relative path of the samples file; null if no rows."
    )
    events_path: str | None = Field(default=None, description="Lake-relative path of the events file; null if no rows.")
    samples_sha256: str | None = Field(
        default=None, description="sha256 of the samples file; null if no rows or a version-1 record."
    )
    samples_bytes: int | None = Field(
        default=None, description="Size of the samples file in bytes; null if no rows or a version-1 record."
    )
    events_sha256: str | None = Field(
        default=None, description="sha256 of the events file; null if no rows or a version-1 record."
    )
    events_bytes: int | None = Field(
        default=None, description="Size of the events file in bytes; null if no rows or a version-1 record."
    )
    sample_rows: int = Field(default=0, description="Rows written to samples.")
    event_rows: int = Field(default=0, description="Rows written to events.")
    errored_samples: int = Field(default=0, description="Sample rows with an error set.")
    eval_id: str | None = Field(default=None, description="Inspect eval id.")
    inspect_task: str | None = Field(default=None, description="Task name in the Inspect log.")
    model: str | None = Field(default=None, description="Model in the Inspect log.")
    inspect_version: str | None = Field(default=None, description="Inspect version that wrote the log.")
    eval_created: str | None = Field(default=None, description="When Inspect created the eval (ISO 8601).")
    started_at: str | None = Field(default=None, description="Log stats: started (ISO 8601).")
    completed_at: str | None = Field(default=None, description="Log stats: completed (ISO 8601).")
    run_meta: dict[str, Any] = Field(
        default_factory=dict, description="Caller's metadata about the run (e.g. reuse, host)."
    )

    def files(self) -> list[tuple[str, int | None, str | None, str]]:
        """Every file this record vouches for: (lake-relative path, size, sha256, what), with
        None where a version-1 record did not record it."""
        out: list[tuple[str, int | None, str | None, str]] = [
            (self.raw_path, self.log_bytes, self.log_sha256, "raw log")
        ]
        if self.samples_path:
            out.append((self.samples_path, self.samples_bytes, self.samples_sha256, "samples file"))
        if self.events_path:
            out.append((self.events_path, self.events_bytes, self.events_sha256, "events file"))
        return out

    def to_json_bytes(self) -> bytes:
        """Canonical JSON (sorted keys): the same record gives the same bytes."""
        import json

        return (json.dumps(self.model_dump(mode="json"), sort_keys=True, indent=1) + "\n").encode()


BATCHES_SCHEMA = pa.schema(
    [
        _f("batch", pa.string(), "Batch-key digest (16 hex).", False),
        _f("repo", pa.string(), "Repository id, 'owner/name'.", False),
        _f("commit", pa.string(), "Commit SHA.", False),
        _f("task", pa.string(), "Task id.", False),
        _f("window", pa.string(), "Sample window name.", False),
        _f("window_start", pa.int64(), "Window start (inclusive).", False),
        _f("window_stop", pa.int64(), "Window stop (exclusive).", False),
        _f("spec", pa.string(), "Task spec of the batch key.", False),
        _f("key_model", pa.string(), "Model of the batch key (what was asked for).", False),
        _f("model_args", pa.string(), "Model arguments of the batch key (canonical JSON).", False),
        _f("config_digest", pa.string(), "Agent config / prompt digest of the batch key.", False),
        _f("backend", pa.string(), "Sandbox backend of the batch key.", False),
        _f("runtime_digest", pa.string(), "Sandbox runtime digest of the batch key.", False),
        _f("seed", pa.int64(), "Seed of the batch key.", False),
        _f("epochs", pa.int64(), "Epochs of the batch key.", False),
        _f("publishable", pa.bool_(), "False when a reproducibility field is missing.", False),
        _f("missing_fields", pa.list_(pa.string()), "Reproducibility fields the key lacks.", False),
        _f("status", pa.string(), "'ok', or the failed log's status ('error', 'cancelled', 'started').", False),
        _f("error", pa.string(), "The log's error message when status is not 'ok'."),
        _f("log_status", pa.string(), "Status in the Inspect log header.", False),
        _f("log_format", pa.string(), "'eval' or 'json'.", False),
        _f("log_sha256", pa.string(), "sha256 of the raw log bytes.", False),
        _f("log_bytes", pa.int64(), "Size of the raw log in bytes.", False),
        _f("raw_path", pa.string(), "Lake-relative path of the raw log.", False),
        _f("samples_path", pa.string(), "Lake-relative path of the samples file; null if no rows."),
        _f("events_path", pa.string(), "Lake-relative path of the events file; null if no rows."),
        _f("sample_rows", pa.int64(), "Rows written to samples.", False),
        _f("event_rows", pa.int64(), "Rows written to events.", False),
        _f("errored_samples", pa.int64(), "Sample rows with an error set.", False),
        _f("eval_id", pa.string(), "Inspect eval id."),
        _f("inspect_task", pa.string(), "Task name in the Inspect log."),
        _f("model", pa.string(), "Model in the Inspect log (what ran)."),
        _f("inspect_version", pa.string(), "Inspect version that wrote the log."),
        _f("eval_created", pa.string(), "When Inspect created the eval (ISO 8601)."),
        _f("started_at", pa.string(), "Log stats: started (ISO 8601)."),
        _f("completed_at", pa.string(), "Log stats: completed (ISO 8601)."),
        _f("run_meta", pa.string(), "Caller's run metadata as canonical JSON.", False),
    ]
)
SCHEMAS["batches"] = BATCHES_SCHEMA


def batches_table(records: list[BatchRecord]) -> pa.Table:
    """The ``batches`` rows of ``records`` (one per record), flattened for SQL."""
    import json

    rows = []
    for r in records:
        k = r.key
        rows.append(
            {
                "batch": r.batch,
                "repo": r.repo,
                "commit": r.commit,
                "task": r.task,
                "window": r.window,
                "window_start": int(k["window_start"]),
                "window_stop": int(k["window_stop"]),
                "spec": k["spec"],
                "key_model": k["model"],
                "model_args": k.get("model_args", "{}"),
                "config_digest": k.get("config_digest", ""),
                "backend": k.get("backend", ""),
                "runtime_digest": k.get("runtime_digest", ""),
                "seed": int(k["seed"]),
                "epochs": int(k.get("epochs", 1)),
                "publishable": r.publishable,
                "missing_fields": list(r.missing_fields),
                "status": r.status,
                "error": r.error,
                "log_status": r.log_status,
                "log_format": r.log_format,
                "log_sha256": r.log_sha256,
                "log_bytes": r.log_bytes,
                "raw_path": r.raw_path,
                "samples_path": r.samples_path,
                "events_path": r.events_path,
                "sample_rows": r.sample_rows,
                "event_rows": r.event_rows,
                "errored_samples": r.errored_samples,
                "eval_id": r.eval_id,
                "inspect_task": r.inspect_task,
                "model": r.model,
                "inspect_version": r.inspect_version,
                "eval_created": r.eval_created,
                "started_at": r.started_at,
                "completed_at": r.completed_at,
                "run_meta": json.dumps(r.run_meta, sort_keys=True),
            }
        )
    return pa.Table.from_pylist(rows, schema=BATCHES_SCHEMA)


# One row per (main-branch point, scope) of the cohort series (evalrunner_assets.pipeline.series).
SERIES_ROWS_SCHEMA = pa.schema(
    [
        ("repo", pa.string()),
        ("branch", pa.string()),
        ("commit", pa.string()),
        ("position", pa.int64()),
        ("committed_at", pa.string()),
        ("subject", pa.string()),
        ("scope", pa.string()),
        ("name", pa.string()),
        ("cohort", pa.string()),
        ("mean", pa.float64()),
        ("lo", pa.float64()),
        ("hi", pa.float64()),
        ("inputs", pa.int64()),
        ("errored", pa.int64()),  # inputs that raised (null in rows written before it was counted)
        ("label", pa.string()),
        ("status", pa.string()),
        ("flagged", pa.bool_()),
        ("annotation", pa.string()),
    ]
)

# One row per note a source attached to a trajectory (evalrunner_assets.mining.annotations):
# on a sample's epoch in one batch, and on one of its events when ``seq`` is set.
ANNOTATIONS_SCHEMA = pa.schema(
    [
        _f("repo", pa.string(), "Repository id, 'owner/name'.", False),
        _f("commit", pa.string(), "Full 40-hex commit SHA of the trajectory.", False),
        _f("task", pa.string(), "Task id of the trajectory.", False),
        _f("batch", pa.string(), "Batch-key digest of the trajectory's batch.", False),
        _f("sample_id", pa.string(), "Inspect sample id.", False),
        _f("epoch", pa.int64(), "Epoch of the sample (1-based).", False),
        _f("seq", pa.int64(), "The event the note is on (events.seq); null for a note on the whole trajectory."),
        _f("source", pa.string(), "Who wrote the note (e.g. 'trajectory-miner').", False),
        _f("finding", pa.string(), "The finding the note reports (the feature's name).", False),
        _f("note", pa.string(), "The note as a person reads it, with its evidence count.", False),
        _f("created_at", pa.string(), "When the note was written (UTC, ISO 8601).", False),
    ]
)

# One row per (candidate measurement, scope) — scope 'task' or 'suite' (evalrunner_assets.pipeline.candidates).
CANDIDATE_ROWS_SCHEMA = pa.schema(
    [
        ("repo", pa.string()),
        ("candidate", pa.string()),
        ("commit", pa.string()),
        ("model", pa.string()),
        ("is_reference", pa.bool_()),
        ("scope", pa.string()),
        ("name", pa.string()),
        ("mean", pa.float64()),
        ("lo", pa.float64()),
        ("hi", pa.float64()),
        ("inputs", pa.int64()),
        ("cost_per_sample", pa.float64()),
        ("p50_latency_s", pa.float64()),
        ("tokens_per_sample", pa.float64()),
        ("label_vs_reference", pa.string()),
        ("delta_vs_reference", pa.float64()),
        ("delta_lo", pa.float64()),
        ("delta_hi", pa.float64()),
    ]
)

# One row per ordered pair of measured candidates compared on the suite's shared inputs:
# ``label`` says how ``candidate`` compares with ``other`` ('improved' = better).
CANDIDATE_PAIRS_SCHEMA = pa.schema(
    [
        ("repo", pa.string()),
        ("candidate", pa.string()),
        ("other", pa.string()),
        ("label", pa.string()),
        ("pairs", pa.int64()),
        ("delta", pa.float64()),
        ("lo", pa.float64()),
        ("hi", pa.float64()),
    ]
)
