"""Discovery: every error is its own, with its message; the schema holds for random manifests."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalrunner_assets.discovery import (
    DiscoveryError,
    ListFailed,
    ListNotExecutable,
    ListNotRegularFile,
    ListOutputTooLarge,
    ListTimeout,
    Manifest,
    ManifestNotJSON,
    ManifestSchemaError,
    NoEvalsFound,
    discover,
    manifest_schema,
    parse_manifest_bytes,
    validate_manifest,
)
from evalrunner_assets.execution.repo import RepoSource
from lake.layout import check_task


def export_of(make_repo, tmp_path: Path, files: dict[str, str], executable=(".evals/list",)):
    repo, sha = make_repo(files, executable=tuple(e for e in executable if e in files))
    return RepoSource("acme/agent", str(repo)).export(sha, tmp_path / "exports" / sha[:12])


def list_printing(text: str) -> dict[str, str]:
    return {".evals/list": "#!/bin/sh\ncat <<'EOF'\n" + text + "\nEOF\n"}


def violations(data) -> list[tuple[str, str]]:
    with pytest.raises(ManifestSchemaError) as info:
        validate_manifest(data)
    return [(v.path, v.message) for v in info.value.violations]


def task(**kw):
    return {"id": "triage/lookup", "spec": "tasks.py@lookup", **kw}


# --- schema errors, each with its message ------------------------------------------------------


def test_schema_is_shipped_in_the_package():
    schema = manifest_schema()
    assert schema["properties"]["version"] == {"description": "Manifest format version.", "const": 1}


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        ([], "$", "[] is not of type 'object'"),
        ({"version": 2, "tasks": []}, "$.version", "1 was expected"),
        ({"tasks": []}, "$", "'version' is a required property"),
        ({"version": 1}, "$", "'tasks' is a required property"),
        ({"version": 1, "tasks": {}}, "$.tasks", "{} is not of type 'array'"),
        ({"version": 1, "tasks": [1]}, "$.tasks[0]", "1 is not of type 'object'"),
        ({"version": 1, "tasks": [{"spec": "a.py"}]}, "$.tasks[0]", "'id' is a required property"),
        ({"version": 1, "tasks": [{"id": "a"}]}, "$.tasks[0]", "'spec' is a required property"),
        ({"version": 1, "tasks": [task(id="../etc")]}, "$.tasks[0].id", "'../etc' is not a path-safe task id"),
        ({"version": 1, "tasks": [task(id="/abs")]}, "$.tasks[0].id", "'/abs' is not a path-safe task id"),
        ({"version": 1, "tasks": [task(id="a/./b")]}, "$.tasks[0].id", "'a/./b' is not a path-safe task id"),
        ({"version": 1, "tasks": [task(id="Upper")]}, "$.tasks[0].id", "'Upper' is not a path-safe task id"),
        ({"version": 1, "tasks": [task(id="a//b")]}, "$.tasks[0].id", "'a//b' is not a path-safe task id"),
        ({"version": 1, "tasks": [task(id="")]}, "$.tasks[0].id", "'' is not a path-safe task id"),
        ({"version": 1, "tasks": [task(spec="--log-dir=/x")]}, "$.tasks[0].spec", "must not start with '-'"),
        ({"version": 1, "tasks": [task(spec="a b.py")]}, "$.tasks[0].spec", "no whitespace"),
        ({"version": 1, "tasks": [task(cohort="Nightly!")]}, "$.tasks[0].cohort", "'Nightly!' is not a cohort name"),
        ({"version": 1, "tasks": [task(workdir=3)]}, "$.tasks[0].workdir", "3 is not of type 'string'"),
        ({"version": 1, "tasks": [task(paths="evals/**")]}, "$.tasks[0].paths", "'evals/**' is not of type 'array'"),
        (
            {"version": 1, "tasks": [task(resources=[1])]},
            "$.tasks[0].resources[0]",
            "1 is not of type 'string', 'object'",
        ),
        ({"version": 1, "tasks": [task(images=[""])]}, "$.tasks[0].images[0]", "'' should be non-empty"),
        ({"version": 1, "images": "img", "tasks": []}, "$.images", "'img' is not of type 'array'"),
    ],
)
def test_each_schema_violation_names_its_json_path(data, path, message):
    found = violations(data)
    assert any(p == path and message in m for p, m in found), found


@pytest.mark.parametrize(
    ("tasks", "path", "message"),
    [
        ([task(), task()], "$.tasks[1].id", "duplicate task id 'triage/lookup' (also at $.tasks[0].id)"),
        (
            [task(workdir="../outside")],
            "$.tasks[0].workdir",
            "workdir '../outside' is absolute or leaves the repository",
        ),
        ([task(workdir="/etc")], "$.tasks[0].workdir", "workdir '/etc' is absolute or leaves the repository"),
        ([task(workdir="a/../../b")], "$.tasks[0].workdir", "leaves the repository"),
        ([task(workdir="evals", spec="../../x.py@t")], "$.tasks[0].spec", "points outside the repository"),
        ([task(spec="/etc/x.py@t")], "$.tasks[0].spec", "points outside the repository"),
        ([task(paths=["../x/**"])], "$.tasks[0].paths[0]", "path glob '../x/**' is absolute or leaves the repository"),
    ],
)
def test_rules_beyond_the_schema_are_violations_too(tasks, path, message):
    found = violations({"version": 1, "tasks": tasks})
    assert any(p == path and message in m for p, m in found), found


def test_every_violation_is_reported_not_only_the_first():
    found = violations({"version": 3, "tasks": [task(id="Bad"), {"id": "x"}]})
    assert [p for p, _ in found] == ["$.tasks[0].id", "$.tasks[1]", "$.version"]


def test_defaults_are_filled_and_unknown_fields_preserved():
    m = validate_manifest(
        {"version": 1, "x-owner": "team-a", "tasks": [{"id": "a", "spec": "t.py@a", "timeout": 30, "meta": {"k": [1]}}]}
    )
    d = m.to_dict()
    assert d["x-owner"] == "team-a" and d["images"] == []
    assert d["tasks"][0] == {
        "id": "a",
        "spec": "t.py@a",
        "workdir": ".",
        "resources": [],
        "images": [],
        "cohort": "default",
        "paths": [],
        "timeout": 30,
        "meta": {"k": [1]},
    }
    assert validate_manifest(json.loads(m.to_json_bytes())) == m


@pytest.mark.parametrize(
    ("raw", "cls", "message"),
    [
        (b"", ManifestNotJSON, "is empty; expected a JSON manifest"),
        (b"\xff\xfe{}", ManifestNotJSON, "is not valid UTF-8 (byte 0)"),
        (
            b'{"version": 1,\n "tasks": [}',
            ManifestNotJSON,
            "not valid JSON: Expecting value at line 2 column 12 (char 26)",
        ),
        (b'{"version": 1, "tasks": []} trailing', ManifestNotJSON, "Extra data at line 1 column 29"),
    ],
)
def test_output_that_is_not_json_says_where(raw, cls, message):
    with pytest.raises(cls) as info:
        parse_manifest_bytes(raw)
    assert message in str(info.value)


def test_invalid_json_error_carries_its_position():
    with pytest.raises(ManifestNotJSON) as info:
        parse_manifest_bytes(b'{"version": 1,\n "tasks": [}')
    assert (info.value.position, info.value.line, info.value.column) == (26, 2, 12)


# --- property tests ----------------------------------------------------------------------------

SEG = st.text(alphabet="abcxyz019_.-", min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))
TASK_ID = st.lists(SEG, min_size=1, max_size=3).map("/".join)
REL = st.lists(st.text(alphabet="abc_-", min_size=1, max_size=6), min_size=0, max_size=3).map(
    lambda parts: "/".join(parts) or "."
)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
EXTRA_KEYS = st.text(alphabet="kqz", min_size=1, max_size=4).map(lambda s: "x-" + s)


@st.composite
def valid_manifests(draw):
    ids = draw(st.lists(TASK_ID, min_size=0, max_size=5, unique=True))
    tasks = []
    for tid in ids:
        t = {"id": tid, "spec": "e" + draw(REL).replace(".", "t") + ".py@" + draw(st.sampled_from(["a", "task_1"]))}
        if draw(st.booleans()):
            t["workdir"] = draw(REL)
        if draw(st.booleans()):
            t["cohort"] = draw(st.sampled_from(["default", "nightly", "smoke.v2"]))
        if draw(st.booleans()):
            t["paths"] = draw(st.lists(REL.map(lambda p: p + "/**"), max_size=3))
        if draw(st.booleans()):
            t["resources"] = draw(st.lists(st.sampled_from(["gpu", "net"]) | st.just({"cpu": 2}), max_size=2))
        t.update(draw(st.dictionaries(EXTRA_KEYS, JSONISH, max_size=2)))
        tasks.append(t)
    m = {"version": 1, "tasks": tasks}
    if draw(st.booleans()):
        m["images"] = draw(st.lists(st.sampled_from(["python:3.11", "ghcr.io/acme/agent:1"]), max_size=2))
    m.update(draw(st.dictionaries(EXTRA_KEYS, JSONISH, max_size=2)))
    return m


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_manifests())
def test_valid_manifests_round_trip(data):
    m = validate_manifest(data)
    again = validate_manifest(json.loads(m.to_json_bytes()))
    assert again == m
    dumped = m.to_dict()
    for key, value in data.items():
        if key != "tasks":
            assert dumped[key] == value
    for given_task, out in zip(data["tasks"], dumped["tasks"]):
        for key, value in given_task.items():
            assert out[key] == value
        assert out["cohort"] == given_task.get("cohort", "default")
        check_task(out["id"])  # every valid id is a valid lake path segment


MUTATIONS = {
    "bad_version": (lambda m: m.update(version=2), "$.version"),
    "no_tasks": (lambda m: m.pop("tasks"), "$"),
    "bad_id": (lambda m: m["tasks"][0].update(id="../up"), "$.tasks[0].id"),
    "dup_id": (lambda m: m["tasks"].append(dict(m["tasks"][0])), None),
    "no_spec": (lambda m: m["tasks"][0].pop("spec"), "$.tasks[0]"),
    "escaping_workdir": (lambda m: m["tasks"][0].update(workdir="../.."), "$.tasks[0].workdir"),
    "dash_spec": (lambda m: m["tasks"][0].update(spec="-x"), "$.tasks[0].spec"),
    "images_not_list": (lambda m: m.update(images={"a": 1}), "$.images"),
}


@settings(max_examples=150, deadline=None)
@given(valid_manifests().filter(lambda m: m["tasks"]), st.sampled_from(sorted(MUTATIONS)))
def test_invalid_manifests_raise_the_schema_error_at_the_mutated_path(data, mutation):
    mutate, path = MUTATIONS[mutation]
    mutate(data)
    with pytest.raises(ManifestSchemaError) as info:
        validate_manifest(data)
    paths = [v.path for v in info.value.violations]
    if path is not None:
        assert path in paths
    else:
        assert paths == [f"$.tasks[{len(data['tasks']) - 1}].id"]


@settings(max_examples=300, deadline=None)
@given(JSONISH | st.dictionaries(st.sampled_from(["version", "tasks", "images", "x"]), JSONISH, max_size=4))
def test_arbitrary_json_never_crashes_validation(data):
    try:
        assert isinstance(validate_manifest(data), Manifest)
    except ManifestSchemaError as exc:
        assert exc.violations and all(v.path.startswith("$") for v in exc.violations)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | JSONISH.map(lambda v: json.dumps(v).encode()))
def test_arbitrary_bytes_never_crash_parsing(raw):
    try:
        parse_manifest_bytes(raw)
    except DiscoveryError:
        pass


# --- discovery in the sandbox ----------------------------------------------------------------


def test_a_valid_list_is_discovered_with_defaults(bwrap_backend, make_repo, tmp_path):
    manifest = {
        "version": 1,
        "images": [],
        "tasks": [{"id": "triage/lookup", "workdir": "evals", "spec": "tasks.py@lookup", "owner": "sre"}],
    }
    export = export_of(make_repo, tmp_path, {**list_printing(json.dumps(manifest)), "evals/tasks.py": "#"})
    result = discover(bwrap_backend, export)
    assert result.source == "evals-list"
    assert result.commit == export.commit and result.tree_digest == export.tree_digest
    t = result.manifest.task("triage/lookup")
    assert t.cohort == "default" and t.workdir == "evals" and t.model_extra == {"owner": "sre"}


def test_a_list_runs_with_the_export_as_its_working_directory(bwrap_backend, make_repo, tmp_path):
    script = '#!/bin/sh\nid=$(cat task-name.txt)\necho \'{"version":1,"tasks":[{"id":"\'$id\'","spec":"t.py"}]}\'\n'
    export = export_of(make_repo, tmp_path, {".evals/list": script, "task-name.txt": "from-file"})
    assert discover(bwrap_backend, export).manifest.tasks[0].id == "from-file"


def test_a_non_executable_list_is_refused(bwrap_backend, make_repo, tmp_path):
    export = export_of(make_repo, tmp_path, list_printing("{}"), executable=())
    with pytest.raises(
        ListNotExecutable, match=r"\.evals/list in acme/agent@[0-9a-f]{12} is not executable; run `chmod \+x"
    ):
        discover(bwrap_backend, export)


def test_a_symlinked_list_is_refused(bwrap_backend, make_repo, tmp_path):
    repo, _ = make_repo({"real-list": "#!/bin/sh\necho {}\n"}, executable=("real-list",))
    (repo / ".evals").mkdir()
    os.symlink("../real-list", repo / ".evals" / "list")
    from tests.helpers.git_repos import commit_files

    sha = commit_files(repo, {})
    export = RepoSource("acme/agent", str(repo)).export(sha, tmp_path / "x")
    with pytest.raises(ListNotRegularFile, match="is not a regular file"):
        discover(bwrap_backend, export)


def test_a_failing_list_reports_its_exit_code_and_stderr_tail(bwrap_backend, make_repo, tmp_path):
    script = "#!/bin/sh\necho 'lots of noise' >&2\necho 'ImportError: no module named agentkit' >&2\nexit 7\n"
    export = export_of(make_repo, tmp_path, {".evals/list": script})
    with pytest.raises(
        ListFailed, match="(?s)exited with code 7; stderr ends: .*ImportError: no module named agentkit"
    ) as info:
        discover(bwrap_backend, export)
    assert info.value.exit_code == 7
    assert info.value.stderr_tail.rstrip().endswith("no module named agentkit")


def test_a_slow_list_times_out(bwrap_backend, make_repo, tmp_path):
    export = export_of(make_repo, tmp_path, {".evals/list": "#!/bin/sh\nsleep 60\n"})
    with pytest.raises(ListTimeout, match=r"\.evals/list did not finish within 1s and was killed"):
        discover(bwrap_backend, export, timeout=1)


def test_output_over_the_cap_is_refused(bwrap_backend, make_repo, tmp_path):
    export = export_of(make_repo, tmp_path, list_printing('{"version": 1, "tasks": []}' + " " * 5000))
    with pytest.raises(ListOutputTooLarge, match=r"printed more than the 1000-byte cap"):
        discover(bwrap_backend, export, output_cap=1000)


def test_invalid_json_from_a_list_is_reported_with_its_position(bwrap_backend, make_repo, tmp_path):
    export = export_of(make_repo, tmp_path, list_printing('{"version": 1, "tasks": [,]}'))
    with pytest.raises(
        ManifestNotJSON, match=r"output of \.evals/list is not valid JSON: Expecting value at line 1 column 26"
    ):
        discover(bwrap_backend, export)


def test_schema_violations_from_a_list_are_reported_with_paths(bwrap_backend, make_repo, tmp_path):
    export = export_of(make_repo, tmp_path, list_printing('{"version": 1, "tasks": [{"id": "../x", "spec": "t.py"}]}'))
    with pytest.raises(
        ManifestSchemaError,
        match=r"manifest from \.evals/list is invalid: \$\.tasks\[0\]\.id: '\.\./x' is not a path-safe task id",
    ):
        discover(bwrap_backend, export)


TASK_FILE = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample

@task
def Runbook_Lookup():
    return Task(dataset=[Sample(input="x", target="y", id="a")])
"""


