"""One pairing rule at scale: on a 1M-row lake (Parquet files committed by batch records), the
SQL view SQL users query (`paired_inputs`) and the engine's path (the rows of its batches from
`comparison_samples`, paired by `stats.pair_tasks`) give the same pairs, and both match what
the generator built in."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from evalrunner_assets import stats
from lake import SAMPLES_SCHEMA, BatchKey, BatchRecord, Window, connect, open_lake
from lake.batch import RunSettings
from lake.duck import query
from lake.ingest import parquet_bytes

REPO = "acme/pairing-scale"
HEAD, BASE = "a" * 40, "b" * 40
TASKS = ("qa/one", "qa/two")
INPUTS = 125_000  # per arm and task; 2 epochs: 2 arms x 2 tasks x 250k = 1M rows
EPOCHS = 2
SHIFT = 250  # head runs ids [0, INPUTS), base [SHIFT, INPUTS + SHIFT): SHIFT ids only on each side
WINDOWS = 5
ERRORS = np.array(["RuntimeError('boom')", "ValueError('x')", "KeyError('k')"], dtype=object)
WHERES = np.array(["solver:agent", "scorer:match"], dtype=object)


def arm_rows(rng: np.random.Generator, ids: np.ndarray, *, changed: np.ndarray, split: np.ndarray) -> dict:
    """One arm's rows (two epochs per id): scores in {0, .5, 1}, 2% errored, 1% unscored; digests
    d<id>, x<id> for ids in ``changed``, and a second-epoch digest y<id> for ids in ``split``."""
    sid = np.repeat(ids, EPOCHS)
    epoch = np.tile(np.arange(1, EPOCHS + 1), len(ids))
    n = len(sid)
    score = rng.integers(0, 3, n) / 2
    errored = rng.random(n) < 0.02
    unscored = ~errored & (rng.random(n) < 0.01)
    digest = np.where(np.isin(sid, changed), "x", "d").astype(object) + sid.astype(str).astype(object)
    digest = np.where((epoch == 2) & np.isin(sid, split), "y" + sid.astype(str).astype(object), digest)
    return {
        "sid": sid,
        "epoch": epoch,
        "score": np.where(errored | unscored, np.nan, score),
        "errored": errored,
        "unscored": unscored,
        "error": np.where(errored, ERRORS[rng.integers(0, len(ERRORS), n)], None),
        "where": np.where(errored, WHERES[rng.integers(0, len(WHERES), n)], None),
        "digest": digest,
    }


def expected_inputs(arm: dict) -> dict[int, tuple[float | None, str]]:
    """Per id: mean over epochs (errored = 0), None when an epoch is unscored; its digest ('' when
    the epochs disagree)."""
    values = np.where(arm["errored"], 0.0, arm["score"])
    sid = arm["sid"]
    out = {}
    for i in range(0, len(sid), EPOCHS):
        digests = set(arm["digest"][i : i + EPOCHS])
        mean = None if arm["unscored"][i : i + EPOCHS].any() else float(values[i : i + EPOCHS].mean())
        out[int(sid[i])] = (mean, digests.pop() if len(digests) == 1 else "")
    return out


def key(commit: str, task: str, window: Window) -> BatchKey:
    return BatchKey(
        repo=REPO,
        commit=commit,
        task=task,
        spec="evals/scale.py",
        window=window,
        config_digest="cfg",
        backend="none",
        runtime_digest="rt",
        settings=RunSettings(model="sim/model", seed=3, epochs=EPOCHS),
    )


def land(lake, commit: str, task: str, arm: dict) -> list[BatchKey]:
    """The arm's rows as WINDOWS committed batches (Parquet + record), like landed windows."""
    keys = []
    per = len(arm["sid"]) // WINDOWS
    for w in range(WINDOWS):
        lo, hi = w * per, (w + 1) * per if w < WINDOWS - 1 else len(arm["sid"])
        window = Window(lo // EPOCHS, hi // EPOCHS)
        k = key(commit, task, window)
        n = hi - lo
        given = {
            "repo": pa.array([REPO] * n),
            "commit": pa.array([commit] * n),
            "task": pa.array([task] * n),
            "batch": pa.array([k.digest] * n),
            "window": pa.array([window.name] * n),
            "window_start": pa.array([window.start] * n, pa.int64()),
            "window_stop": pa.array([window.stop] * n, pa.int64()),
            "sample_id": pa.array(("q" + arm["sid"][lo:hi].astype(str).astype(object)).tolist(), pa.string()),
            "epoch": pa.array(arm["epoch"][lo:hi], pa.int64()),
            "score": pa.array(arm["score"][lo:hi], pa.float64(), from_pandas=True),
            "error": pa.array(arm["error"][lo:hi], pa.string()),
            "error_where": pa.array(arm["where"][lo:hi], pa.string()),
            "input_digest": pa.array(arm["digest"][lo:hi], pa.string()),
        }
        columns = []
        for field in SAMPLES_SCHEMA:
            if field.name in given:
                columns.append(given[field.name].cast(field.type))
            elif field.nullable:
                columns.append(pa.nulls(n, field.type))
            else:
                columns.append(pa.repeat(pa.scalar(0 if pa.types.is_integer(field.type) else "", field.type), n))
        data = parquet_bytes(pa.table(columns, schema=SAMPLES_SCHEMA))
        layout = lake.layout
        path = layout.table_file("samples", REPO, commit, task, window, k.digest)
        lake.write_bytes(path, data)
        raw = b"stands for the Inspect log"  # the record vouches for it; nothing reads it here
        lake.write_bytes(layout.raw_log(REPO, commit, task, window, k.digest), raw)
        record = BatchRecord(
            batch=k.digest,
            key=k.as_record(),
            repo=REPO,
            commit=commit,
            task=task,
            window=window.name,
            publishable=True,
            missing_fields=[],
            status="ok",
            log_status="success",
            log_format="eval",
            log_sha256=hashlib.sha256(raw).hexdigest(),
            log_bytes=len(raw),
            raw_path=layout.raw_log(REPO, commit, task, window, k.digest),
            samples_path=path,
            samples_sha256=hashlib.sha256(data).hexdigest(),
            samples_bytes=len(data),
            sample_rows=n,
        )
        lake.write_bytes(layout.batch_record(REPO, commit, task, window, k.digest), record.to_json_bytes())
        keys.append(k)
    return keys


@pytest.mark.slow
def test_the_sql_view_and_the_engine_give_the_same_pairs_on_a_million_rows(tmp_path) -> None:
    rng = np.random.default_rng(20240601)
    lake = open_lake(str(tmp_path / "lake"))
    truth: dict[str, tuple[dict, dict]] = {}
    keys: dict[tuple[str, str], list[BatchKey]] = {}
    errored: dict[str, tuple[int, int]] = {}
    for task in TASKS:
        changed = rng.choice(INPUTS, INPUTS // 100, replace=False)  # base ran other inputs
        split = rng.choice(INPUTS, INPUTS // 500, replace=False)  # head's epochs disagree
        head = arm_rows(rng, np.arange(INPUTS), changed=np.array([], int), split=split)
        base = arm_rows(rng, np.arange(SHIFT, INPUTS + SHIFT), changed=changed, split=np.array([], int))
        keys[(HEAD, task)] = land(lake, HEAD, task, head)
        keys[(BASE, task)] = land(lake, BASE, task, base)
        truth[task] = (expected_inputs(head), expected_inputs(base))
        errored[task] = tuple(int(a["errored"].reshape(-1, EPOCHS).any(axis=1).sum()) for a in (head, base))

    # SQL users: the parameterised view over every committed row of the two commits.
    con = connect(lake)
    assert con.execute("select count(*) from samples").fetchall() == [(2 * 2 * INPUTS * EPOCHS,)]
    view = query(con, "paired_samples", {"repo": REPO, "head": HEAD, "base": BASE})
    status = con.sql(
        "select task, sample_id, pair_status from paired_inputs($repo, $head, $base)",
        params={"repo": REPO, "head": HEAD, "base": BASE},
    ).to_arrow_table()

    # The engine: the rows of its batches (comparison_samples), paired by stats.pair_tasks.
    digests = [k.digest for ks in keys.values() for k in ks]
    rows = query(con, "comparison_samples", {"batches": digests})
    orders = {task: stats.seeded_order([f"q{i}" for i in range(INPUTS + SHIFT)], 3) for task in TASKS}

    def arm(commit: str, task: str) -> pa.Table:
        return rows.filter(pc.and_(pc.equal(rows["commit"], commit), pc.equal(rows["task"], task)))

    engine = stats.pair_tasks({task: (arm(HEAD, task), arm(BASE, task), orders[task]) for task in TASKS})

    for task in TASKS:
        pairing = engine[task]
        mine = view.filter(pc.equal(view["task"], task))
        paired = mine.filter(pc.is_valid(mine["delta"]))
        sql_pairs = dict(zip(paired["sample_id"].to_pylist(), paired["delta"].to_pylist()))
        # The same pairs with the same deltas, the engine's in the seeded order.
        assert sorted(sql_pairs) == sorted(pairing.sample_ids)
        assert pairing.deltas.tolist() == pytest.approx([sql_pairs[s] for s in pairing.sample_ids], abs=1e-12)
        position = {s: i for i, s in enumerate(orders[task])}
        assert [position[s] for s in pairing.sample_ids] == sorted(position[s] for s in pairing.sample_ids)
        outcome = status.filter(pc.equal(status["task"], task))

        def ids(value: str, outcome: pa.Table = outcome) -> tuple[str, ...]:
            return tuple(sorted(outcome.filter(pc.equal(outcome["pair_status"], value))["sample_id"].to_pylist()))

        assert ids("changed_input") == pairing.changed_inputs
        assert ids("head_only") == pairing.unpaired_head and ids("base_only") == pairing.unpaired_base

        # Both match the generator's ground truth.
        head, base = truth[task]
        want = {
            f"q{i}": h[0] - base[i][0]
            for i, h in head.items()
            if i in base and h[0] is not None and base[i][0] is not None and h[1] == base[i][1] and h[1] != ""
        }
        assert len(want) > 0.9 * INPUTS
        assert sorted(want) == sorted(pairing.sample_ids)
        assert pairing.deltas.tolist() == pytest.approx([want[s] for s in pairing.sample_ids], abs=1e-12)
        changed = {f"q{i}" for i, h in head.items() if i in base and h[0] is not None and base[i][0] is not None}
        assert set(pairing.changed_inputs) == changed - set(want) and len(pairing.changed_inputs) > INPUTS // 100
        assert pairing.unpaired_head == tuple(sorted(f"q{i}" for i in range(SHIFT) if head[i][0] is not None))
        assert (pairing.inputs_head, pairing.inputs_base) == (INPUTS, INPUTS)
        assert pairing.unscored_head == sum(h[0] is None for h in head.values()) > 0
        assert (pairing.errored_head, pairing.errored_base) == errored[task]
        assert sum(n for _, _, n in pairing.error_causes_head) == pairing.errored_head
