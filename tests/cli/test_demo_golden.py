"""`evalrunner demo` on the embedded defaults writes the same comparison document and PR comment
as the goldens in tests/fixtures/demo_golden/, byte for byte, once the values a run measures
(times, latencies, the host's core count, where the home is) are normalised by ``normalise_*``.

A change that alters what users see fails here. When the change is meant, regenerate the
goldens and commit them with it: ``EVALRUNNER_UPDATE_GOLDEN=1 ./dev test tests/cli/test_demo_golden.py``
(docs/development.md).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "demo_golden"
UPDATE_ENV = "EVALRUNNER_UPDATE_GOLDEN"
HOME_PLACEHOLDER = "$EVALRUNNER_HOME"
MEASURED = "<measured>"

# Every field of the comparison document that legitimately differs between two runs of the
# demo, and why. "*" matches any key. Nothing else is touched.
MEASURED_FIELDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("computed_at",), "the wall-clock time the document was computed"),
    (("execution", "planning", "seconds"), "the planner's wall time"),
    (("execution", "planning", "calls"), "how often the planner ran: once per batch of steps that landed together"),
    (("execution", "max_in_flight"), "how many windows happened to run at once"),
    (("execution", "workers"), "the default worker count is the host's core count"),
    (("tasks", "*", "base", "latency_p50_s"), "measured sample latency"),
    (("tasks", "*", "head", "latency_p50_s"), "measured sample latency"),
    (("tasks", "*", "latency_p50_delta_s"), "the difference of two measured latencies"),
)
# The trajectories' locations (``trajectories.base``/``.head`` and the comment's
# "trajectories:" line) are absolute paths under the run's temporary EVALRUNNER_HOME: that
# prefix becomes HOME_PLACEHOLDER, and the rest of each path is kept and compared.
# In the comment, the per-eval details table's last column ("p50 latency Δ", e.g. `+0.069s`)
# is the measured latency difference above, rendered.
_LATENCY_CELL = re.compile(r"\| [+-]\d+\.\d{3}s \|$", re.M)


def _dumps(doc: Any) -> bytes:
    # How evalrunner writes its documents (documents.codec.to_json).
    return json.dumps(doc, indent=2, sort_keys=True).encode()


def _mask(node: Any, path: tuple[str, ...]) -> None:
    head, rest = path[0], path[1:]
    keys = list(node) if head == "*" else [head] if head in node else []
    for key in keys:
        if rest:
            _mask(node[key], rest)
        else:
            node[key] = MEASURED


def normalise_comparison(raw: bytes, home: Path) -> bytes:
    """The comparison document with MEASURED_FIELDS set to ``"<measured>"`` and the home's
    path replaced by ``$EVALRUNNER_HOME``; refuses a document not written exactly as evalrunner
    writes its documents, so formatting is compared byte for byte too."""
    doc = json.loads(raw)
    assert _dumps(doc) == raw, "the comparison document is not in evalrunner's JSON format"
    for path, _why in MEASURED_FIELDS:
        _mask(doc, path)
    for arm, where in doc.get("trajectories", {}).items():
        doc["trajectories"][arm] = _without_home(where, home)
    return _dumps(doc) + b"\n"


def normalise_comment(text: str, home: Path) -> str:
    """The PR comment with the measured latency cells and the home's path normalised."""
    return _LATENCY_CELL.sub(f"| {MEASURED} |", _without_home(text, home))


def _without_home(text: str, home: Path) -> str:
    return text.replace(str(home), HOME_PLACEHOLDER)


def _demo_env(home: Path) -> dict[str, str]:
    # The embedded defaults: none of the caller's evalrunner settings (a lake, GitHub, a
    # gateway) and no Dagster instance of theirs.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALRUNNER_", "DAGSTER_"))}
    return {**env, "EVALRUNNER_HOME": str(home)}


def _printed(stdout: str, label: str) -> Path:
    [line] = [line for line in stdout.splitlines() if line.startswith(label)]
    return Path(line.split(":", 1)[1].strip())


def _check(name: str, got: str) -> None:
    path = GOLDEN / name
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing: run with {UPDATE_ENV}=1 to write it"
    want = path.read_text(encoding="utf-8")
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(path), "this run"))
        pytest.fail(f"the demo's {name} changed (if meant: {UPDATE_ENV}=1, then commit the goldens):\n{diff}")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    # Resolved: evalrunner resolves its home, and the paths it prints are under that.
    home = tmp_path_factory.mktemp("demo-home").resolve()
    exe = shutil.which("evalrunner", path=os.path.dirname(sys.executable)) or "evalrunner"
    done = subprocess.run([exe, "demo"], env=_demo_env(home), capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, done.stdout + done.stderr
    return home, done.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_demo_comparison_document_is_the_golden_one(demo: tuple[Path, str]) -> None:
    home, stdout = demo
    raw = _printed(stdout, "comparison JSON :").read_bytes()
    _check("comparison.json", normalise_comparison(raw, home).decode())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_demo_pr_comment_is_the_golden_one(demo: tuple[Path, str]) -> None:
    home, stdout = demo
    text = _printed(stdout, "PR comment      :").read_text(encoding="utf-8")
    _check("comment.md", normalise_comment(text, home))


def test_normalising_touches_only_the_measured_fields(tmp_path: Path) -> None:
    doc = {
        "computed_at": "2026-01-01T00:00:00+00:00",
        "execution": {"planning": {"calls": 3, "seconds": 0.5}, "steps": 76, "workers": 2, "max_in_flight": 2},
        "tasks": {"t/a": {"base": {"latency_p50_s": 0.3, "samples": 8}, "latency_p50_delta_s": 0.1, "pairs": 8}},
        "trajectories": {"head": f"{tmp_path}/lake/raw/r/c"},
        "verdict": "IMPROVED",
    }
    got = json.loads(normalise_comparison(_dumps(doc), tmp_path))
    assert got == {
        "computed_at": MEASURED,
        "execution": {
            "planning": {"calls": MEASURED, "seconds": MEASURED},
            "steps": 76,
            "workers": MEASURED,
            "max_in_flight": MEASURED,
        },
        "tasks": {
            "t/a": {"base": {"latency_p50_s": MEASURED, "samples": 8}, "latency_p50_delta_s": MEASURED, "pairs": 8}
        },
        "trajectories": {"head": "$EVALRUNNER_HOME/lake/raw/r/c"},
        "verdict": "IMPROVED",
    }
    with pytest.raises(AssertionError, match="not in evalrunner's JSON format"):
        normalise_comparison(json.dumps(doc).encode(), tmp_path)
    row = "| `t/a` | 32 | 14 / 0 / 18 | (+0.26, +0.62) | 9.66e+03 | 1.00 · 0.00 · 0.00 | +0.00027 | -0.041s |"
    assert normalise_comment(f"{row}\ntrajectories: `{tmp_path}/lake`", tmp_path) == (
        f"{row.removesuffix('-0.041s |')}<measured> |\ntrajectories: `$EVALRUNNER_HOME/lake`"
    )