def test_without_a_list_inspect_tasks_are_discovered_and_the_source_says_so(bwrap_backend, make_repo, tmp_path):
    export = export_of(make_repo, tmp_path, {"evals/triage.py": TASK_FILE, "README.md": "hi"})
    result = discover(bwrap_backend, export)
    assert result.source == "inspect-list"
    assert [(t.id, t.spec, t.workdir) for t in result.manifest.tasks] == [
        ("evals/triage/runbook_lookup", "evals/triage.py@Runbook_Lookup", ".")
    ]


def test_tasks_of_a_file_with_a_syntax_error_are_still_discovered_so_they_are_not_taken_for_deleted(
    bwrap_backend, make_repo, tmp_path
):
    # Inspect's listing skips a file that does not parse; its tasks are listed by name anyway,
    # so loading them reports the syntax error against each task (not "removed on this PR").
    broken = TASK_FILE + "\n@task(name='x')\nasync def second_task():\n    return (\n"
    export = export_of(make_repo, tmp_path, {"evals/triage.py": broken, "evals/ok.py": TASK_FILE})
    result = discover(bwrap_backend, export)
    assert [(t.id, t.spec) for t in result.manifest.tasks] == [
        ("evals/ok/runbook_lookup", "evals/ok.py@Runbook_Lookup"),
        ("evals/triage/runbook_lookup", "evals/triage.py@Runbook_Lookup"),
        ("evals/triage/second_task", "evals/triage.py@second_task"),
    ]


