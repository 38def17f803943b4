"""The cheat policy: checked on every attempt before its score counts.

- A patch that edits test files (anything under a ``tests``/``test`` directory, ``test_*.py``,
  ``*_test.py``, ``conftest.py``) or writes at a hidden-test path is failed. The list of touched
  files comes from the controller's diff of the workspace, not from the agent.
- So is a patch that changes how the test run itself behaves: ``pytest.ini``, the pytest
  sections of ``pyproject.toml`` / ``setup.cfg`` / ``tox.ini`` (``[tool.pytest…]``,
  ``[tool:pytest]``, ``[pytest]``, or any changed line naming pytest options), and files Python
  runs at every start-up (``sitecustomize.py``, ``usercustomize.py``, ``*.pth``). Code under
  test runs in the grading process, so these are the places a patch could rewrite its own
  results from (what remains — code that forges results at import time — is the limit of
  grading untrusted code in-process; the exit code and the JUnit report must still agree).
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


_STARTUP_FILES = {"sitecustomize.py", "usercustomize.py"}
_CONFIG_FILES = {"pyproject.toml", "setup.cfg", "tox.ini"}
_PYTEST_CONFIG = re.compile(r"\[tool\.pytest|\[tool:pytest\]|\[pytest\]|\bpytest\b|\baddopts\b|\bpython_files\b")


def _changed_lines(patch: str, path: str) -> list[str] | None:
    """The added and removed lines of ``path`` in the attempt's unified diff (``--- a/…``,
    ``+++ b/…`` file headers), or None when the diff could not show them (a binary or oversized
    file)."""
    if f"Binary or non-text file {path} differs" in patch:
        return None
    lines: list[str] = []
    current = old = None
    for line in patch.splitlines():
        if line.startswith("--- "):
            old = line[4:].removeprefix("a/")
        elif line.startswith("+++ "):
            new = line[4:]
            current = old if new == "/dev/null" else new.removeprefix("b/")
        elif current == path and line[:1] in "+-":
            lines.append(line[1:])
    return lines


def harness_files(touched: list[str], patch: str) -> list[str]:
    """Touched files that change how the test run behaves (see the module docstring)."""
    found = []
    for path in touched:
        name = path.split("/")[-1]
        if name == "pytest.ini" or name in _STARTUP_FILES or name.endswith(".pth"):
            found.append(path)
        elif name in _CONFIG_FILES:
            changed = _changed_lines(patch, path)
            if changed is None or any(_PYTEST_CONFIG.search(line) for line in changed):
                found.append(path)
    return sorted(found)


def check_patch(touched: list[str], hidden_paths: list[str], patch: str = "") -> list[str]:
    """Reasons the patch is not allowed (empty when it is). ``patch`` (the unified diff) tells
    a pytest section of a shared config file from an unrelated edit of it."""
    reasons = []
    hidden = sorted(t for t in touched if _under(t, hidden_paths))
    if hidden:
        reasons.append(f"patch writes hidden-test paths: {', '.join(hidden[:5])}")
    tests = sorted(t for t in touched if is_test_file(t) and t not in hidden)
    if tests:
        reasons.append(f"patch edits test files: {', '.join(tests[:5])}")
    harness = [t for t in harness_files(touched, patch) if t not in hidden and t not in tests]
    if harness:
        reasons.append(f"patch changes how the tests run: {', '.join(harness[:5])}")
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
