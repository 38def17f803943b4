"""The pre-comparison sweep of a local lake lists the temp-write records (``index/temp-writes/``)
instead of walking the whole lake (docs/scale.md: the walk grows with every PR ever landed)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalrunner_assets.pipeline.engine import sweep_lake
from lake import LAYOUT, open_lake

ROOT = Path(__file__).resolve().parents[2]


def _killed_writer(lake_root: Path, done: str, dies: str) -> int:
    """A process that writes ``done`` through the lake, then is killed writing ``dies`` between
    its temporary file and the rename; returns its pid."""
    code = textwrap.dedent(
        f"""
        import os
        from lake import open_lake
        lake = open_lake({str(lake_root)!r})
        lake.write_bytes({done!r}, b"{{}}")
        os.replace = lambda *a, **k: os._exit(0)
        lake.write_bytes({dies!r}, b"half")
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.wait(timeout=120) == 0
    return proc.pid


def test_a_finished_write_leaves_no_record(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path))
    lake.write_bytes("comparisons/o/r/1/x.json", b"{}")
    assert lake.write_once("comparisons/o/r/1/x.json", b"{}") is False
    assert list(lake.listdir(LAYOUT.temp_write_records_root())) == []
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "comparisons/o/r/1/x.json"
    ]


def test_sweep_after_the_first_lists_only_the_temp_write_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = open_lake(str(tmp_path))
    for i in range(30):  # history the sweep must not walk
        lake.write_bytes(f"comparisons/o/r/{i}/{'a' * 40}.json", b"{}")
    assert sweep_lake(lake) == []  # the lake's first sweep walks it once and says so
    assert lake.exists(LAYOUT.temp_writes_walked())

    pid = _killed_writer(tmp_path, "comparisons/o/r/7/" + "b" * 40 + ".json", "inbox/github/d1.json")
    left = sorted(str(p) for p in tmp_path.rglob(f".*.tmp-{pid}-*"))
    assert len(left) == 1 and "inbox" in left[0], left
    records = list(lake.listdir(LAYOUT.temp_write_records_root()))
    assert [LAYOUT.parse_temp_write_record(r) for r in records] == [pid]

    live = tmp_path / "inbox" / "github" / f".g.json.tmp-{os.getpid()}-{uuid.uuid4().hex}"
    live.write_bytes(b"being written")
    live_record = LAYOUT.temp_write_record(os.getpid(), uuid.uuid4().hex)
    lake.write_bytes(live_record, str(live.relative_to(tmp_path)).encode())  # as a live writer's
    listed: list[str] = []
    real_listdir = lake.listdir

    def counting_listdir(rel: str) -> Iterator[str]:
        listed.append(rel)
        return real_listdir(rel)

    def no_walk(*a: object, **k: object) -> None:
        raise AssertionError("the sweep walked the lake")

    monkeypatch.setattr(lake, "listdir", counting_listdir)
    monkeypatch.setattr(os, "walk", no_walk)
    removed = sweep_lake(lake)
    monkeypatch.undo()

    assert removed == left
    assert listed == [LAYOUT.temp_write_records_root()]
    assert live.exists()  # a live writer's file is never touched
    assert list(lake.listdir(LAYOUT.temp_write_records_root())) == [live_record]  # the dead one's record went


def test_a_record_naming_anything_else_removes_nothing(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path))
    sweep_lake(lake)
    dead = subprocess.Popen(["true"])
    dead.wait()
    outside = tmp_path.parent / f".x.tmp-{dead.pid}-{uuid.uuid4().hex}"
    outside.write_bytes(b"not the lake's")
    plain = tmp_path / "comparisons" / "keep.json"
    plain.parent.mkdir(parents=True)
    plain.write_bytes(b"{}")
    for target in (f"../{outside.name}", "comparisons/keep.json"):
        lake.write_bytes(LAYOUT.temp_write_record(dead.pid, uuid.uuid4().hex), target.encode())
    assert sweep_lake(lake) == []
    assert outside.exists() and plain.exists()
    outside.unlink()
