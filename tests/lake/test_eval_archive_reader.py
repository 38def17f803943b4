"""The direct ``.eval`` reader (lake.eval_archive + lake.raw_rows) lands exactly the rows the
``inspect_ai.log`` path lands, on real logs Inspect writes here, and leaves every log it does not
recognize to that path.

Only the installed Inspect version writes logs here (no fixture logs of other versions exist in
the repository), so older/newer versions are covered by the fallback: an archive whose header
claims a version the reader does not know must land the same rows through ``inspect_ai.log``.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lake import open_lake
from lake.eval_archive import EvalArchive, UnrecognizedArchive
from lake.ingest import LogIngestError, LogStatusError, _record, _tables, land_batch, read_log_bytes
from lake.raw_rows import read_archive_rows, read_part, warm_reader
from tests.helpers.inspect_models import probe_batch_key, probe_logs

KEY = probe_batch_key("acme/widgets", "a" * 40, epochs=2)


def _diff(fast: pa.Table, slow: pa.Table) -> str:
    """Which columns differ, and the first differing row of each."""
    if fast.schema != slow.schema:
        return f"schemas differ:\n{fast.schema}\n---\n{slow.schema}"
    if fast.num_rows != slow.num_rows:
        return f"{fast.num_rows} rows (fast) vs {slow.num_rows} (inspect_ai.log)"
    lines = []
    for name in fast.column_names:
        a, b = fast[name].to_pylist(), slow[name].to_pylist()
        if a != b or fast[name].type != slow[name].type:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y or type(x) is not type(y)), None)
            lines.append(f"{name}: row {i}: {a[i] if i is not None else ''!r} vs {b[i] if i is not None else ''!r}")
    return "\n".join(lines) or "tables differ (metadata)"


def _assert_same_rows(data: bytes) -> tuple[pa.Table, pa.Table]:
    rows = read_archive_rows(data)  # raises if the archive is not recognized
    fast_samples, fast_events, fast_errored = rows.tables(KEY)
    _, log = read_log_bytes(data, "log")
    slow_samples, slow_events, slow_errored = _tables(KEY, log)
    assert fast_samples.equals(slow_samples), _diff(fast_samples, slow_samples)
    assert fast_events.equals(slow_events), _diff(fast_events, slow_events)
    assert fast_errored == slow_errored
    assert rows.sample_errors == [s.error.message if s.error else None for s in log.samples]
    # the batch record is built from the header: the same record either way
    common: dict[str, Any] = dict(fmt="eval", sha="0", size=1, raw_path="raw", run_meta=None, status="ok")
    assert _record(KEY, rows.header, **common) == _record(KEY, log, **common)
    assert (rows.header.status, rows.header.error) == (log.status, log.error)
    return fast_samples, fast_events


def _rewrite_member(data: bytes, name: str, edit: Any) -> bytes:
    """The archive with one JSON member replaced by ``edit(parsed member)``; others copied as is."""
    import json

    import inspect_ai._util.zipfile  # noqa: F401  (teaches zipfile zstd, as Inspect reads it)

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            content = src.read(info)
            if info.filename == name:
                content = json.dumps(edit(json.loads(content))).encode()
            dst.writestr(info.filename, content)
    return out.getvalue()


def _with_header(path: Path, **fields: Any) -> bytes:
    return _rewrite_member(path.read_bytes(), "header.json", lambda h: {**h, **fields})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real logs: the lake probes (epochs, tool calls, two scorers, an errored sample, error
    status, a .json log) and one richer task (dict-valued scores, tool errors, chat-message and
    long inputs Inspect moves into attachments)."""
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, ContentText, get_model
    from inspect_ai.scorer import Score, Target, includes, mean, scorer
    from inspect_ai.solver import TaskState, generate, use_tools
    from inspect_ai.tool import Tool, ToolError, tool

    root = tmp_path_factory.mktemp("archive-corpus")
    logs = dict(probe_logs(root))

    @tool
    def lookup() -> Tool:
        async def execute(topic: str) -> str:
            """Look a topic up; 'missing' is not found.

            Args:
                topic: What to look up.
            """
            if topic.startswith("missing"):
                raise ToolError(f"no entry for {topic}")
            return topic

        return execute

    @scorer(metrics={"*": [mean()]})
    def parts() -> Any:
        async def score(state: TaskState, target: Target) -> Score:
            return Score(value={"length": len(state.output.completion), "has_answer": 1.0})

        return score

    long_text = "Please use tool and say fig. " + "background " * 60
    samples = [
        Sample(id=1, input="Please use tool and say missing.", target="missing"),
        Sample(id=2, input=long_text, target="fig"),
        Sample(
            id=3,
            input=[ChatMessageSystem(content="be brief"), ChatMessageUser(content=[ContentText(text="say apple")])],
            target=["apple", "APPLE"],
            choices=["apple", "pear"],
        ),
        Sample(id=10, input="say kiwi", target="kiwi", files={"a.txt": "hi"}, setup="echo hi"),
    ]
    rich = eval(
        Task(dataset=samples, solver=[use_tools(lookup()), generate()], scorer=[parts(), includes()]),
        model=get_model("lakeprobe/probe-1"),
        log_dir=str(root / "rich"),
        display="none",
        log_level="error",
        epochs=2,
    )[0]
    assert rich.status == "success"
    logs["rich"] = Path(rich.location)
    return logs