def test_a_repo_with_neither_a_list_nor_tasks_gets_an_explicit_error(bwrap_backend, make_repo, tmp_path):
    export = export_of(make_repo, tmp_path, {"README.md": "nothing here", "lib.py": "x = 1\n"})
    with pytest.raises(NoEvalsFound, match=r"has no \.evals/list and no Inspect @task in any Python file"):
        discover(bwrap_backend, export)


# -- the model an agent config names -------------------------------------------------------------


def test_the_agent_config_names_the_model_and_its_args(tmp_path):
    from evalrunner_assets.discovery import AgentModel, read_agent_model

    assert read_agent_model(tmp_path) is None  # no agent config
    (tmp_path / "agent.yaml").write_text("name: a\ninstructions: hi\n")
    assert read_agent_model(tmp_path) is None  # an agent config without a model line
    (tmp_path / "agent.yaml").write_text("name: a\nmodel: openai/ft:gpt-4o-mini:acme::abc123\nmodel_args: {seed: 3}\n")
    assert read_agent_model(tmp_path) == AgentModel("openai/ft:gpt-4o-mini:acme::abc123", {"seed": 3}, "agent.yaml")
    (tmp_path / "agent.yaml").unlink()
    (tmp_path / "agent.json").write_text('{"model": "simagent/support-agent"}')
    assert read_agent_model(tmp_path) == AgentModel("simagent/support-agent", {}, "agent.json")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model: gpt 4\n", "agent.yaml: model 'gpt 4' is not an Inspect model id of the form provider/name"),
        ("model: [a, b]\n", "agent.yaml: model ['a', 'b'] is not an Inspect model id"),
        ("model_args: {t: 1}\n", "agent.yaml: model_args is set but model is not"),
        ("model: a/b\nmodel_args: [1]\n", "agent.yaml: model_args must be a mapping, not list"),
        ("model: a/b\nmodel_args: {t: {x: 1}}\n", "agent.yaml: model_args.t: values must be strings, numbers"),
        ("- model\n", "agent.yaml: the top level must be a mapping, not list"),
        ("model: [\n", "agent.yaml is not valid YAML (line 2, column 1: expected the node content, but found"),
        # one line, where the problem is: a terminal error shows only the first line
        ("model: [unclosed\n", "agent.yaml is not valid YAML (line 2, column 1: expected ',' or ']', but got"),
    ],
)
def test_an_invalid_model_in_the_agent_config_fails_discovery_naming_the_file_and_field(tmp_path, text, expected):
    from evalrunner_assets.discovery import AgentConfigError, DiscoveryError, read_agent_model

    (tmp_path / "agent.yaml").write_text(text)
    with pytest.raises(AgentConfigError) as err:
        read_agent_model(tmp_path)
    assert str(err.value).startswith(expected)
    assert "\n" not in str(err.value)
    assert isinstance(err.value, DiscoveryError)


