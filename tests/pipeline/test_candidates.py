"""Candidates without sandboxes: the file's schema and its errors, the frontier query on known
rows, the promotion gate's rules, and the simulated models behind the example's candidates."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalrunner_assets.example_repo import CANDIDATES_SOURCE
from evalrunner_assets.pipeline import candidates as cands
from evalrunner_assets.simagent import decide, simulated_model
from lake import LAYOUT, open_lake
from lake.layout import LakePathError
from lake.schema import CANDIDATE_PAIRS_SCHEMA, CANDIDATE_ROWS_SCHEMA

REPO = "acme/agent"


def _doc(**overrides):
    doc = {
        "version": 1,
        "reference": "main",
        "candidates": [{"name": "main", "ref": "main"}, {"name": "big", "ref": "main", "model": "openai/gpt-4o"}],
    }
    doc.update(overrides)
    return doc


def test_the_example_candidates_file_is_valid():
    declared = cands.parse_candidates_text(CANDIDATES_SOURCE.read_bytes())
    assert declared.reference == "main"
    assert list(declared.candidates) == ["main", "runbook-skill", "runbook-skill-large", "fine-tune"]
    assert declared.settings.cap == 64 and declared.settings.margin == 0.1
    assert declared.candidates["fine-tune"].model == "simagent/support-agent-ft"


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            _doc(candidates=[{"name": "main"}, {"name": "big", "model": "gpt 4"}]),
            "candidates.yaml: candidates[1] ('big').model: 'gpt 4' does not match",
        ),
        (
            _doc(candidates=[{"name": "main", "skills": ["triage"]}]),
            "candidates.yaml: candidates[0] ('main'): Additional properties are not allowed ('skills'",
        ),
        (_doc(candidates=[{"name": "Main!"}]), "candidates[0] ('Main!').name: 'Main!' is not a candidate name"),
        (_doc(reference="prod"), "candidates.yaml: reference: 'prod' is not one of the candidates (main, big)"),
        (_doc(candidates=[{"name": "main"}, {"name": "main"}]), "candidates[1].name: 'main' is declared twice"),
        (_doc(settings={"cap": 4}), "candidates.yaml: settings.cap: 4 is less than the minimum of 8"),
        ({"reference": "main", "candidates": []}, "candidates.yaml: (top level): 'version' is a required property"),
    ],
)
def test_an_invalid_candidates_file_names_the_file_and_the_field(doc, expected):
    with pytest.raises(cands.CandidateError) as err:
        cands.parse_candidates(doc, source=".evals/candidates.yaml")
    assert expected in str(err.value)


def test_a_candidates_file_that_is_not_yaml_says_so():
    with pytest.raises(cands.CandidateError, match="candidates.yaml at abc: not valid YAML"):
        cands.parse_candidates_text("version: [1", source=".evals/candidates.yaml at abc")


def test_candidate_names_are_checked_before_they_become_lake_paths():
    assert LAYOUT.candidate(REPO, "runbook-skill") == "candidates/acme/agent/defs/runbook-skill.json"
    with pytest.raises(LakePathError):
        LAYOUT.candidate(REPO, "../escape")
    assert cands.parse_candidate_key(cands.candidate_key(REPO, "big")) == (REPO, "big")
    with pytest.raises(cands.CandidateError):
        cands.parse_candidate_key("acme-agent")


def _suite(name, score, cost, reference=False):
    return {
        "repo": REPO,
        "candidate": name,
        "commit": "0" * 40,
        "model": "simagent/x",
        "is_reference": reference,
        "scope": "suite",
        "name": "suite",
        "mean": score,
        "lo": score - 0.05,
        "hi": score + 0.05,
        "inputs": 192,
        "cost_per_sample": cost,
        "p50_latency_s": 0.1,
        "tokens_per_sample": 900.0,
    }


def _write(lake, rel, rows, schema):
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buf)
    lake.write_bytes(rel, buf.getvalue())


def _pairs(labels):
    mirror = {"improved": "regressed", "regressed": "improved"}
    rows = []
    for (a, b), label in labels.items():
        rows.append({"repo": REPO, "candidate": a, "other": b, "label": label, "pairs": 192})
        rows.append({"repo": REPO, "candidate": b, "other": a, "label": mirror.get(label, label), "pairs": 192})
    return rows


def test_the_frontier_query_drops_only_what_a_paired_test_shows_dominated(tmp_path):
    lake = open_lake(str(tmp_path))
    points = {
        "cheap": (0.70, 1.0),
        "better": (0.80, 2.0),
        "worse-dearer": (0.75, 3.0),  # shown worse than `better`, which is cheaper: dominated
        "same-dearer": (0.80, 3.5),  # shown equal to `better` (unchanged): dominated
        "best": (0.85, 4.0),
        "unclear": (0.80, 5.0),  # cheaper ones score as high and the test cannot tell: uncertain
        "no-cost": (0.90, None),
    }
    for name, (score, cost) in points.items():
        _write(
            lake, LAYOUT.candidate_rows(REPO, name), [_suite(name, score, cost, name == "cheap")], CANDIDATE_ROWS_SCHEMA
        )
    labels = {
        ("better", "cheap"): "improved",
        ("worse-dearer", "better"): "regressed",
        ("worse-dearer", "cheap"): "inconclusive",
        ("same-dearer", "better"): "unchanged",
        ("best", "better"): "improved",
        ("best", "cheap"): "improved",
        ("unclear", "better"): "inconclusive",
        ("unclear", "best"): "inconclusive",
        ("unclear", "cheap"): "improved",
    }
    _write(lake, LAYOUT.candidate_pairs(REPO), _pairs(labels), CANDIDATE_PAIRS_SCHEMA)
    rows = {r["candidate"]: r for r in cands.frontier_rows(lake, REPO)}
    assert {n: r["status"] for n, r in rows.items()} == {
        "cheap": "frontier",
        "better": "frontier",
        "worse-dearer": "dominated",
        "same-dearer": "dominated",
        "best": "frontier",
        "unclear": "uncertain",
        "no-cost": "cost unknown",
    }
    assert rows["worse-dearer"]["dominated_by"] == "better"
    assert rows["unclear"]["uncertain_against"] == "better, best"
    assert list(rows) == ["cheap", "better", "worse-dearer", "same-dearer", "best", "unclear", "no-cost"]


def test_the_candidate_tables_are_in_the_default_sql_connection(tmp_path):
    from lake.query import run_sql

    lake = open_lake(str(tmp_path))
    other = "other/agent"
    _write(lake, LAYOUT.candidate_rows(REPO, "main"), [_suite("main", 0.7, 1.0, True)], CANDIDATE_ROWS_SCHEMA)
    _write(lake, LAYOUT.candidate_rows(REPO, "big"), [_suite("big", 0.8, 3.0)], CANDIDATE_ROWS_SCHEMA)
    _write(lake, LAYOUT.candidate_rows(other, "x"), [{**_suite("x", 0.5, 2.0), "repo": other}], CANDIDATE_ROWS_SCHEMA)
    _write(lake, LAYOUT.candidate_pairs(REPO), _pairs({("big", "main"): "improved"}), CANDIDATE_PAIRS_SCHEMA)
    rows = run_sql(lake, "select repo, candidate, mean from candidate_rows order by repo, candidate", "csv")
    assert rows.splitlines() == [
        "repo,candidate,mean",
        "acme/agent,big,0.8",
        "acme/agent,main,0.7",
        "other/agent,x,0.5",
    ]
    pairs = run_sql(lake, "select candidate, other, label from candidate_pairs order by candidate", "csv")
    assert pairs.splitlines() == ["candidate,other,label", "big,main,improved", "main,big,regressed"]
    # An empty lake still has both tables (typed, no rows): a query never fails on their absence.
    empty = open_lake(str(tmp_path / "empty"))
    assert run_sql(empty, "select count(*) as n from candidate_rows, candidate_pairs", "csv").splitlines() == ["n", "0"]


def _measured(name, flags, cost):
    return {
        "name": name,
        "tasks": {t: {"mean": 0.8} for t in ("a", "b")},
        "suite": {"cost_per_sample": cost},
        "vs_reference": {"tasks": flags},
    }


def _flag(label, lo, hi, delta=0.0):
    return {"label": label, "interval": [lo, hi], "delta": delta}


def test_the_gate_needs_non_inferiority_on_every_task_and_a_gain_or_a_saving():
    settings = cands.CandidateSettings(margin=0.05)
    docs = {
        "main": _measured("main", {}, 1.0),
        "gain": _measured("gain", {"a": _flag("improved", 0.1, 0.3), "b": _flag("unchanged", -0.03, 0.03)}, 1.1),
        "saving": _measured(
            "saving", {"a": _flag("unchanged", -0.04, 0.04), "b": _flag("unchanged", -0.02, 0.02)}, 0.5
        ),
        "unsure": _measured("unsure", {"a": _flag("improved", 0.1, 0.3), "b": _flag("inconclusive", -0.08, 0.02)}, 0.9),
        "worse": _measured("worse", {"a": _flag("regressed", -0.3, -0.1, -0.2), "b": _flag("improved", 0.1, 0.2)}, 0.8),
        "flat": _measured("flat", {"a": _flag("unchanged", -0.04, 0.04), "b": _flag("unchanged", -0.02, 0.02)}, 1.2),
    }
    pairs = pa.Table.from_pylist(_pairs({("gain", "saving"): "improved"}), schema=CANDIDATE_PAIRS_SCHEMA)
    decision = cands.promotion_gate(docs, "main", settings, pairs)
    passed = {n for n, v in decision["candidates"].items() if v["passed"]}
    assert passed == {"gain", "saving"}
    assert decision["promoted"] == "gain"  # shown better than the cheaper `saving`: quality first
    assert "b: not shown non-inferior" in decision["candidates"]["unsure"]["reasons"][0]
    assert decision["candidates"]["worse"]["reasons"][0].startswith("a: regressed")
    assert decision["candidates"]["flat"]["reasons"] == ["neither improved on a task nor cheaper than the reference"]
    # Without the paired evidence that `gain` is better, cost breaks the tie.
    tied = pa.Table.from_pylist(_pairs({("gain", "saving"): "unchanged"}), schema=CANDIDATE_PAIRS_SCHEMA)
    assert cands.promotion_gate(docs, "main", settings, tied)["promoted"] == "saving"


def test_the_simulated_models_differ_only_in_price_and_what_they_know():
    assert simulated_model("anything").price == simulated_model("support-agent").price
    large, ft = simulated_model("simagent/support-agent-large"), simulated_model("support-agent-ft")
    assert large.price.input_usd_per_mtok == 3 * simulated_model("x").price.input_usd_per_mtok
    prompt = "Search with runbook_search."  # search_tool cue only: 0.60
    base = decide("runbook_lookup", prompt, seed=0, sample_id="INC-0001", epoch=1)
    learned = decide("runbook_lookup", prompt, seed=0, sample_id="INC-0001", epoch=1, known_cues=ft.known_cues)
    bigger = decide("runbook_lookup", prompt, seed=0, sample_id="INC-0001", epoch=1, bonus=large.bonus)
    assert (base.probability, learned.probability, bigger.probability) == (0.60, 0.85, 0.70)
    assert "error_code_query" in learned.cues
    # The draw is shared: a model that is better never fails where the standard one succeeds.
    assert not base.succeeds or (learned.succeeds and bigger.succeeds)


def test_candidates_add_and_list_on_the_command_line(tmp_path, monkeypatch, capsys):
    from evalrunner_assets import cli
    from evalrunner_assets.example_repo import build_example_candidates

    build_example_candidates(tmp_path / "repo")
    monkeypatch.setenv("EVALRUNNER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVALRUNNER_LAKE", raising=False)
    where = ["--repo", str(tmp_path / "repo"), "--repo-id", "example/support-agent"]
    assert cli.main(["candidates", "add", *where, "--name", "Bad name"]) == 2
    assert "'Bad name' is not a candidate name" in capsys.readouterr().err
    assert cli.main(["candidates", "add", *where, "--name", "mini", "--model", "simagent/mini"]) == 0
    capsys.readouterr()
    assert cli.main(["candidates", "list", *where]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "main (reference): ref main · the agent config's model · declared in .evals/candidates.yaml" in listed
    assert "mini: ref HEAD · simagent/mini · declared in evalrunner candidates add" in listed
    assert len(listed) == 5


def test_a_candidate_off_the_reference_inputs_is_named_with_its_tasks():
    def doc(windows_a, windows_b):
        return {"tasks": {"a": {"windows": windows_a}, "b": {"windows": windows_b}}}

    docs = {
        "main": doc(["0-8", "8-16"], ["0-8"]),
        "same": doc(["0-8", "8-16"], ["0-8"]),
        "short": doc(["0-8"], ["0-8"]),
    }
    assert cands.inputs_differing_from_reference(docs, "main") == {"short": ["a"]}


# --- agent-config overrides ----------------------------------------------------------------------

SKILL_ON = {"skills": ["triage", "status-updates", "runbook"]}


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (
            {"name": "x", "agent_config": {"model": "openai/gpt-4o"}},
            "candidates[0]: candidate 'x': agent_config.model: the model is set with the candidate's own `model`",
        ),
        (
            {"name": "x", "agent_config": {"model_args": {"temperature": 0}}},
            "candidate 'x': agent_config.model_args: the model is set with the candidate's own",
        ),
        (
            {"name": "x", "agent_config": ["skills"]},
            "candidates[0] ('x').agent_config: ['skills'] is not of type 'object'",
        ),
        ({"name": "x", "agent_config": {1: "a"}}, "candidate 'x': agent_config key 1 is not a non-empty string"),
        (
            {"name": "x", "agent_config": {"limits": {"since": __import__("datetime").date(2025, 1, 1)}}},
            "candidate 'x': agent_config.limits.since: date is not YAML/JSON data",
        ),
    ],
)
def test_invalid_agent_config_overrides_name_the_candidate_and_the_key(candidate, expected):
    with pytest.raises(cands.CandidateError) as err:
        cands.parse_candidates(_doc(reference="x", candidates=[candidate]), source=".evals/candidates.yaml")
    assert expected in str(err.value)


def test_agent_config_overrides_are_read_from_the_file_and_kept_in_the_record():
    declared = cands.parse_candidates_text(
        "version: 1\nreference: main\ncandidates:\n  - name: main\n  - name: skill-on\n    agent_config:\n"
        "      skills: [triage, status-updates, runbook]\n"
    )
    assert declared.candidates["skill-on"].agent_config == SKILL_ON
    assert declared.candidates["skill-on"].to_dict()["agent_config"] == SKILL_ON
    assert "agent_config" not in declared.candidates["main"].to_dict()  # earlier records unchanged


def test_rewriting_a_yaml_agent_config_keeps_every_other_line():
    import yaml

    from evalrunner_assets.discovery._agent_config import rewrite_agent_config

    text = (
        "# the agent\nname: a  # inline\ninstructions: |\n  Be brief.\n  Quote ids.\n\n# skills below\n"
        "skills:\n  - triage\nmodel: simagent/x\n"
    )
    out = rewrite_agent_config("agent.yaml", text.encode(), {"skills": ["triage", "runbook"], "tone": "calm"}).decode()
    assert out == (
        "# the agent\nname: a  # inline\ninstructions: |\n  Be brief.\n  Quote ids.\n\n# skills below\n"
        "skills:\n  - triage\n  - runbook\nmodel: simagent/x\ntone: calm\n"
    )
    out = rewrite_agent_config("agent.yaml", text.encode(), {"instructions": "Be kind.\nAlways.\n"}).decode()
    assert out.startswith("# the agent\nname: a  # inline\ninstructions: |\n  Be kind.\n  Always.\n\n# skills below\n")
    # An anchor defined in a replaced entry: line editing would break the alias, so the whole
    # file is written anew, and it still means exactly the old mapping with the override.
    anchored = rewrite_agent_config("agent.yaml", b"base: &b [a]\nskills: *b\n", {"base": ["x"]}).decode()
    assert yaml.safe_load(anchored) == {"base": ["x"], "skills": ["a"]}
    as_json = rewrite_agent_config("agent.json", b'{"name": "a", "skills": []}', {"skills": ["x"]})
    assert json.loads(as_json) == {"name": "a", "skills": ["x"]}


def _git_out(repo, *args):
    import subprocess

    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_the_overrides_commit_is_deterministic_and_differs_from_its_ref_only_in_the_agent_config(tmp_path):
    import yaml

    from evalrunner_assets.example_repo import build_example_candidates
    from evalrunner_assets.execution.repo import RepoSource

    first, second = build_example_candidates(tmp_path / "a"), build_example_candidates(tmp_path / "b")
    candidate = cands.Candidate(name="runbook-on", ref="main", agent_config=SKILL_ON)
    resolved = cands.resolve_candidate(RepoSource("example/support-agent", str(first.path)), candidate)
    again = cands.resolve_candidate(RepoSource("example/support-agent", str(first.path)), candidate)
    elsewhere = cands.resolve_candidate(RepoSource("example/support-agent", str(second.path)), candidate)
    assert resolved == again
    assert elsewhere.commit == resolved.commit  # same overrides on the same commit: same SHA anywhere
    assert resolved.base_commit == first.base_sha != resolved.commit
    repo = first.path
    assert _git_out(repo, "rev-parse", f"{resolved.commit}^") == first.base_sha
    assert _git_out(repo, "rev-parse", "refs/evalrunner/candidates/runbook-on") == resolved.commit
    assert _git_out(repo, "diff", "--name-only", first.base_sha, resolved.commit) == "agent.yaml"
    assert _git_out(repo, "log", "-1", "--format=%an <%ae> %ad", resolved.commit) == _git_out(
        repo, "log", "-1", "--format=evalrunner <evalrunner@localhost> %cd", first.base_sha
    )
    message = _git_out(repo, "log", "-1", "--format=%B", resolved.commit)
    assert message.startswith("evalrunner candidate runbook-on: agent.yaml with skills overridden")
    assert f"Base: {first.base_sha}" in message and "  - runbook" in message
    before = _git_out(repo, "show", f"{first.base_sha}:agent.yaml")
    after = _git_out(repo, "show", f"{resolved.commit}:agent.yaml")
    assert yaml.safe_load(after) == {**yaml.safe_load(before), **SKILL_ON}
    kept = before.split("skills:")[0]
    assert after.startswith(kept)  # the comments, instructions and model line byte for byte
    assert resolved.provenance() == {
        "base_ref": "main",
        "base_commit": first.base_sha,
        "commit": resolved.commit,
        "file": "agent.yaml",
        "overrides": SKILL_ON,
        "git_ref": "refs/evalrunner/candidates/runbook-on",
    }
    other = cands.Candidate(name="runbook-on", ref="main", agent_config={"skills": ["triage", "runbook"]})
    assert cands.resolve_candidate(RepoSource("example/support-agent", str(repo)), other).commit != resolved.commit
    plain = cands.resolve_candidate(RepoSource("example/support-agent", str(repo)), cands.Candidate(name="main"))
    assert plain == cands.CandidateCommit(commit=first.base_sha, base_commit=first.base_sha)


def test_candidates_add_with_overrides_on_the_command_line(tmp_path, monkeypatch, capsys):
    import subprocess

    from evalrunner_assets import cli
    from evalrunner_assets.example_repo import build_example_candidates

    example = build_example_candidates(tmp_path / "repo")
    monkeypatch.setenv("EVALRUNNER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVALRUNNER_LAKE", raising=False)
    where = ["--repo", str(tmp_path / "repo"), "--repo-id", "example/support-agent"]
    add = ["candidates", "add", *where, "--name", "on", "--ref", "main"]
    assert cli.main([*add, "--set", "model=openai/gpt-4o"]) == 2
    assert (
        "candidate 'on': agent_config.model: the model is set with the candidate's own `model`"
        in capsys.readouterr().err
    )
    assert cli.main([*add, "--set", "skills"]) == 2
    assert "evalrunner candidates add: --set 'skills' is not KEY=VALUE" in capsys.readouterr().err
    assert cli.main([*add, "--set", "skills=[triage"]) == 2
    assert "evalrunner candidates add: --set skills: '[triage' is not valid YAML" in capsys.readouterr().err
    assert cli.main([*add, "--set", "skills=[triage, status-updates, runbook]", "--set", "tone=calm"]) == 0
    out = capsys.readouterr().out
    assert f"its agent config overrides (skills, tone) on {example.base_sha[:12]} are commit " in out
    assert cli.main(["candidates", "list", *where]) == 0
    assert (
        "on: ref main · overrides skills, tone · the agent config's model · declared in evalrunner candidates add"
        in (capsys.readouterr().out.splitlines())
    )
    lake = open_lake(str(tmp_path / "home" / "lake"))
    stored = cands.load_candidates(lake, "example/support-agent")["on"]
    assert stored.agent_config == {"skills": ["triage", "status-updates", "runbook"], "tone": "calm"}
    # A ref without an agent config: refused before anything is stored, naming candidate and ref.
    bare = tmp_path / "bare"
    bare.mkdir()
    git = ["git", "-C", str(bare), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (bare / "README.md").write_text("no agent here\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "readme"], check=True)
    rc = cli.main(
        ["candidates", "add", "--repo", str(bare), "--repo-id", "acme/bare", "--name", "on", "--set", "skills=[a]"]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "acme/bare: candidate 'on': ref HEAD (" in err
    assert "has no agent config (agent.yaml, agent.yml, agent.json at the repository root)" in err
    assert cands.load_candidates(lake, "acme/bare") == {}


def test_a_mirror_keeps_the_overrides_commit_and_its_ref_across_updates(tmp_path):
    from evalrunner_assets.example_repo import build_example_candidates
    from evalrunner_assets.execution.repo import RepoSource

    example = build_example_candidates(tmp_path / "upstream")
    source = RepoSource("example/support-agent", f"file://{example.path}", cache_dir=str(tmp_path / "cache"))
    source.update()
    resolved = cands.resolve_candidate(source, cands.Candidate(name="runbook-on", agent_config=SKILL_ON))
    source.update()  # fetch --prune with the mirror's refs/* refspec
    assert _git_out(source.git_dir, "rev-parse", "refs/evalrunner/candidates/runbook-on") == resolved.commit
    assert source.resolve_commit(resolved.commit) == resolved.commit
    assert _git_out(example.path, "for-each-ref", "refs/evalrunner") == ""  # nothing written upstream
