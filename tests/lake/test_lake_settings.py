"""The lake's settings are defined once (evalrunner_assets/lake_settings.py), read when a lake is opened (not at
import), checked with errors naming the variable, and the deploy files set only known ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from evalrunner_assets import lake_settings as lake_settings_module
from evalrunner_assets.errors import UserError
from evalrunner_assets.lake_settings import BY_ENV, LakeSettingError, lake_settings
from lake import open_lake

ROOT = Path(__file__).resolve().parents[2]


def test_unset_variables_keep_the_defaults_and_set_ones_are_parsed():
    assert lake_settings({}) == lake_settings_module.LakeSettings()
    got = lake_settings({"EVALRUNNER_LAKE": " gs://b/p ", "EVALRUNNER_LAKE_RETRIES": "3",
                         "EVALRUNNER_LAKE_RETRY_BASE_S": "0.25", "EVALRUNNER_GCS_TOKEN": ""})  # fmt: skip
    assert (got.root, got.retries, got.retry_base_s, got.gcs_token) == ("gs://b/p", 3, 0.25, None)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"EVALRUNNER_LAKE_RETRIES": "two"}, "EVALRUNNER_LAKE_RETRIES='two' is not a whole number"),
        ({"EVALRUNNER_LAKE_RETRIES": "-1"}, "EVALRUNNER_LAKE_RETRIES='-1' is negative"),
        ({"EVALRUNNER_LAKE_RETRY_BASE_S": "soon"}, "EVALRUNNER_LAKE_RETRY_BASE_S='soon' is not a number"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_variable(env, says):
    with pytest.raises(LakeSettingError, match=re.escape(says)):
        lake_settings(env)


def test_opening_a_lake_with_a_bad_value_is_a_user_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALRUNNER_LAKE_RETRIES", "two")
    with pytest.raises(UserError, match="EVALRUNNER_LAKE_RETRIES='two' is not a whole number"):
        open_lake(str(tmp_path / "lake"))


def test_settings_are_read_when_a_lake_is_opened_not_at_import(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALRUNNER_LAKE", str(tmp_path / "from-env"))
    monkeypatch.setenv("EVALRUNNER_LAKE_RETRIES", "4")
    lake = open_lake()
    assert lake.root == str(tmp_path / "from-env") and lake.retries == 4
    assert open_lake(str(tmp_path / "given"), retries=0).retries == 0  # a caller's value wins


def test_no_other_module_reads_a_lake_variable_from_the_environment():
    pattern = re.compile(r"environ(?:\.get)?\s*[\[(]\s*[\"'](EVALRUNNER_LAKE\w*|EVALRUNNER_GCS_\w+)")
    offenders = []
    for top in ("evalrunner_assets", "lake", "resources", "sensors"):
        for path in (ROOT / top).rglob("*.py"):
            if path.parent.name == "evalrunner_assets" and path.name in ("lake_settings.py", "home.py"):
                continue
            for match in pattern.finditer(path.read_text(encoding="utf-8")):
                offenders.append(f"{path.relative_to(ROOT)}: {match.group(1)}")
    assert offenders == []


def _keys(node, found):
    if isinstance(node, dict):
        name = node.get("name")
        if isinstance(name, str) and "value" in node:
            found.add(name)
        for key, value in node.items():
            found.add(str(key))
            _keys(value, found)
    elif isinstance(node, list):
        for item in node:
            _keys(item, found)
    return found


def test_the_deploy_files_set_only_known_lake_settings_and_the_lake_root():
    found: set[str] = set()
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        if "templates" in path.parts:  # Helm templates are not YAML until rendered
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            _keys(doc, found)
    lake_vars = {k for k in found if k.startswith(("EVALRUNNER_LAKE", "EVALRUNNER_GCS_"))}
    assert "EVALRUNNER_LAKE" in lake_vars
    assert lake_vars <= set(BY_ENV), lake_vars - set(BY_ENV)
