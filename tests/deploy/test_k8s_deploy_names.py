"""Names in deploy/ (README commands, manifests, Helm values, dagster.yaml, Dockerfile) against
the names the code reads: environment variables, secret keys, ConfigMaps and Secrets, ports,
service names, namespaces, the webhook path. A rename on either side fails here, not in a
cluster. Each check returns its findings so it is also shown to catch a broken name."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CODE_DIRS = ("evalrunner_assets", "sensors", "resources", "lake")
RELEASE_NAMESPACE = "evalrunner"


# --- what deploy/ says ---------------------------------------------------------------------


def manifests() -> list[dict]:
    return [d for p in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


def find(docs: list[dict], kind: str, name: str) -> dict:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def values() -> dict:
    return yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())


def instance() -> dict:
    return yaml.safe_load((DEPLOY / "dagster.yaml").read_text())


def readme() -> str:
    return (DEPLOY / "README.md").read_text()


def readme_commands(text: str) -> list[list[str]]:
    """Shell commands of the README's bash blocks, continuation lines joined, split into words
    (comments dropped; `a || b` and `a && b` give two commands)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            current: list[str] = []
            for w in words:
                if w in ("||", "&&", ";", "|"):
                    commands.append(current)
                    current = []
                else:
                    current.append(w)
            commands.append(current)
    return [c for c in commands if c]


def readme_secrets(text: str) -> dict[str, set[str]]:
    """Secret name -> keys, for every `kubectl create secret generic|tls` in the README."""
    out: dict[str, set[str]] = {}
    for cmd in readme_commands(text):
        if cmd[:1] != ["kubectl"] or "create" not in cmd or "secret" not in cmd:
            continue
        i = cmd.index("secret")
        kind, name = cmd[i + 1], cmd[i + 2]
        keys = out.setdefault(name, set())
        if kind == "tls":
            keys |= {"tls.crt", "tls.key"}
        for w in cmd:
            for flag in ("--from-literal=", "--from-file="):
                if w.startswith(flag):
                    keys.add(w[len(flag) :].split("=", 1)[0])
    return out


def helm_release(text: str) -> tuple[str, str]:
    """(release name, namespace) of the README's `helm upgrade --install` of the Dagster chart."""
    for cmd in readme_commands(text):
        if cmd[:3] == ["helm", "upgrade", "--install"] and "dagster/dagster" in cmd:
            return cmd[3], cmd[cmd.index("--namespace") + 1]
    raise AssertionError("README has no `helm upgrade --install … dagster/dagster`")


def user_deployment(v: dict) -> dict:
    (dep,) = v["dagster-user-deployments"]["deployments"]
    return dep


def chart_created_configmaps(release: str) -> set[str]:
    # The Dagster chart's instance ConfigMap is "<fullname>-instance"; fullname is the release
    # name when it contains the chart name "dagster".
    assert "dagster" in release
    return {f"{release}-instance"}


# --- what the code reads -------------------------------------------------------------------

_ENV_NAME = re.compile(r"^(EVALRUNNER|DAGSTER|GCSFS)_[A-Z0-9_]+$")


def code_env_names() -> set[str]:
    """Every string constant in the code that is a whole environment variable name we own or
    set for libraries (EVALRUNNER_*, DAGSTER_*, GCSFS_*)."""
    names: set[str] = set()
    for top in CODE_DIRS:
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and _ENV_NAME.match(node.value):
                    names.add(node.value)
    return names


