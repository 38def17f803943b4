"""The simulated agent model: documented probabilities, common random numbers, and the Inspect
provider (tool calls, token usage, price). End-to-end runs of the example's tasks are in
test_example_repo.py."""

from __future__ import annotations

import asyncio

import pytest
from inspect_ai.model import (
    ChatMessageSystem,
    ChatMessageUser,
    get_model,
)
from inspect_ai.model._model_info import get_model_info
from inspect_ai.tool import ToolInfo, ToolParam, ToolParams
from scipy.stats import binom

from evalrunner_assets.simagent import (
    BEHAVIOUR_MODELS,
    SIMAGENT_PRICE,
    CallTool,
    Conversation,
    ToolExchange,
    cues_present,
    decide,
    next_step,
    success_probability,
)

DRAWS = 20_000
RUNBOOK_BASE = "Use `runbook_search` to find the runbook for the affected service."
RUNBOOK_IMPROVED = (
    RUNBOOK_BASE + " Put the alert's exact error code (for example `PAY-503`) in the\n"
    "  **query** together with the service name."
)
INCIDENT = (
    "Incident INC-0007\nService: payments-api\nSeverity: SEV2\n"
    "Alert: [PAY-503] 503s from database connection pool exhaustion\nError code: PAY-503\n"
    "Reported by: storefront\nStarted: 2025-03-04 10:17 UTC\n\n"
    "Find the runbook for this alert and reply with its id."
)


def _rate(behaviour, prompt: str, *, seed: int = 0, epoch: int = 1) -> list[bool]:
    return [decide(behaviour, prompt, seed=seed, sample_id=f"S-{i}", epoch=epoch).succeeds for i in range(DRAWS)]


def _within_999(successes: int, n: int, p: float) -> bool:
    low, high = binom.interval(0.999, n, p)
    return low <= successes <= high


def test_documented_probabilities_are_floor_plus_cue_increments():
    assert success_probability("runbook_lookup", frozenset()) == 0.30
    assert success_probability("runbook_lookup", frozenset({"search_tool"})) == 0.60
    assert success_probability("runbook_lookup", frozenset({"search_tool", "error_code_query"})) == 0.85
    assert success_probability("escalation_policy", frozenset({"severity_policy", "owner_lookup"})) == 0.80
    assert success_probability("escalation_policy", frozenset({"severity_policy"})) == 0.55
    assert success_probability("summary_quality", frozenset({"summary_structure"})) == 0.90
    with pytest.raises(ValueError, match="unknown cues"):
        success_probability("summary_quality", frozenset({"search_tool"}))


@pytest.mark.parametrize(
    ("behaviour", "prompt"),
    [
        ("runbook_lookup", RUNBOOK_BASE),
        ("runbook_lookup", RUNBOOK_IMPROVED),
        ("escalation_policy", "Page only for SEV1 and SEV2. Call service_owner first."),
        ("escalation_policy", "Page only for SEV1 and SEV2."),
        ("summary_quality", "State the impact, the cause and the next step."),
        ("summary_quality", "Be brief."),
    ],
)
def test_success_frequency_matches_documented_probability(behaviour, prompt):
    p = success_probability(behaviour, cues_present(behaviour, prompt))
    successes = sum(_rate(behaviour, prompt))
    assert _within_999(successes, DRAWS, p), (behaviour, p, successes / DRAWS)


def test_cues_ignore_formatting_and_line_wrapping():
    assert cues_present("runbook_lookup", RUNBOOK_IMPROVED) == {"search_tool", "error_code_query"}
    rewrapped = RUNBOOK_IMPROVED.replace("`", "").replace("\n  ", " ").upper()
    assert cues_present("runbook_lookup", rewrapped) == {"search_tool", "error_code_query"}
    assert cues_present("runbook_lookup", "Search the runbooks.") == frozenset()


def test_rewording_without_changing_guidance_gives_identical_outcomes():
    reworded = "Look the runbook up with runbook_search; be quick about it.\n\n## Style\nTerse."
    assert cues_present("runbook_lookup", reworded) == cues_present("runbook_lookup", RUNBOOK_BASE)
    assert _rate("runbook_lookup", reworded) == _rate("runbook_lookup", RUNBOOK_BASE)


def test_added_guidance_only_flips_failures_into_successes():
    base, improved = _rate("runbook_lookup", RUNBOOK_BASE), _rate("runbook_lookup", RUNBOOK_IMPROVED)
    assert not any(b and not i for b, i in zip(base, improved)), "a success was lost"
    flips = sum(i and not b for b, i in zip(base, improved))
    assert _within_999(flips, DRAWS, 0.85 - 0.60)


