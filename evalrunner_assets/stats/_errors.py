"""Typed errors: each names the input that was wrong and how to fix it."""

from __future__ import annotations

from evalrunner_assets.errors import EvalrunnerError


class StatsError(EvalrunnerError, ValueError):
    """Base class for every error raised by ``evalrunner_assets.stats``."""


class ParamsError(StatsError):
    """A statistics parameter is out of range (the message names it and its allowed range)."""


class PairingError(StatsError):
    """Sample rows cannot be paired (the message names the side, the sample id and the field)."""


class PlanError(StatsError):
    """The planner was given an inconsistent task state or budget."""
