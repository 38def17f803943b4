"""Candidates and the continuum frontier, end to end on a real Dagster instance and real sandboxes.

The example repo declares four candidates in ``.evals/candidates.yaml`` whose success
probabilities (simagent's documented cues, plus the simulated models' profiles) and prices are
known:

================== ============================= =============================== ============
candidate          runbook / escalation / summary  model                           price
================== ============================= =============================== ============
main (reference)   0.60 / 0.80 / 0.90              standard                        1×
runbook-skill      0.85 / 0.80 / 0.90              standard (skill adds a cue)     1×
runbook-skill-large 0.95 / 0.90 / 1.00             bigger (+0.10 everywhere)       3×
fine-tune          0.85 / 0.80 / 0.90              learned the runbook cue         2×
================== ============================= =============================== ============

So the frontier is main → runbook-skill → runbook-skill-large; the fine-tune is as good as the
runbook skill at twice the price (dominated); every candidate passes the gate against main and
the bigger model is promoted (quality first), unless a budget rules it out.

The last tests add a fifth candidate, ``runbook-skill-on``: main with an agent-config override
that switches on the repository's ``runbook`` skill (not listed in main's ``agent.yaml``). That
skill carries the error-code cue, so runbook_lookup should match runbook-skill sample for
sample (0.85) while the other evals match main's.
"""

from __future__ import annotations

import base64
import re

import dagster as dg
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient

from evalrunner_assets.driver.candidates import add_candidate, measure_candidates
from evalrunner_assets.example_repo import build_example_candidates
from evalrunner_assets.http.web import create_app
from evalrunner_assets.pipeline import candidates as cands
from evalrunner_assets.pipeline import series
from evalrunner_assets.report import links
from evalrunner_assets.report.panel import PANEL_WIDTH, png_size
from evalrunner_assets.simagent import SIMAGENT_PRICE, simulated_model
from lake import LAYOUT
from tests.helpers.pipeline_fixtures import evalrunner_home

REPO = "example/support-agent"
TASKS = ("triage/runbook_lookup", "triage/escalation_policy", "triage/summary_quality")
KNOWN = {
    "main": (0.60, 0.80, 0.90),
    "runbook-skill": (0.85, 0.80, 0.90),
    "runbook-skill-large": (0.95, 0.90, 1.00),
    "fine-tune": (0.85, 0.80, 0.90),
}

# 4 candidates × 3 evals × 64 inputs, then a second run that reuses everything (~2 min idle).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("candidates")
    example = build_example_candidates(root / "repo")
    with evalrunner_home(root / "home") as home:
        instance = dg.DagsterInstance.ephemeral()
        first = measure_candidates(REPO, str(example.path), instance=instance, resources=home.resources())
        starts_after_first = len(home.starts())
        second = measure_candidates(REPO, str(example.path), instance=instance, resources=home.resources())
        yield {
            "first": first,
            "second": second,
            "home": home,
            "instance": instance,
            "example": example,
            "new_starts": len(home.starts()) - starts_after_first,
        }


def test_the_candidates_file_is_stored_with_its_provenance(measured):
    assert sorted(measured["first"].declared) == sorted(KNOWN)
    lake = measured["home"].lake()
    provenance = cands.candidate_provenance(lake, REPO, "fine-tune")
    assert provenance["declared_in"] == ".evals/candidates.yaml"
    assert provenance["commit"] == measured["example"].base_sha
    assert cands.load_candidates(lake, REPO)["runbook-skill-large"].model == "simagent/support-agent-large"


def test_every_candidate_runs_the_same_inputs_and_matches_its_known_probabilities(measured):
    docs = measured["first"].measurements
    windows = {name: {t: docs[name]["tasks"][t]["windows"] for t in TASKS} for name in KNOWN}
    assert all(w == windows["main"] for w in windows.values())
    for name, probabilities in KNOWN.items():
        for task, p in zip(TASKS, probabilities, strict=True):
            t = docs[name]["tasks"][task]
            assert t["inputs"] == 64
            lo, hi = t["interval"]
            assert lo <= p <= hi, (name, task, t["mean"], p)
            assert t["p50_latency_s"] is not None and t["tokens_per_sample"] > 0


