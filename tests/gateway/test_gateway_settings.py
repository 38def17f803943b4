"""The model gateway's settings are defined once (evalrunner_assets/gateway/settings.py), read when a
gateway's settings are made (not at import), checked with errors naming the variable, and the
deploy files set only known ones (and never a model key in a ConfigMap)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from evalrunner_assets.gateway import PROVIDERS, GatewayError, GatewaySettings
from evalrunner_assets.gateway import settings as settings
from evalrunner_assets.gateway.settings import BY_ENV, GatewayEnvSettings, GatewaySettingError, gateway_env_settings

ROOT = Path(__file__).resolve().parents[2]


def test_unset_variables_keep_the_defaults_and_set_ones_are_parsed():
    assert gateway_env_settings({}) == GatewayEnvSettings()
    got = gateway_env_settings({"OPENAI_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://up", "OPENAI_BASE_URL": "",
                                "EVALRUNNER_GATEWAY_CONCURRENCY": "3"})  # fmt: skip
    assert (got.openai_key, got.anthropic_key, got.anthropic_base, got.openai_base, got.max_concurrency) == (
        "k",
        None,
        "http://up",
        "https://api.openai.com/v1",
        3,
    )
    assert "k" not in repr(got)


def test_the_providers_and_the_gateway_take_their_variables_and_defaults_from_the_settings():
    assert {(p.key_env, p.base_env, p.default_base) for p in PROVIDERS.values()} == {
        (settings.OPENAI_KEY.env, settings.OPENAI_BASE.env, settings.OPENAI_BASE.default),
        (settings.ANTHROPIC_KEY.env, settings.ANTHROPIC_BASE.env, settings.ANTHROPIC_BASE.default),
    }
    assert GatewaySettings().max_concurrency == settings.CONCURRENCY.default
    gs = GatewaySettings.from_env({"ANTHROPIC_API_KEY": "a", "EVALRUNNER_GATEWAY_CONCURRENCY": "2"}, budget_usd=1.0)
    assert (gs.keys, gs.max_concurrency, gs.budget_usd) == ({"anthropic": "a"}, 2, 1.0)
    assert gs.bases == {"openai": settings.OPENAI_BASE.default, "anthropic": settings.ANTHROPIC_BASE.default}


def test_a_bad_value_is_an_error_naming_the_variable():
    says = "EVALRUNNER_GATEWAY_CONCURRENCY='many' is not an integer"
    with pytest.raises(GatewaySettingError, match=re.escape(says)):
        gateway_env_settings({"EVALRUNNER_GATEWAY_CONCURRENCY": "many"})
    with pytest.raises(GatewayError, match=re.escape(says)):
        GatewaySettings.from_env({"EVALRUNNER_GATEWAY_CONCURRENCY": "many"})
    # A caller's own value wins, and the variable is then not read.
    assert GatewaySettings.from_env({"EVALRUNNER_GATEWAY_CONCURRENCY": "many"}, max_concurrency=5).max_concurrency == 5


def test_settings_are_read_when_used_not_at_import(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("EVALRUNNER_GATEWAY_CONCURRENCY", "4")
    gs = GatewaySettings.from_env()
    assert (gs.keys, gs.max_concurrency) == ({"openai": "k"}, 4)


_NAMES = "|".join(re.escape(s.env) for s in settings.SETTINGS)
_READ = re.compile(rf"(?:environ|getenv|\benv)(?:\.get)?\s*[\[(]\s*f?[\"']({_NAMES})[\"']")


def test_no_other_module_reads_a_gateway_variable_from_the_environment():
    offenders = []
    for top in ("evalrunner_assets", "lake", "resources", "sensors"):
        for path in (ROOT / top).rglob("*.py"):
            if path == ROOT / "evalrunner_assets" / "gateway" / "settings.py":
                continue
            for match in _READ.finditer(path.read_text(encoding="utf-8")):
                offenders.append(f"{path.relative_to(ROOT)}: {match.group(1)}")
    assert offenders == []
    assert _READ.search('os.environ.get("OPENAI_API_KEY")') and _READ.search("env['EVALRUNNER_GATEWAY_CONCURRENCY']")


def test_the_deploy_files_set_only_known_gateway_settings_and_no_key_in_a_config_map():
    found: set[str] = set()
    in_config_maps: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("name"), str) and "value" in node:
                found.add(node["name"])
            for key, value in node.items():
                found.add(str(key))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        if "templates" in path.parts:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            walk(doc)
            if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
                in_config_maps |= set(doc.get("data") or {})
    gateway_vars = {k for k in found if k.startswith("EVALRUNNER_GATEWAY_")}
    assert gateway_vars <= set(BY_ENV), gateway_vars - set(BY_ENV)
    assert not in_config_maps & {s.env for s in settings.SETTINGS if s.secret}
