"""Triage evals for the support agent.

Three tasks over the same 300 synthetic incidents, each judging one part of the agent's job from
its trajectory (the tool calls it made, their arguments and results, and its final answer):

- ``runbook_lookup``    find the right runbook with ``runbook_search`` and cite its id
- ``escalation_policy`` page the owning team's on-call for SEV1/SEV2 only
- ``summary_quality``   write a status-page summary with impact, cause and next step

The agent under test is whatever model Inspect is given (``--model``); its instructions are the
system prompt built from ``agent.yaml`` and the skills it lists, read from this checkout. The
incidents are generated from ``data/catalog.json`` by hashing, so they are identical everywhere.
Nothing here writes files.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool
from inspect_ai.scorer import (
    CORRECT,
    INCORRECT,
    Score,
    Scorer,
    Target,
    accuracy,
    scorer,
    stderr,
)
from inspect_ai.solver import Generate, TaskState, generate, solver, use_tools
from inspect_ai.tool import Tool, ToolError, tool

REPO_ROOT = Path(__file__).resolve().parent.parent
CATALOG_PATH = Path(__file__).resolve().parent / "data" / "catalog.json"

INCIDENT_COUNT = 300
PAGING_SEVERITIES = ("SEV1", "SEV2")
SEVERITY_WEIGHTS = (("SEV1", 10), ("SEV2", 35), ("SEV3", 35), ("SEV4", 20))
SUMMARY_MAX_WORDS = 80
MESSAGE_LIMIT = 16

RUNBOOK_REQUEST = "Find the runbook for this alert and reply with its id."
ESCALATION_REQUEST = "Apply the paging policy to this incident and reply with what you did."
SUMMARY_REQUEST = "Write the customer-facing summary of this incident for the status page."


# ---------------------------------------------------------------------------------------------
# The agent's instructions, as configured in this checkout
# ---------------------------------------------------------------------------------------------


def _without_frontmatter(text: str) -> str:
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end != -1:
            return text[end + len("\n---\n") :]
    return text


def agent_system_prompt(repo_root: Path = REPO_ROOT) -> str:
    """``agent.yaml``'s instructions followed by each skill it lists (``skills/<name>/SKILL.md``,
    front matter removed), in the listed order."""
    config = yaml.safe_load((repo_root / "agent.yaml").read_text(encoding="utf-8"))
    parts = [str(config["instructions"]).strip()]
    for name in config.get("skills", []):
        skill_file = repo_root / "skills" / name / "SKILL.md"
        if not skill_file.is_file():
            raise FileNotFoundError(f"agent.yaml lists skill {name!r} but {skill_file} is missing")
        parts.append(_without_frontmatter(skill_file.read_text(encoding="utf-8")).strip())
    return "\n\n".join(parts) + "\n"


@solver
def agent_instructions(prompt: str):
    """Put the agent's instructions in front of the conversation as its system message."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.messages.insert(0, ChatMessageSystem(content=prompt))
        return state

    return solve


# ---------------------------------------------------------------------------------------------
# Synthetic incidents
# ---------------------------------------------------------------------------------------------


@cache
def catalog() -> dict[str, Any]:
    return json.loads(CATALOG_PATH.read_text(encoding="utf-8"))


