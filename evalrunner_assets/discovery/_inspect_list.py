"""Run INSIDE the sandbox: list the repository's Inspect ``@task``s into the output dir.

The zero-manifest fallback. Task files are imported to find their tasks, so this is untrusted
code's process; the controller treats the file it writes as untrusted input.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> int:
    import inspect_ai

    root = Path(os.environ.get("EVALRUNNER_REPO", "."))
    out = Path(os.environ.get("EVALRUNNER_OUT", "."))
    tasks = inspect_ai.list_tasks(root_dir=root)
    rows = [{"file": str(t.file), "name": t.name} for t in tasks]
    tmp = out / ".tasks.json.tmp"
    tmp.write_text(json.dumps(rows))
    os.replace(tmp, out / "tasks.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