@pytest.mark.parametrize("name", ["head", "failed", "harness_error", "rich"])
def test_the_direct_reader_lands_the_rows_of_the_inspect_path(corpus, name):
    samples, events = _assert_same_rows(corpus[name].read_bytes())
    assert samples.num_rows > 0 and events.num_rows > 0


def test_the_corpus_has_what_the_comparison_must_cover(corpus):
    _, head_events = _assert_same_rows(corpus["head"].read_bytes())
    rich_samples, rich_events = _assert_same_rows(corpus["rich"].read_bytes())
    head_samples = read_archive_rows(corpus["head"].read_bytes()).tables(KEY)[0]
    assert set(head_samples["epoch"].to_pylist()) == {1, 2}
    assert any(head_samples["error_where"].to_pylist())  # an errored sample, its span named
    assert "tool" in head_events["event"].to_pylist()
    errors = [e for k, e in zip(rich_events["event"].to_pylist(), rich_events["error"].to_pylist()) if k == "tool"]
    assert any(e and "no entry for missing" in e for e in errors)  # a tool error
    assert any('"length"' in s for s in rich_samples["scores"].to_pylist())  # dict-valued scores
    archive = EvalArchive(corpus["rich"].read_bytes())
    raw = list(archive.samples())
    assert any(not isinstance(s["input"], str) for s in raw)  # a chat-message input
    assert any(s.get("attachments") for s in raw)  # long content moved into attachments
    texts = rich_events["text"].to_pylist()
    assert not any(t and t.startswith("attachment://") for t in texts)


def test_samples_stored_out_of_order_land_in_inspects_order(corpus):
    """Inspect stores samples as they finish and sorts them on read (epoch, then id)."""
    import inspect_ai._util.zipfile  # noqa: F401  (teaches zipfile zstd, as Inspect reads it)

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(corpus["rich"].read_bytes())) as src, zipfile.ZipFile(out, "w") as dst:
        for info in reversed(src.infolist()):
            dst.writestr(info.filename, src.read(info))
    samples, _ = _assert_same_rows(out.getvalue())
    assert samples["sample_id"].to_pylist()[:4] == ["1", "2", "3", "10"]


def test_a_cancelled_log_lands_like_before(corpus, tmp_path):
    data = _with_header(corpus["head"], status="cancelled")
    _assert_same_rows(data)
    with pytest.raises(LogStatusError, match="'cancelled'") as info:
        land_batch(open_lake(str(tmp_path / "lake")), KEY, data, source="cancelled.eval")
    assert info.value.record is not None and info.value.record.status == "cancelled"


