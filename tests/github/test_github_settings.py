"""GitHub's settings are defined once (evalrunner_assets/github_settings.py), read when credentials or
a client are made (not at import), checked with errors naming the variable, and the deploy files
set only known ones (and no GitHub secret in a ConfigMap)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from evalrunner_assets import github_settings as settings
from evalrunner_assets.github_settings import BY_ENV, GitHubSettingError, GitHubSettings, github_settings
from resources._github_client import GitHubClient, GitHubCredentials, GitHubError
from resources.github import GitHubResource

ROOT = Path(__file__).resolve().parents[2]


def test_unset_variables_keep_the_defaults_and_set_ones_are_parsed():
    assert github_settings({}) == GitHubSettings()
    assert github_settings({}).api_url == "https://api.github.com"
    got = github_settings({"EVALRUNNER_GITHUB_APP_ID": "12", "EVALRUNNER_GITHUB_INSTALLATION_ID": "34",
                           "EVALRUNNER_GITHUB_API_URL": "https://ghe.example/api/v3", "EVALRUNNER_GITHUB_TOKEN": ""})  # fmt: skip
    assert (got.app_id, got.installation_id, got.api_url, got.token) == ("12", 34, "https://ghe.example/api/v3", None)


def test_a_callers_value_wins_and_its_variable_is_not_read():
    env = {"EVALRUNNER_GITHUB_INSTALLATION_ID": "not-a-number", "EVALRUNNER_GITHUB_API_URL": "https://env"}
    got = github_settings(env, installation_id=7, api_url="https://given")
    assert (got.installation_id, got.api_url) == (7, "https://given")
    assert github_settings(env | {"EVALRUNNER_GITHUB_INSTALLATION_ID": "1"}, api_url="").api_url == "https://env"
    with pytest.raises(TypeError, match="not GitHub settings: apiurl"):
        github_settings({}, apiurl="x")


def test_a_bad_value_is_an_error_naming_the_variable():
    with pytest.raises(GitHubSettingError, match=re.escape("EVALRUNNER_GITHUB_INSTALLATION_ID='x1' is not a number")):
        github_settings({"EVALRUNNER_GITHUB_INSTALLATION_ID": "x1"})
    # Where credentials are made, it is a GitHubError (a sensor reports it; nothing crashes).
    with pytest.raises(GitHubError, match="EVALRUNNER_GITHUB_INSTALLATION_ID='x1' is not a number"):
        GitHubCredentials.from_env({"EVALRUNNER_GITHUB_INSTALLATION_ID": "x1", "EVALRUNNER_GITHUB_TOKEN": "t"})


def test_secrets_come_from_the_variable_or_its_file_never_both(tmp_path):
    key = tmp_path / "key.pem"
    key.write_text("PEM\n")
    app = GitHubCredentials.from_env({"EVALRUNNER_GITHUB_APP_ID": "5", "EVALRUNNER_GITHUB_PRIVATE_KEY_FILE": str(key)})
    assert (app.app_id, app.private_key, app.installation_id) == ("5", "PEM", None)
    assert "PEM" not in repr(app) and "PEM" not in repr(
        github_settings({"EVALRUNNER_GITHUB_PRIVATE_KEY": "PEM", "EVALRUNNER_GITHUB_TOKEN": "PEM"})
    )
    with pytest.raises(GitHubError, match=r"set only one of EVALRUNNER_GITHUB_TOKEN and a file for it"):
        GitHubCredentials.from_env({"EVALRUNNER_GITHUB_TOKEN": "t", "EVALRUNNER_GITHUB_TOKEN_FILE": str(key)})
    with pytest.raises(GitHubError, match="has no private key: set EVALRUNNER_GITHUB_PRIVATE_KEY"):
        GitHubCredentials.from_env({"EVALRUNNER_GITHUB_APP_ID": "5"})
    assert GitHubCredentials.from_env({"EVALRUNNER_GITHUB_TOKEN": "t"}, token_file=None).token == "t"


def test_settings_are_read_when_used_not_at_import(monkeypatch):
    monkeypatch.setenv("EVALRUNNER_GITHUB_TOKEN", "t")
    monkeypatch.setenv("EVALRUNNER_GITHUB_API_URL", "https://ghe.example/api/v3/")
    assert GitHubClient.from_env().base_url == "https://ghe.example/api/v3"
    resource = GitHubResource(throttle=False)
    assert resource.is_configured() and resource.describe()["base_url"] == "https://ghe.example/api/v3/"
    assert GitHubResource(base_url="https://given").describe()["base_url"] == "https://given"
    monkeypatch.delenv("EVALRUNNER_GITHUB_TOKEN")
    monkeypatch.delenv("EVALRUNNER_GITHUB_API_URL")
    assert not resource.is_configured() and resource.describe() == {
        "auth": "none",
        "base_url": settings.DEFAULT_API_URL,
        "check_run": "evalrunner / evals",
    }
    monkeypatch.setenv("EVALRUNNER_GITHUB_INSTALLATION_ID", "soon")
    assert not resource.is_configured()  # a bad setting: not configured, never a crash


# Reading one of these variables anywhere but github_settings.py, by its literal name or a
# name defined again as a constant.
_NAMES = r"EVALRUNNER_GITHUB_\w*|EVALRUNNER_GIT_BASE_URL\b"
_READ = re.compile(rf"(?:environ|getenv|\benv)(?:\.get)?\s*[\[(]\s*f?[\"']({_NAMES})")
_DEFINED = re.compile(rf"^\s*[A-Za-z_]\w*\s*(?::[^=]+)?=\s*[\"']({_NAMES})[\"']", re.M)


def test_no_other_module_reads_a_github_variable_from_the_environment():
    offenders = []
    for top in ("evalrunner_assets", "lake", "resources", "sensors"):
        for path in (ROOT / top).rglob("*.py"):
            if path == ROOT / "evalrunner_assets" / "github_settings.py":
                continue
            text = path.read_text(encoding="utf-8")
            for pattern in (_READ, _DEFINED):
                for match in pattern.finditer(text):
                    offenders.append(f"{path.relative_to(ROOT)}: {match.group(1)}")
    assert offenders == []


def test_the_check_sees_a_read_and_a_second_definition():
    assert _READ.search('token = os.environ.get("EVALRUNNER_GITHUB_TOKEN")')
    assert _READ.search("x = env['EVALRUNNER_GITHUB_APP_ID']")
    assert _DEFINED.search('ENV_TOKEN = "EVALRUNNER_GITHUB_TOKEN"')
    assert not _READ.search('raise GitHubError("set EVALRUNNER_GITHUB_TOKEN")')


def _env_names(node, found):
    """Every ``name`` with a ``value`` (container env) and every mapping key, recursively."""
    if isinstance(node, dict):
        name = node.get("name")
        if isinstance(name, str) and "value" in node:
            found.add(name)
        for key, value in node.items():
            found.add(str(key))
            _env_names(value, found)
    elif isinstance(node, list):
        for item in node:
            _env_names(item, found)
    return found


def test_the_deploy_files_set_only_known_github_settings_and_no_secret_in_a_config_map():
    found: set[str] = set()
    in_config_maps: set[str] = set()
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        if "templates" in path.parts:  # Helm templates are not YAML until rendered
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            _env_names(doc, found)
            if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
                in_config_maps |= set(doc.get("data") or {})
    github_vars = {k for k in found if k.startswith("EVALRUNNER_GITHUB_")}
    assert github_vars <= set(BY_ENV), github_vars - set(BY_ENV)
    secret = {s.env for s in settings.SETTINGS if s.secret}
    assert not in_config_maps & secret


def test_the_readme_secret_carries_the_app_settings():
    # deploy/README.md creates the App's Secret (its keys become the runs' variables).
    readme = (ROOT / "deploy" / "README.md").read_text(encoding="utf-8")
    [command] = [c for c in readme.split("kubectl") if "secret generic evalrunner-github-app" in c]
    keys = set(re.findall(r"--from-(?:literal|file)=(\w+)=", command))
    assert keys == {settings.APP_ID.env, settings.PRIVATE_KEY.env}


def test_the_pr_sensor_clones_from_the_git_host_the_environment_names_when_it_evaluates(monkeypatch):
    from sensors.pr import git_base_url

    monkeypatch.delenv("EVALRUNNER_GIT_BASE_URL", raising=False)
    assert git_base_url() == "https://github.com"
    monkeypatch.setenv("EVALRUNNER_GIT_BASE_URL", "https://git.example.internal")
    assert git_base_url() == "https://git.example.internal"
    assert github_settings({"EVALRUNNER_GIT_BASE_URL": "http://127.0.0.1:9"}).git_base_url == "http://127.0.0.1:9"
