"""The template skill fixer on findings mined in the test: the rule per finding kind, where it is
written, which skill it chooses, and the PR description's evidence (the end-to-end path, mined
from a real comparison and judged by the PR pipeline, is tests/mining/test_mining_fix_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalrunner_assets.errors import UserError
from evalrunner_assets.mining.fixer import (
    AUTHOR_LABEL,
    SECTION,
    NoFixableFinding,
    TemplateFixer,
    add_rule,
    branch_name,
    pr_body,
    rule_for,
)
from evalrunner_assets.mining.lake_findings import Mined
from evalrunner_assets.mining.miner import contrast
from tests.helpers.trajectories import trajectory

SKILL = """---
name: triage
description: Triage alerts.
---
# Triage

## Finding the runbook
Use `runbook_search` to find the runbook for the affected service, then reply with its id.

## Tone
Keep replies short.
"""
OTHER = """---
name: runbook
---
# Runbooks

Search with `runbook_search` and put the alert's exact error code in the query string.
"""


def _mined(commit: str = "c" * 40) -> Mined:
    failing = [
        trajectory(i, ["page_oncall"] if i < 14 else ["runbook_search", "page_oncall"], score=0.0) for i in range(21)
    ]
    passing = [trajectory(100 + i, ["runbook_search", "page_oncall"], score=1.0) for i in range(40)]
    return Mined("o/agent", commit, "triage/runbook_lookup", None, contrast(failing, passing))


def _checkout(tmp_path: Path, *skills: tuple[str, str]) -> Path:
    for rel, text in skills:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_never_calls_finding_becomes_a_rule_in_the_skill_that_names_the_tool(tmp_path):
    checkout = _checkout(tmp_path, ("skills/triage/SKILL.md", SKILL), ("skills/status/SKILL.md", "# Status\n"))
    fix = TemplateFixer().propose(_mined(), checkout, ["skills/triage/**"])
    assert fix.path == "skills/triage/SKILL.md"
    assert fix.finding.feature.name in ("never calls runbook_search", "page_oncall without runbook_search first")
    assert fix.after.startswith(SKILL) and fix.after.endswith(f"\n{SECTION}\n- {fix.rule}\n")
    assert "`runbook_search`" in fix.rule
    assert fix.diff().startswith("--- a/skills/triage/SKILL.md\n+++ b/skills/triage/SKILL.md\n")


def test_a_rule_already_in_the_skill_is_not_proposed_twice(tmp_path):
    checkout = _checkout(tmp_path, ("skills/triage/SKILL.md", SKILL))
    first = TemplateFixer().propose(_mined(), checkout, [])
    (checkout / first.path).write_text(first.after)
    with pytest.raises(NoFixableFinding, match="already has the rule"):
        TemplateFixer().propose(_mined(), checkout, [])


def test_rules_are_added_to_an_existing_section_before_the_next_heading():
    text = f"# Skill\n\n{SECTION}\n- Rule one.\n\n## Tone\nShort.\n"
    got = add_rule(text, "Rule two.")
    assert got == f"# Skill\n\n{SECTION}\n- Rule one.\n- Rule two.\n\n## Tone\nShort.\n"
    assert add_rule("# Skill", "Rule.") == f"# Skill\n\n{SECTION}\n- Rule.\n"


def test_several_skills_name_the_tool_the_one_the_agent_was_given_wins(tmp_path):
    checkout = _checkout(tmp_path, ("skills/triage/SKILL.md", SKILL), ("skills/runbook/SKILL.md", OTHER))
    with pytest.raises(UserError, match=r"several skill files name runbook_search .*--skill"):
        TemplateFixer().propose(_mined(), checkout, [])
    # The system prompt the agent saw carries the triage skill's paragraphs, re-wrapped.
    prompt = "You are the agent.\n\n" + SKILL.split("---\n", 2)[2].replace("\n", "  \n")
    assert TemplateFixer(prompts=[prompt]).propose(_mined(), checkout, []).path == "skills/triage/SKILL.md"
    forced = TemplateFixer(skill="skills/runbook/SKILL.md").propose(_mined(), checkout, [])
    assert forced.path == "skills/runbook/SKILL.md"
    with pytest.raises(UserError, match="--skill skills/nope.md: no such file"):
        TemplateFixer(skill="skills/nope.md").propose(_mined(), checkout, [])


def test_skills_outside_the_tasks_paths_or_without_the_tool_are_not_edited(tmp_path):
    checkout = _checkout(tmp_path, ("skills/triage/SKILL.md", SKILL))
    with pytest.raises(NoFixableFinding, match="no skill file in the task's paths names"):
        TemplateFixer().propose(_mined(), checkout, ["skills/other/**"])


def test_findings_the_template_cannot_fix_are_refused_with_the_reason(tmp_path):
    failing = [trajectory(i, ["lookup"], score=None, error="boom") for i in range(20)]
    passing = [trajectory(100 + i, ["lookup"], score=1.0) for i in range(30)]
    mined = Mined("o/agent", "c" * 40, "t/x", None, contrast(failing, passing))
    assert [f.feature.kind for f in mined.contrast.findings] == ["raised"]
    with pytest.raises(NoFixableFinding, match="no template for raised"):
        TemplateFixer().propose(mined, _checkout(tmp_path, ("skills/a/SKILL.md", "`lookup`\n")), [])


@pytest.mark.parametrize(
    ("kind", "tools", "name", "expected"),
    [
        ("without_first", ("service_owner", "page_oncall"), "page_oncall without service_owner first",
         "Before you call `page_oncall`, call `service_owner`"),
        ("before", ("page_oncall", "service_owner"), "page_oncall before service_owner",
         "Call `service_owner` before `page_oncall`."),
        ("tool_error", ("search",), "tool error in search", "When `search` returns an error"),
        ("repeats", ("search",), "calls search 3+ times", "Call `search` at most 2 time(s)"),
        ("raised", (), "raised an error", None),
        ("long_tail", (), "turns above 6", None),
    ],
)  # fmt: skip
def test_each_finding_kind_has_its_rule_or_none(kind, tools, name, expected):
    from dataclasses import replace

    from evalrunner_assets.mining.features import Feature

    finding = replace(_mined().contrast.findings[0], feature=Feature(name, kind, tools))
    rule = rule_for(finding)
    assert (rule is None) if expected is None else (rule is not None and rule.startswith(expected))


def test_the_pr_description_carries_the_evidence_and_the_author(tmp_path):
    mined = _mined()
    fix = TemplateFixer().propose(mined, _checkout(tmp_path, ("skills/triage/SKILL.md", SKILL)), [])
    body = pr_body(fix, mined)
    f = fix.finding
    assert body.startswith(f"**{AUTHOR_LABEL}**")
    assert f"Pattern seen in {f.failing_with} / {f.failing} failing samples" in body
    assert "Fisher exact" in body and "Benjamini–Hochberg" in body and f"`{f.samples[0]}`" in body
    assert fix.rule in body and fix.path in body
    assert branch_name(fix).startswith("trajectory-miner/triage-runbook-lookup-")