def _land_both_ways(data: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, bytes]]:
    """Every file land_batch writes, landed by the direct reader and by inspect_ai.log."""
    import lake.raw_rows

    landed = []
    for way in ("direct", "inspect"):
        if way == "inspect":

            def unrecognized(data: bytes) -> Any:
                raise UnrecognizedArchive("forced")

            monkeypatch.setattr(lake.raw_rows, "read_archive_rows", unrecognized)
        root = tmp_path / way
        try:
            land_batch(open_lake(str(root)), KEY, data, source="log.eval")
        except LogStatusError:
            pass
        landed.append({str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()})
    return landed


@pytest.mark.parametrize("name", ["head", "failed", "harness_error", "rich"])
def test_land_batch_writes_the_same_files_either_way(corpus, name, tmp_path, monkeypatch):
    direct, inspect = _land_both_ways(corpus[name].read_bytes(), tmp_path, monkeypatch)
    assert direct.keys() == inspect.keys()
    assert direct == inspect


def test_an_unknown_log_format_version_falls_back_and_lands_the_same_rows(corpus, tmp_path, monkeypatch):
    data = _with_header(corpus["head"], version=99)
    with pytest.raises(UnrecognizedArchive, match="version 99"):
        EvalArchive(data)
    fallback = tmp_path / "fallback"
    land_batch(open_lake(str(fallback)), KEY, data, source="v99.eval")
    known = tmp_path / "known"
    land_batch(open_lake(str(known)), KEY, corpus["head"].read_bytes(), source="v2.eval")

    # the raw logs differ (and so the file names), the rows do not
    import pyarrow.parquet as pq

    got = [pq.read_table(p) for p in sorted(fallback.rglob("*.parquet"))]
    want = [pq.read_table(p) for p in sorted(known.rglob("*.parquet"))]
    assert len(got) == len(want) == 2
    for a, b in zip(got, want):
        assert a.equals(b), _diff(a, b)


def test_timestamps_without_an_offset_are_read_as_utc_like_inspect_reads_them(corpus):
    def naive(sample: dict[str, Any]) -> dict[str, Any]:
        sample["started_at"] = sample["started_at"].replace("+00:00", "")
        sample["events"][0]["timestamp"] = sample["events"][0]["timestamp"].replace("+00:00", "")
        return sample

    _assert_same_rows(_rewrite_member(corpus["head"].read_bytes(), "samples/s1_epoch_1.json", naive))


def test_a_sample_field_the_reader_does_not_know_falls_back(corpus):
    data = _rewrite_member(corpus["head"].read_bytes(), "samples/s1_epoch_1.json", lambda s: {**s, "novel": 1})
    with pytest.raises(UnrecognizedArchive, match="novel"):
        read_archive_rows(data)


def test_a_json_log_is_left_to_inspect(corpus, tmp_path):
    with pytest.raises(UnrecognizedArchive):
        EvalArchive(corpus["base"].read_bytes())
    record = land_batch(open_lake(str(tmp_path / "lake")), KEY, corpus["base"].read_bytes(), source="base.json")
    assert record.log_format == "json" and record.sample_rows == 3


def _corrupt(data: bytes) -> bytes:
    mid = len(data) // 2
    return data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + 64]) + data[mid + 64 :]


