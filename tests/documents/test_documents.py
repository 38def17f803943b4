"""evalrunner's JSON documents are typed: the request, commit facts and comparison document
written by the evalrunner before they were models still load (tests/fixtures/documents-v1 holds
the demo's, saved by that version), a bad document names its file and field, and the exported
JSON Schemas match the models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalrunner_assets.documents.codec import DocumentError
from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.pipeline import schemas
from evalrunner_assets.pipeline.facts import FACTS_SCHEMA_VERSION, CommitFacts
from evalrunner_assets.pipeline.spec import REQUEST_SCHEMA_VERSION, ComparisonRequest, ComparisonRequestError
from lake.batch import BatchKey, RunSettings

V1 = Path(__file__).parents[1] / "fixtures" / "documents-v1"


def test_a_version_1_request_loads_with_its_settings_nested_and_saves_as_version_2() -> None:
    old = json.loads((V1 / "request.json").read_text())
    assert "schema_version" not in old and "model" in old  # the shape the old evalrunner wrote
    request = ComparisonRequest.from_json((V1 / "request.json").read_bytes(), str(V1 / "request.json"))
    assert request.settings == RunSettings(
        model=old["model"], model_args=old["model_args"], seed=old["seed"], epochs=old["epochs"]
    )
    assert (request.repo, request.pr, request.head_sha, request.cap) == (old["repo"], old["pr"], old["head_sha"], 256)
    saved = json.loads(request.to_json())
    assert saved["schema_version"] == REQUEST_SCHEMA_VERSION
    assert saved["settings"] == {"model": old["model"], "model_args": {}, "seed": 0, "epochs": 1}
    assert not {"model", "model_args", "seed", "epochs"} & set(saved)
    assert ComparisonRequest.from_json(request.to_json()) == request


def test_version_1_commit_facts_load_unchanged() -> None:
    old = json.loads((V1 / "tasks.json").read_text())
    facts = CommitFacts.from_json((V1 / "tasks.json").read_bytes(), str(V1 / "tasks.json"))
    assert facts.schema_version == FACTS_SCHEMA_VERSION
    assert set(facts.tasks) == set(old["tasks"])
    for task, rec in old["tasks"].items():
        assert list(facts.tasks[task].sample_ids) == rec["sample_ids"]
        assert list(facts.tasks[task].input_digests) == rec["input_digests"]
    assert facts.agent_model is None  # learnt before agent configs could name a model
    again = json.loads(facts.to_json())
    # Written back with the same fields, plus the version, the (optional, null) agent model and
    # each task's failure kind (null: its ids were listed).
    assert again.pop("agent_model") is None
    for rec in again["tasks"].values():
        assert rec.pop("failure_kind") is None
    assert {k: v for k, v in again.items() if k != "schema_version"} == old


def test_older_commit_facts_failures_get_their_kind_from_the_runners_wording() -> None:
    old = json.loads((V1 / "tasks.json").read_text())
    task, rec = next(iter(old["tasks"].items()))
    load = {**rec, "failure": "loading task 'evals/x.py@t' raised SyntaxError: invalid syntax; fix the task file"}
    sandbox = {**rec, "failure": "listing sample ids failed in the sandbox (timeout): no reply within 900s"}
    for record, kind in ((load, "task_load"), (sandbox, "listing")):
        facts = CommitFacts.from_json(json.dumps({**old, "tasks": {task: record}}).encode())
        assert facts.tasks[task].failure_kind == kind
        assert facts.tasks[task].load_error == (record["failure"] if kind == "task_load" else None)


def test_the_demo_comparison_document_reads_and_writes_back_byte_for_byte() -> None:
    raw = (V1 / "comparison.json").read_bytes()
    doc = ComparisonDocument.from_json(raw, str(V1 / "comparison.json"))
    assert doc.verdict == "IMPROVED" and doc.status == "complete"
    assert doc.tasks["triage/runbook_lookup"].decision.label == "improved"
    assert doc.samples_run == sum(t.head.samples + t.base.samples for t in doc.tasks.values())
    assert doc.to_json() == raw


def test_a_comparison_document_without_a_version_is_read_as_version_1() -> None:
    old = json.loads((V1 / "comparison.json").read_text())
    del old["schema_version"]
    assert ComparisonDocument.from_json(json.dumps(old)).schema_version == 1


def test_the_settings_are_one_record_in_the_request_the_run_config_and_the_batch_key() -> None:
    record = json.loads((V1 / "batch-record.json").read_text())
    key = BatchKey.from_record(record["key"])
    assert key.settings == RunSettings(model="simagent/support-agent", seed=0, epochs=1)
    # The batch keys of landed batches are unchanged: the same digest, so they are reused.
    assert key.digest == record["batch"]
    assert key.as_record() == record["key"]


def test_a_bad_comparison_document_names_the_file_and_the_field(tmp_path: Path) -> None:
    doc = json.loads((V1 / "comparison.json").read_text())
    doc["tasks"]["triage/runbook_lookup"]["decision"]["label"] = "better"
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DocumentError) as err:
        ComparisonDocument.from_json(path.read_bytes(), str(path))
    assert str(path) in str(err.value)
    assert err.value.field == "tasks.triage/runbook_lookup.decision.label"
    assert "'better'" in str(err.value)


def test_a_request_with_flat_and_nested_settings_or_a_newer_version_is_refused() -> None:
    old = json.loads((V1 / "request.json").read_text())
    with pytest.raises(ComparisonRequestError, match="give the run settings once"):
        ComparisonRequest.from_json(json.dumps({**old, "settings": {"model": "x/y"}}), "r.json")
    new = json.loads(ComparisonRequest.from_json((V1 / "request.json").read_bytes()).to_json())
    with pytest.raises(ComparisonRequestError, match=r"r\.json: schema_version: .*newer than this evalrunner reads"):
        ComparisonRequest.from_json(json.dumps({**new, "schema_version": REQUEST_SCHEMA_VERSION + 1}), "r.json")
    with pytest.raises(ComparisonRequestError, match=r"settings\.epochs"):
        ComparisonRequest.build(**{**old, "epochs": 0})
    with pytest.raises(ComparisonRequestError, match="unknown_field"):
        ComparisonRequest.from_json(json.dumps({**old, "unknown_field": 1}), "r.json")


def test_not_json_is_named_as_such() -> None:
    with pytest.raises(DocumentError, match=r"^x\.json: not valid JSON"):
        CommitFacts.from_json(b"{nope", "x.json")


@pytest.mark.parametrize("name", sorted(schemas.SCHEMAS))
def test_the_exported_json_schemas_match_the_models(name: str) -> None:
    path = schemas.SCHEMA_DIR / name
    assert path.exists(), f"{path} is missing: run `python -m evalrunner_assets.pipeline.schemas`"
    assert path.read_text(encoding="utf-8") == schemas.schema_text(schemas.SCHEMAS[name]), (
        f"{path} differs from its model: run `python -m evalrunner_assets.pipeline.schemas`"
    )
    assert path.parent == Path(__file__).parents[2] / "evalrunner_assets" / "discovery"  # beside the manifest's


def test_a_schema_check_fails_when_a_model_changes_without_regenerating(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import Field, create_model

    changed = create_model("RunSettings", __base__=RunSettings, temperature=(float, Field(default=0.0)))
    assert schemas.schema_text(changed) != (schemas.SCHEMA_DIR / "run-settings.schema.json").read_text(encoding="utf-8")
