"""What the simulated agent knows how to do, and how likely it is to get it right.

The agent recognises three kinds of request (*behaviours*). For each, its chance of success
depends only on which pieces of *guidance* (cues) the system prompt contains — not on any other
wording. Every sample gets one uniform draw per (seed, behaviour, sample id, epoch), shared by
every prompt: the sample succeeds when its draw is below the success probability. Two commits
whose prompts carry the same cues therefore produce identical per-sample outcomes (ties), and a
commit that adds a cue flips exactly the failures whose draw lies between the old and the new
probability (common random numbers).

Documented probabilities (floor + the increments of the cues present):

=================== ======= ==================================================== =========
behaviour           floor   cue (regular expression over the normalised prompt)   increment
=================== ======= ==================================================== =========
runbook_lookup      0.30    ``search_tool``: mentions ``runbook_search``          +0.30
                            ``error_code_query``: put the error code in the query  +0.25
escalation_policy   0.30    ``severity_policy``: "only for SEV1 and SEV2"         +0.25
                            ``owner_lookup``: mentions ``service_owner``          +0.25
summary_quality     0.50    ``summary_structure``: impact … cause … next step     +0.40
=================== ======= ==================================================== =========

So the bundled example's base skills give 0.60 / 0.80 / 0.90; its ``improve-runbook`` variant
adds ``error_code_query`` (runbook_lookup 0.85), ``regress-escalation`` drops ``owner_lookup``
(escalation_policy 0.55), and ``no-op-wording`` keeps every cue (no change). Its ``runbook``
skill, in the repository but not in ``agent.yaml``'s skills, carries ``error_code_query`` too:
a candidate that switches it on (an agent-config override) gets runbook_lookup 0.85.

A named simulated model (``_profiles``) may act on cues its prompt lacks (a fine-tune) or add a
fixed lift to every behaviour (a bigger model); the draws stay the same for every model.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

Behaviour = Literal["runbook_lookup", "escalation_policy", "summary_quality"]
BEHAVIOURS: tuple[Behaviour, ...] = ("runbook_lookup", "escalation_policy", "summary_quality")


@dataclass(frozen=True)
class Cue:
    """One piece of behaviour-relevant guidance the agent acts on when its prompt contains it."""

    name: str
    pattern: str  # searched in the normalised prompt (see ``normalise_prompt``)
    increment: float  # added to the behaviour's success probability when present


@dataclass(frozen=True)
class BehaviourModel:
    floor: float  # success probability with none of the cues
    cues: tuple[Cue, ...]


BEHAVIOUR_MODELS: dict[Behaviour, BehaviourModel] = {
    "runbook_lookup": BehaviourModel(
        floor=0.30,
        cues=(
            Cue("search_tool", r"\brunbook_search\b", 0.30),
            Cue(
                "error_code_query",
                r"error code.{0,80}\bquery\b|\bquery\b.{0,80}error code",
                0.25,
            ),
        ),
    ),
    "escalation_policy": BehaviourModel(
        floor=0.30,
        cues=(
            Cue("severity_policy", r"only for sev1 and sev2", 0.25),
            Cue("owner_lookup", r"\bservice_owner\b", 0.25),
        ),
    ),
    "summary_quality": BehaviourModel(
        floor=0.50,
        cues=(Cue("summary_structure", r"impact.{0,60}cause.{0,60}next step", 0.40),),
    ),
}


def normalise_prompt(text: str) -> str:
    """Lower-case, drop Markdown emphasis/code marks, collapse whitespace — so that formatting
    and line wrapping never change which cues are found."""
    text = text.lower().replace("`", "").replace("*", "")
    return re.sub(r"\s+", " ", text)


def cues_present(behaviour: Behaviour, prompt: str) -> frozenset[str]:
    """Names of the behaviour's cues found in ``prompt`` (the system prompt, raw)."""
    normalised = normalise_prompt(prompt)
    return frozenset(cue.name for cue in BEHAVIOUR_MODELS[behaviour].cues if re.search(cue.pattern, normalised))


def success_probability(behaviour: Behaviour, cues: frozenset[str]) -> float:
    """The documented probability that the agent handles one sample of ``behaviour`` right."""
    model = BEHAVIOUR_MODELS[behaviour]
    unknown = cues - {cue.name for cue in model.cues}
    if unknown:
        raise ValueError(f"unknown cues for {behaviour}: {sorted(unknown)}")
    p = model.floor + sum(cue.increment for cue in model.cues if cue.name in cues)
    return round(min(1.0, max(0.0, p)), 10)


def uniform_draw(*key: object) -> float:
    """A uniform number in [0, 1) fixed by ``key`` (stable across processes and Python versions)."""
    digest = hashlib.sha256("\x1f".join(str(part) for part in key).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class Decision:
    """What the agent will do on one sample: succeed or not, and which way it goes wrong."""

    behaviour: Behaviour
    cues: frozenset[str]  # the behaviour-relevant guidance found in the prompt
    probability: float
    succeeds: bool
    failure_draw: float  # picks the failure mode when ``succeeds`` is false


def decide(
    behaviour: Behaviour,
    prompt: str,
    *,
    seed: int,
    sample_id: str,
    epoch: int,
    known_cues: frozenset[str] = frozenset(),
    bonus: float = 0.0,
) -> Decision:
    """The agent's outcome on one sample. The draws do not depend on the prompt, only the
    probability does — that is what makes both arms of a comparison share their randomness.
    ``known_cues`` (guidance the model learned in training) count as present whatever the
    prompt says; ``bonus`` is a more capable model's lift on every behaviour."""
    own = {cue.name for cue in BEHAVIOUR_MODELS[behaviour].cues}
    cues = cues_present(behaviour, prompt) | (known_cues & own)
    probability = round(min(1.0, success_probability(behaviour, cues) + bonus), 10)
    outcome_draw = uniform_draw(seed, behaviour, sample_id, epoch, "outcome")
    failure_draw = uniform_draw(seed, behaviour, sample_id, epoch, "failure-mode")
    return Decision(behaviour, cues, probability, outcome_draw < probability, failure_draw)