def test_a_candidate_without_a_model_runs_the_one_its_agent_config_names(measured):
    docs = measured["first"].measurements
    # main and runbook-skill name no model: each runs what agent.yaml at its ref names.
    for name in ("main", "runbook-skill"):
        assert docs[name]["model"] == {
            "model": "simagent/support-agent",
            "model_args": {},
            "source": "agent config (agent.yaml)",
        }
    assert docs["runbook-skill-large"]["model"]["model"] == "simagent/support-agent-large"
    assert docs["runbook-skill-large"]["model"]["source"] == "run setting"
    lake = measured["home"].lake()
    landed = pq.read_table(lake.fs.open(lake.path(LAYOUT.candidate_rows(REPO, "main")), "rb"))
    assert set(landed.column("model").to_pylist()) == {"simagent/support-agent"}


def test_costs_follow_the_simulated_prices(measured):
    cost = {n: d["suite"]["cost_per_sample"] for n, d in measured["first"].measurements.items()}
    large = simulated_model("support-agent-large").price.input_usd_per_mtok / SIMAGENT_PRICE.input_usd_per_mtok
    ft = simulated_model("support-agent-ft").price.input_usd_per_mtok / SIMAGENT_PRICE.input_usd_per_mtok
    # Same prompts, nearly the same trajectories: the cost ratio is the price ratio (±10%).
    assert cost["runbook-skill-large"] / cost["runbook-skill"] == pytest.approx(large, rel=0.1)
    assert cost["fine-tune"] / cost["main"] == pytest.approx(ft, rel=0.1)
    assert cost["main"] < cost["runbook-skill"] < cost["fine-tune"] < cost["runbook-skill-large"]


def test_each_candidate_is_paired_against_the_reference(measured):
    docs = measured["first"].measurements
    assert docs["main"]["vs_reference"] == {}
    skill = docs["runbook-skill"]["vs_reference"]["tasks"]
    assert skill["triage/runbook_lookup"]["label"] == "improved"
    assert {skill[t]["label"] for t in TASKS[1:]} == {"unchanged"}  # same cues: every pair ties
    assert skill["triage/escalation_policy"]["delta"] == 0.0


def test_the_frontier_matches_the_known_probabilities_and_prices(measured):
    rows = {r["candidate"]: r for r in measured["first"].frontier["rows"]}
    assert [r["candidate"] for r in measured["first"].frontier["rows"]] == [
        "main",
        "runbook-skill",
        "fine-tune",
        "runbook-skill-large",
    ]
    assert {n for n, r in rows.items() if r["status"] == "frontier"} == {"main", "runbook-skill", "runbook-skill-large"}
    assert rows["fine-tune"]["status"] == "dominated"
    assert rows["fine-tune"]["dominated_by"] == "runbook-skill"
    steps = measured["first"].frontier["steps"]
    assert [(s["from"], s["to"], s["paired_label"]) for s in steps] == [
        ("main", "runbook-skill", "improved"),
        ("runbook-skill", "runbook-skill-large", "improved"),
    ]
    assert steps[1]["cost_ratio"] == pytest.approx(3.0, rel=0.1)


def test_the_gate_promotes_the_best_candidate_and_says_why(measured):
    promotion = measured["first"].frontier["promotion"]
    assert promotion["promoted"] == "runbook-skill-large"
    assert all(v["passed"] for v in promotion["candidates"].values())
    assert any("improved on triage/runbook_lookup" in r for r in promotion["candidates"]["fine-tune"]["reasons"])
    assert any("fine-tune: not shown better than runbook-skill" in r for r in promotion["reasons"])
    lake = measured["home"].lake()
    assert lake.exists(LAYOUT.promotion(REPO))


