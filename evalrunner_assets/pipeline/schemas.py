"""JSON Schemas of evalrunner's documents, exported next to the manifest schema.

``python -m evalrunner_assets.pipeline.schemas`` writes them again after a model changes;
``tests/documents/test_documents.py`` fails while a file differs from its model.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.pipeline.facts import CommitFacts
from evalrunner_assets.pipeline.spec import ComparisonRequest
from lake.batch import RunSettings

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "discovery"

SCHEMAS: dict[str, type[BaseModel]] = {
    "comparison.schema.json": ComparisonDocument,
    "comparison-request.schema.json": ComparisonRequest,
    "commit-facts.schema.json": CommitFacts,
    "run-settings.schema.json": RunSettings,
}


def schema_text(model: type[BaseModel]) -> str:
    """The model's JSON Schema as evalrunner exports it (sorted keys, indented, newline-ended)."""
    return json.dumps(model.model_json_schema(mode="validation"), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    written = []
    for name, model in SCHEMAS.items():
        path = directory / name
        path.write_text(schema_text(model), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_schemas():
        print(path)
