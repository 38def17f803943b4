"""The sandbox settings are defined once (evalrunner_assets/execution/sandbox_settings.py): the
Dagster resource, the Kubernetes backend's configuration, the CLI and the deploy files agree
with that definition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from evalrunner_assets.execution import sandbox_settings as settings
from evalrunner_assets.execution.kubernetes.config import KubernetesSandboxConfig
from resources.sandbox import ENV_FIELDS, SandboxResource

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PREFIX = "EVALRUNNER_SANDBOX_"
# The deploy files choose the backend (kubernetes); every other setting with a default that
# they set must be set to that default, so a deployment that copies them and one that sets
# nothing behave alike.
CHOSEN_BY_THE_DEPLOYMENT = {settings.BACKEND.env}


def _env_entries(node: Any, where: str) -> list[tuple[str, str, Any]]:
    """Every (where, variable, value) a Helm values tree or a manifest sets: a container's
    ``env`` list (``name``/``value``) and any mapping key spelled like a sandbox variable."""
    found: list[tuple[str, str, Any]] = []
    if isinstance(node, dict):
        name = node.get("name")
        if isinstance(name, str) and name.startswith("EVALRUNNER_") and "value" in node:
            found.append((where, name, node["value"]))
        for key, value in node.items():
            if isinstance(key, str) and key in settings.BY_ENV or str(key).startswith(PREFIX):
                found.append((where, str(key), value))
            else:
                found += _env_entries(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found += _env_entries(item, f"{where}[{i}]")
    return found


def deployed_settings() -> list[tuple[str, str, Any]]:
    """The sandbox variables deploy/k8s/*.yaml (ConfigMap data, container env) and the Helm
    values set, with where each is set."""
    found: list[tuple[str, str, Any]] = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            where = f"{path.relative_to(ROOT)} {doc['kind']}/{doc['metadata']['name']}"
            if doc["kind"] == "ConfigMap":
                found += [(where, k, v) for k, v in (doc.get("data") or {}).items()]
            else:
                found += _env_entries(doc.get("spec", {}), where)
    for path in sorted((DEPLOY / "helm").glob("*.yaml")):
        found += _env_entries(yaml.safe_load(path.read_text()), str(path.relative_to(ROOT)))
    return found


def findings(entries: list[tuple[str, str, Any]]) -> list[str]:
    """What is wrong with the deployed sandbox settings: an unknown EVALRUNNER_SANDBOX_*
    variable, a value that does not parse to its setting's type, or a default-valued knob set
    to something other than the one default."""
    bad = []
    for where, name, value in entries:
        setting = settings.BY_ENV.get(name)
        if setting is None:
            if name.startswith(PREFIX):
                bad.append(f"{where}: {name} is not a sandbox setting (sandbox_settings.SETTINGS)")
            continue
        if not isinstance(value, str):
            bad.append(f"{where}: {name} is {value!r}, not a string (environment values are strings: quote it)")
            continue
        try:
            parsed = setting.parse(value)
        except ValueError as exc:
            bad.append(f"{where}: {exc}")
            continue
        if setting.choices and parsed not in setting.choices:
            bad.append(f"{where}: {name}={value!r} is not one of {', '.join(setting.choices)}")
        if setting.default is not None and name not in CHOSEN_BY_THE_DEPLOYMENT and parsed != setting.default:
            bad.append(f"{where}: {name}={value!r} disagrees with the setting's default {setting.default!r}")
    return bad


def test_the_deploy_files_set_only_known_sandbox_settings_with_values_of_their_type_and_default():
    entries = deployed_settings()
    names = {name for _, name, _ in entries}
    # The ConfigMap is where the deployment's settings live: it names the pod cap.
    assert settings.MAX_CONCURRENT_PODS.env in names and settings.BACKEND.env in names
    assert findings(entries) == []


@pytest.mark.parametrize(
    ("name", "value", "complaint"),
    [
        ("EVALRUNNER_SANDBOX_MAX_CONCURRENT_PODS", "16", "default 8"),
        ("EVALRUNNER_SANDBOX_MAX_CONCURRENT_PODS", "eight", "not an integer"),
        ("EVALRUNNER_SANDBOX_MAX_CONCURRENT_PODS", 8, "not a string"),
        ("EVALRUNNER_SANDBOX_ENV_RETAIN_DAYS", "two weeks", "not a number"),
        ("EVALRUNNER_SANDBOX_BACKEND", "docker", "not one of"),
        ("EVALRUNNER_SANDBOX_POD_CAP", "8", "not a sandbox setting"),
    ],
)
def test_a_wrong_deployed_sandbox_setting_is_named(name, value, complaint):
    (bad,) = findings([("deploy/k8s/x.yaml ConfigMap/evalrunner-env", name, value)])
    assert name in bad and complaint in bad


def test_the_env_walk_finds_container_env_and_helm_style_mappings():
    spec = {"template": {"spec": {"containers": [{"env": [{"name": "EVALRUNNER_SANDBOX_IMAGE", "value": "x"}]}]}}}
    assert _env_entries(spec, "d") == [("d.template.spec.containers[0].env[0]", "EVALRUNNER_SANDBOX_IMAGE", "x")]
    helm = {"a": {"env": {"EVALRUNNER_SANDBOX_MAX_CONCURRENT_PODS": "4"}}}
    assert findings(_env_entries(helm, "values.yaml"))  # 4 is not the default


def test_the_pod_cap_has_one_default_everywhere():
    default = settings.MAX_CONCURRENT_PODS.default
    assert default == 8
    assert SandboxResource().k8s_max_concurrent_pods == default
    assert SandboxResource.from_env({}).k8s_max_concurrent_pods == default
    assert KubernetesSandboxConfig(image="i").max_concurrent_pods == default
    assert SandboxResource(backend_name="kubernetes").worker_count() == default


def test_the_resource_and_the_kubernetes_config_take_every_setting_from_its_definition():
    assert ENV_FIELDS == {s.env: s.resource_field for s in settings.SETTINGS}
    assert len(settings.BY_ENV) == len(settings.SETTINGS)
    resource_fields = SandboxResource.model_fields
    config_fields = KubernetesSandboxConfig.model_fields
    for s in settings.SETTINGS:
        assert resource_fields[s.resource_field].default == s.resource_default, s.name
        assert resource_fields[s.resource_field].annotation in (s.type, f"{s.type.__name__}"), s.name
        if s.config_field is None:
            continue
        field = config_fields[s.config_field]
        assert field.description == s.help, s.name
        if s is settings.IMAGE:
            assert field.is_required()
        elif s is settings.MODEL_EGRESS_PORT:
            # Given to the backend only together with a CIDR (kubernetes_options).
            assert field.default is None
        else:
            assert field.default == s.default, s.name


def test_from_env_parses_each_setting_to_its_type():
    env = {
        "EVALRUNNER_SANDBOX_BACKEND": "kubernetes",
        "EVALRUNNER_SANDBOX_MAX_CONCURRENT_PODS": "3",
        "EVALRUNNER_SANDBOX_ENV_RETAIN_DAYS": "0.5",
        "EVALRUNNER_MODEL_EGRESS_PORT": "8443",
        "EVALRUNNER_SANDBOX_IMAGE": "",  # empty: the default holds
    }
    r = SandboxResource.from_env(env)
    assert (r.backend_name, r.k8s_max_concurrent_pods, r.k8s_env_retain_days, r.k8s_model_egress_port) == (
        "kubernetes",
        3,
        0.5,
        8443,
    )
    assert r.k8s_image == settings.IMAGE.resource_default


def test_the_cli_offers_the_settings_choices_and_defaults():
    from evalrunner_assets.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["envs", "prune"])
    assert args.retain_days is None and args.namespace is None  # the environment's, else the defaults
    sub = next(a for a in parser._actions if a.dest == "command")
    envs = sub.choices["envs"]  # type: ignore[attr-defined]
    prune = next(a for a in envs._actions if a.dest == "envs_command").choices["prune"]
    helps = {a.dest: a.help for a in prune._actions}
    assert settings.ENV_RETAIN_DAYS.env in helps["retain_days"] and "else 14)" in helps["retain_days"]
    assert settings.NAMESPACE.default in helps["namespace"]
    for command in ("backfill", "compare"):
        p = sub.choices[command]  # type: ignore[attr-defined]
        backend = next(a for a in p._actions if a.dest == "backend")
        assert tuple(backend.choices) == settings.BACKEND.choices and backend.default == settings.BACKEND.default