def test_a_budget_keeps_the_gate_to_what_it_allows(measured):
    lake = measured["home"].lake()
    docs = cands.load_measurements(lake, REPO)
    pairs = pq.read_table(lake.fs.open(lake.path(LAYOUT.candidate_pairs(REPO)), "rb"))
    budget = docs["runbook-skill"]["suite"]["cost_per_sample"] * 1.2
    settings = cands.CandidateSettings(cap=64, margin=0.1, max_cost_per_sample=budget)
    decision = cands.promotion_gate(docs, "main", settings, pairs)
    assert decision["promoted"] == "runbook-skill"
    assert not decision["candidates"]["runbook-skill-large"]["passed"]
    assert any("over the budget" in r for r in decision["candidates"]["runbook-skill-large"]["reasons"])


def test_the_chart_and_the_asset_metadata_land(measured):
    lake = measured["home"].lake()
    assert lake.read_bytes(LAYOUT.continuum_frontier(REPO, "png")).startswith(b"\x89PNG")
    assert b"<svg" in lake.read_bytes(LAYOUT.continuum_frontier(REPO, "svg"))
    mats = measured["instance"].fetch_materializations(dg.AssetKey("continuum_frontier"), limit=10).records
    metadata = mats[0].asset_materialization.metadata
    assert metadata["promoted"].value == "runbook-skill-large"
    assert "runbook-skill → runbook-skill-large" in metadata["steps up the frontier"].value
    (png,) = re.findall(r"base64,([A-Za-z0-9+/=]+)\)", metadata["chart"].value)
    assert png_size(base64.b64decode(png))[0] <= PANEL_WIDTH  # fits the UI's metadata panel
    key = dg.AssetCheckKey(dg.AssetKey("continuum_frontier"), "same_inputs_as_reference")
    records = measured["instance"].event_log_storage.get_asset_check_execution_history(key, limit=10)
    assert len(records) == 2  # one per measure
    for rec in records:
        assert rec.status.value == "SUCCEEDED"
        assert rec.event.dagster_event.event_specific_data.passed  # type: ignore[union-attr]


def test_the_continuum_page_shows_the_frontier_each_candidates_place_and_the_promotion(measured):
    client = TestClient(create_app(measured["home"].lake()))
    listing = client.get("/continuum")
    assert listing.status_code == 200
    [href] = re.findall(r'href="(/continuum/[^"]+)"', listing.text)
    assert href == links.continuum_path(REPO) and "promote runbook-skill-large" in listing.text
    page = client.get(href)
    assert page.status_code == 200
    assert re.search(r'class="pill big good">Promote runbook-skill-large<', page.text)
    assert "fine-tune: not shown better than runbook-skill" in page.text  # the decision's reasons
    body = page.text.split("<h2>Candidates, cheapest first</h2>", 1)[1].split("</table>", 1)[0]
    shown = {
        name: (status, rest)
        for name, rest, status in re.findall(
            r'<tr>\s*<td><code>([^<]+)</code>(.*?)<span class="pill \w+">(frontier|dominated|uncertain|cost unknown)</span>',
            body,
            re.S,
        )
    }
    assert list(shown) == ["main", "runbook-skill", "fine-tune", "runbook-skill-large"]  # cheapest first
    assert {n for n, (status, _) in shown.items() if status == "frontier"} == {
        "main",
        "runbook-skill",
        "runbook-skill-large",
    }
    assert shown["fine-tune"][0] == "dominated" and "by runbook-skill" in body
    assert "reference" in shown["main"][1] and "promoted" in shown["runbook-skill-large"][1]
    steps = page.text.split("<h2>Steps up the frontier</h2>", 1)[1]
    assert re.search(r"<code>main</code></td>\s*<td><code>runbook-skill</code>", steps)
    chart = client.get(href + "/chart.svg")
    assert chart.status_code == 200 and chart.content.lstrip().startswith(b"<svg")
    assert client.get("/continuum/nobody/here").status_code == 404