def test_seed_and_epoch_give_independent_outcomes():
    base = _rate("runbook_lookup", RUNBOOK_BASE)
    other_seed = _rate("runbook_lookup", RUNBOOK_BASE, seed=1)
    other_epoch = _rate("runbook_lookup", RUNBOOK_BASE, epoch=2)
    for other in (other_seed, other_epoch):
        agree = sum(a == b for a, b in zip(base, other))
        # independent draws at p = 0.6 agree with probability 0.6² + 0.4² = 0.52
        assert _within_999(agree, DRAWS, 0.52)


def test_every_behaviour_model_has_probabilities_in_range():
    for behaviour, model in BEHAVIOUR_MODELS.items():
        everything = frozenset(cue.name for cue in model.cues)
        assert 0 < success_probability(behaviour, frozenset()) < success_probability(behaviour, everything) <= 1


def test_policy_searches_reads_results_and_answers_from_them():
    prompt = RUNBOOK_IMPROVED
    sample = next(
        f"S-{i}" for i in range(100) if decide("runbook_lookup", prompt, seed=0, sample_id=f"S-{i}", epoch=1).succeeds
    )
    conversation = Conversation(system=prompt, request=INCIDENT, tools=frozenset({"runbook_search"}))
    first = next_step(conversation, seed=0, sample_id=sample, epoch=1)
    assert first == CallTool("runbook_search", {"query": "payments-api PAY-503"}, first.note)
    results = "RB-002 | payments-api | PAY-429 | x\nRB-001 | payments-api | PAY-503 | payments-api: 503s"
    answered = Conversation(
        system=prompt,
        request=INCIDENT,
        tools=frozenset({"runbook_search"}),
        exchanges=(ToolExchange("runbook_search", first.arguments, results),),
    )
    assert next_step(answered, seed=0, sample_id=sample, epoch=1).text == "Runbook RB-001: payments-api: 503s"


def test_policy_without_the_needed_tool_answers_without_calling_it():
    conversation = Conversation(system=RUNBOOK_BASE, request=INCIDENT, tools=frozenset())
    step = next_step(conversation, seed=0, sample_id="S-1", epoch=1)
    assert not isinstance(step, CallTool)
    assert "runbook_search" in step.text


def test_provider_returns_tool_calls_with_usage_and_registers_its_price():
    model = get_model("simagent/support-agent")
    search = ToolInfo(
        name="runbook_search",
        description="Search the runbook library.",
        parameters=ToolParams(properties={"query": ToolParam(type="string", description="words")}, required=["query"]),
    )
    output = asyncio.run(
        model.generate([ChatMessageSystem(content=RUNBOOK_IMPROVED), ChatMessageUser(content=INCIDENT)], tools=[search])
    )
    call = output.message.tool_calls[0]
    assert (call.function, call.arguments["query"].split()[0]) == ("runbook_search", "payments-api")
    assert output.usage.input_tokens > 0 and output.usage.output_tokens > 0
    assert output.usage.total_tokens == output.usage.input_tokens + output.usage.output_tokens
    info = get_model_info("simagent/support-agent")
    assert (info.cost.input, info.cost.output) == (
        SIMAGENT_PRICE.input_usd_per_mtok,
        SIMAGENT_PRICE.output_usd_per_mtok,
    )


def test_provider_rejects_model_args_it_does_not_understand():
    with pytest.raises(ValueError, match="takes no model args"):
        get_model("simagent/support-agent", memoize=False, temperature_bias=1)


def test_the_price_table_knows_the_simagent_price_wherever_the_code_location_loads():
    # A fresh interpreter: the pipeline's pricing never imports the example model, so the
    # price is there only because loading the assets registered it.
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import evalrunner_assets.assets\n"
        "from evalrunner_assets.pricing import PriceTable\n"
        "print(PriceTable.default().price('simagent/support-agent'))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str((SIMAGENT_PRICE.input_usd_per_mtok, SIMAGENT_PRICE.output_usd_per_mtok))


def test_a_registered_price_is_overridden_by_the_configured_price_table(tmp_path, monkeypatch):
    from evalrunner_assets.pricing import PriceTable

    table = tmp_path / "prices.json"
    table.write_text('{"simagent/*": {"input": 2, "output": 3}}')
    assert PriceTable.default().price("simagent/x") == (1.0, 5.0)
    monkeypatch.setenv("EVALRUNNER_PRICES", str(table))
    assert PriceTable.default().price("simagent/x") == (2.0, 3.0)
