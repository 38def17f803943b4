"""The same landing and SQL round trip on a gs:// lake, against a real GCS JSON API on loopback."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from lake import BatchKey, Lake, LogStatusError, connect, land_batch, view_command
from lake.duck import query
from lake.storage import gcs_filesystem
from tests.helpers.inspect_models import EXPECTED_PAIRS, probe_batch_key, probe_logs

REPO = "acme/agent"
HEAD = "a" * 40
BASE = "b" * 40
BUCKET = "evalrunner-test"


@pytest.fixture(scope="module")
def gcs_endpoint() -> Iterator[str]:
    """gcp-storage-emulator, in memory, on a loopback port; stopped after the module."""
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"  # else a gRPC probe stalls 60 s
    from gcp_storage_emulator.server import create_server

    # Port 0: the emulator binds a port itself, so none can be taken between probing and
    # binding (a failed bind in its thread would leave ``start()`` waiting forever).
    server = create_server("127.0.0.1", 0, in_memory=True, default_bucket=BUCKET)
    server.start()
    port = server._api._httpd.server_address[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def gs_lake(endpoint: str, prefix: str) -> Lake:
    fs = gcs_filesystem(endpoint_url=endpoint, token="anon", skip_instance_cache=True)
    return Lake(root=f"gs://{BUCKET}/{prefix}", fs=fs)


def key(commit: str, epochs: int) -> BatchKey:
    return probe_batch_key(REPO, commit, epochs)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory):
    return probe_logs(tmp_path_factory.mktemp("inspect-logs"))


def test_gs_lake_lands_and_pairs_like_a_local_one(gcs_endpoint, logs):
    lake = gs_lake(gcs_endpoint, "round-trip")
    empty = connect(lake)
    assert empty.execute("select count(*) from samples").fetchall() == [(0,)]

    head = land_batch(lake, key(HEAD, 2), logs["head"].read_bytes())
    base = land_batch(lake, key(BASE, 1), logs["base"].read_bytes())
    assert lake.read_bytes(head.raw_path) == logs["head"].read_bytes()
    assert land_batch(lake, key(HEAD, 2), logs["head"].read_bytes()) == head  # idempotent

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
    assert con.execute("select count(*) from events").fetchall() == [(head.event_rows + base.event_rows,)]
    assert con.execute("select count(*), sum(sample_rows) from batches").fetchall() == [(2, 11)]
    # the objects really are in the bucket, under the layout's names
    listed = lake.fs.find(f"{BUCKET}/round-trip")
    assert sum(p.endswith(".parquet") for p in listed) == 4
    assert view_command(lake)[view_command(lake).index("--log-dir") + 1] == f"gs://{BUCKET}/round-trip/raw"


def test_gs_error_log_lands_a_record_and_no_parquet(gcs_endpoint, logs):
    lake = gs_lake(gcs_endpoint, "failed")
    with pytest.raises(LogStatusError, match="gs://evalrunner-test/failed/raw/"):
        land_batch(lake, key(HEAD, 1), logs["harness_error"].read_bytes())
    listed = lake.fs.find(f"{BUCKET}/failed")
    assert not [p for p in listed if p.endswith(".parquet")]
    assert connect(lake).execute("select status from batches").fetchall() == [("error",)]


def test_list_modified_gives_each_object_its_time_from_one_listing(gcs_endpoint):
    lake = gs_lake(gcs_endpoint, "list-modified")
    before = time.time() - 60
    lake.write_bytes("inbox/github/a.json", b"{}")
    lake.write_bytes("inbox/github/b.json", b"{}")
    lake.write_bytes("inbox/github/sub/c.json", b"{}")  # not directly under: not listed
    listed = list(lake.list_modified("inbox/github"))
    assert [rel for rel, _ in listed] == ["inbox/github/a.json", "inbox/github/b.json"]
    assert all(before < t < time.time() + 60 for _, t in listed)
    assert list(lake.list_modified("inbox/none")) == []