def test_with_the_web_url_set_the_frontier_materialization_links_its_page(measured, monkeypatch):
    from evalrunner_assets.assets.candidates import continuum_frontier
    from resources import LakeResource

    monkeypatch.setenv("EVALRUNNER_WEB_URL", "https://evalrunner.example.com/web")
    instance = dg.DagsterInstance.ephemeral()  # its own runs: the module's instance keeps its jobs
    instance.add_dynamic_partitions("candidate_repos", [REPO])
    lake = measured["home"].lake()
    done = dg.materialize(
        [continuum_frontier], partition_key=REPO, resources={"lake": LakeResource(root=lake.root)}, instance=instance
    )
    (mat,) = done.asset_materializations_for_node("continuum_frontier")
    page = mat.metadata["page"]
    assert isinstance(page, dg.UrlMetadataValue)
    assert page.url == "https://evalrunner.example.com/web" + links.continuum_path(REPO)
    assert TestClient(create_app(lake)).get(links.continuum_path(REPO)).status_code == 200


def test_in_a_real_browser_the_continuum_pages_load_cleanly_and_pass_the_accessibility_scan(measured):
    """Chromium on the served pages: Continuum → the repository's page, reached by clicking; the
    chart decodes; no console error or failed request; no serious or critical axe-core
    violation at 1280 px; no page-level sideways scroll on a phone. Screenshots kept."""
    from tests.helpers.github_standin import LoopbackServer
    from tests.helpers.web_browser import Visit, artifacts_dir, axe_source, launched_chromium

    axe, shots = axe_source(), artifacts_dir()
    with launched_chromium() as browser, LoopbackServer(create_app(measured["home"].lake())) as served:
        for width in (1280, 390):
            visit = Visit(browser, width)
            try:
                visit.open(f"{served.url}/prs")
                visit.follow('nav a[href="/continuum"]')
                shown = [("continuum", visit.page.url), ("continuum-repo", visit.follow('a[href^="/continuum/"]'))]
                chart = visit.page.locator("img.chart")
                assert chart.evaluate("img => img.complete && img.naturalWidth > 0"), "the chart did not decode"
                for name, url in shown:
                    visit.check(name, url, axe=axe, shots=shots)
                assert visit.problems == [], visit.problems
            finally:
                visit.close()


def test_a_second_measure_starts_no_sandbox_and_records_defined_jobs(measured):
    assert measured["new_starts"] == 0
    second = measured["second"]
    assert second.frontier["promotion"]["promoted"] == "runbook-skill-large"
    assert {r.job_name for r in measured["instance"].get_runs()} == {
        "candidate_measurements_job",
        "continuum_frontier_job",
    }
    keys = measured["instance"].get_dynamic_partitions("candidates")
    assert sorted(keys) == sorted(f"{REPO}:{n}" for n in KNOWN)
    mats = measured["instance"].fetch_materializations(dg.AssetKey("candidate_measurements"), limit=100).records
    assert {m.partition_key for m in mats} == set(keys)


def test_a_candidate_whose_every_window_fails_is_not_saved_and_the_error_names_it_and_the_cause(measured):
    # The simulated provider refuses model args: every window's log ends in error (a real
    # failure in the sandbox, not a stand-in).
    lake = measured["home"].lake()
    broken = cands.Candidate(name="broken", ref="main", model="simagent/support-agent", model_args={"temperature": 0.5})
    cands.save_candidate(lake, REPO, broken, {"declared_in": "test"})
    with pytest.raises(Exception) as err:
        measure_candidates(
            REPO, str(measured["example"].path), names=["broken"], instance=measured["instance"],
            resources=measured["home"].resources(),
        )  # fmt: skip
    message = str(err.value) + str(getattr(err.value, "__cause__", "") or "")
    assert "candidate 'broken' (simagent/support-agent at" in message
    assert "was not measured: every window failed (triage/escalation_policy: " in message
    assert "takes no model args" in message
    assert cands.load_measurement(lake, REPO, "broken") is None
    assert not lake.exists(LAYOUT.candidate_rows(REPO, "broken"))


# --- a candidate with agent-config overrides (after the four above: it adds to their lake) -------

SKILL_ON = {"skills": ["triage", "status-updates", "runbook"]}