def instance_env_names() -> set[str]:
    """Environment variables deploy/dagster.yaml reads (``env:`` sources)."""
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if set(node) == {"env"} and isinstance(node["env"], str):
                found.add(node["env"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(instance())
    return found


# --- the checks ----------------------------------------------------------------------------


def unread_env_names(docs: list[dict], secrets: dict[str, set[str]], v: dict) -> list[str]:
    """Variables deploy/ sets that nothing reads (a typo or a rename on one side)."""
    read = code_env_names() | instance_env_names()
    bad = []
    for key in find(docs, "ConfigMap", "evalrunner-env")["data"]:
        if key not in read:
            bad.append(f"ConfigMap evalrunner-env sets {key}, which no code reads")
    for d in docs:
        for spec in _pod_specs(d):
            for c in spec.get("containers", []):
                for e in c.get("env", []):
                    if e["name"] not in read:
                        bad.append(f"{d['kind']} {d['metadata']['name']} sets {e['name']}, which no code reads")
    env_secret_names = {s["name"] for s in user_deployment(v).get("envSecrets", [])}
    env_secret_names |= {s["name"] for s in v["runLauncher"]["config"]["k8sRunLauncher"].get("envSecrets", [])}
    for name in env_secret_names:
        for key in secrets.get(name, ()):
            if key not in read:
                bad.append(f"Secret {name} (envSecrets) has key {key}, which no code reads")
    return bad


def _pod_specs(doc: dict) -> list[dict]:
    if doc["kind"] == "Deployment":
        return [doc["spec"]["template"]["spec"]]
    return []


def missing_objects(docs: list[dict], secrets: dict[str, set[str]], v: dict, inst: dict, release: str) -> list[str]:
    """Secrets and ConfigMaps named somewhere that nothing creates."""
    created_cm = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"} | chart_created_configmaps(release)
    created_secrets = set(secrets)
    for d in docs:
        if d["kind"] == "Ingress" and any(
            k.startswith("cert-manager.io/") for k in d["metadata"].get("annotations", {})
        ):
            created_secrets |= {t["secretName"] for t in d["spec"].get("tls", [])}  # issued by cert-manager
    wanted_cm: dict[str, str] = {}
    wanted_secrets: dict[str, str] = {}
    for d in docs:
        where = f"{d['kind']} {d['metadata']['name']}"
        for spec in _pod_specs(d):
            for vol in spec.get("volumes", []):
                if "secret" in vol:
                    wanted_secrets[vol["secret"]["secretName"]] = where
                if "configMap" in vol:
                    wanted_cm[vol["configMap"]["name"]] = where
            for c in spec.get("containers", []):
                for ref in c.get("envFrom", []):
                    if "configMapRef" in ref:
                        wanted_cm[ref["configMapRef"]["name"]] = where
                    if "secretRef" in ref:
                        wanted_secrets[ref["secretRef"]["name"]] = where
        if d["kind"] == "Ingress":
            for t in d["spec"].get("tls", []):
                wanted_secrets.setdefault(t["secretName"], where)
    launcher_values = v["runLauncher"]["config"]["k8sRunLauncher"]
    for section, conf in (
        ("dagsterWebserver", v["dagsterWebserver"]),
        ("dagsterDaemon", v["dagsterDaemon"]),
        ("user deployment", user_deployment(v)),
        ("k8sRunLauncher", launcher_values),
    ):
        for ref in conf.get("envConfigMaps", []):
            wanted_cm[ref["name"]] = f"helm/values.yaml {section}"
        for ref in conf.get("envSecrets", []):
            wanted_secrets[ref["name"]] = f"helm/values.yaml {section}"
    if not v.get("generatePostgresqlPasswordSecret", True):
        wanted_secrets[v["global"]["postgresqlSecretName"]] = "helm/values.yaml global.postgresqlSecretName"
    if v["postgresql"].get("existingSecret"):
        wanted_secrets[v["postgresql"]["existingSecret"]] = "helm/values.yaml postgresql.existingSecret"
    launcher = inst["run_launcher"]["config"]
    wanted_cm[launcher["instance_config_map"]] = "dagster.yaml instance_config_map"
    for name in launcher.get("env_config_maps", []):
        wanted_cm[name] = "dagster.yaml env_config_maps"
    for name in launcher.get("env_secrets", []):
        wanted_secrets[name] = "dagster.yaml env_secrets"
    wanted_secrets[launcher["postgres_password_secret"]] = "dagster.yaml postgres_password_secret"
    bad = [f"ConfigMap {n} ({w}) is created by nothing in deploy/" for n, w in wanted_cm.items() if n not in created_cm]
    bad += [
        f"Secret {n} ({w}) is created by nothing in deploy/"
        for n, w in wanted_secrets.items()
        if n not in created_secrets
    ]
    return bad


_API_CALL = re.compile(
    r"\b(create|read|patch|delete|list|connect_get)_namespaced_(pod|persistent_volume_claim|job)(_log|_exec|_attach)?\b"
)
# A websocket exec/attach is a GET upgraded by the API server; RBAC checks it as `create` (and,
# on servers before 1.30, as `get`), so the Role must grant both.
_VERB = {"create": "create", "read": "get", "patch": "patch", "delete": "delete", "list": "list", "connect_get": "get"}
_RESOURCE = {"pod": ("", "pods"), "persistent_volume_claim": ("", "persistentvolumeclaims"), "job": ("batch", "jobs")}


def backend_api_calls() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every namespaced call the Kubernetes backend makes."""
    calls = set()
    for path in sorted((ROOT / "evalrunner_assets" / "execution" / "kubernetes").glob("*.py")):
        text = path.read_text()
        for verb, kind, sub in _API_CALL.findall(text):
            group, resource = _RESOURCE[kind]
            resource += f"/{sub[1:]}" if sub else ""
            calls.add((group, resource, _VERB[verb]))
            if verb == "connect_get":
                calls.add((group, resource, "create"))
    return calls


def unauthorised_calls(docs: list[dict]) -> list[str]:
    """Calls the backend makes that the controller's Role in the sandbox namespace does not allow."""
    allowed = {
        (group, resource, verb)
        for rule in find(docs, "Role", "evalrunner-sandbox-controller")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    return sorted(f"{verb} {group or 'core'}/{resource}" for group, resource, verb in backend_api_calls() - allowed)


# --- tests ---------------------------------------------------------------------------------


def test_the_controllers_role_allows_every_call_the_backend_makes():
    calls = backend_api_calls()
    # The parser sees the environment build's calls (and the pods'):
    assert {("batch", "jobs", "create"), ("", "persistentvolumeclaims", "patch"), ("", "pods", "create")} <= calls
    # ... and the websocket subresources: delivery (attach) and every exec, e.g. the Inspect
    # provider's workspace pods (kubernetes/workspace.py reaches exec through kubernetes/pod_run.py).
    assert {("", "pods/exec", "create"), ("", "pods/exec", "get"), ("", "pods/attach", "create")} <= calls
    # ... and the environment retention sweep's (kubernetes/env_retention.py):
    assert {("", "persistentvolumeclaims", "list"), ("", "persistentvolumeclaims", "delete")} <= calls
    assert unauthorised_calls(manifests()) == []
    docs = manifests()
    role = find(docs, "Role", "evalrunner-sandbox-controller")
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["jobs"]]
    assert unauthorised_calls(docs) == ["create batch/jobs", "delete batch/jobs", "get batch/jobs"]
    claims = next(r for r in role["rules"] if r["resources"] == ["persistentvolumeclaims"])
    claims["verbs"] = [v for v in claims["verbs"] if v not in ("list", "delete")]
    assert unauthorised_calls(docs) == [
        "create batch/jobs",
        "delete batch/jobs",
        "delete core/persistentvolumeclaims",
        "get batch/jobs",
        "list core/persistentvolumeclaims",
    ]
    docs = manifests()
    role = find(docs, "Role", "evalrunner-sandbox-controller")
    for rule in role["rules"]:
        rule["resources"] = [r for r in rule["resources"] if r != "pods/exec"]
    assert unauthorised_calls(docs) == ["create core/pods/exec", "get core/pods/exec"]


def test_environment_build_egress_policy_and_settings_agree_with_the_code():
    from ipaddress import ip_address, ip_network
    from urllib.parse import urlsplit

    from evalrunner_assets.execution.kubernetes.env import package_index_network_policy
    from resources.sandbox import SandboxResource

    docs = manifests()
    env = find(docs, "ConfigMap", "evalrunner-env")["data"]
    deployed = find(docs, "NetworkPolicy", "package-index-egress")
    (proxy_rule,) = [r for r in deployed["spec"]["egress"] if "ipBlock" in r["to"][0]]
    cidr, port = proxy_rule["to"][0]["ipBlock"]["cidr"], proxy_rule["ports"][0]["port"]
    backend = SandboxResource.from_env(env).backend()
    generated = package_index_network_policy(backend.config, proxy_cidr=cidr, proxy_port=port)
    assert (deployed["metadata"], deployed["spec"]) == (generated["metadata"], generated["spec"])
    proxy = urlsplit(env["EVALRUNNER_PACKAGE_INDEX_PROXY"])
    assert backend.config.package_index_proxy == env["EVALRUNNER_PACKAGE_INDEX_PROXY"]
    assert ip_address(proxy.hostname) in ip_network(cidr) and proxy.port == port
    assert backend.config.env_storage_class == env["EVALRUNNER_SANDBOX_ENV_STORAGE_CLASS"]
    assert backend.config.env_retain_days == float(env["EVALRUNNER_SANDBOX_ENV_RETAIN_DAYS"])
    quota = find(docs, "ResourceQuota", "sandbox-quota")["spec"]["hard"]
    assert int(quota["persistentvolumeclaims"]) > 0  # one claim per environment digest


def test_the_readme_parser_sees_the_commands():
    secrets = readme_secrets(readme())
    assert {"evalrunner-github-webhook", "evalrunner-github-app", "evalrunner-postgresql"} <= set(secrets)
    assert helm_release(readme()) == ("dagster", RELEASE_NAMESPACE)


def test_every_variable_deploy_sets_is_read_by_the_code():
    assert unread_env_names(manifests(), readme_secrets(readme()), values()) == []


def test_every_secret_and_configmap_deploy_names_is_created_by_deploy():
    release, _ = helm_release(readme())
    assert missing_objects(manifests(), readme_secrets(readme()), values(), instance(), release) == []


def test_renames_are_caught():
    docs, secrets, v, inst = manifests(), readme_secrets(readme()), values(), instance()
    # The README's old key names for the App, and a ConfigMap key with a typo:
    renamed = {**secrets, "evalrunner-github-app": {"GITHUB_APP_ID", "GITHUB_APP_PRIVATE_KEY"}}
    assert any("GITHUB_APP_ID" in b for b in unread_env_names(docs, renamed, v))
    cm = find(docs, "ConfigMap", "evalrunner-env")
    cm["data"]["EVALRUNNER_SANDBOX_IMAGES"] = cm["data"].pop("EVALRUNNER_SANDBOX_IMAGE")
    assert any("EVALRUNNER_SANDBOX_IMAGES" in b for b in unread_env_names(docs, secrets, v))
    # The instance ConfigMap and Postgres Secret of the old dagster.yaml:
    inst["run_launcher"]["config"]["instance_config_map"] = "evalrunner-dagster-instance"
    without_pg = {k: keys for k, keys in secrets.items() if k != "evalrunner-postgresql"}
    found = missing_objects(docs, without_pg, v, inst, "dagster")
    assert any("evalrunner-dagster-instance" in b for b in found) and any("evalrunner-postgresql" in b for b in found)
    # A TLS secret with neither cert-manager nor a README step:
    ingress = find(docs, "Ingress", "evalrunner-webhook")
    ingress["metadata"]["annotations"] = {}
    assert any("evalrunner-webhook-tls" in b for b in missing_objects(docs, secrets, v, instance(), "dagster"))


def test_github_app_secret_carries_the_variables_the_github_resource_reads_and_is_wired_into_runs():
    from resources._github_client import ENV_APP_ID, ENV_PRIVATE_KEY

    secrets = readme_secrets(readme())
    assert {ENV_APP_ID, ENV_PRIVATE_KEY} <= secrets["evalrunner-github-app"]
    v = values()
    for where in (user_deployment(v), v["runLauncher"]["config"]["k8sRunLauncher"]):
        assert {"name": "evalrunner-github-app"} in where["envSecrets"]  # not optional: no App, no verdict
    assert "evalrunner-github-app" in instance()["run_launcher"]["config"]["env_secrets"]


def test_webhook_secret_file_is_where_the_receiver_reads_it():
    from evalrunner_assets.http.webhook import SECRET_FILE_ENV

    hook = find(manifests(), "Deployment", "evalrunner-webhook")["spec"]["template"]["spec"]
    (container,) = hook["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    path = Path(env[SECRET_FILE_ENV])
    mount = next(m for m in container["volumeMounts"] if Path(m["mountPath"]) == path.parent)
    volume = next(vol for vol in hook["volumes"] if vol["name"] == mount["name"])
    assert path.name in readme_secrets(readme())[volume["secret"]["secretName"]]


def test_postgres_password_secret_has_the_key_dagster_k8s_reads_and_is_made_once():
    from dagster_k8s.job import DAGSTER_PG_PASSWORD_SECRET_KEY

    assert readme_secrets(readme())["evalrunner-postgresql"] == {DAGSTER_PG_PASSWORD_SECRET_KEY}
    v = values()
    assert v["generatePostgresqlPasswordSecret"] is False
    assert v["global"]["postgresqlSecretName"] == v["postgresql"]["existingSecret"] == "evalrunner-postgresql"
    # Created only when absent, and no install or upgrade sets a password of its own.
    commands = readme_commands(readme())
    i = next(
        i
        for i, c in enumerate(commands)
        if c[:4] == ["kubectl", "-n", "evalrunner", "get"] and "evalrunner-postgresql" in c
    )
    assert commands[i + 1][:2] == ["kubectl", "-n"] and "create" in commands[i + 1]
    assert "||" in readme()  # the create runs only when the get failed
    assert not any("postgresqlPassword" in w for c in commands for w in c)


def test_postgres_connection_names_match_the_chart_values():
    env = find(manifests(), "ConfigMap", "evalrunner-env")["data"]
    v = values()
    release, _ = helm_release(readme())
    assert env["DAGSTER_PG_USER"] == v["postgresql"]["postgresqlUsername"]
    assert env["DAGSTER_PG_DB"] == v["postgresql"]["postgresqlDatabase"]
    assert (
        v["postgresql"]["enabled"] and env["DAGSTER_PG_HOST"] == f"{release}-postgresql"
    )  # the bundled Postgres service
    assert instance()["storage"]["postgres"]["postgres_db"]["port"] == v["postgresql"]["service"]["port"]


def test_ports_services_and_paths_agree():
    from evalrunner_assets.http.webhook import WEBHOOK_PATH

    docs, v = manifests(), values()
    dep = user_deployment(v)
    workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())["load_from"][0]["grpc_server"]
    assert (
        workspace["host"] == dep["name"] and workspace["port"] == dep["port"]
    )  # the chart's Service is named after the deployment
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"EXPOSE {dep['port']}" in dockerfile and f'"--port", "{dep["port"]}"' in dockerfile
    hook = find(docs, "Deployment", "evalrunner-webhook")["spec"]["template"]["spec"]["containers"][0]
    (port,) = hook["ports"]
    assert hook["command"][hook["command"].index("--port") + 1] == str(port["containerPort"])
    service = find(docs, "Service", "evalrunner-webhook")
    (sport,) = service["spec"]["ports"]
    assert sport["targetPort"] == port["name"]
    ingress = find(docs, "Ingress", "evalrunner-webhook")
    (rule,) = ingress["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["backend"]["service"] == {"name": service["metadata"]["name"], "port": {"name": sport["name"]}}
    assert path["path"] == WEBHOOK_PATH
    assert f"https://{rule['host']}{WEBHOOK_PATH}" in readme()  # the URL the README has GitHub call
    assert rule["host"] in ingress["spec"]["tls"][0]["hosts"]


def test_namespaces_and_service_accounts_agree():
    from evalrunner_assets.execution.kubernetes import KubernetesSandboxConfig
    from resources.sandbox import SandboxResource

    docs, v, inst = manifests(), values(), instance()
    namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    assert namespaces == {RELEASE_NAMESPACE, "evalrunner-sandbox"}
    assert all(d["metadata"]["namespace"] in namespaces for d in docs if d["kind"] != "Namespace")
    assert helm_release(readme())[1] == RELEASE_NAMESPACE
    assert (
        inst["run_launcher"]["config"]["job_namespace"]
        == v["runLauncher"]["config"]["k8sRunLauncher"]["jobNamespace"]
        == RELEASE_NAMESPACE
    )
    env = find(docs, "ConfigMap", "evalrunner-env")["data"]
    sandbox_ns = env["EVALRUNNER_SANDBOX_NAMESPACE"]
    assert sandbox_ns == KubernetesSandboxConfig.model_fields["namespace"].default == "evalrunner-sandbox"
    assert find(docs, "Role", "evalrunner-sandbox-controller")["metadata"]["namespace"] == sandbox_ns
    controller = find(docs, "ServiceAccount", "evalrunner-dagster")
    assert controller["metadata"]["namespace"] == RELEASE_NAMESPACE
    names = {
        v["global"]["serviceAccountName"],
        v["serviceAccount"]["name"],
        inst["run_launcher"]["config"]["service_account_name"],
    }
    assert names == {controller["metadata"]["name"]}
    (subject,) = find(docs, "RoleBinding", "evalrunner-sandbox-controller")["subjects"]
    assert (subject["name"], subject["namespace"]) == (controller["metadata"]["name"], RELEASE_NAMESPACE)
    sandbox_sa = find(docs, "ServiceAccount", KubernetesSandboxConfig.model_fields["service_account"].default)
    assert sandbox_sa["metadata"]["namespace"] == sandbox_ns
    # The code location reads the ConfigMap's sandbox settings (definitions use from_env).
    resource = SandboxResource.from_env(env)
    assert resource.backend_name == "kubernetes" and resource.k8s_namespace == sandbox_ns
    assert resource.k8s_image == env["EVALRUNNER_SANDBOX_IMAGE"]
    assert resource.k8s_max_concurrent_pods == int(env["EVALRUNNER_SANDBOX_MAX_CONCURRENT_PODS"])


def exec_targets(text: str) -> list[str]:
    """The Deployments the README's `kubectl exec deploy/NAME` commands run in."""
    return [
        w.removeprefix("deploy/")
        for c in readme_commands(text)
        if c[:1] == ["kubectl"] and "exec" in c
        for w in c
        if w.startswith("deploy/")
    ]


def test_the_readme_runs_envs_prune_in_the_code_locations_deployment():
    # The chart names a user deployment "<release>-dagster-user-deployments-<name>".
    release = helm_release(readme())[0]
    code_location = f"{release}-dagster-user-deployments-{user_deployment(values())['name']}"
    targets = exec_targets(readme())
    assert targets and set(targets) == {code_location}
    prunes = [
        c
        for c in readme_commands(readme())
        if "exec" in c and c[c.index("--") + 1 :][:3] == ["evalrunner", "envs", "prune"]
    ]
    assert len(prunes) == len(targets)


def test_images_are_deployed_by_digest():
    docs, v = manifests(), values()
    assert "@sha256:" in user_deployment(v)["image"]["tag"]
    hook = find(docs, "Deployment", "evalrunner-webhook")["spec"]["template"]["spec"]["containers"][0]
    assert "@sha256:" in hook["image"]
    assert "@sha256:" in find(docs, "ConfigMap", "evalrunner-env")["data"]["EVALRUNNER_SANDBOX_IMAGE"]
    assert "RepoDigests" in readme()  # the README step that produces the digests


def image_findings(text: str, docs: list[dict], v: dict, dockerfile: str) -> list[str]:
    """The README's image steps against the Dockerfile and the files it says to pin: the base
    image it verifies is the Dockerfile's, the stages it builds exist, each image it builds is
    pushed and resolved to its digest, and the names it pins are the ones deploy/ uses."""
    bad = []
    commands = readme_commands(text)
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, flags=re.M)
    inspected = [c[4] for c in commands if c[:4] == ["docker", "buildx", "imagetools", "inspect"]]
    if not base or inspected != [base.group(1).split("@")[0]]:
        bad.append(f"README verifies base image {inspected}, Dockerfile pins {base.group(1) if base else None}")
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", dockerfile, flags=re.M))
    built = {}
    for c in commands:
        if c[:2] == ["docker", "build"]:
            target, tag = c[c.index("--target") + 1], c[c.index("-t") + 1]
            if target not in stages:
                bad.append(f"README builds stage {target!r}, which deploy/Dockerfile does not have")
            built[target] = tag
    pushed = {c[2] for c in commands if c[:2] == ["docker", "push"]}
    # VAR=$(docker inspect --format '{{index .RepoDigests 0}}' IMAGE): the image is the last word.
    resolved = {c[-1].rstrip(")") for c in commands if "{{index .RepoDigests 0}}" in c and "inspect" in c}
    for tag in built.values():
        if tag not in pushed or tag not in resolved:
            bad.append(f"README builds {tag} but does not push it and take its digest")
    repo_of = {target: tag.split(":")[0].replace("$REGISTRY", "REGISTRY") for target, tag in built.items()}
    pins = {
        "helm/values.yaml dagster-user-deployments image": (user_deployment(v)["image"]["repository"], "code-location"),
        "k8s/50-webhook.yaml image": (
            find(docs, "Deployment", "evalrunner-webhook")["spec"]["template"]["spec"]["containers"][0]["image"].split(
                "@"
            )[0],
            "code-location",
        ),
        "EVALRUNNER_SANDBOX_IMAGE": (
            find(docs, "ConfigMap", "evalrunner-env")["data"]["EVALRUNNER_SANDBOX_IMAGE"].split("@")[0],
            "sandbox",
        ),
    }
    for where, (image, target) in pins.items():
        if image != repo_of.get(target):
            bad.append(f"{where} is {image!r}; the README builds {target} as {repo_of.get(target)!r}")
    return bad


def test_readme_verifies_the_base_image_and_builds_pushes_and_pins_the_images_deploy_uses():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    docs, v = manifests(), values()
    assert image_findings(readme(), docs, v, dockerfile) == []
    # A renamed sandbox image, a stage the Dockerfile lacks, another base image: each is caught.
    broken = readme().replace("$REGISTRY/evalrunner-sandbox:$TAG .", "$REGISTRY/evalrunner-box:$TAG .")
    assert any("EVALRUNNER_SANDBOX_IMAGE" in b for b in image_findings(broken, docs, v, dockerfile))
    broken = readme().replace("--target sandbox ", "--target sandboxed ")
    assert any("'sandboxed'" in b for b in image_findings(broken, docs, v, dockerfile))
    rebased = dockerfile.replace("python:3.11-slim-bookworm@", "python:3.12-slim-bookworm@")
    assert any("verifies base image" in b for b in image_findings(readme(), docs, v, rebased))


@pytest.mark.parametrize(
    "bad",
    ["EVALRUNNER_SANDBOX_MAX_CONCURRENT_PODS", "EVALRUNNER_MODEL_EGRESS_PORT", "EVALRUNNER_SANDBOX_ENV_RETAIN_DAYS"],
)
def test_sandbox_settings_from_the_environment_refuse_a_non_number_naming_it(bad):
    from resources.sandbox import SandboxResource

    with pytest.raises(ValueError, match=bad):
        SandboxResource.from_env({bad: "eight"})
