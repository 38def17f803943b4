"""The SWE pipeline's lake: task sets, blobs, attempts (write-once rows), runs, gold checks.

Every path comes from ``lake.layout``; tables are Parquet written atomically. An attempt's row
is named by its key (agent version, task id, sample index) and written with ``write_once``, so a
retry or a resubmitted run can never add a second sample: the first writer wins and the others
see it exists.
"""

from __future__ import annotations

import hashlib
import io
import json
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import sql
from evalrunner_assets.swe.model import ATTEMPTS_SCHEMA, FLAKE_SCHEMA, RunSpec, SweError, TaskSet
from lake.storage import Lake


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def parquet_bytes(rows: list[dict[str, Any]], schema: pa.Schema) -> bytes:
    table = pa.Table.from_pylist(rows, schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


class SweStore:
    """Reads and writes the ``swe/`` part of one lake."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self.layout = lake.layout

    # -- blobs ---------------------------------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        rel = self.layout.swe_blob(digest)
        if not self.lake.exists(rel):
            self.lake.write_once(rel, data)
        return digest

    def blob(self, digest: str) -> bytes:
        data = self.lake.read_bytes(self.layout.swe_blob(digest))
        if hashlib.sha256(data).hexdigest() != digest:
            raise SweError(f"blob {digest} in the lake does not match its digest (corrupt); re-register the task set")
        return data

    def hidden_files(self, digest: str) -> dict[str, bytes]:
        bundle = json.loads(self.blob(digest))
        return {path: content.encode("utf-8") for path, content in bundle.items()}

    # -- task sets -----------------------------------------------------------------------------
    def save_task_set(self, task_set: TaskSet) -> bool:
        """Store a task set; False if the same tasks were registered already. A task id that
        another set (or an earlier version of this one) defines differently is refused: attempt
        rows are keyed by task id, so its meaning must never change."""
        known = {t.id: (ts.name, t.digest()) for ts in self.task_sets() for t in ts.tasks}
        for t in task_set.tasks:
            if t.id in known and known[t.id][1] != t.digest():
                raise SweError(
                    f"task {t.id!r} is already registered (in task set {known[t.id][0]!r}) with another "
                    "definition; give the changed task a new id"
                )
        rel = self.layout.swe_task_set(task_set.name)
        if self.lake.exists(rel):
            old = TaskSet.model_validate_json(self.lake.read_bytes(rel))
            if [t.digest() for t in old.tasks] == [t.digest() for t in task_set.tasks]:
                return False
        rows = [{**t.model_dump(), "hidden_paths": json.dumps(t.hidden_paths)} for t in task_set.tasks]
        for r in rows:
            r["fail_to_pass"] = json.dumps(r["fail_to_pass"])
            r["pass_to_pass"] = json.dumps(r["pass_to_pass"])
        self.lake.write_bytes(self.layout.swe_tasks_table(task_set.name), parquet_bytes(rows, _tasks_schema()))
        self.lake.write_bytes(rel, task_set.model_dump_json(indent=2).encode())
        return True

    def task_sets(self) -> list[TaskSet]:
        return [
            TaskSet.model_validate_json(self.lake.read_bytes(r))
            for r in self.lake.glob(self.layout.swe_task_sets_glob())
        ]

    def task_set(self, name: str) -> TaskSet:
        rel = self.layout.swe_task_set(name)
        if not self.lake.exists(rel):
            raise SweError(f"task set {name!r} is not registered (evalrunner swe register …)")
        return TaskSet.model_validate_json(self.lake.read_bytes(rel))

    # -- attempts ------------------------------------------------------------------------------
    def attempt_exists(self, agent_version: str, task_id: str, sample_idx: int) -> bool:
        return self.lake.exists(self.layout.swe_attempt(agent_version, task_id, sample_idx))

    def write_attempt(self, row: dict[str, Any], trajectory: dict[str, Any]) -> bool:
        """Land one attempt: its trajectory document, then its row (the commit marker). False
        when a row with this key already exists (nothing is changed then)."""
        key = (row["agent_version"], row["task_id"], row["sample_idx"])
        rel = self.layout.swe_attempt(*key)
        if self.lake.exists(rel):
            return False
        traj_rel = self.layout.swe_trajectory(*key)
        self.lake.write_bytes(traj_rel, json.dumps(trajectory, indent=1, default=str).encode())
        return self.lake.write_once(rel, parquet_bytes([{**row, "trajectory": traj_rel}], ATTEMPTS_SCHEMA))

    def attempts(self, task_ids: list[str] | None = None, agent_version: str | None = None) -> list[dict[str, Any]]:
        """Attempt rows, through ``sql/swe_attempts.sql``; filtered to ``task_ids`` / ``agent_version``."""
        files = [self.lake.url(r) for r in self.lake.glob(self.layout.swe_attempts_glob())]
        if not files:
            return []
        con = duckdb.connect()
        try:
            if not self.lake.is_local:
                con.register_filesystem(self.lake.fs)
            cur = con.execute(sql.load("swe_attempts"), {"files": files})
            columns = [d[0] for d in cur.description or []]
            rows = [dict(zip(columns, values)) for values in cur.fetchall()]
        finally:
            con.close()
        if task_ids is not None:
            wanted = set(task_ids)
            rows = [r for r in rows if r["task_id"] in wanted]
        if agent_version is not None:
            rows = [r for r in rows if r["agent_version"] == agent_version]
        return rows

    def trajectory(self, agent_version: str, task_id: str, sample_idx: int) -> dict[str, Any]:
        rel = self.layout.swe_trajectory(agent_version, task_id, sample_idx)
        if not self.lake.exists(rel):
            raise SweError(f"no trajectory for {agent_version}/{task_id}/{sample_idx}")
        return json.loads(self.lake.read_bytes(rel))

    # -- runs ----------------------------------------------------------------------------------
    def save_run(self, spec: RunSpec, **extra: Any) -> tuple[dict[str, Any], bool]:
        """The run record for ``spec``; created (True) only if absent."""
        run_id = spec.run_id()
        rel = self.layout.swe_run(run_id)
        record = {"id": run_id, "spec": spec.model_dump(), "submitted_at": now_iso(), **extra}
        created = self.lake.write_once(rel, json.dumps(record, indent=2).encode())
        return (record if created else self.run(run_id)), created

    def update_run(self, run_id: str, **fields: Any) -> dict[str, Any]:
        record = {**self.run(run_id), **fields}
        self.lake.write_bytes(self.layout.swe_run(run_id), json.dumps(record, indent=2, default=str).encode())
        return record

    def run(self, run_id: str) -> dict[str, Any]:
        rel = self.layout.swe_run(run_id)
        if not self.lake.exists(rel):
            raise SweError(f"no run {run_id!r}")
        return json.loads(self.lake.read_bytes(rel))

    # -- the run queue (runs submitted through the API, waiting for their Dagster run) ----------
    def queue_run(self, run_id: str, launch: int) -> dict[str, Any]:
        """Ask for launch ``launch`` of a recorded run (0 first, then one more per resubmission
        after a failed or cancelled run). Writers racing on the same launch write the same
        request, so the Dagster run it becomes is the same too."""
        self.run(run_id)  # the record comes first: the run reads its request from it
        request = {"id": run_id, "launch": launch, "queued_at": now_iso()}
        self.lake.write_bytes(self.layout.swe_run_request(run_id), json.dumps(request).encode())
        return request

    def queued_run(self, run_id: str) -> dict[str, Any] | None:
        rel = self.layout.swe_run_request(run_id)
        return json.loads(self.lake.read_bytes(rel)) if self.lake.exists(rel) else None

    def queued_runs(self) -> list[dict[str, Any]]:
        """Every waiting request, oldest first (an unreadable one is skipped: its writer's
        rename has not happened, or it was removed meanwhile)."""
        out = []
        for rel in self.lake.glob(self.layout.swe_run_requests_glob()):
            try:
                out.append(json.loads(self.lake.read_bytes(rel)))
            except (FileNotFoundError, ValueError):
                continue
        return sorted(out, key=lambda r: (r.get("queued_at", ""), r["id"]))

    def dequeue_run(self, run_id: str) -> None:
        self.lake.remove(self.layout.swe_run_request(run_id))

    # -- gold checks ---------------------------------------------------------------------------
    def save_gold(self, name: str, summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        self.lake.write_bytes(self.layout.swe_gold_rows(name), parquet_bytes(rows, FLAKE_SCHEMA))
        self.lake.write_bytes(self.layout.swe_gold(name), json.dumps(summary, indent=2).encode())

    def gold(self, name: str) -> dict[str, Any] | None:
        rel = self.layout.swe_gold(name)
        return json.loads(self.lake.read_bytes(rel)) if self.lake.exists(rel) else None


def _tasks_schema() -> pa.Schema:
    return pa.schema(
        [
            ("id", pa.string()),
            ("task_set", pa.string()),
            ("repo", pa.string()),
            ("commit", pa.string()),
            ("env_digest", pa.string()),
            ("env_source", pa.string()),
            ("test_cmd", pa.string()),
            ("problem", pa.string()),
            ("hidden_tests_ref", pa.string()),
            ("hidden_paths", pa.string()),
            ("gold_patch_ref", pa.string()),
            ("fail_to_pass", pa.string()),
            ("pass_to_pass", pa.string()),
        ]
    )
