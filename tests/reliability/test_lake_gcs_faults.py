"""A gs:// lake under contention and outage, against gcp-storage-emulator on loopback.

The emulator does not honour the ``ifGenerationMatch`` precondition (a create-only upload of an
existing object overwrites it; checked below), so the create-only tests are in two parts: every
create-only write carries ``ifGenerationMatch=0`` on the wire (against the stock emulator), and
50 concurrent writers against the emulator with a precondition stand-in — a wrapper of its
upload handler that answers 412 as GCS documents — see exactly one winner."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path

import pytest

from lake import Lake, LakeUnavailable
from lake.batch import RunSettings
from lake.storage import gcs_filesystem

pytestmark = pytest.mark.reliability

BUCKET = "evalrunner-faults"
EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))


def _start(port: int = 0, data_dir: str | None = None):
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"  # else a gRPC probe stalls 60 s
    from gcp_storage_emulator.server import create_server

    server = create_server("127.0.0.1", port, in_memory=data_dir is None, default_bucket=BUCKET, data_dir=data_dir)
    server.start()
    return server, server._api._httpd.server_address[1]


@pytest.fixture
def emulator() -> Iterator[str]:
    server, port = _start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def uploads(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Query parameters of every multipart upload the emulator receives."""
    from gcp_storage_emulator.handlers import objects

    seen: list[dict] = []
    real = objects._multipart_upload

    def recording(request, response, storage):
        seen.append({k: v[0] for k, v in request.query.items()} | {"name": request.data["meta"].get("name")})
        return real(request, response, storage)

    monkeypatch.setattr(objects, "_multipart_upload", recording)
    return seen


@pytest.fixture
def precondition_standin(monkeypatch: pytest.MonkeyPatch, uploads: list[dict]) -> None:
    """The emulator's upload handler, wrapped to honour ``ifGenerationMatch=0`` as GCS does:
    412 Precondition Failed when the object exists (the emulator serves one request at a time,
    so check-then-create here is atomic)."""
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    recording = objects._multipart_upload

    def conditional(request, response, storage):
        if request.query.get("ifGenerationMatch") == ["0"]:
            name = request.data["meta"].get("name")
            try:
                storage.get_file_obj(request.params["bucket_name"], name)
            except NotFound:
                pass
            else:
                uploads.append({"name": name, "refused": "412"})
                response.status = HTTPStatus.PRECONDITION_FAILED
                response.json(
                    {
                        "error": {
                            "code": 412,
                            "message": "At least one of the pre-conditions you specified did not hold.",
                            "errors": [],
                        }
                    }
                )
                return None
        return recording(request, response, storage)

    monkeypatch.setattr(objects, "_multipart_upload", conditional)


def gs_lake(endpoint: str, prefix: str) -> Lake:
    return Lake(
        root=f"gs://{BUCKET}/{prefix}", fs=gcs_filesystem(endpoint_url=endpoint, token="anon", skip_instance_cache=True)
    )


def test_the_stock_emulator_ignores_if_generation_match(emulator: str) -> None:
    """Why the stand-in exists: a second create-only upload overwrites on the emulator."""
    fs = gcs_filesystem(endpoint_url=emulator, token="anon", skip_instance_cache=True)
    fs.pipe_file(f"{BUCKET}/probe", b"one", mode="create")
    fs.pipe_file(f"{BUCKET}/probe", b"two", mode="create")  # GCS would answer 412 here
    assert fs.cat_file(f"{BUCKET}/probe") == b"two"


def test_every_create_only_write_sends_if_generation_match_0(emulator: str, uploads: list[dict]) -> None:
    lake = gs_lake(emulator, "shape")
    assert lake.write_once("inbox/github/d1.json", b"{}") is True
    lake.write_bytes("comparisons/a/b/1/x.json", b"{}")
    creates = [u for u in uploads if u["name"].endswith("d1.json")]
    overwrites = [u for u in uploads if u["name"].endswith("x.json")]
    assert [u.get("ifGenerationMatch") for u in creates] == ["0"]
    assert [u.get("ifGenerationMatch") for u in overwrites] == [None]


@pytest.mark.slow
def test_fifty_concurrent_create_only_writers_exactly_one_wins(
    emulator: str, uploads: list[dict], precondition_standin: None
) -> None:
    lake = gs_lake(emulator, "race")
    rel = "inbox/github/delivery-1.json"
    barrier = threading.Barrier(50)

    def write(i: int) -> bool:
        barrier.wait()
        return lake.write_once(rel, json.dumps({"writer": i}).encode())

    with cf.ThreadPoolExecutor(max_workers=50) as pool:
        won = list(pool.map(write, range(50)))
    assert won.count(True) == 1 and won.count(False) == 49
    winner = won.index(True)
    assert json.loads(lake.read_bytes(rel)) == {"writer": winner}
    assert sum(1 for u in uploads if u.get("refused") == "412") == 49