def test_an_agent_config_that_is_a_symlink_is_refused(tmp_path):
    from evalrunner_assets.discovery import AgentConfigError, read_agent_model

    (tmp_path / "outside.yaml").write_text("model: a/b\n")
    (tmp_path / "agent.yaml").symlink_to(tmp_path / "outside.yaml")
    with pytest.raises(AgentConfigError, match="agent.yaml is not a regular file"):
        read_agent_model(tmp_path)


def test_a_run_setting_wins_over_the_agent_config_and_the_document_says_which_was_used():
    from evalrunner_assets.discovery import AgentModel
    from evalrunner_assets.pipeline.assess import model_choice, run_settings
    from evalrunner_assets.pipeline.spec import ComparisonRequest

    request = ComparisonRequest(repo="acme/agent", source=".", pr="1", base_sha="b" * 40, head_sha="a" * 40)
    agent = AgentModel("simagent/support-agent-ft", {}, "agent.yaml")
    assert model_choice(request, agent) == {
        "model": "simagent/support-agent-ft",
        "model_args": {},
        "source": "agent config (agent.yaml)",
    }
    assert model_choice(request, None)["source"] == "default"
    assert run_settings(request, agent).model == "simagent/support-agent-ft"
    explicit = ComparisonRequest(
        repo="acme/agent", source=".", pr="1", base_sha="b" * 40, head_sha="a" * 40,
        model="openai/gpt-4o", model_override=True,
    )  # fmt: skip
    assert model_choice(explicit, agent) == {"model": "openai/gpt-4o", "model_args": {}, "source": "run setting"}
    assert run_settings(explicit, agent).model == "openai/gpt-4o"
    # A request that names model args (or another model) is an explicit run setting by itself.
    with_args = ComparisonRequest(
        repo="acme/agent", source=".", pr="1", base_sha="b" * 40, head_sha="a" * 40, model_args={"t": 1}
    )
    assert with_args.model_override and model_choice(with_args, agent)["source"] == "run setting"
    # The same with the run settings as one record (the request's current shape), and written
    # to the lake and read back: the choice survives.
    from lake.batch import RunSettings

    named = ComparisonRequest(
        repo="acme/agent", source=".", pr="1", base_sha="b" * 40, head_sha="a" * 40,
        settings=RunSettings(model="openai/gpt-4o", seed=3),
    )  # fmt: skip
    assert named.model_override and run_settings(named, agent) == RunSettings(model="openai/gpt-4o", seed=3)
    assert ComparisonRequest.from_json(named.to_json()) == named
    assert not ComparisonRequest.from_json(request.to_json()).model_override
    assert run_settings(request, agent) == RunSettings(model="simagent/support-agent-ft")


def test_a_commit_no_comparison_judges_runs_the_model_its_agent_config_names(tmp_path):
    """What a task_samples run launched from the UI runs for a commit no comparison judges."""
    from evalrunner_assets.discovery import AgentModel
    from evalrunner_assets.pipeline.defaults import samples_defaults
    from lake import open_lake
    from lake.batch import RunSettings

    lake = open_lake(str(tmp_path / "lake"))
    sha = "c" * 40
    named = samples_defaults(
        lake, "acme/agent", sha, "t/a", 12, backend_name="bubblewrap", runtime_digest="r",
        agent=AgentModel("simagent/support-agent-ft", {"temperature": 0}, "agent.yaml"),
    )  # fmt: skip
    assert named.settings == RunSettings(model="simagent/support-agent-ft", model_args={"temperature": 0})
    assert named.comparison == ""
    plain = samples_defaults(lake, "acme/agent", sha, "t/a", 12, backend_name="bubblewrap", runtime_digest="r")
    assert plain.settings == RunSettings(model="simagent/support-agent")
