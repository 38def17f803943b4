"""The lakehouse layer: layout, atomic storage, Inspect-log ingest, DuckDB over Parquet."""

from lake.batch import BatchKey
from lake.duck import connect, refresh
from lake.ingest import (
    BatchConflictError,
    LogIngestError,
    LogStatusError,
    ingest_log_file,
    land_batch,
    land_log_file,
)
from lake.integrity import CorruptRecordError, LakeIntegrityError, verify_lake
from lake.layout import LAYOUT, LakeLayout, LakePathError, Window
from lake.query import QueryError, run_sql
from lake.schema import BATCHES_SCHEMA, EVENTS_SCHEMA, SAMPLES_SCHEMA, BatchRecord, describe
from lake.storage import Lake, LakeUnavailable, LakeWriteError, open_lake
from lake.viewer import view_command

__all__ = [
    "BATCHES_SCHEMA",
    "EVENTS_SCHEMA",
    "LAYOUT",
    "SAMPLES_SCHEMA",
    "BatchConflictError",
    "BatchKey",
    "BatchRecord",
    "CorruptRecordError",
    "Lake",
    "LakeIntegrityError",
    "LakeLayout",
    "LakePathError",
    "LakeUnavailable",
    "LakeWriteError",
    "LogIngestError",
    "LogStatusError",
    "QueryError",
    "Window",
    "connect",
    "describe",
    "ingest_log_file",
    "land_batch",
    "land_log_file",
    "open_lake",
    "refresh",
    "run_sql",
    "verify_lake",
    "view_command",
]
