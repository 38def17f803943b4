"""A real comparison document, the demo's (``tests/fixtures/documents-v1/comparison.json``,
written by evalrunner before its documents were models): as a model without its execution
record and failed windows, or as raw JSON as it stood mid-run."""

from __future__ import annotations

import copy
from pathlib import Path

from evalrunner_assets.documents.comparison import ComparisonDocument

FIXTURE = Path(__file__).parents[1] / "fixtures" / "documents-v1" / "comparison.json"


def document() -> ComparisonDocument:
    doc = ComparisonDocument.from_json(FIXTURE.read_bytes(), str(FIXTURE))
    doc.execution = None
    doc.failed_windows = None
    return doc


def running(raw: dict) -> dict:
    """The fixture as it stood mid-run: one more window of each arm to run on the first task."""
    raw = copy.deepcopy(raw)
    task = raw["task_order"][0]
    raw["status"], raw["verdict"] = "running", "RUNNING"
    raw["next_windows"] = [
        {"arm": arm, "commit": raw[f"{arm}_sha"], "task": task, "window": "w000144-000160"} for arm in ("head", "base")
    ]
    return raw
