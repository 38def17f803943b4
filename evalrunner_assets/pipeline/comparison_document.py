"""Moved to :mod:`evalrunner_assets.documents.comparison` (below both the engine and the report);
this name is kept only for ``evalrunner_assets/cli.py``, which still imports it from here."""

from evalrunner_assets.documents.comparison import ComparisonDocument

__all__ = ["ComparisonDocument"]
