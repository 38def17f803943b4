"""Readers never trust a file its batch record does not vouch for: flipped bits, truncated files,
corrupt records, data planted outside the lake, concurrent landings of one batch, a full disk."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from evalrunner_assets.execution.inspect_runner import WindowRun
from evalrunner_assets.pipeline.windows import _land, batch_state
from lake import BatchConflictError, BatchKey, Window, connect, land_batch, open_lake
from lake.batch import RunSettings
from lake.integrity import LakeIntegrityError, forget_verified, verify_lake, verify_record
from lake.schema import SAMPLES_SCHEMA, BatchRecord
from tests.helpers.inspect_models import probe_logs

pytestmark = pytest.mark.reliability

EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return probe_logs(tmp_path_factory.mktemp("inspect-logs"))


def key_for(commit: str = "a" * 40, window: Window = Window(0, 4)) -> BatchKey:
    return BatchKey(
        repo="acme/agent",
        commit=commit,
        task="qa/probe",
        spec="evals/probe.py@lake_probe",
        window=window,
        config_digest="cfg123",
        backend="local-unsafe",
        runtime_digest="rt1",
        settings=RunSettings(model="lakeprobe/probe-1", seed=7, epochs=2),
    )


def flip_bit(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    at = len(data) // 2 if offset is None else offset
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def evalrunner(lake_root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "EVALRUNNER_LAKE": str(lake_root)}
    return subprocess.run([EVALRUNNER, *args], env=env, capture_output=True, text=True, timeout=120)


def test_record_carries_size_and_sha256_of_every_file_it_commits(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    record = land_batch(lake, key_for(), logs["head"].read_bytes())
    files = record.files()
    assert [what for *_, what in files] == ["raw log", "samples file", "events file"]
    import hashlib

    for rel, size, sha, _ in files:
        data = (tmp_path / rel).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, sha)


def test_flipped_bit_in_a_parquet_file_is_named_and_the_batch_quarantined(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    key = key_for()
    record = land_batch(lake, key, logs["head"].read_bytes())
    forget_verified()
    assert batch_state(lake, key) == "committed"
    flip_bit(tmp_path / record.samples_path)
    forget_verified()  # a new process has verified nothing yet

    with pytest.raises(LakeIntegrityError) as info:
        verify_record(lake, record)
    assert record.samples_path in str(info.value) and "sha256 differs" in str(info.value)
    assert record.samples_sha256 in str(info.value)  # expected vs found

    assert batch_state(lake, key) == "absent"  # quarantined: the planner runs the window again
    quarantined = list((tmp_path / "quarantine").rglob("*.json"))
    assert len(quarantined) == 1
    entry = json.loads(quarantined[0].read_text())
    assert record.samples_path in entry["reason"] and entry["record_path"].startswith("batches/")
    assert connect(lake).execute("select count(*) from samples").fetchall() == [(0,)]

    again = land_batch(lake, key, logs["head"].read_bytes())  # the re-run lands cleanly
    assert batch_state(lake, key) == "committed" and again.samples_sha256 == record.samples_sha256


def test_a_file_rewritten_after_verification_is_verified_again(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    record = land_batch(lake, key_for(), logs["head"].read_bytes())
    verify_record(lake, record)  # remembered as verified in this process
    flip_bit(tmp_path / record.events_path)  # same size, new mtime
    with pytest.raises(LakeIntegrityError, match="events file sha256 differs"):
        verify_record(lake, record)


def test_truncated_file_is_left_out_of_the_views_with_its_name(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    good = land_batch(lake, key_for("a" * 40), logs["head"].read_bytes())
    bad = land_batch(lake, key_for("b" * 40), logs["head"].read_bytes())
    path = tmp_path / bad.samples_path
    path.write_bytes(path.read_bytes()[:-10])
    problems: list[str] = []
    con = connect(lake, on_problem=lambda exc: problems.append(str(exc)))
    assert con.execute("select count(*) from samples").fetchall() == [(good.sample_rows,)]
    assert len(problems) == 1 and bad.samples_path in problems[0] and "size differs" in problems[0]


@pytest.mark.slow
def test_corrupt_batch_record_names_the_file_and_other_queries_still_work(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    good = land_batch(lake, key_for("a" * 40), logs["head"].read_bytes())
    bad = land_batch(lake, key_for("b" * 40), logs["head"].read_bytes())
    rec = tmp_path / "batches" / "acme" / "agent" / bad.commit / "qa" / "probe" / f"{bad.window}.{bad.batch}.json"
    rec.write_text("{not json")

    one = evalrunner(tmp_path, "sql", "select 1 as one", "--format", "csv")
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines()[:2] == ["one", "1"]
    warnings = [line for line in one.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1, one.stderr  # one line, naming the file and what to do
    assert str(rec) in warnings[0] and "not valid JSON" in warnings[0]
    assert "evalrunner lake verify --repair" in warnings[0]

    rows = evalrunner(tmp_path, "sql", "select count(*) as n from samples", "--format", "csv")
    assert rows.returncode == 0 and rows.stdout.splitlines()[1] == str(good.sample_rows)

    # an invalid record (JSON, wrong fields) too
    rec.write_text(json.dumps({"batch": bad.batch, "status": "ok"}))
    check = evalrunner(tmp_path, "lake", "verify")
    assert check.returncode == 1 and str(rec) in check.stdout and "not a valid batch record" in check.stdout
    repair = evalrunner(tmp_path, "lake", "verify", "--repair")
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "1 quarantined" in repair.stdout and not rec.exists()
    clean = evalrunner(tmp_path, "lake", "verify")
    assert clean.returncode == 0 and "1 batch records: 1 ok" in clean.stdout
    assert evalrunner(tmp_path, "sql", "select 1").stderr.strip() == ""


def test_lake_verify_finds_a_flipped_bit_that_the_size_check_cannot(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    record = land_batch(lake, key_for(), logs["head"].read_bytes())
    flip_bit(tmp_path / record.raw_path)
    report = verify_lake(lake)
    assert [p for _, p in report.problems] and record.raw_path in report.problems[0][1]
    assert not report.clean
    assert verify_lake(lake, repair=True).quarantined and verify_lake(lake).records == 0


def test_version_1_record_is_checked_by_row_count(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    key = key_for()
    record = land_batch(lake, key, logs["head"].read_bytes())
    old = record.model_copy(
        update={
            "schema_version": 1,
            "samples_sha256": None,
            "samples_bytes": None,
            "events_sha256": None,
            "events_bytes": None,
        }
    )
    rel = lake.layout.batch_record(key.repo, key.commit, key.task, key.window, key.digest)
    lake.write_bytes(rel, old.to_json_bytes())
    forget_verified()
    assert batch_state(lake, key) == "committed"
    report = verify_lake(lake)
    assert report.clean and len(report.unverifiable) == 1
    # a samples file that is not the one the record counted fails even without a digest
    other = pq.read_table(tmp_path / record.samples_path).slice(0, 1)
    pq.write_table(other, tmp_path / record.samples_path)
    forget_verified()
    assert batch_state(lake, key) == "absent"


def test_nothing_outside_the_lake_is_read_as_data(tmp_path, logs, monkeypatch):
    """The old empty-schema files lived in $TMPDIR/evalrunner-lake-schemas/, where anyone could
    plant rows; the views now come from the schemas in code."""
    tmpdir = tmp_path / "tmp"
    planted = tmpdir / "evalrunner-lake-schemas"
    planted.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    row = {f.name: None for f in SAMPLES_SCHEMA}
    row.update(
        repo="evil/planted",
        commit="c" * 40,
        task="x",
        batch="b",
        window="w",
        window_start=0,
        window_stop=1,
        sample_id="s",
        epoch=1,
        input_tokens=0,
        output_tokens=0,
        total_tokens=0,
        spec="",
        model_args="",
        config_digest="",
        backend="",
        runtime_digest="",
        seed=0,
        epochs=1,
        log_status="success",
    )
    import hashlib

    import pyarrow as pa

    digest = hashlib.sha256(SAMPLES_SCHEMA.serialize().to_pybytes()).hexdigest()[:16]
    pq.write_table(pa.Table.from_pylist([row], schema=SAMPLES_SCHEMA), planted / f"samples-{digest}.parquet")

    lake = open_lake(str(tmp_path / "lake"))
    assert connect(lake).execute("select count(*) from samples").fetchall() == [(0,)]
    land_batch(lake, key_for(), logs["head"].read_bytes())
    con = connect(lake)
    assert con.execute("select count(*) from samples where repo = 'evil/planted'").fetchall() == [(0,)]
    assert [c[0] for c in con.execute("describe samples").fetchall()] == SAMPLES_SCHEMA.names
    assert sorted(os.listdir(tmpdir)) == ["evalrunner-lake-schemas"]  # nothing new written there


def test_a_window_landed_by_another_process_first_is_reused_not_a_failure(tmp_path, logs):
    """Two processes ran the same window; the other committed first with a different log (runs
    are not byte-identical): this landing is discarded as a duplicate, its files removed, and
    the committed batch is untouched."""
    lake = open_lake(str(tmp_path))
    key = key_for()
    first = land_batch(lake, key, logs["head"].read_bytes())
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    run = WindowRun(
        key=key,
        mode="warm",
        status="ok",
        failure_kind=None,
        failure_cause=None,
        log_bytes=logs["head"].read_bytes(),
        log_name="x.eval",
        log_status="success",
        sample_ids=[],
        sample_count=0,
        duration_s=0.1,
    )
    # the same bytes: the committed record stands (landing is idempotent), nothing is written
    assert _land(lake, run, None).status == "landed"
    # different bytes (a nondeterministic re-run)
    with pytest.raises(BatchConflictError) as info:
        land_batch(lake, key, logs["base"].read_bytes())
    assert info.value.record == first
    run2 = dataclasses.replace(run, log_bytes=logs["base"].read_bytes(), log_name="x.json")
    outcome = _land(lake, run2, None)
    assert (outcome.status, outcome.duplicate, outcome.failure_kind) == ("reused", True, None)
    assert not (tmp_path / "failures").exists()
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert after == before
    assert (
        BatchRecord.model_validate_json(
            lake.read_bytes(lake.layout.batch_record(key.repo, key.commit, key.task, key.window, key.digest))
        )
        == first
    )


def test_concurrent_landings_of_one_batch_commit_exactly_one_consistent_record(tmp_path, logs):
    """Eight threads land the same batch, half with one log and half with another, at once: one
    record is committed, every file it vouches for matches it, and no landing wrote over
    another's files."""
    import threading

    lake = open_lake(str(tmp_path))
    key = key_for()
    datas = [logs["head"].read_bytes(), logs["base"].read_bytes()]
    barrier = threading.Barrier(8)
    results: list[object] = []

    def land(i: int) -> None:
        barrier.wait()
        try:
            results.append(land_batch(lake, key, datas[i % 2]))
        except BatchConflictError as exc:
            results.append(exc)

    threads = [threading.Thread(target=land, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committed = BatchRecord.model_validate_json(
        lake.read_bytes(lake.layout.batch_record(key.repo, key.commit, key.task, key.window, key.digest))
    )
    forget_verified()
    verify_record(lake, committed, always=True)
    winners = [r for r in results if isinstance(r, BatchRecord)]
    assert all(r == committed for r in winners)
    assert all(e.record == committed for e in results if isinstance(e, BatchConflictError))
    assert len(list((tmp_path / "tables" / "samples").rglob("*.parquet"))) == 1  # the loser's removed


_KILLED_BEFORE_ITS_RECORD = """
import os, signal, sys
from lake import BatchKey, Window, land_batch, open_lake
from lake.batch import RunSettings
from lake.storage import Lake

def die(self, rel, data):  # kill -9 of this process between the landing's files and its record
    os.kill(os.getpid(), signal.SIGKILL)

Lake.write_once = die
key = BatchKey(repo="acme/agent", commit="a" * 40, task="qa/probe", spec="evals/probe.py@lake_probe",
               window=Window(0, 4), config_digest="cfg123", backend="local-unsafe", runtime_digest="rt1",
               settings=RunSettings(model="lakeprobe/probe-1", seed=7, epochs=2))
land_batch(open_lake(sys.argv[1]), key, open(sys.argv[2], "rb").read())
"""


def test_a_landing_killed_before_its_record_leaves_no_table_file_once_the_window_lands_again(tmp_path, logs):
    """kill -9 after a landing wrote its table files and before its record: the rerun of the
    window (another log, so other file names) commits, and the killed landing's files go."""
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_BEFORE_ITS_RECORD, str(tmp_path), str(logs["base"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    orphans = sorted((tmp_path / "tables").rglob("*.parquet"))
    assert len(orphans) == 2  # its samples and events files, vouched by no record
    lake = open_lake(str(tmp_path))
    record = land_batch(lake, key_for(), logs["head"].read_bytes())
    left = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "tables").rglob("*.parquet"))
    assert left == sorted([record.samples_path, record.events_path])
    forget_verified()
    verify_record(lake, record, always=True)


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A directory on a 1 MiB tmpfs (mounted when permitted, e.g. as root), else on the normal
    disk with ENOSPC injected into fsync. Yields (directory, fill, free): ``fill()`` leaves
    ~4 KiB free, ``free()`` gives the space back."""
    import errno

    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode
        == 0
    )
    filler = mount / "filler"
    state = {"full": False}
    if not mounted:
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            if state["full"]:
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)

    def fill() -> None:
        state["full"] = True
        if mounted:
            st = os.statvfs(mount)
            filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - 4096))

    def free() -> None:
        state["full"] = False
        filler.unlink(missing_ok=True)

    try:
        yield mount, fill, free
    finally:
        if mounted:
            subprocess.run(["umount", str(mount)], check=True)


def test_full_disk_while_landing_is_a_lake_write_failure_and_leaves_nothing_half_written(small_disk, logs):
    mount, fill, free = small_disk
    lake = open_lake(str(mount / "lake"))
    key = key_for()
    run = WindowRun(
        key=key,
        mode="warm",
        status="ok",
        failure_kind=None,
        failure_cause=None,
        log_bytes=logs["head"].read_bytes(),
        log_name="x.eval",
        log_status="success",
        sample_ids=[],
        sample_count=0,
        duration_s=0.1,
    )
    fill()
    outcome = _land(lake, run, None)
    assert (outcome.status, outcome.failure_kind) == ("failed", "lake_write"), outcome.failure
    assert "No space left on device" in (outcome.failure or "")
    files = [p for p in (mount / "lake").rglob("*") if p.is_file()]
    assert not [p for p in files if ".tmp-" in p.name or p.suffix == ".parquet"], files
    assert not (mount / "lake" / "batches").exists() or not list((mount / "lake" / "batches").rglob("*.json"))
    assert batch_state(lake, key) in ("absent", "failed")  # never committed

    free()
    assert _land(lake, run, None).status == "landed"  # the space is back: the window lands
    assert batch_state(lake, key) == "committed"


def test_full_disk_in_a_step_is_counted_as_lake_write_by_the_breaker():
    import errno

    from evalrunner_assets.pipeline.scheduler import failure_kind
    from lake import LakeUnavailable, LakeWriteError

    assert failure_kind(OSError(errno.ENOSPC, "No space left on device")) == "lake_write"
    assert failure_kind(LakeWriteError("x", disk_full=True)) == "lake_write"
    assert failure_kind(LakeUnavailable("x")) == "lake_unavailable"
    assert failure_kind(RuntimeError("bwrap: cannot start")) == "sandbox_start"


@pytest.mark.slow
def test_flipped_bit_in_a_landed_parquet_file_is_named_quarantined_and_rerun_by_the_next_compare(tmp_path):
    """`evalrunner compare`, one bit flipped in a landed samples file, the same command again (a
    new process): it names the file, quarantines the batch, runs the window again, and ends
    with the verdict of the untampered run."""
    from evalrunner_assets.example_repo import build_example_repo

    repo = tmp_path / "repo"
    build_example_repo(repo, ["improve-runbook"])
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "EVALRUNNER_HOME": str(home)}
    env.pop("DAGSTER_HOME", None)
    env.pop("EVALRUNNER_LAKE", None)
    argv = [EVALRUNNER, "compare", "--repo", str(repo), "--base", "main", "--head", "improve-runbook", "--cap", "16"]

    def compare() -> tuple[subprocess.CompletedProcess, dict]:
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        (doc,) = [p for p in (home / "lake" / "comparisons").rglob("*.json") if p.name.count(".") == 1]
        return done, json.loads(doc.read_text())

    _, untampered = compare()
    records = {p: json.loads(p.read_text()) for p in (home / "lake" / "batches").rglob("*.json")}
    rec_path, record = sorted(records.items())[0]
    flip_bit(home / "lake" / record["samples_path"])

    done, again = compare()
    named = [line for line in done.stderr.splitlines() if record["samples_path"] in line]
    assert named and "sha256 differs" in named[0], done.stderr[-3000:]
    (moved,) = list((home / "lake" / "quarantine").rglob("*.json"))
    assert record["samples_path"] in json.loads(moved.read_text())["reason"]
    assert [q["record"] for q in again["execution"]["quarantined"]] == [str(rec_path)]
    rerun = json.loads(rec_path.read_text())  # the window ran again and committed a new record
    assert rerun["samples_path"] != record["samples_path"] and rerun["batch"] == record["batch"]
    assert again["execution"]["windows"].get("landed") == 1

    def verdict(doc: dict) -> tuple:
        return (
            doc["verdict"],
            doc["samples_run"],
            {t: (d["decision"]["label"], d["head"]["samples"], d["base"]["samples"]) for t, d in doc["tasks"].items()},
            doc["final_verdict"].get("p_improvement"),
        )

    assert verdict(again) == verdict(untampered)


def test_temp_files_of_dead_writers_are_swept_anywhere_in_the_lake(tmp_path):
    import uuid

    from evalrunner_assets.driver.comparison import _sweep

    lake = open_lake(str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    places = ["inbox/github", "quarantine/batches/x", "comparisons/other/repo/1", "tables/samples/repo=o%2Fr"]
    leftovers = []
    for place in places:
        (tmp_path / place).mkdir(parents=True)
        p = tmp_path / place / f".f.json.tmp-{dead.pid}-{uuid.uuid4().hex}"
        p.write_bytes(b"half")
        leftovers.append(p)
    live = tmp_path / "inbox" / "github" / f".g.json.tmp-{os.getpid()}-{uuid.uuid4().hex}"
    live.write_bytes(b"being written")
    removed = _sweep(lake, "acme/agent")
    assert sorted(removed) == sorted(str(p) for p in leftovers)
    assert live.exists()