@pytest.fixture(scope="module")
def overridden(measured):
    home, example, instance = measured["home"], measured["example"], measured["instance"]
    candidate = cands.Candidate(
        name="runbook-skill-on", ref="main", description="main with the runbook skill on", agent_config=SKILL_ON
    )
    resolved = add_candidate(home.resources(), REPO, candidate)
    before = len(home.starts())
    first = measure_candidates(
        REPO, str(example.path), names=["runbook-skill-on"], instance=instance, resources=home.resources()
    )
    after_first = len(home.starts())
    second = measure_candidates(
        REPO, str(example.path), names=["runbook-skill-on"], instance=instance, resources=home.resources()
    )
    return {
        "resolved": resolved,
        "first": first,
        "second": second,
        "starts": home.starts_by_commit(before),
        "first_starts": after_first - before,
        "second_starts": len(home.starts()) - after_first,
    }


def _outcomes(lake, doc, task):
    return {str(r["sample_id"]): r["score"] for r in series.point_task_rows(lake, doc, task)}


def test_an_override_candidate_runs_a_commit_on_its_ref_and_records_it(measured, overridden):
    resolved, example = overridden["resolved"], measured["example"]
    doc = overridden["first"].measurements["runbook-skill-on"]
    assert resolved.base_commit == example.base_sha != resolved.commit
    assert doc["commit"] == resolved.commit
    assert doc["agent_config_overrides"] == {
        "base_ref": "main",
        "base_commit": example.base_sha,
        "commit": resolved.commit,
        "file": "agent.yaml",
        "overrides": SKILL_ON,
        "git_ref": "refs/evalrunner/candidates/runbook-skill-on",
    }
    assert doc["candidate"]["agent_config"] == SKILL_ON
    assert cands.reading(doc).endswith(
        f" · skills overridden on {example.base_sha[:12]} (commit {resolved.commit[:12]})"
    )
    mats = measured["instance"].fetch_materializations(dg.AssetKey("candidate_measurements"), limit=100).records
    shown = [m.asset_materialization.metadata.get(f"{REPO}:runbook-skill-on") for m in mats]
    assert any(v is not None and "skills overridden on" in v.value for v in shown)
    # The agent config keeps main's model line: the candidate runs the model it names.
    assert doc["model"] == {"model": "simagent/support-agent", "model_args": {}, "source": "agent config (agent.yaml)"}
    # Its sandboxes ran the synthesized commit, nothing else.
    assert overridden["first_starts"] > 0
    assert set(overridden["starts"]) == {resolved.commit}


def test_switching_the_runbook_skill_on_moves_only_runbook_lookup_as_the_skill_predicts(measured, overridden):
    lake = measured["home"].lake()
    docs = overridden["first"].measurements
    on, main, skill = docs["runbook-skill-on"], docs["main"], docs["runbook-skill"]
    assert {t: on["tasks"][t]["windows"] for t in TASKS} == {t: main["tasks"][t]["windows"] for t in TASKS}
    for task, p in zip(TASKS, (0.85, 0.80, 0.90), strict=True):
        lo, hi = on["tasks"][task]["interval"]
        assert lo <= p <= hi, (task, on["tasks"][task]["mean"])
    # Common random numbers: the same cues give the same outcome on every input.
    assert _outcomes(lake, on, TASKS[0]) == _outcomes(lake, skill, TASKS[0]) != _outcomes(lake, main, TASKS[0])
    for task in TASKS[1:]:
        assert _outcomes(lake, on, task) == _outcomes(lake, main, task)
    flags = on["vs_reference"]["tasks"]
    assert flags[TASKS[0]]["label"] == "improved"
    assert {flags[t]["label"] for t in TASKS[1:]} == {"unchanged"}
    assert flags[TASKS[1]]["delta"] == 0.0


def test_a_second_measure_of_an_override_candidate_starts_no_sandbox(measured, overridden):
    assert overridden["second_starts"] == 0
    again = overridden["second"].measurements["runbook-skill-on"]
    assert again["commit"] == overridden["resolved"].commit
    assert again["suite"] == overridden["first"].measurements["runbook-skill-on"]["suite"]
    rows = {r["candidate"] for r in overridden["second"].frontier["rows"]}
    assert "runbook-skill-on" in rows
    mats = measured["instance"].fetch_materializations(dg.AssetKey("candidate_measurements"), limit=100).records
    assert f"{REPO}:runbook-skill-on" in {m.partition_key for m in mats}
