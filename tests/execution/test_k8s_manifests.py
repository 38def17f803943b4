"""deploy/ manifests and generated sandbox pods: Kubernetes schemas and Pod Security 'restricted'.

Schemas come from kubernetes-validate's bundled copies (offline). The Helm values are checked
against the Dagster chart's own values schema in tests/deploy/test_k8s_helm_values.py; here, what the
schema cannot say (our image, our service account, PSA 'restricted' for the code location), and
their names are cross-checked in tests/deploy/test_k8s_deploy_names.py.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from evalrunner_assets.execution.kubernetes import (
    NETWORK_LABEL,
    KubernetesSandboxError,
    build_sandbox_pod,
    sanitize_label_value,
)
from evalrunner_assets.execution.sandbox import Limits, NetworkPolicy, RepoExport, SandboxRequest
from tests.helpers.k8s_checks import K8S_VERSION, config, psa_restricted_violations

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def manifests() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                docs.append((f"{path.name}#{i}", doc))
    return docs


def request(**kw) -> SandboxRequest:
    base = dict(
        argv=("inspect", "eval", "evals/task.py", "--log-dir", "/work/out"),
        export=RepoExport(repo="acme/agent", commit="a" * 40, path="/nonexistent", tree_digest="d" * 64),
        labels={"task": "evals/task.py@refund", "window": "0-20", "Model": "openai/gpt-4o-mini"},
    )
    base.update(kw)
    return SandboxRequest(**base)


def generated_pods() -> list[tuple[str, dict]]:
    egress = config(model_egress_cidr="10.64.0.10/32", model_egress_port=443)
    return [
        ("default", build_sandbox_pod(request(), config(), sandbox_id="0123abcd", pod_name="evalrunner-sbx-0123abcd")),
        (
            "model-egress",
            build_sandbox_pod(
                request(network=NetworkPolicy.MODEL_EGRESS, env={"OPENAI_BASE_URL": "http://proxy"}),
                egress,
                sandbox_id="x",
            ),
        ),
        (
            "stdin+limits",
            build_sandbox_pod(
                request(stdin=b"{}", limits=Limits(wall_seconds=30, memory_bytes=1 << 30)),
                config(runtime_class_name="gvisor", node_selector={"pool": "sandbox"}),
                sandbox_id="y",
            ),
        ),
        ("warm-session", build_sandbox_pod(request(), config(), sandbox_id="w", session=True)),
        # One Inspect sample's workspace pod (sandbox="evalrunner-k8s").
        ("inspect-workspace", build_sandbox_pod(request(), config(), sandbox_id="i", workspace=True)),
    ]


def pod_specs_in(doc: dict) -> list[dict]:
    kind = doc.get("kind")
    if kind == "Pod":
        return [doc["spec"]]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"):
        return [doc["spec"]["template"]["spec"]]
    if kind == "CronJob":
        return [doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]]
    return []


# --- tests ---------------------------------------------------------------------------------


def test_kubernetes_validate_has_offline_schemas_for_the_pinned_version():
    ok = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}
    kubernetes_validate.validate(ok, K8S_VERSION, strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({**ok, "data": {"a": 1}}, K8S_VERSION, strict=True)


@pytest.mark.parametrize("name,doc", manifests(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_deploy_manifest_validates_against_the_kubernetes_schema(name, doc):
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("name,pod", generated_pods(), ids=lambda v: v if isinstance(v, str) else "")
def test_generated_sandbox_pods_validate_and_meet_psa_restricted(name, pod):
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert psa_restricted_violations(pod["spec"]) == []


def test_every_deployment_pod_template_meets_psa_restricted():
    templates = [(n, s) for n, d in manifests() for s in pod_specs_in(d)]
    assert templates, "deploy/k8s should contain at least the webhook Deployment"
    for name, spec in templates:
        assert psa_restricted_violations(spec) == [], name


def test_psa_rules_catch_each_violation():
    pod = generated_pods()[0][1]["spec"]
    import copy

    cases = {
        "hostNetwork is true": lambda s: s.update(hostNetwork=True),
        "uses ['hostPath']": lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "is privileged": lambda s: s["containers"][0]["securityContext"].update(privileged=True),
        "allowPrivilegeEscalation": lambda s: s["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
        "adds ['SYS_ADMIN']": lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        "seccompProfile Unconfined": lambda s: s["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "runAsUser is 0": lambda s: s["initContainers"][0]["securityContext"].update(runAsUser=0),
    }
    for expected, mutate in cases.items():
        spec = copy.deepcopy(pod)
        mutate(spec)
        assert any(expected in v for v in psa_restricted_violations(spec)), expected
    ok = copy.deepcopy(pod)
    ok["containers"][0]["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    assert psa_restricted_violations(ok) == []


def test_sandbox_pod_has_no_credentials_links_or_writable_root():
    pod = generated_pods()[0][1]
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] >= 900
    for c in spec["containers"] + spec["initContainers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert not c.get("envFrom")
        assert all("valueFrom" not in e for e in c.get("env", []))
        for key in ("cpu", "memory", "ephemeral-storage"):
            assert key in c["resources"]["limits"] and key in c["resources"]["requests"], (c["name"], key)
    assert all("emptyDir" in v and v["emptyDir"]["sizeLimit"] for v in spec["volumes"])
    sandbox = spec["containers"][0]
    mounts = {m["mountPath"]: m for m in sandbox["volumeMounts"]}
    assert mounts["/work/repo"].get("readOnly") is True
    assert not mounts["/work/out"].get("readOnly")
    collector = spec["containers"][1]
    assert all(m.get("readOnly") for m in collector["volumeMounts"])


def test_session_pod_takes_requests_through_an_inbox_the_sandbox_cannot_write():
    pod = dict(generated_pods())["warm-session"]
    sandbox, collector = pod["spec"]["containers"]
    assert sandbox["args"][0] == "serve" and "--wall-seconds" not in sandbox["args"]
    inbox = {c["name"]: next(m for m in c["volumeMounts"] if m["name"] == "inbox") for c in (sandbox, collector)}
    assert inbox["sandbox"].get("readOnly") is True and not inbox["collector"].get("readOnly")
    assert pod["metadata"]["labels"]["evalrunner.dev/role"] == "session"
    assert pod["spec"]["activeDeadlineSeconds"] >= config().session_max_seconds
    cold = dict(generated_pods())["default"]
    assert "inbox" not in {v["name"] for v in cold["spec"]["volumes"]}


def test_labels_are_label_syntax_and_annotations_keep_full_values():
    pod = generated_pods()[0][1]
    labels, notes = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels["evalrunner.dev/task"] == sanitize_label_value("evals/task.py@refund")
    assert notes["evalrunner.dev/task"] == "evals/task.py@refund"
    assert notes["evalrunner.dev/model"] == "openai/gpt-4o-mini"
    long = sanitize_label_value("x" * 200)
    assert len(long) <= 63 and long != sanitize_label_value("x" * 199)
    assert sanitize_label_value("main") == "main"
    assert sanitize_label_value("/") and sanitize_label_value("-.-")


def test_model_egress_needs_a_configured_endpoint_and_matches_the_network_policy():
    with pytest.raises(KubernetesSandboxError, match="model_egress_cidr"):
        build_sandbox_pod(request(network=NetworkPolicy.MODEL_EGRESS), config(), sandbox_id="z")
    pod = generated_pods()[1][1]
    assert pod["metadata"]["labels"][NETWORK_LABEL] == "model-egress"
    assert generated_pods()[0][1]["metadata"]["labels"][NETWORK_LABEL] == "none"
    policies = {d["metadata"]["name"]: d for _, d in manifests() if d["kind"] == "NetworkPolicy"}
    deny = policies["deny-all"]["spec"]
    assert deny["podSelector"] == {} and set(deny["policyTypes"]) == {"Ingress", "Egress"}
    assert "egress" not in deny and "ingress" not in deny
    egress = policies["model-egress"]["spec"]
    assert egress["podSelector"]["matchLabels"] == {NETWORK_LABEL: "model-egress"}
    assert egress["policyTypes"] == ["Egress"]
    ports = sorted((p["protocol"], p["port"]) for rule in egress["egress"] for p in rule["ports"])
    assert ports == [("TCP", 53), ("TCP", 443), ("UDP", 53)]
    env = next(d for _, d in manifests() if d["kind"] == "ConfigMap")["data"]
    cidr = next(t["ipBlock"]["cidr"] for rule in egress["egress"] for t in rule["to"] if "ipBlock" in t)
    assert env["EVALRUNNER_MODEL_EGRESS_CIDR"] == cidr


def test_sandbox_namespace_enforces_restricted_and_only_the_controller_may_manage_pods():
    docs = {(d["kind"], d["metadata"]["name"]): d for _, d in manifests()}
    ns = docs[("Namespace", "evalrunner-sandbox")]["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert ns[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    sa = docs[("ServiceAccount", "evalrunner-sandbox")]
    assert sa["automountServiceAccountToken"] is False
    role = docs[("Role", "evalrunner-sandbox-controller")]
    assert role["metadata"]["namespace"] == "evalrunner-sandbox"
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {
        ("pods", "create"),
        ("pods", "get"),
        ("pods", "list"),
        ("pods", "watch"),
        ("pods", "delete"),
        ("pods/attach", "create"),
        ("pods/attach", "get"),
        ("pods/exec", "create"),
        ("pods/exec", "get"),
        ("pods/log", "get"),
        # repository environment builds: a claim per digest (annotated once built), a Job
        ("persistentvolumeclaims", "create"),
        ("persistentvolumeclaims", "get"),
        ("persistentvolumeclaims", "patch"),
        # ... and their retention sweep: claims unused past the retention are listed and deleted
        ("persistentvolumeclaims", "list"),
        ("persistentvolumeclaims", "delete"),
        ("jobs", "create"),
        ("jobs", "get"),
        ("jobs", "delete"),
    }
    binding = docs[("RoleBinding", "evalrunner-sandbox-controller")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "evalrunner-dagster", "namespace": "evalrunner"}]
    assert not any(d["kind"] in ("ClusterRole", "ClusterRoleBinding") for _, d in manifests())
    quota = docs[("ResourceQuota", "sandbox-quota")]["spec"]["hard"]
    assert int(quota["pods"]) > 0 and quota["secrets"] == "0"


def test_lake_uses_workload_identity_and_the_webhook_secret_is_a_file():
    docs = {(d["kind"], d["metadata"]["name"]): d for _, d in manifests()}
    for sa in ("evalrunner-dagster", "evalrunner-webhook"):
        assert "iam.gke.io/gcp-service-account" in docs[("ServiceAccount", sa)]["metadata"]["annotations"]
    assert docs[("ConfigMap", "evalrunner-env")]["data"]["EVALRUNNER_LAKE"].startswith("gs://")
    hook = docs[("Deployment", "evalrunner-webhook")]["spec"]["template"]["spec"]
    container = hook["containers"][0]
    assert not any("valueFrom" in e for e in container.get("env", []))
    assert any(v.get("secret", {}).get("secretName") == "evalrunner-github-webhook" for v in hook["volumes"])
    assert (
        docs[("Ingress", "evalrunner-webhook")]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"]
        == "evalrunner-webhook"
    )


def test_dagster_yaml_configures_k8s_run_launcher_and_postgres_per_their_schemas(monkeypatch):
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config_schema
    from dagster_k8s import K8sRunLauncher

    for name in ("DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB"):
        monkeypatch.setenv(name, "x")
    instance = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    top = process_config(dagster_instance_config_schema(), instance)
    assert top.success, top.errors
    assert instance["run_launcher"]["class"] == "K8sRunLauncher"
    launcher = process_config(K8sRunLauncher.config_type(), instance["run_launcher"]["config"])
    assert launcher.success, launcher.errors
    assert set(instance["storage"]) == {"postgres"}  # needs dagster-postgres in the image
    workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
    assert workspace["load_from"][0]["grpc_server"]["port"] == 3030


def test_helm_values_use_k8s_run_launcher_daemon_and_our_image():
    # The chart's schema check is tests/deploy/test_k8s_helm_values.py; these are our own choices.
    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert values["dagsterDaemon"]["enabled"] is True
    assert values["postgresql"]["postgresqlDatabase"]
    (dep,) = values["dagster-user-deployments"]["deployments"]
    assert dep["dagsterApiGrpcArgs"] == ["--module-name", "evalrunner_assets.definitions"]
    assert set(dep["image"]) == {"repository", "tag", "pullPolicy"} and isinstance(dep["port"], int)
    assert (
        psa_restricted_violations(
            {
                "securityContext": dep["podSecurityContext"],
                "containers": [{"name": "u", "securityContext": dep["securityContext"]}],
            }
        )
        == []
    )
    assert values["serviceAccount"]["name"] == "evalrunner-dagster"
