"""The miner's notes in Inspect's own viewer: mining a real landed log writes an annotated copy of
it (the notes in the noted samples' metadata and transcripts), the raw log stays byte for byte,
a real ``inspect view`` over the copies serves them, and the trajectory pages link noted samples
there."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.log import EvalLog, read_eval_log
from inspect_ai.model import get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from starlette.testclient import TestClient

from evalrunner_assets.http.web import create_app
from evalrunner_assets.mining import mine_task
from evalrunner_assets.mining.annotated_logs import COPY_OF_KEY, INFO_SOURCE, METADATA_KEY, write_annotated_logs
from evalrunner_assets.report import links
from lake import BatchKey, Window, land_batch, open_lake
from lake.batch import RunSettings
from lake.layout import LAYOUT
from lake.schema import ANNOTATIONS_SCHEMA
from lake.storage import Lake
from lake.viewer import view_command
from tests.helpers.inspect_models import lookup

REPO, COMMIT, TASK = "acme/agent", "c" * 40, "qa/probe"
FAILING = [f"f{i}" for i in range(6)]
PASSING = [f"p{i}" for i in range(6)]


def _probe_log(log_dir: Path) -> EvalLog:
    # The scripted model calls `lookup` when asked to use the tool: those samples fail (a target
    # nothing answers), the others answer as asked and pass, so "calls lookup" is the finding.
    dataset = [Sample(id=s, input=f"Please use tool and say fig{s}.", target="nope") for s in FAILING]
    dataset += [Sample(id=s, input=f"Please say apple{s}.", target=f"apple{s}") for s in PASSING]
    task = Task(dataset=dataset, solver=[use_tools(lookup()), generate()], scorer=includes())
    [log] = eval(task, model=get_model("lakeprobe/probe-1"), log_dir=str(log_dir), display="none", log_level="error")
    assert log.status == "success"
    return log


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory) -> tuple[Lake, str, str, list[str]]:
    """(lake, the raw log's lake path, its sha256 before mining, the copies mining wrote)."""
    root = tmp_path_factory.mktemp("annotated")
    log = _probe_log(root / "logs")
    lake = open_lake(str(root / "home" / "lake"))  # a home's lake: `evalrunner serve` serves it
    key = BatchKey(
        repo=REPO,
        commit=COMMIT,
        task=TASK,
        spec="evals/probe.py@probe",
        window=Window(0, len(FAILING) + len(PASSING)),
        config_digest="cfg",
        backend="local-unsafe",
        runtime_digest="rt",
        settings=RunSettings(model="lakeprobe/probe-1", seed=7, epochs=1),
    )
    record = land_batch(lake, key, Path(log.location).read_bytes())
    before = hashlib.sha256(lake.read_bytes(record.raw_path)).hexdigest()
    result = mine_task(lake, REPO, COMMIT, TASK)
    assert [f.feature.name for f in result.contrast.findings][:1] == ["calls lookup"]
    return lake, record.raw_path, before, result.annotated_logs


def _sha(lake: Lake, rel: str) -> str:
    return hashlib.sha256(lake.read_bytes(rel)).hexdigest()


def test_mining_writes_an_annotated_copy_the_raw_log_unchanged(mined):
    lake, raw_path, before, copies = mined
    assert copies == [LAYOUT.annotated_log(raw_path)]
    assert _sha(lake, raw_path) == before
    raw, copy = read_eval_log(lake.url(raw_path)), read_eval_log(lake.url(copies[0]))
    assert copy.eval.metadata[COPY_OF_KEY] == raw_path
    assert [str(s.id) for s in copy.samples] == [str(s.id) for s in raw.samples]
    for r, c in zip(raw.samples, copy.samples, strict=True):
        if str(r.id) in PASSING:
            # Not noted: copied as it is.
            assert c.model_dump() == r.model_dump()
            continue
        [note] = c.metadata[METADATA_KEY]
        seq = note["seq"]
        # The note is on the raw log's tool call (events.seq), and says so.
        assert r.events[seq].event == "tool" and r.events[seq].function == "lookup"
        assert note["event"] == "tool call lookup" and note["source"] == "trajectory-miner"
        assert note["finding"] == "calls lookup" and note["note"].startswith("Pattern seen in 6 / 6 failing samples")
        # In the transcript: an info event right after that call; every other event as it was.
        info = c.events[seq + 1]
        assert info.event == "info" and info.source == INFO_SOURCE
        assert info.span_id == r.events[seq].span_id
        assert [e.model_dump() for e in c.events[: seq + 1] + c.events[seq + 2 :]] == [e.model_dump() for e in r.events]
        assert c.metadata == {**(r.metadata or {}), METADATA_KEY: [note]}
        assert c.scores == r.scores and c.messages == r.messages


def test_every_sources_notes_are_in_the_copy_and_a_copy_without_notes_goes(mined, tmp_path):
    lake, raw_path, before, copies = mined
    # A second source's note on a whole trajectory: the copy is rebuilt from every source.
    batch = raw_path.rsplit("/", 1)[1].split(".")[0]
    row = {
        "repo": REPO, "commit": COMMIT, "task": TASK, "batch": batch, "sample_id": "p0", "epoch": 1, "seq": None,
        "source": "reviewer", "finding": "looked at", "note": "answered without checking", "created_at": "2026-01-01",
    }  # fmt: skip
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([row], schema=ANNOTATIONS_SCHEMA), buf)
    other = LAYOUT.annotations(REPO, COMMIT, TASK, "reviewer")
    lake.write_bytes(other, buf.getvalue())
    try:
        done = write_annotated_logs(lake, REPO, COMMIT, TASK)
        assert done.written == copies and done.removed == []
        copy = read_eval_log(lake.url(copies[0]))
        p0 = next(s for s in copy.samples if s.id == "p0")
        assert [n["note"] for n in p0.metadata[METADATA_KEY]] == ["answered without checking"]
        init = next(i for i, e in enumerate(p0.events) if e.event == "sample_init")
        assert p0.events[init + 1].event == "info" and "on the whole trajectory" in str(p0.events[init + 1].data)
        assert all(METADATA_KEY in s.metadata for s in copy.samples if s.id in FAILING)
        # No notes left on the log: its copy is removed, the raw log still untouched.
        miner = LAYOUT.annotations(REPO, COMMIT, TASK, "trajectory-miner")
        kept = lake.read_bytes(miner)
        lake.remove(miner)
        lake.remove(other)
        try:
            assert write_annotated_logs(lake, REPO, COMMIT, TASK).removed == copies
            assert not lake.exists(copies[0])
        finally:
            lake.write_bytes(miner, kept)
    finally:
        lake.remove(other)
        write_annotated_logs(lake, REPO, COMMIT, TASK)
    assert _sha(lake, raw_path) == before and lake.exists(copies[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def test_inspect_view_over_the_copies_serves_the_notes(mined):
    lake, raw_path, _, copies = mined
    port = _free_port()
    viewer = subprocess.Popen(
        view_command(lake, host="127.0.0.1", port=port, annotated=True),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert viewer.poll() is None, viewer.stderr.read().decode()[-3000:] if viewer.stderr else "exited"
            try:
                listing = json.loads(_get(f"{api}/logs"))
                break
            except OSError:
                assert time.monotonic() < deadline, "inspect view never answered"
                time.sleep(0.3)
        # The listing is the copies, found recursively under the viewer's log directory.
        [entry] = listing["files"]
        assert entry["name"].endswith("/" + copies[0])
        name = urllib.parse.quote(entry["name"], safe="")
        # The log as the viewer's API serves it: the noted samples carry the notes.
        served = json.loads(_get(f"{api}/logs/{name}"))
        noted = {s["id"]: s["metadata"].get(METADATA_KEY) for s in served["samples"]}
        assert all(noted[s] and noted[s][0]["finding"] == "calls lookup" for s in FAILING)
        assert all(noted[s] is None for s in PASSING)
        # The bytes the viewer's page reads the archive from (ranges of /log-bytes) are the copy.
        size = int(_get(f"{api}/log-size/{name}"))
        data = _get(f"{api}/log-bytes/{name}?start=0&end={size - 1}")
        assert data == lake.read_bytes(copies[0])
        # It reads only its own directory: the raw logs are not served by it.
        raw_name = urllib.parse.quote(entry["name"].replace(copies[0], raw_path), safe="")
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(f"{api}/logs/{raw_name}")
        assert refused.value.code == 403
    finally:
        viewer.terminate()
        viewer.wait(timeout=30)


def test_the_trajectory_pages_link_noted_samples_to_the_annotated_viewer(mined):
    lake, raw_path, _, copies = mined
    raw_view, noted_view = "http://view.example:7575", "http://view.example:7576"
    client = TestClient(create_app(lake, inspect_view_url=raw_view, inspect_annotated_view_url=noted_view))
    listing = client.get(links.trajectories_path(REPO, COMMIT, TASK)).text
    fragment = "/#/logs/" + raw_path[len(LAYOUT.raw_prefix()) + 1 :] + "/samples/sample/"
    for sample in FAILING:
        assert f'href="{noted_view}{fragment}{sample}/1/"' in listing
    for sample in PASSING:
        assert f"{noted_view}{fragment}{sample}/" not in listing
        assert f'href="{raw_view}{fragment}{sample}/1/"' in listing
    page = client.get(links.trajectory_path(REPO, COMMIT, TASK, FAILING[0], 1)).text
    assert re.search(rf'<a href="{re.escape(noted_view + fragment + FAILING[0])}/1/">With the notes', page)
    assert "Raw log in Inspect's viewer" in page
    # Without the annotated viewer configured, no such link.
    plain = TestClient(create_app(lake, inspect_view_url=raw_view)).get(links.trajectories_path(REPO, COMMIT, TASK))
    assert noted_view not in plain.text


def test_serve_starts_the_annotated_viewer_and_the_pages_link_noted_samples_to_it(mined, tmp_path):
    lake, raw_path, _, copies = mined
    home = Path(lake.root).parent
    port, view_port, noted_port = _free_port(), _free_port(), _free_port()
    exe = shutil.which("evalrunner", path=os.path.dirname(sys.executable)) or "evalrunner"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALRUNNER_", "DAGSTER_"))}
    args = ["serve", "--webhook-only", "--insecure", "--port", str(port)]
    args += ["--inspect-view-port", str(view_port), "--annotated-view-port", str(noted_port)]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        serve = subprocess.Popen([exe, *args], env={**env, "EVALRUNNER_HOME": str(home)}, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 120
            while True:
                assert serve.poll() is None, log.read_text()[-3000:]
                try:
                    listing = _get(f"http://127.0.0.1:{port}/web{links.trajectories_path(REPO, COMMIT, TASK)}").decode()
                    json.loads(_get(f"http://127.0.0.1:{noted_port}/api/logs"))
                    break
                except OSError:
                    assert time.monotonic() < deadline, log.read_text()[-3000:]
                    time.sleep(0.3)
            noted = re.findall(rf'href="(http://127\.0\.0\.1:{noted_port}/#/logs/[^"]+)"', listing)
            assert len(noted) == len(FAILING)
            # The link's log path, under the annotated viewer's directory, is the copy it serves.
            path = noted[0].split("/#/logs/", 1)[1].split("/samples/sample/", 1)[0]
            assert LAYOUT.annotated_logs_prefix() + "/" + urllib.parse.unquote(path) == copies[0]
            copy = urllib.parse.quote(lake.url(copies[0]), safe="")
            served = json.loads(_get(f"http://127.0.0.1:{noted_port}/api/logs/{copy}"))
            assert all(METADATA_KEY in s["metadata"] for s in served["samples"] if s["id"] in FAILING)
            # The raw logs' viewer runs beside it, over raw/ as before.
            assert json.loads(_get(f"http://127.0.0.1:{view_port}/api/logs"))["files"][0]["name"].endswith(raw_path)
        finally:
            serve.terminate()
            serve.wait(timeout=60)
    # Stopping serve stops both viewers.
    for p in (view_port, noted_port):
        with pytest.raises(OSError):
            _get(f"http://127.0.0.1:{p}/")
