"""The simulated agent's policy: given the conversation so far, its next tool call or answer.

Pure Python (no Inspect types), so it can be reasoned about and tested on its own. The agent
reads the incident from the first user message (``Key: value`` lines: ``Incident``, ``Service``,
``Severity``, ``Error code``, ``Reported by``), recognises the request from its last line, and
reads tool results in the formats the bundled example's tools print (``runbook_search``: one
``id | service | error code | title`` line per hit; ``service_owner``: ``<service> is owned by
<team>.``; ``incident_timeline``: ``impact confirmed:`` / ``root cause: … on <host>`` /
``follow-up agreed:`` lines). Whether it gets a sample right is fixed up front by
:func:`~._behaviour.decide`; the trajectory then plays that decision out with real tool calls, so
the task's own scorer — which knows nothing of this module — reaches the same verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ._behaviour import Behaviour, Decision, decide
from ._profiles import STANDARD_MODEL, SimulatedModel

PAGING_SEVERITIES = ("SEV1", "SEV2")


@dataclass(frozen=True)
class ToolExchange:
    """One completed tool call: what the agent asked for and what came back."""

    function: str
    arguments: dict[str, Any]
    result: str
    error: str | None = None


@dataclass(frozen=True)
class Conversation:
    system: str  # all system messages, joined: the agent's instructions and skills
    request: str  # the first user message
    exchanges: tuple[ToolExchange, ...] = ()
    tools: frozenset[str] = frozenset()  # names of the tools offered


@dataclass(frozen=True)
class CallTool:
    function: str
    arguments: dict[str, Any]
    note: str  # the assistant text that accompanies the call


@dataclass(frozen=True)
class Answer:
    text: str


Step = CallTool | Answer


@dataclass(frozen=True)
class Incident:
    id: str
    service: str
    severity: str
    error_code: str
    reported_by: str
    alert: str = ""
    fields: dict[str, str] = field(default_factory=dict)


def classify_request(request: str) -> Behaviour | None:
    """Which behaviour the request asks for, from its last non-empty line."""
    lines = [line.strip().lower() for line in request.splitlines() if line.strip()]
    if not lines:
        return None
    ask = lines[-1]
    if "runbook" in ask:
        return "runbook_lookup"
    if "paging" in ask or "escalat" in ask:
        return "escalation_policy"
    if "summary" in ask or "status page" in ask:
        return "summary_quality"
    return None


def parse_incident(request: str) -> Incident | None:
    fields = {
        match.group(1).strip().lower(): match.group(2).strip()
        for match in re.finditer(r"^([A-Za-z][A-Za-z ]*):\s*(.+)$", request, re.MULTILINE)
    }
    incident_id = re.search(r"\bIncident\s+(\S+)", request)
    required = ("service", "severity", "error code")
    if incident_id is None or any(key not in fields for key in required):
        return None
    return Incident(
        id=incident_id.group(1),
        service=fields["service"],
        severity=fields["severity"].upper(),
        error_code=fields["error code"],
        reported_by=fields.get("reported by", ""),
        alert=fields.get("alert", ""),
        fields=fields,
    )


def incident_key(request: str) -> str | None:
    """The incident id named in the request (used when no sample id is known)."""
    match = re.search(r"\bIncident\s+(\S+)", request)
    return match.group(1) if match else None


def next_step(
    conversation: Conversation, *, seed: int, sample_id: str, epoch: int, model: SimulatedModel = STANDARD_MODEL
) -> Step:
    behaviour = classify_request(conversation.request)
    if behaviour is None:
        return Answer(
            "I handle incident triage: finding runbooks, applying the paging policy and "
            "writing status-page summaries. Which of these do you need?"
        )
    incident = parse_incident(conversation.request)
    if incident is None:
        return Answer("I need the incident's id, service, severity and error code to help.")
    decision = decide(
        behaviour,
        conversation.system,
        seed=seed,
        sample_id=sample_id,
        epoch=epoch,
        known_cues=model.known_cues,
        bonus=model.bonus,
    )
    return _PLANS[behaviour](incident, decision, conversation)


# ---------------------------------------------------------------------------------------------
# Plans, one per behaviour. Each returns the next step given the exchanges so far; a success
# plays the correct trajectory, a failure one of the mistakes agents really make.
# ---------------------------------------------------------------------------------------------


def _exchanges(conversation: Conversation, function: str) -> list[ToolExchange]:
    return [e for e in conversation.exchanges if e.function == function]


def _missing_tools(conversation: Conversation, *needed: str) -> Answer | None:
    missing = [name for name in needed if name not in conversation.tools]
    if missing:
        return Answer(f"I cannot do this without the {', '.join(missing)} tool(s).")
    return None


@dataclass(frozen=True)
class _RunbookHit:
    id: str
    service: str
    error_code: str
    title: str


def _runbook_hits(result: str) -> list[_RunbookHit]:
    hits = []
    for line in result.splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) == 4 and re.fullmatch(r"RB-\d+", parts[0]):
            hits.append(_RunbookHit(*parts))
    return hits


def _runbook_plan(incident: Incident, decision: Decision, conversation: Conversation) -> Step:
    if refusal := _missing_tools(conversation, "runbook_search"):
        return refusal
    searches = _exchanges(conversation, "runbook_search")
    if decision.succeeds:
        if not searches:
            query = incident.service
            if "error_code_query" in decision.cues:
                query = f"{incident.service} {incident.error_code}"
            return CallTool("runbook_search", {"query": query}, f"Searching the runbooks: {query}.")
        hits = _runbook_hits(searches[-1].result)
        match = next((hit for hit in hits if hit.error_code == incident.error_code), None)
        if match is None:
            return Answer(f"No runbook in the library matches {incident.error_code}.")
        return Answer(f"Runbook {match.id}: {match.title}")

    # Failures: answering from memory (no search), or reading the wrong runbook of the service.
    if decision.failure_draw < 0.2:
        return Answer(f"This is a known {incident.service} problem; follow the service's usual runbook.")
    if not searches:
        return CallTool("runbook_search", {"query": incident.service}, f"Searching the runbooks: {incident.service}.")
    wrong = [hit for hit in _runbook_hits(searches[-1].result) if hit.error_code != incident.error_code]
    if not wrong:
        return Answer("I could not tell which runbook applies.")
    pick = wrong[min(len(wrong) - 1, int((decision.failure_draw - 0.2) / 0.8 * len(wrong)))]
    return Answer(f"Runbook {pick.id}: {pick.title}")


def _owner_from(exchanges: list[ToolExchange]) -> str | None:
    for exchange in reversed(exchanges):
        match = re.search(r"is owned by ([A-Za-z0-9_.-]+?)\.?$", exchange.result.strip())
        if exchange.error is None and match:
            return match.group(1)
    return None


def _escalation_plan(incident: Incident, decision: Decision, conversation: Conversation) -> Step:
    if refusal := _missing_tools(conversation, "service_owner", "page_oncall"):
        return refusal
    needs_page = incident.severity in PAGING_SEVERITIES
    lookups = _exchanges(conversation, "service_owner")
    pages = _exchanges(conversation, "page_oncall")
    message = f"{incident.id}: [{incident.error_code}] {incident.alert}".strip()

    def lookup_owner() -> CallTool:
        return CallTool("service_owner", {"service": incident.service}, f"Checking who owns {incident.service}.")

    def page(team: str) -> CallTool:
        return CallTool(
            "page_oncall",
            {"team": team, "severity": incident.severity, "message": message},
            f"Paging the {team} on-call.",
        )

    # Failures: paging the reporting team without a lookup, deciding a paging incident can
    # wait, or paging for an incident the policy says must not page.
    paging_failure = not decision.succeeds and needs_page
    if paging_failure and decision.failure_draw < 0.6:
        if not pages:
            return page(incident.reported_by)
        return Answer(f"Paged {incident.reported_by} for {incident.id} ({incident.severity}).")
    if paging_failure:
        return Answer(f"No page: {incident.id} can wait for working hours.")

    if not lookups:
        return lookup_owner()
    owner = _owner_from(lookups)
    if owner is None:
        return Answer(f"I could not find the owner of {incident.service}; not paging.")
    if needs_page or not decision.succeeds:
        if not pages:
            return page(owner)
        return Answer(f"Paged {owner} for {incident.id} ({incident.severity}).")
    return Answer(f"No page: {incident.severity} incidents go to {owner}'s queue.")


def _timeline_facts(result: str) -> dict[str, str]:
    facts = {}
    for key, pattern in (
        ("impact", r"impact confirmed:\s*(.+)$"),
        ("cause", r"root cause:\s*(.+?) on \S+$"),
        ("next_step", r"follow-up agreed:\s*(.+)$"),
    ):
        match = re.search(pattern, result, re.MULTILINE)
        if match:
            facts[key] = match.group(1).strip()
    return facts


def _summary_plan(incident: Incident, decision: Decision, conversation: Conversation) -> Step:
    if refusal := _missing_tools(conversation, "incident_timeline"):
        return refusal
    timelines = [e for e in _exchanges(conversation, "incident_timeline") if e.error is None]
    heading = f"{incident.service} incident {incident.id}"

    # Failure without reading anything: a vague holding statement.
    if not decision.succeeds and decision.failure_draw >= 0.7:
        return Answer(f"{heading}: {incident.service} is degraded. We are investigating.")
    if not timelines:
        if _exchanges(conversation, "incident_timeline"):
            return Answer(f"{heading}: I could not read the timeline.")
        return CallTool("incident_timeline", {"incident_id": incident.id}, f"Reading the timeline of {incident.id}.")
    facts = _timeline_facts(timelines[-1].result)
    if len(facts) < 3:
        return Answer(f"{heading}: the timeline does not yet say enough for a summary.")
    if decision.succeeds:
        return Answer(f"{heading}: {facts['impact']}. Cause: {facts['cause']}. Next step: {facts['next_step']}.")
    # Failures after reading: forgetting the next step, or pasting the raw timeline.
    if decision.failure_draw < 0.4:
        return Answer(f"{heading}: {facts['impact']}. Cause: {facts['cause']}.")
    events = [line for line in timelines[-1].result.splitlines()[1:] if line.strip()]
    return Answer(f"Status update for {incident.id}:\n" + "\n".join(events))


_PLANS = {
    "runbook_lookup": _runbook_plan,
    "escalation_policy": _escalation_plan,
    "summary_quality": _summary_plan,
}
