"""The cheat policy: checked on every attempt before its score counts.

- A patch that edits test files (anything under a ``tests``/``test`` directory, ``test_*.py``,
  ``*_test.py``, ``conftest.py``) or writes at a hidden-test path is failed. The list of touched
  files comes from the controller's diff of the workspace, not from the agent.
- A trajectory whose commands read leaked paths (the hidden tests' paths, gold patches, the
  lake) or git history beyond the pinned commit (other refs, reflog, fetches) is failed.

Each finding is a reason in words; an attempt with any reason is ``policy_failed``. The
trajectory rules match the commands the agent ran: they are pattern rules, so they catch what
they name and no more (an agent that hides a read behind an encoding is not caught here; the
sandbox keeps those paths out of reach in the first place).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

from lake.layout import LAYOUT

_TEST_DIRS = {"tests", "test", "testing"}
_GIT_HISTORY = re.compile(
    r"\bgit\b[^|;&\n]*?(\s--(all|branches|remotes|tags|glob)\b|\s(reflog|fetch|pull|clone)\b|\borigin/|FETCH_HEAD|ORIG_HEAD)"
)
_LEAK_MARKERS = ("gold.patch", "/hidden/", LAYOUT.swe_blobs_prefix(), ".evalrunner/lake")


def is_test_file(path: str) -> bool:
    parts = path.split("/")
    name = parts[-1]
    return (
        any(p in _TEST_DIRS for p in parts[:-1])
        or name == "conftest.py"
        or (name.startswith("test_") and name.endswith(".py"))
        or name.endswith("_test.py")
    )


def _under(path: str, prefixes: Iterable[str]) -> bool:
    for p in prefixes:
        p = posixpath.normpath(p)
        if path == p or path.startswith(p + "/"):
            return True
    return False


def check_patch(touched: list[str], hidden_paths: list[str]) -> list[str]:
    """Reasons the patch is not allowed (empty when it is)."""
    reasons = []
    hidden = sorted(t for t in touched if _under(t, hidden_paths))
    if hidden:
        reasons.append(f"patch writes hidden-test paths: {', '.join(hidden[:5])}")
    tests = sorted(t for t in touched if is_test_file(t) and t not in hidden)
    if tests:
        reasons.append(f"patch edits test files: {', '.join(tests[:5])}")
    return reasons


def check_trajectory(commands: list[str], hidden_paths: list[str]) -> list[str]:
    """Reasons the trajectory is not allowed, from the commands the agent ran."""
    reasons = []
    for n, cmd in enumerate(commands):
        if _GIT_HISTORY.search(cmd):
            reasons.append(f"step {n} reads git history beyond the pinned commit: {cmd[:120]!r}")
        leaked = [m for m in _LEAK_MARKERS if m in cmd] + [p for p in hidden_paths if p in cmd]
        if leaked:
            reasons.append(f"step {n} reads leaked paths ({', '.join(sorted(set(leaked))[:3])}): {cmd[:120]!r}")
    return reasons
