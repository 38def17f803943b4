"""Landing real Inspect logs: exact rows, atomicity, idempotence and bad input."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import duckdb
import pytest

from lake import (
    BatchConflictError,
    BatchKey,
    LakePathError,
    LakeWriteError,
    LogIngestError,
    LogStatusError,
    Window,
    connect,
    ingest_log_file,
    land_batch,
    open_lake,
)
from lake.batch import RunSettings
from lake.schema import EVENTS_SCHEMA, SAMPLES_SCHEMA
from tests.helpers.inspect_models import probe_logs

HEAD = "a" * 40
BASE = "b" * 40


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return probe_logs(tmp_path_factory.mktemp("inspect-logs"))


def key_for(commit: str = HEAD, *, epochs: int = 2, task: str = "qa/probe") -> BatchKey:
    return BatchKey(
        repo="acme/agent",
        commit=commit,
        task=task,
        spec="evals/probe.py@lake_probe",
        window=Window(0, 4),
        config_digest="cfg123",
        backend="local-unsafe",
        runtime_digest="rt456",
        settings=RunSettings(model="lakeprobe/probe-1", seed=7, epochs=epochs),
    )


def lake_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def samples_rows(lake_root: Path) -> list[dict]:
    con = connect(open_lake(str(lake_root)))
    return con.sql("select * from samples order by sample_id, epoch").to_arrow_table().to_pylist()


def test_landed_samples_keep_every_epoch_and_errored_samples(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    record = land_batch(lake, key_for(), logs["head"].read_bytes())

    assert (record.status, record.sample_rows, record.errored_samples) == ("ok", 8, 2)
    rows = samples_rows(tmp_path)
    assert [(r["sample_id"], r["epoch"]) for r in rows] == [(s, e) for s in ("s1", "s2", "s3", "s4") for e in (1, 2)]
    by_id: dict[str, list[dict]] = {}
    for r in rows:
        by_id.setdefault(r["sample_id"], []).append(r)
        # batch key and reproducibility columns on every row
        assert (r["repo"], r["commit"], r["task"], r["batch"]) == ("acme/agent", HEAD, "qa/probe", key_for().digest)
        assert (r["window"], r["window_start"], r["window_stop"]) == ("w000000-000004", 0, 4)
        assert (r["spec"], r["config_digest"], r["backend"], r["runtime_digest"]) == (
            "evals/probe.py@lake_probe",
            "cfg123",
            "local-unsafe",
            "rt456",
        )
        assert (r["seed"], r["epochs"], r["model_args"], r["model"]) == (7, 2, "{}", "lakeprobe/probe-1")
        assert r["log_status"] == "success"
        assert r["cost_usd"] is None  # no price known: unknown, never 0
        assert r["total_time_s"] > 0 and r["working_time_s"] > 0
        assert r["started_at"] <= r["completed_at"]

    # s1 is right in exactly one of its two epochs
    assert sorted(r["score"] for r in by_id["s1"]) == [0.0, 1.0]
    assert sorted(r["score_raw"] for r in by_id["s1"]) == ['"C"', '"I"']
    for r in by_id["s2"]:
        assert (r["score"], r["score_raw"], r["scorer"], r["error"]) == (0.0, '"I"', "includes", None)
        assert json.loads(r["scores"]) == {"includes": "I", "answer_length": 1.3}
        assert (r["input_tokens"], r["output_tokens"], r["total_tokens"]) == (10, 5, 15)
        assert (r["input_tokens_cache_read"], r["input_tokens_cache_write"], r["reasoning_tokens"]) == (3, 1, 2)
    for r in by_id["s3"]:  # tool round trip: two model calls (1 then 3 messages in)
        assert (r["score"], r["input_tokens"], r["output_tokens"], r["total_tokens"]) == (1.0, 40, 10, 50)
        assert (r["input_tokens_cache_read"], r["input_tokens_cache_write"], r["reasoning_tokens"]) == (6, 2, 4)
    for r in by_id["s4"]:  # errored: kept, error set, no score, no model call
        assert r["error"] == "RuntimeError('planned failure for sample s4')"
        assert (r["score"], r["score_raw"], r["scorer"], r["scores"]) == (None, None, None, None)
        assert (r["input_tokens"], r["output_tokens"], r["total_tokens"]) == (0, 0, 0)
        assert (r["input_tokens_cache_read"], r["reasoning_tokens"]) == (None, None)


def test_landed_events_record_tool_calls_tokens_and_errors(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    record = land_batch(lake, key_for(), logs["head"].read_bytes())
    con = connect(lake)
    assert con.execute("select count(*) from events").fetchall()[0][0] == record.event_rows == 158

    s3 = con.sql(
        "select seq, event, role, model, tool_function, tool_arguments, tool_calls, "
        "input_tokens, output_tokens, total_tokens, text from events "
        "where sample_id = 's3' and epoch = 1 and event in ('model', 'tool', 'sample_init') order by seq"
    ).fetchall()
    assert [row[:2] for row in s3] == [(1, "sample_init"), (10, "model"), (12, "tool"), (14, "model")]
    assert s3[0][2] == "user" and s3[0][10] == "Please use tool and say fig."
    assert s3[1][2:10] == ("assistant", "lakeprobe/probe-1", "lookup", '{"topic": "fig."}', 1, 10, 5, 15)
    assert s3[2][2:7] == ("tool", None, "lookup", '{"topic": "fig."}', None)
    assert s3[2][10] == "fig."
    assert s3[3][2:10] == ("assistant", "lakeprobe/probe-1", None, None, 0, 30, 5, 35)
    assert s3[3][10] == "ANSWER: fig."

    errors = con.sql("select sample_id, epoch, error from events where event = 'error' order by epoch").fetchall()
    assert errors == [("s4", e, "RuntimeError('planned failure for sample s4')") for e in (1, 2)]
    seqs = con.sql(
        "select sample_id, epoch, count(*), min(seq), max(seq) from events group by all order by all"
    ).fetchall()
    assert all(n == hi + 1 and lo == 0 for _, _, n, lo, hi in seqs)  # dense 0-based sequence
    assert con.execute("select max(length(text)) <= 2000, bool_or(text_truncated) from events").fetchall()[0] == (
        True,
        False,
    )


def test_json_log_lands_like_eval_and_keeps_raw_bytes(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    data = logs["base"].read_bytes()
    record = land_batch(lake, key_for(BASE, epochs=1), data)
    assert record.log_format == "json" and record.raw_path.endswith(".json")
    assert lake.read_bytes(record.raw_path) == data
    rows = samples_rows(tmp_path)
    assert [(r["sample_id"], r["epoch"], r["score"], r["error"]) for r in rows] == [
        ("s1", 1, 1.0, None),
        ("s2", 1, 0.0, None),
        ("s3", 1, 1.0, None),
    ]


def test_ingest_log_file_matches_landed_rows_and_summaries_path(logs):
    samples, events = ingest_log_file(logs["head"], key_for())
    assert samples.schema.equals(SAMPLES_SCHEMA) and events.schema.equals(EVENTS_SCHEMA)
    assert (samples.num_rows, events.num_rows) == (8, 158)
    fast, no_events = ingest_log_file(logs["head"], key_for(), events=False)
    assert no_events.num_rows == 0
    # summaries and samples agree on everything else (summaries carry a thinned input and no
    # events: no input digest or error span from them)
    drop = ["started_at", "completed_at", "input_digest", "error_where"]
    assert (
        fast.drop_columns(drop)
        .sort_by([("sample_id", "ascending"), ("epoch", "ascending")])
        .equals(samples.drop_columns(drop).sort_by([("sample_id", "ascending"), ("epoch", "ascending")]))
    )


def test_relanding_the_same_log_changes_nothing(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    data = logs["head"].read_bytes()
    first = land_batch(lake, key_for(), data)
    before = {p: (tmp_path / p).read_bytes() for p in lake_files(tmp_path)}
    mtimes = {p: (tmp_path / p).stat().st_mtime_ns for p in before}
    second = land_batch(lake, key_for(), data)
    assert second == first
    assert {p: (tmp_path / p).read_bytes() for p in lake_files(tmp_path)} == before
    assert {p: (tmp_path / p).stat().st_mtime_ns for p in before} == mtimes
    assert len(samples_rows(tmp_path)) == 8  # no duplicates


def test_landing_is_deterministic_byte_for_byte(tmp_path, logs):
    data = logs["head"].read_bytes()
    land_batch(open_lake(str(tmp_path / "one")), key_for(), data)
    land_batch(open_lake(str(tmp_path / "two")), key_for(), data)
    one, two = lake_files(tmp_path / "one"), lake_files(tmp_path / "two")
    assert one == two and len(one) == 4  # raw log, samples, events, record
    for rel in one:
        assert (tmp_path / "one" / rel).read_bytes() == (tmp_path / "two" / rel).read_bytes(), rel


def test_a_committed_batch_refuses_a_different_log(tmp_path, logs):
    lake = open_lake(str(tmp_path))
    land_batch(lake, key_for(), logs["head"].read_bytes())
    with pytest.raises(BatchConflictError, match="already committed with a different log"):
        land_batch(lake, key_for(), logs["base"].read_bytes())


@pytest.mark.parametrize("fail_on", ["events", "batches"])
def test_failure_before_the_record_leaves_no_parquet(tmp_path, logs, monkeypatch, fail_on):
    lake = open_lake(str(tmp_path))
    real_write = lake.write_bytes

    def flaky_write(rel: str, data: bytes) -> str:
        if rel.startswith("tables/events/" if fail_on == "events" else "batches/"):
            raise LakeWriteError(f"simulated failure writing {rel}")
        return real_write(rel, data)

    real_once = lake.write_once

    def flaky_once(rel: str, data: bytes) -> bool:  # the record is committed create-only
        if fail_on == "batches" and rel.startswith("batches/"):
            raise LakeWriteError(f"simulated failure writing {rel}")
        return real_once(rel, data)

    monkeypatch.setattr(lake, "write_bytes", flaky_write)
    monkeypatch.setattr(lake, "write_once", flaky_once)
    with pytest.raises(LakeWriteError, match="simulated failure"):
        land_batch(lake, key_for(), logs["head"].read_bytes())
    files = lake_files(tmp_path)
    assert not [f for f in files if f.endswith(".parquet") or f.startswith("batches/")], files
    assert not [f for f in files if "/." in f], files  # no temporaries either
    con = connect(lake)
    assert con.execute("select count(*) from samples").fetchall()[0] == (0,)

    monkeypatch.setattr(lake, "write_bytes", real_write)  # the retry lands normally
    monkeypatch.setattr(lake, "write_once", real_once)
    assert land_batch(lake, key_for(), logs["head"].read_bytes()).sample_rows == 8


def test_a_crash_inside_a_file_write_leaves_neither_file_nor_temporary(tmp_path, monkeypatch):
    lake = open_lake(str(tmp_path))
    import lake.storage as storage

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(storage.os, "replace", broken_replace)
    with pytest.raises(LakeWriteError, match="simulated crash"):
        lake.write_bytes("tables/samples/x.parquet", b"PAR1")
    assert lake_files(tmp_path) == []


def test_log_whose_error_is_a_samples_own_exception_lands_its_rows_as_the_agents_errors(tmp_path, logs):
    # The task stopped because its solver raised on s4 (fail_on_error): the agent's failure,
    # not the harness's, so the samples land and s4 is an errored row naming where it raised.
    lake = open_lake(str(tmp_path))
    data = logs["failed"].read_bytes()
    record = land_batch(lake, key_for(), data)
    assert (record.status, record.log_status) == ("ok", "error")
    assert record.errored_samples >= 1 and record.sample_rows >= 1
    con = connect(lake)
    rows = con.sql(
        "select sample_id, error, error_where, score, input_digest from samples where error is not null"
    ).fetchall()
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("s4", "RuntimeError('planned failure for sample s4')", "solver:explode_when_flagged", None)
    ]
    assert rows[0][4] and len(rows[0][4]) == 32
    samples, _ = ingest_log_file(logs["failed"])
    assert "s4" in samples.column("sample_id").to_pylist()


def test_log_with_error_status_no_sample_explains_lands_raw_and_error_record_but_no_rows(tmp_path, logs):
    lake = open_lake(str(tmp_path / "lake"))
    data = logs["harness_error"].read_bytes()
    with pytest.raises(LogStatusError, match="log status is 'error'.*worker lost") as info:
        land_batch(lake, key_for(), data)
    assert str(lake.url(info.value.record.raw_path)) in str(info.value)
    record = info.value.record
    assert (record.status, record.sample_rows, record.samples_path) == ("error", 0, None)
    assert "worker lost its connection" in record.error
    files = lake_files(tmp_path / "lake")
    assert not [f for f in files if f.endswith(".parquet")]
    assert lake.read_bytes(record.raw_path) == data
    con = connect(lake)
    assert con.sql("select status, error like '%worker lost%' from batches").fetchall() == [("error", True)]
    assert con.execute("select count(*) from samples").fetchall()[0] == (0,)
    # a later good log for the same key replaces the failure
    good = land_batch(lake, key_for(), logs["head"].read_bytes())
    assert good.status == "ok"
    (tmp_path / "h.eval").write_bytes(data)
    with pytest.raises(LogStatusError, match="status is 'error'"):
        ingest_log_file(tmp_path / "h.eval")


def test_input_digest_is_the_same_for_a_listed_sample_and_its_logged_run(tmp_path, logs):
    # The digest computed in the sandbox from the dataset's Sample and the one ingest computes
    # from the log's EvalSample are one function of the same fields.
    from inspect_ai.dataset import Sample

    from evalrunner_assets.sample_digest import digest_of_sample
    from tests.helpers.inspect_models import PROBE_SAMPLES

    samples, _ = ingest_log_file(logs["head"])
    logged = dict(zip(samples.column("sample_id").to_pylist(), samples.column("input_digest").to_pylist()))
    listed = {i: digest_of_sample(Sample(id=i, input=x, target=t, metadata=m)) for i, x, t, m in PROBE_SAMPLES}
    assert logged == listed
    assert len(set(listed.values())) == len(listed)
    # Summaries carry a thinned input: no digest rather than a wrong one.
    thin, _ = ingest_log_file(logs["head"], events=False)
    assert set(thin.column("input_digest").to_pylist()) == {None}


def _not_inspect_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("README.txt", "just a zip")
    return buf.getvalue()


def _corrupt(data: bytes) -> bytes:
    mid = len(data) // 2
    return data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + 64]) + data[mid + 64 :]


BAD_INPUTS = {
    "empty": (lambda logs: b"", "empty file"),
    "truncated": (lambda logs: logs["head"].read_bytes()[:5000], "truncated or corrupt .eval zip"),
    "corrupt": (lambda logs: _corrupt(logs["head"].read_bytes()), "corrupt"),
    "not-inspect-zip": (lambda logs: _not_inspect_zip(), "zip is not an Inspect log"),
    "invalid-json": (lambda logs: logs["base"].read_bytes()[:200], "not valid JSON at position"),
    "not-utf8": (lambda logs: b'{"version": 2, "x": "\xff\xfe"}', "not valid UTF-8"),
    "json-not-a-log": (lambda logs: b'{"hello": "world"}', "JSON is not an Inspect log"),
    "plain-text": (lambda logs: b"hello world", "neither a .eval zip nor JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_named_and_leaves_nothing(tmp_path, logs, case):
    make, problem = BAD_INPUTS[case]
    lake = open_lake(str(tmp_path / "lake"))
    with pytest.raises(LogIngestError) as info:
        land_batch(lake, key_for(), make(logs), source=f"sandbox-out/{case}.eval")
    message = str(info.value)
    assert message.startswith(f"sandbox-out/{case}.eval: "), message
    assert problem in message, message
    assert lake_files(tmp_path / "lake") == []
    # the same finding for a file read ad hoc, named by its path
    path = tmp_path / f"{case}.eval"
    path.write_bytes(make(logs))
    with pytest.raises(LogIngestError, match=str(path)):
        ingest_log_file(path)


def test_paths_outside_the_lake_are_refused(tmp_path):
    with pytest.raises(LakePathError, match=r"task id '\.\./escape'"):
        key_for(task="../escape")
    with pytest.raises(LakePathError, match="repo"):
        BatchKey(
            repo="../../etc",
            commit=HEAD,
            task="t",
            spec="s",
            window=Window(0, 1),
            settings=RunSettings(model="m", seed=1),
        )
    lake = open_lake(str(tmp_path / "lake"))
    with pytest.raises(LakePathError, match="outside the lake root"):
        lake.write_bytes("raw/../../escape.eval", b"x")
    with pytest.raises(LogIngestError, match="no such file"):
        ingest_log_file(tmp_path / "never-written.eval")
    assert not (tmp_path / "escape.eval").exists()


def test_an_empty_lake_has_empty_views_with_every_column(tmp_path):
    con = connect(open_lake(str(tmp_path / "empty")))
    for view, schema in (("samples", SAMPLES_SCHEMA), ("events", EVENTS_SCHEMA)):
        rel = con.sql(f"select * from {view}")
        assert rel.columns == schema.names and rel.fetchall() == []
    assert con.execute("select count(*) from batches").fetchall()[0] == (0,)
    assert isinstance(con, duckdb.DuckDBPyConnection)


def test_input_digest_matches_for_chat_inputs_targets_choices_files_and_setup(tmp_path):
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.log import read_eval_log
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, ContentText
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate

    from evalrunner_assets.sample_digest import digest_of_sample

    samples = [
        Sample(
            input=[ChatMessageSystem(content="be brief"), ChatMessageUser(content=[ContentText(text="say apple")])],
            target=["apple", "APPLE"],
            files={"a.txt": "hi"},
            setup="echo hi",
        ),
        Sample(input="say pear", target="pear", choices=["pear", "plum"], metadata={"k": 1}),
    ]
    listed = [digest_of_sample(s) for s in samples]  # what the sandbox lists, before any run
    log = eval(
        Task(dataset=samples, solver=[generate()], scorer=includes()),
        model="lakeprobe/probe-1",
        display="none",
        log_dir=str(tmp_path),
        log_level="error",
    )[0]
    logged = [digest_of_sample(s) for s in sorted(read_eval_log(log.location).samples, key=lambda s: s.id)]
    assert logged == listed and listed[0] != listed[1]


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("C", 1.0),
        ("P", 0.5),
        ("I", 0.0),
        ("N", 0.0),
        ("yes", 1.0),
        ("False", 0.0),
        ("0.25", 0.25),
        (True, 1.0),
        (0.75, 0.75),
        (1, 1.0),
        # not a score in [0, 1]: left unscored (and said so beside the verdict), never 0
        ("A", None),
        ("F", None),
        ("", None),
        ("1.5", None),
        ("nan", None),
        (1.5, None),
        (-0.1, None),
        (float("nan"), None),
        ({"exact": 1.0}, None),
        ([1.0], None),
    ],
)
def test_primary_scores_map_like_value_to_float_and_unknown_values_stay_unscored(raw, value, caplog):
    from inspect_ai.scorer import value_to_float

    from lake.ingest import score_value

    with caplog.at_level("WARNING"):
        assert score_value(raw, value_to_float()) == value
    assert "Unable to convert" not in caplog.text  # nothing printed to the user's terminal
