"""The lakehouse layer: layout, atomic storage, Inspect-log ingest, DuckDB over Parquet."""

from lake.layout import LAYOUT, LakeLayout, LakePathError, Window
from lake.storage import Lake, LakeWriteError, open_lake

__all__ = ["LAYOUT", "Lake", "LakeLayout", "LakePathError", "LakeWriteError", "Window", "open_lake"]
