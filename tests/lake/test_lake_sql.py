"""SQL over a local lake: views, the paired head/base join, summaries and `evalrunner sql` output."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import sql
from lake import BatchKey, QueryError, connect, land_batch, open_lake, refresh, run_sql, view_command
from lake.duck import query
from tests.helpers.inspect_models import EXPECTED_PAIRS, probe_batch_key, probe_logs

REPO = "acme/agent"
HEAD = "a" * 40
BASE = "b" * 40


def key(commit: str, epochs: int) -> BatchKey:
    return probe_batch_key(REPO, commit, epochs)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return probe_logs(tmp_path_factory.mktemp("inspect-logs"))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, logs):
    lake = open_lake(str(tmp_path_factory.mktemp("lake")))
    land_batch(lake, key(HEAD, 2), logs["head"].read_bytes())
    land_batch(lake, key(BASE, 1), logs["base"].read_bytes())
    return lake


def test_paired_samples_average_each_arms_epochs_per_input(lake):
    con = connect(lake)
    rows = query(con, "paired_samples", {"repo": REPO, "head": HEAD, "base": BASE}).to_pylist()
    got = [
        (
            r["sample_id"],
            r["head_score"],
            r["base_score"],
            r["delta"],
            r["head_errors"],
            r["base_errors"],
            r["head_epochs"],
            r["base_epochs"],
        )
        for r in rows
    ]
    assert got == EXPECTED_PAIRS
    assert {r["task"] for r in rows} == {"qa/probe"}


def test_parameters_are_bound_not_formatted(lake):
    con = connect(lake)
    hostile = {"repo": "' or 1=1 --", "head": HEAD, "base": BASE}
    assert query(con, "paired_samples", hostile).num_rows == 0
    for name in sql.names():
        text = sql.load(name)
        assert "{" not in text and "%s" not in text, name  # nothing to format into


def test_task_arm_summary_counts_errors_tokens_and_unknown_cost(lake):
    con = connect(lake)
    rows = query(con, "task_arm_summary", {"repo": REPO}).to_pylist()
    head, base = rows
    assert (head["commit"], head["samples"], head["sample_epochs"], head["errors"]) == (HEAD, 4, 8, 2)
    assert head["mean_score"] == pytest.approx(0.5)  # 3 right of 6 scored epochs
    assert (head["total_tokens"], head["cost_usd"], head["cost_unknown_rows"]) == (160, None, 8)
    assert head["p50_total_time_s"] > 0
    assert (base["commit"], base["samples"], base["sample_epochs"], base["errors"]) == (BASE, 3, 3, 0)
    assert base["mean_score"] == pytest.approx(2 / 3)
    assert (base["total_tokens"], base["cost_usd"]) == (80, None)


def test_tool_usage_and_batches_views(lake):
    con = connect(lake)
    tools = query(con, "tool_usage", {"repo": REPO}).to_pylist()
    assert [(t["commit"], t["tool_function"], t["calls"], t["failed_calls"]) for t in tools] == [
        (HEAD, "lookup", 2, 0),
        (BASE, "lookup", 1, 0),
    ]
    batches = con.sql(
        'select "commit", status, sample_rows, errored_samples, log_format, publishable from batches order by "commit"'
    ).fetchall()
    assert batches == [(HEAD, "ok", 8, 2, "eval", True), (BASE, "ok", 3, 0, "json", True)]


def test_refresh_makes_new_batches_visible(tmp_path, logs):
    fresh = open_lake(str(tmp_path / "fresh"))
    con = connect(fresh)
    assert con.execute("select count(*) from samples").fetchall() == [(0,)]
    land_batch(fresh, key(BASE, 1), logs["base"].read_bytes())
    assert con.execute("select count(*) from samples").fetchall() == [(0,)]
    refresh(con, fresh)
    assert con.execute("select count(*) from samples").fetchall() == [(3,)]


def test_run_sql_renders_table_csv_json_and_parquet(tmp_path, lake):
    q = "select sample_id, head_score, delta from (" + sql.load("paired_samples") + ")"
    params = {"repo": REPO, "head": HEAD, "base": BASE}
    table = run_sql(lake, q, "table", params=params)
    lines = table.splitlines()
    assert lines[0].split() == ["sample_id", "head_score", "delta"]
    assert lines[2].split() == ["s1", "0.5", "-0.5"] and lines[5].split() == ["s4", "0", "NULL"]
    assert lines[-1] == "(4 rows)"
    rows = list(csv.reader(io.StringIO(run_sql(lake, q, "csv", params=params))))
    assert rows[0] == ["sample_id", "head_score", "delta"] and rows[1] == ["s1", "0.5", "-0.5"]
    assert rows[4] == ["s4", "0.0", ""]
    as_json = json.loads(run_sql(lake, q, "json", params=params))
    assert as_json[3] == {"sample_id": "s4", "head_score": 0.0, "delta": None}
    out = tmp_path / "pairs.parquet"
    assert run_sql(lake, q, "parquet", out=str(out), params=params) == f"wrote 4 rows to {out}\n"
    assert pq.read_table(out).column("sample_id").to_pylist() == ["s1", "s2", "s3", "s4"]
    with pytest.raises(QueryError, match="needs an output path"):
        run_sql(lake, q, "parquet")
    with pytest.raises(QueryError, match="SQL failed"):
        run_sql(lake, "select no_such_column from samples")


def test_view_command_opens_inspect_view_on_raw_logs(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    cmd = view_command(lake, port=7999)
    assert cmd[:5] == [sys.executable, "-m", "inspect_ai", "view", "start"]
    assert cmd[cmd.index("--log-dir") + 1] == str(tmp_path / "lake" / "raw")
    assert "--recursive" in cmd and "--no-trust-content" in cmd and cmd[-2:] == ["--port", "7999"]


def test_a_samples_address_in_inspects_viewer_is_its_log_under_raw_and_its_id_and_epoch():
    from lake.viewer import sample_url

    url = sample_url("http://view.example:7575/", "raw/acme/agent/" + HEAD + "/qa/a b/w0/x#1.eval", "id/1 ?", 2)
    assert url == (
        "http://view.example:7575/#/logs/acme/agent/" + HEAD + "/qa/a%20b/w0/x%231.eval/samples/sample/id%2F1%20%3F/2/"
    )
    with pytest.raises(ValueError, match="not a raw log"):
        sample_url("http://v", "tables/samples/x.parquet", "s", 1)


def test_paired_samples_and_the_engine_share_one_rule_on_digests_and_errors():
    # The lake's query over every row of two commits (sql/paired_samples.sql, through the
    # paired_inputs view) and the engine's pairing of the same rows (stats.pair_task) apply one
    # rule (sql.PAIRING_RULE) and give the same pairs, with the rule's outcome pinned below.
    import duckdb

    from evalrunner_assets.stats import pair_task

    rows = {
        HEAD: [
            ("1", 1, 1.0, None, "aa"),
            ("2", 1, 1.0, None, "bb"),
            ("3", 1, None, "RuntimeError('x')", "cc"),
            ("4", 1, 1.0, None, None),
            ("5", 1, 1.0, None, "ee"),
            ("5", 2, 0.0, None, "ff"),
        ],
        BASE: [
            ("1", 1, 0.0, None, "aa"),
            ("2", 1, 0.0, None, "XX"),
            ("3", 1, 1.0, None, "cc"),
            ("4", 1, 0.0, None, None),
            ("5", 1, 1.0, None, "ee"),
            ("5", 2, 1.0, None, "ee"),
        ],
    }
    con = duckdb.connect()
    con.execute(
        'create table samples (repo varchar, "commit" varchar, task varchar, sample_id varchar, '
        "epoch bigint, score double, error varchar, input_digest varchar)"
    )
    con.execute("alter table samples add column error_where varchar")
    for commit, arm in rows.items():
        for sid, epoch, score, error, digest in arm:
            con.execute(
                "insert into samples values (?, ?, 't', ?, ?, ?, ?, ?, null)",
                [REPO, commit, sid, epoch, score, error, digest],
            )
    for name in (*sql.PAIRING_RULE, "paired_inputs_view"):
        con.execute(sql.load(name))
    got = con.sql(sql.load("paired_samples"), params={"repo": REPO, "head": HEAD, "base": BASE}).fetchall()
    sql_pairs = {r[1]: r[4] for r in got if r[4] is not None}

    def as_rows(arm):
        return [{"sample_id": s, "epoch": e, "score": v, "error": err, "input_digest": d} for s, e, v, err, d in arm]

    p = pair_task(as_rows(rows[HEAD]), as_rows(rows[BASE]))
    assert sql_pairs == pytest.approx(dict(zip(p.sample_ids, p.deltas.tolist())))
    assert sorted(sql_pairs) == ["1", "3", "4"] and sql_pairs["3"] == -1.0  # errored head scores 0
    assert sorted(p.changed_inputs) == ["2", "5"]
    status = con.sql(
        "select sample_id, pair_status from paired_inputs($repo, $head, $base) order by sample_id",
        params={"repo": REPO, "head": HEAD, "base": BASE},
    ).fetchall()
    assert status == [("1", "paired"), ("2", "changed_input"), ("3", "paired"), ("4", "paired"), ("5", "changed_input")]