def _pick(number: int, field: str, count: int) -> int:
    digest = hashlib.sha256(f"incident:{number}:{field}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def _severity(number: int) -> str:
    roll = _pick(number, "severity", sum(weight for _, weight in SEVERITY_WEIGHTS))
    for severity, weight in SEVERITY_WEIGHTS:
        if roll < weight:
            return severity
        roll -= weight
    raise AssertionError("unreachable")


@cache
def incidents() -> tuple[dict[str, Any], ...]:
    """The 300 incidents, generated deterministically from the catalog."""
    services = {service["name"]: service["owner"] for service in catalog()["services"]}
    teams = sorted(set(services.values()))
    runbooks = catalog()["runbooks"]
    start = datetime(2025, 3, 3, 0, 0, tzinfo=UTC)
    generated = []
    for number in range(1, INCIDENT_COUNT + 1):
        runbook = runbooks[_pick(number, "runbook", len(runbooks))]
        owner = services[runbook["service"]]
        other_teams = [team for team in teams if team != owner]
        started = start + timedelta(minutes=_pick(number, "started", 60 * 24 * 28))
        generated.append(
            {
                "id": f"INC-{number:04d}",
                "service": runbook["service"],
                "owner": owner,
                "severity": _severity(number),
                "error_code": runbook["error_code"],
                "alert": runbook["title"].split(": ", 1)[1],
                "runbook_id": runbook["id"],
                "reported_by": other_teams[_pick(number, "reporter", len(other_teams))],
                "started": started.strftime("%Y-%m-%d %H:%M UTC"),
                "host": f"{runbook['service']}-{_pick(number, 'host', 40):02d}.prod.internal",
                "impact": runbook["impact"],
                "cause": runbook["cause"],
                "next_step": runbook["next_step"],
            }
        )
    return tuple(generated)


@cache
def incidents_by_id() -> dict[str, dict[str, Any]]:
    return {incident["id"]: incident for incident in incidents()}


def incident_report(incident: dict[str, Any]) -> str:
    """The alert as the agent receives it (no owner, cause or runbook: tools must find those)."""
    return (
        f"Incident {incident['id']}\n"
        f"Service: {incident['service']}\n"
        f"Severity: {incident['severity']}\n"
        f"Alert: [{incident['error_code']}] {incident['alert']}\n"
        f"Error code: {incident['error_code']}\n"
        f"Reported by: {incident['reported_by']}\n"
        f"Started: {incident['started']}\n"
    )


def timeline(incident: dict[str, Any]) -> list[str]:
    started = datetime.strptime(incident["started"], "%Y-%m-%d %H:%M UTC")

    def at(minutes: int) -> str:
        return (started + timedelta(minutes=minutes)).strftime("%H:%M")

    return [
        f"{at(0)} alert fired: [{incident['error_code']}] {incident['alert']}",
        f"{at(6)} impact confirmed: {incident['impact']}",
        f"{at(19)} root cause: {incident['cause']} on {incident['host']}",
        f"{at(41)} mitigated by the on-call engineer",
        f"{at(75)} follow-up agreed: {incident['next_step']}",
    ]


def incident_samples(request: str, target_of: Callable[[dict[str, Any]], str]) -> MemoryDataset:
    samples = [
        Sample(
            id=incident["id"],
            input=f"{incident_report(incident)}\n{request}",
            target=target_of(incident),
            metadata=dict(incident),
        )
        for incident in incidents()
    ]
    return MemoryDataset(samples, name="triage-incidents")


# ---------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9][a-z0-9-]*", text.lower()))


@tool
def runbook_search() -> Tool:
    async def execute(query: str) -> str:
        """Search the runbook library.

        Args:
            query: Words to search for, e.g. a service name and an error code.

        Returns:
            Up to five runbooks, one per line: id | service | error code | title.
        """
        query_words = _words(query)
        scored = []
        for runbook in catalog()["runbooks"]:
            score = 3 * (runbook["error_code"].lower() in query_words)
            score += 2 * (runbook["service"] in query_words)
            score += len({w for w in _words(runbook["title"]) if len(w) > 3} & query_words)
            if score:
                scored.append((-score, runbook["id"], runbook))
        if not scored:
            return "No runbooks match the query."
        return "\n".join(
            f"{rb['id']} | {rb['service']} | {rb['error_code']} | {rb['title']}" for _, _, rb in sorted(scored)[:5]
        )

    return execute


@tool
def service_owner() -> Tool:
    async def execute(service: str) -> str:
        """Look up which team owns a service.

        Args:
            service: The service name, e.g. payments-api.

        Returns:
            The owning team.
        """
        owners = {entry["name"]: entry["owner"] for entry in catalog()["services"]}
        if service not in owners:
            raise ToolError(f"unknown service {service!r}; known: {', '.join(sorted(owners))}")
        return f"{service} is owned by {owners[service]}."

    return execute


@tool
def page_oncall() -> Tool:
    async def execute(team: str, severity: str, message: str) -> str:
        """Page a team's on-call engineer.

        Args:
            team: The team to page.
            severity: Incident severity, SEV1 to SEV4.
            message: What the on-call engineer needs to know.

        Returns:
            The page id.
        """
        teams = {entry["owner"] for entry in catalog()["services"]}
        if team not in teams:
            raise ToolError(f"unknown team {team!r}; known: {', '.join(sorted(teams))}")
        if severity not in ("SEV1", "SEV2", "SEV3", "SEV4"):
            raise ToolError(f"severity must be SEV1..SEV4, got {severity!r}")
        page_id = hashlib.sha256(f"{team}|{severity}|{message}".encode()).hexdigest()[:8]
        return f"Paged the {team} on-call ({severity}); page id PG-{page_id}."

    return execute


@tool
def incident_timeline() -> Tool:
    async def execute(incident_id: str) -> str:
        """Read an incident's timeline.

        Args:
            incident_id: The incident id, e.g. INC-0042.

        Returns:
            The timeline, one event per line.
        """
        incident = incidents_by_id().get(incident_id)
        if incident is None:
            raise ToolError(f"unknown incident {incident_id!r}")
        header = f"Timeline for {incident_id} ({incident['service']}, {incident['severity']}):"
        return "\n".join([header, *timeline(incident)])

    return execute


def agent_tools() -> list[Tool]:
    """Every task offers the agent its whole tool belt; choosing the right tools is its job."""
    return [runbook_search(), service_owner(), page_oncall(), incident_timeline()]


# ---------------------------------------------------------------------------------------------
# Trajectory helpers for the scorers
# ---------------------------------------------------------------------------------------------


def tool_calls(state: TaskState, function: str) -> list[dict[str, Any]]:
    """Arguments of every call the agent made to ``function``, in order."""
    return [
        dict(call.arguments)
        for message in state.messages
        if isinstance(message, ChatMessageAssistant)
        for call in (message.tool_calls or [])
        if call.function == function
    ]


def tool_results(state: TaskState, function: str) -> list[str]:
    return [
        message.text
        for message in state.messages
        if isinstance(message, ChatMessageTool) and message.function == function
    ]


def _verdict(problems: list[str], answer: str, ok: str) -> Score:
    return Score(
        value=INCORRECT if problems else CORRECT,
        answer=answer,
        explanation="; ".join(problems) if problems else ok,
    )


# ---------------------------------------------------------------------------------------------
# Scorers
# ---------------------------------------------------------------------------------------------


@scorer(metrics=[accuracy(), stderr()])
def runbook_cited():
    """Correct when the agent searched the runbooks and its answer cites the target runbook,
    by an id a search actually returned."""

    async def score(state: TaskState, target: Target) -> Score:
        answer = state.output.completion
        cited = re.findall(r"\bRB-\d{3}\b", answer)
        problems = []
        if not tool_calls(state, "runbook_search"):
            problems.append("never called runbook_search")
        if not cited:
            problems.append("answer cites no runbook id")
        elif cited[0] != target.text:
            problems.append(f"cited {cited[0]}, expected {target.text}")
        elif not any(target.text in result for result in tool_results(state, "runbook_search")):
            problems.append(f"{target.text} never appeared in a search result")
        return _verdict(problems, cited[0] if cited else "", f"cited {target.text}")

    return score


@scorer(metrics=[accuracy(), stderr()])
def paging_followed_policy():
    """Correct when SEV1/SEV2 incidents page exactly the owning team once, with the incident's
    severity, and SEV3/SEV4 incidents page nobody."""

    async def score(state: TaskState, target: Target) -> Score:
        incident = state.metadata
        pages = tool_calls(state, "page_oncall")
        problems = []
        if incident["severity"] in PAGING_SEVERITIES:
            if not pages:
                problems.append(f"{incident['severity']} incident but nobody was paged")
            elif len(pages) > 1:
                problems.append(f"paged {len(pages)} times")
            else:
                page = pages[0]
                if page.get("team") != incident["owner"]:
                    problems.append(f"paged {page.get('team')!r}, owner is {incident['owner']!r}")
                if page.get("severity") != incident["severity"]:
                    problems.append(f"paged as {page.get('severity')!r}, incident is {incident['severity']}")
        elif pages:
            problems.append(f"{incident['severity']} incident must not page, paged {pages[0].get('team')!r}")
        paged = ",".join(str(page.get("team")) for page in pages) or "no-page"
        return _verdict(problems, paged, f"followed the policy ({target.text})")

    return score


@scorer(metrics=[accuracy(), stderr()])
def summary_complete():
    """Correct when the summary states the impact, the cause and the next step, stays within
    the word limit and leaks no internal hostname."""

    async def score(state: TaskState, target: Target) -> Score:
        incident = state.metadata
        summary = state.output.completion
        lowered = summary.lower()
        problems = [
            f"missing the {part}" for part in ("impact", "cause", "next_step") if incident[part].lower() not in lowered
        ]
        if ".internal" in lowered:
            problems.append("leaks an internal hostname")
        words = len(summary.split())
        if words > SUMMARY_MAX_WORDS:
            problems.append(f"{words} words, limit {SUMMARY_MAX_WORDS}")
        return _verdict(problems, summary, "complete summary")

    return score


# ---------------------------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------------------------


def _triage_task(request: str, target_of: Callable[[dict[str, Any]], str], scorer_: Scorer) -> Task:
    prompt = agent_system_prompt()
    return Task(
        dataset=incident_samples(request, target_of),
        solver=[agent_instructions(prompt), use_tools(agent_tools()), generate()],
        scorer=scorer_,
        message_limit=MESSAGE_LIMIT,
        metadata={"agent_config_sha256": hashlib.sha256(prompt.encode()).hexdigest()},
    )


@task
def runbook_lookup() -> Task:
    return _triage_task(RUNBOOK_REQUEST, lambda incident: incident["runbook_id"], runbook_cited())


@task
def escalation_policy() -> Task:
    return _triage_task(
        ESCALATION_REQUEST,
        lambda incident: f"page:{incident['owner']}" if incident["severity"] in PAGING_SEVERITIES else "no-page",
        paging_followed_policy(),
    )


@task
def summary_quality() -> Task:
    return _triage_task(SUMMARY_REQUEST, lambda incident: incident["next_step"], summary_complete())