@pytest.mark.slow
def test_batch_records_on_gcs_are_committed_create_only(
    emulator: str, uploads: list[dict], precondition_standin: None, tmp_path: Path
) -> None:
    from lake import BatchConflictError, BatchKey, Window, land_batch
    from tests.helpers.inspect_models import probe_logs

    logs = probe_logs(tmp_path / "logs")
    lake = gs_lake(emulator, "records")
    key = BatchKey(
        repo="acme/agent",
        commit="a" * 40,
        task="qa/probe",
        spec="evals/probe.py@lake_probe",
        window=Window(0, 4),
        config_digest="cfg",
        backend="local-unsafe",
        runtime_digest="rt",
        settings=RunSettings(model="lakeprobe/probe-1", seed=7, epochs=2),
    )
    first = land_batch(lake, key, logs["head"].read_bytes())
    with pytest.raises(BatchConflictError) as info:
        land_batch(lake, key, logs["base"].read_bytes())
    assert info.value.record == first
    record_uploads = [u for u in uploads if u["name"].startswith("records/batches/")]
    assert [u.get("ifGenerationMatch") for u in record_uploads] == ["0"]


@pytest.mark.slow
def test_an_unreachable_lake_is_lake_unavailable_not_a_client_traceback(monkeypatch) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("EVALRUNNER_LAKE_RETRIES", "0")  # read when the lake is opened
    lake = gs_lake(f"http://127.0.0.1:{port}", "down")
    started = time.monotonic()
    with pytest.raises(LakeUnavailable, match=rf"gs://{BUCKET}/down/batches") as info:
        lake.exists("batches")
    assert "ClientConnectorError" in str(info.value) or "Connect" in str(info.value)
    assert time.monotonic() - started < 120  # gcsfs's own backoff, then given up


@pytest.mark.slow
def test_emulator_killed_mid_run_stops_with_exit_3_and_the_same_command_resumes(tmp_path: Path) -> None:
    """`evalrunner compare` on a gs:// lake; the emulator is stopped after the first windows
    land: the run stops (exit 3, "lake unavailable"), never a traceback; with the emulator back
    (same data), the same command resumes and completes, reusing what had landed."""
    from evalrunner_assets.example_repo import build_example_repo

    repo = tmp_path / "repo"
    build_example_repo(repo, ["improve-runbook"])
    data_dir = tmp_path / "gcs-data"
    data_dir.mkdir()
    server, port = _start(data_dir=str(data_dir))
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "EVALRUNNER_HOME": str(home),
        "EVALRUNNER_LAKE": f"gs://{BUCKET}/lake",
        "EVALRUNNER_GCS_ENDPOINT": f"http://127.0.0.1:{port}",
        "EVALRUNNER_GCS_TOKEN": "anon",
        "EVALRUNNER_LAKE_RETRIES": "0",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }
    env.pop("DAGSTER_HOME", None)
    argv = [EVALRUNNER, "compare", "--repo", str(repo), "--base", "main", "--head", "improve-runbook", "--cap", "32"]
    fs = gcs_filesystem(endpoint_url=f"http://127.0.0.1:{port}", token="anon", skip_instance_cache=True)

    def landed() -> list[str]:
        fs.invalidate_cache()
        return [p for p in fs.find(f"{BUCKET}/lake/batches") if p.endswith(".json")]

    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 400
        while len(landed()) < 2:
            assert proc.poll() is None, proc.stderr.read()[-3000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no window landed"
            time.sleep(0.5)
        before = set(landed())
        server.stop()  # the lake goes away mid-run
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert proc.returncode == 3, err[-3000:]
    assert "lake unavailable" in err and "Traceback" not in err, err[-3000:]

    server, _ = _start(port=port, data_dir=str(data_dir))  # the same lake, back
    try:
        again = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        doc_paths = [p for p in fs.find(f"{BUCKET}/lake/comparisons") if p.count(".") == 1 and p.endswith(".json")]
        assert len(doc_paths) == 1
        doc = json.loads(fs.cat_file(doc_paths[0]))
        assert doc["status"] == "complete"
        assert before <= set(landed())  # what landed before the outage is reused
        records = [json.loads(fs.cat_file(p)) for p in landed()]
        assert len({(r["commit"], r["task"], r["window"]) for r in records}) == len(records)
    finally:
        server.stop()
