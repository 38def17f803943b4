"""A task-set file holding some of the bundled SWE example's tasks (tests keep runs short)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from evalrunner_assets.swe.example import EXAMPLE_TASK_SET


def write_subset_task_set(dest: Path, task_ids: Iterable[str]) -> Path:
    """``dest/taskset.json`` with the example's tasks named in ``task_ids`` (every one must
    exist), its task files linked beside it; returns the file's path."""
    wanted = set(task_ids)
    spec = json.loads(EXAMPLE_TASK_SET.read_text())
    spec["tasks"] = [t for t in spec["tasks"] if t["id"] in wanted]
    assert {t["id"] for t in spec["tasks"]} == wanted, (
        f"not in the example: {wanted - {t['id'] for t in spec['tasks']}}"
    )
    dest.mkdir(parents=True)
    (dest / "tasks").symlink_to(EXAMPLE_TASK_SET.parent / "tasks")
    (dest / "taskset.json").write_text(json.dumps(spec))
    return dest / "taskset.json"
