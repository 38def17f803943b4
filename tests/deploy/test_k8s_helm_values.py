"""deploy/helm/values.yaml against the official Dagster chart's own values schema.

How a user gets the schema (the chart ships it; helm checks every install against it):

    helm repo add dagster https://dagster-io.github.io/helm
    helm pull dagster/dagster --version 1.13.27 --untar   # -> dagster/values.schema.json

No network in tests, so the schema is a fixture: tests/fixtures/dagster-chart/values.schema.json,
the chart's ``helm/dagster/values.schema.json`` from the dagster-io/dagster repository (it is
generated there from the pydantic models in ``helm/dagster/schema`` and packaged unchanged into
the chart). Provenance, and which chart version it is, in tests/fixtures/dagster-chart/README.md;
the test below fails if the file's sha256 is not the one recorded there.

What helm does and this test does the same way:
- the schema's Kubernetes types are ``$ref``s to
  ``raw.githubusercontent.com/yannh/kubernetes-json-schema/master/v1.19.0/_definitions.json``;
  they resolve here to the same repository's definitions bundled (offline) by
  kubernetes-validate, for the cluster version the manifests target (``K8S_VERSION``, strict:
  unknown fields in a pod security context or resources block are errors too);
- helm validates the *merged* values (the chart's values.yaml with ours over it). Ours is an
  overlay, so the chart's defaults supply every key the schema marks ``required``; without that
  file here, ``required`` is not enforced except inside ``if``/``then`` (the run launcher's and
  run coordinator's type-specific config must be present). Every other keyword is: types,
  enums, consts, and ``additionalProperties: false`` (unknown keys where the chart forbids them).

On top of the schema, every key we set must be one the schema declares, also where the schema
allows extra keys, except inside free-form Kubernetes objects and the subchart values listed in
``SUBCHART_KEYS`` (the chart passes them to its bundled Postgres chart, which has no schema).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from referencing import Registry, Resource

from tests.helpers.k8s_checks import K8S_VERSION

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "fixtures" / "dagster-chart" / "values.schema.json"
PROVENANCE = ROOT / "tests" / "fixtures" / "dagster-chart" / "README.md"
VALUES = ROOT / "deploy" / "helm" / "values.yaml"
K8S_DEFINITIONS_URL = "https://raw.githubusercontent.com/yannh/kubernetes-json-schema/master/v1.19.0/_definitions.json"
# Keys of the bundled bitnami postgresql subchart (8.1.0): not in the dagster chart's schema.
SUBCHART_KEYS = {("postgresql", "existingSecret"): "bitnami postgresql subchart: the password Secret"}


def chart_schema() -> dict[str, Any]:
    return json.loads(SCHEMA.read_text())


def _k8s_definitions() -> dict[str, Any]:
    bundled = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    return json.loads((bundled / f"v{K8S_VERSION}.0-local-strict" / "_definitions.json").read_text())


def _registry() -> Registry:
    # kubernetes-validate's copy keys the definitions by "$defs" (the chart's refs say
    # "definitions") and carries its own $id; served at the chart's URL under both names.
    doc = {k: v for k, v in _k8s_definitions().items() if k != "$id"}
    doc["definitions"] = doc["$defs"]
    return Registry().with_resource(K8S_DEFINITIONS_URL, Resource.from_contents(doc))


def _overlay_schema(node: Any, *, in_then: bool = False) -> Any:
    """The schema with ``required`` kept only inside ``then`` (see the module docstring)."""
    if isinstance(node, list):
        return [_overlay_schema(n, in_then=in_then) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "required" and not in_then and isinstance(value, list):
            continue
        out[key] = _overlay_schema(value, in_then=in_then or key == "then")
    return out


def overlay_errors(values: dict[str, Any]) -> list[str]:
    schema = _overlay_schema(chart_schema())
    validator = jsonschema.Draft202012Validator(schema, registry=_registry())

    def flat(errors):  # an anyOf failure carries each branch's own errors as its context
        for e in errors:
            yield e
            yield from flat(e.context)

    return sorted(
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message[:300]}"
        for e in flat(validator.iter_errors(values))
    )


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return _resolve(
            schema, {**schema["$defs"][ref.split("/")[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
        )
    return node


def _object_branches(schema: dict[str, Any], node: dict[str, Any]) -> list[dict[str, Any]]:
    node = _resolve(schema, node)
    branches = [node] if node.get("type") in ("object", None) and "anyOf" not in node else []
    for option in node.get("anyOf", []):
        branches += [b for b in _object_branches(schema, option) if b.get("type") != "null"]
    return branches


def undeclared_keys(values: Any, schema: dict[str, Any], node: dict[str, Any], path: tuple = ()) -> list[str]:
    """Keys we set that the schema does not declare (outside free-form Kubernetes objects)."""
    found: list[str] = []
    if isinstance(values, list):
        items = _resolve(schema, node).get("items")
        for i, item in enumerate(values):
            if isinstance(items, dict):
                found += undeclared_keys(item, schema, items, (*path, i))
        return found
    if not isinstance(values, dict):
        return found
    branches = _object_branches(schema, node)
    if not branches or any(str(b.get("$ref", "")).startswith("https://") for b in branches):
        return found  # a Kubernetes object: kubernetes' own schema checks it
    declared: dict[str, Any] = {}
    for b in branches:
        declared.update(b.get("properties", {}))
    if not declared:
        return found  # a free-form map (labels, env, runK8sConfig's raw pod spec pieces)
    for key, value in values.items():
        where = (*path, key)
        if key not in declared:
            if tuple(str(p) for p in where if not isinstance(p, int)) not in SUBCHART_KEYS:
                found.append(".".join(str(p) for p in where))
            continue
        found += undeclared_keys(value, schema, declared[key], where)
    return found


def test_the_schema_fixture_is_the_recorded_upstream_file():
    recorded = re.search(r"sha256: `([0-9a-f]{64})`", PROVENANCE.read_text())
    assert recorded, f"{PROVENANCE} records no sha256"
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == recorded.group(1)
    schema = chart_schema()
    assert schema["title"] == "DagsterHelmValues" and "runLauncher" in schema["properties"]


def test_deploy_helm_values_validate_against_the_charts_values_schema():
    values = yaml.safe_load(VALUES.read_text())
    assert overlay_errors(values) == []


def test_every_key_in_deploy_helm_values_is_one_the_chart_declares():
    values = yaml.safe_load(VALUES.read_text())
    schema = chart_schema()
    assert undeclared_keys(values, schema, schema) == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        # A misspelt key where the chart forbids extra keys.
        (("runLauncher", "config", "k8sRunLauncher", "envSecret"), [{"name": "x"}], "Additional properties"),
        # The wrong type.
        (("dagster-user-deployments", "deployments", 0, "port"), "3030", "'3030' is not of type 'integer'"),
        # A value outside an enum.
        (("runLauncher", "type"), "K8sJobLauncher", "is not one of"),
        # A Kubernetes field that does not exist, inside a Kubernetes object (the strict $ref target).
        (("dagster-user-deployments", "deployments", 0, "securityContext", "runAsRoot"), False, "runAsRoot"),
    ],
)
def test_the_schema_check_rejects_broken_values(path, value, expected):
    values = copy.deepcopy(yaml.safe_load(VALUES.read_text()))
    target = values
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    errors = overlay_errors(values)
    assert any(expected in e for e in errors), errors


def test_a_key_the_chart_does_not_declare_is_reported_even_where_extra_keys_pass_the_schema():
    values = copy.deepcopy(yaml.safe_load(VALUES.read_text()))
    values["postgresql"]["postgresqlHostname"] = "db"  # PostgreSQL allows extra keys; this one is a typo
    values["dagsterDaemonn"] = {"enabled": True}  # so does the top level
    schema = chart_schema()
    assert overlay_errors(values) == []
    assert undeclared_keys(values, schema, schema) == ["postgresql.postgresqlHostname", "dagsterDaemonn"]


# The keys of dagsterDaemon.runMonitoring the chart's instance template reads (an open object in
# the schema, so the schema checks nothing inside it): helm/dagster/templates/configmap-instance.yaml
# renders each as the snake_case key of the instance's run_monitoring.
CHART_RUN_MONITORING_KEYS = {
    "enabled",
    "startTimeoutSeconds",
    "cancelTimeoutSeconds",
    "maxResumeRunAttempts",
    "pollIntervalSeconds",
    "freeSlotsAfterRunEndSeconds",
}


def test_helm_run_monitoring_renders_the_run_monitoring_of_deploy_dagster_yaml():
    monitoring = yaml.safe_load(VALUES.read_text())["dagsterDaemon"]["runMonitoring"]
    assert set(monitoring) <= CHART_RUN_MONITORING_KEYS, set(monitoring) - CHART_RUN_MONITORING_KEYS
    rendered = {re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower(): v for k, v in monitoring.items()}
    deployed = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())["run_monitoring"]
    assert rendered == deployed
    assert deployed["enabled"] is True and deployed["max_resume_run_attempts"] == 0


def test_helm_run_queue_renders_the_run_coordinator_of_deploy_dagster_yaml():
    """The chart renders the pods' instance from the values, not from deploy/dagster.yaml: the
    queue's limits, the report lock (jobs.REPORT_LOCK_TAG) among them, must be in both."""
    from evalrunner_assets.jobs import REPORT_LOCK_TAG

    queued = yaml.safe_load(VALUES.read_text())["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    deployed = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())["run_coordinator"]["config"]
    assert queued["maxConcurrentRuns"] == deployed["max_concurrent_runs"]
    assert queued["tagConcurrencyLimits"] == deployed["tag_concurrency_limits"]
    assert [lim["key"] for lim in queued["tagConcurrencyLimits"]] == [REPORT_LOCK_TAG]