def _crc_broken(data: bytes) -> bytes:
    """One sample member's stored CRC changed in both headers: it decompresses but fails its check."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = next(i for i in zf.infolist() if i.filename.startswith("samples/"))
    wrong = ((info.CRC + 1) & 0xFFFFFFFF).to_bytes(4, "little")
    out = bytearray(data)
    right = info.CRC.to_bytes(4, "little")
    local = info.header_offset + 14
    assert out[local : local + 4] == right
    out[local : local + 4] = wrong
    central = out.rfind(info.filename.encode()) - 46  # the directory, after every local header, names it last
    assert out[central : central + 4] == b"PK\x01\x02" and out[central + 16 : central + 20] == right
    out[central + 16 : central + 20] = wrong
    return bytes(out)


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:5000],
        lambda d: d[: len(d) - 100],
        _corrupt,
        _crc_broken,
    ],
    ids=["truncated", "cut-at-the-end", "corrupt", "crc"],
)
def test_a_damaged_archive_gets_the_error_it_got_before(corpus, tmp_path, damage):
    data = damage(corpus["head"].read_bytes())
    with pytest.raises(LogIngestError) as before:
        read_log_bytes(data, "damaged.eval")
    with pytest.raises(LogIngestError) as now:
        land_batch(open_lake(str(tmp_path / "lake")), KEY, data, source="damaged.eval")
    assert str(now.value) == str(before.value)
    assert type(now.value) is type(before.value)


def test_logs_landed_in_parallel_threads_land_what_they_land_one_by_one(corpus, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    names = ["head", "rich", "failed", "head", "rich"]

    def land(i: int) -> dict[str, bytes]:
        root = tmp_path / f"{i}"
        land_batch(open_lake(str(root)), KEY, corpus[names[i]].read_bytes(), source=names[i])
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        parallel = list(pool.map(land, range(len(names))))
    assert parallel[0] == parallel[3] and parallel[1] == parallel[4]
    assert parallel[0] != parallel[1]
    import gc

    assert gc.isenabled()


def _pool_rows(data: bytes) -> Any:
    from lake import read_pool
    from lake.raw_rows import ArchiveRows

    archive = EvalArchive(data)
    packed = [archive.packed(m) for m in archive.sample_members]
    parts = read_pool.read_parts(read_part, warm_reader, archive.sample_members, packed, 2, min_samples=1)
    return ArchiveRows(archive.header, parts), len(parts)


def test_rows_read_in_worker_processes_equal_the_rows_read_here(corpus: dict[str, Path]) -> None:
    from lake import read_pool

    assert read_pool.wait_ready(2, timeout=60, warm=warm_reader), "the landing workers did not start"
    checked = 0
    for name, path in corpus.items():
        data = path.read_bytes()
        try:
            here = read_archive_rows(data, processes=0)
        except UnrecognizedArchive:
            continue
        pooled, parts = _pool_rows(data)
        assert parts == (2 if len(here.sample_errors) > 1 else 1), name
        for a, b in zip(pooled.tables(KEY), here.tables(KEY)):
            assert a == b if isinstance(a, int) else a.equals(b), name
        assert pooled.sample_errors == here.sample_errors
        checked += 1
    assert checked >= 3


def test_a_killed_landing_worker_costs_only_a_read_here(corpus: dict[str, Path]) -> None:
    from lake import read_pool

    assert read_pool.wait_ready(2, timeout=60, warm=warm_reader)
    first = read_pool._pool
    assert first is not None
    first.workers[0].process.kill()
    first.workers[0].process.wait()
    data = corpus["rich"].read_bytes()
    pooled, parts = _pool_rows(data)
    assert parts == 1  # read here, in one part
    assert pooled.tables(KEY)[0].equals(read_archive_rows(data, processes=0).tables(KEY)[0])
    assert read_pool._pool is not first  # the broken pool was dropped; the next large log starts another
    assert read_pool.wait_ready(2, timeout=60, warm=warm_reader)
    assert _pool_rows(data)[1] == 2


def test_a_damaged_member_read_in_a_worker_is_unrecognized(corpus: dict[str, Path]) -> None:
    from lake import read_pool

    assert read_pool.wait_ready(2, timeout=60, warm=warm_reader)
    data = corpus["rich"].read_bytes()
    archive = EvalArchive(data)
    packed = [archive.packed(m) for m in archive.sample_members]
    packed[-1] = packed[-1][:-3] + b"xyz"
    with pytest.raises(UnrecognizedArchive):
        read_pool.read_parts(read_part, warm_reader, archive.sample_members, packed, 2, min_samples=1)
