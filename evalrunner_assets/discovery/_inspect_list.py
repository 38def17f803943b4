"""Run INSIDE the sandbox: list the repository's Inspect ``@task``s into the output dir.

The zero-manifest fallback. Task files are imported to find their tasks, so this is untrusted
code's process; the controller treats the file it writes as untrusted input.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from pathlib import Path

# A top-level ``@task`` (or ``@task(...)``) decorator, any further decorators, then its function.
_TASK_DEF = re.compile(r"^@task\b.*\n(?:@.*\n)*(?:async[ \t]+)?def[ \t]+(\w+)", re.MULTILINE)


def unparsable_tasks(root: Path) -> list[dict[str, str]]:
    """Tasks in files Inspect's listing skips because they do not parse (a syntax error):
    without them a PR that breaks a task file would look like a PR that deleted its tasks.
    Listed by name, so loading them reports the syntax error against the task."""
    from inspect_ai._eval.list import task_files

    rows = []
    for path in sorted(task_files([], root)):
        if path.suffix != ".py":
            continue
        try:
            code = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "@task" not in code:
            continue
        try:
            ast.parse(code)
        except (SyntaxError, ValueError):
            file = path.relative_to(root.resolve()).as_posix()
            rows += [{"file": file, "name": m.group(1)} for m in _TASK_DEF.finditer(code)]
    return rows


def main() -> int:
    import inspect_ai

    root = Path(os.environ.get("EVALRUNNER_REPO", "."))
    out = Path(os.environ.get("EVALRUNNER_OUT", "."))
    tasks = inspect_ai.list_tasks(root_dir=root)
    rows = [{"file": str(t.file), "name": t.name} for t in tasks] + unparsable_tasks(root)
    tmp = out / ".tasks.json.tmp"
    tmp.write_text(json.dumps(rows))
    os.replace(tmp, out / "tasks.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
