"""Event-level features of trajectories, as boolean columns the miner contrasts.

A trajectory is one sample's epoch in one batch: its outcome and what the agent did (the tool
calls in order, tool errors, turns, tokens, time, the final answer). ``sql/trajectory_features.sql``
computes one row per trajectory from the lake's ``samples`` and ``events``; this module turns a
set of such rows into a feature matrix: for every tool seen in the set, "calls A", "never calls
A", "calls A n+ times", "A before B", "B without A first" and "tool error in A"; and "raised",
"hit the <limit> limit", "no tool calls", "empty answer", and the long-tail bins of turns, tokens
and time (above the set's 75th percentile). Features are computed with numpy over the whole set
at once: a task with 10,000 trajectories costs milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# "calls A n+ times" for these n (1 is "calls A").
REPEAT_COUNTS = (2, 3, 5)
# A feature needs at least this many trajectories with it and without it to be tested: one seen
# once cannot be significant, and testing it would only cost the others power.
MIN_SUPPORT = 3


@dataclass(frozen=True)
class Trajectory:
    """What the miner knows of one trajectory (a row of ``trajectory_features``)."""

    batch: str
    sample_id: str
    epoch: int
    score: float | None
    error: str | None
    limit_type: str | None
    tools: tuple[str, ...]  # tool functions called, in order
    tool_seqs: tuple[int, ...]  # the event seq of each call
    tool_errors: tuple[str, ...]  # tool functions whose call returned an error, in order
    tool_error_seqs: tuple[int, ...]
    turns: int
    total_tokens: int
    total_time_s: float | None
    first_error_seq: int | None
    answer_chars: int | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Trajectory:
        return cls(
            batch=str(row["batch"]),
            sample_id=str(row["sample_id"]),
            epoch=int(row["epoch"]),
            score=row["score"],
            error=row["error"],
            limit_type=row["limit_type"],
            tools=tuple(row["tool_sequence"] or ()),
            tool_seqs=tuple(int(s) for s in row["tool_seqs"] or ()),
            tool_errors=tuple(row["tool_error_sequence"] or ()),
            tool_error_seqs=tuple(int(s) for s in row["tool_error_seqs"] or ()),
            turns=int(row["turns"] or 0),
            total_tokens=int(row["total_tokens"] or 0),
            total_time_s=row["total_time_s"],
            first_error_seq=row["first_error_seq"],
            answer_chars=row["answer_chars"],
        )

    def passed(self, threshold: float) -> bool | None:
        """Passed (score at or above ``threshold``), failed, or None when it cannot be told: a
        sample that raised failed (the repository's code raised: it scores 0); one with no score
        and no error (unscored, or a score outside [0, 1]) is left out."""
        if self.score is None:
            return False if self.error is not None else None
        return self.score >= threshold


@dataclass(frozen=True)
class Feature:
    """One boolean feature: its name (what a person reads) and where it shows in a trajectory."""

    name: str
    kind: str  # calls, never_calls, repeats, before, without_first, tool_error, raised, limit, ...
    tools: tuple[str, ...] = ()  # the tools it is about, in the order of its name

    def event_seq(self, trajectory: Trajectory) -> int | None:
        """The event seq a note about this feature attaches to in ``trajectory`` (the first call
        of the tool it is about, the first failing call), or None for a trajectory-level note."""
        if self.kind in ("calls", "repeats", "before") and self.tools:
            tool = self.tools[-1] if self.kind == "before" else self.tools[0]
            return _first_seq(trajectory.tools, trajectory.tool_seqs, tool)
        if self.kind == "without_first":
            return _first_seq(trajectory.tools, trajectory.tool_seqs, self.tools[1])
        if self.kind == "tool_error":
            return _first_seq(trajectory.tool_errors, trajectory.tool_error_seqs, self.tools[0])
        if self.kind == "raised":
            return trajectory.first_error_seq
        return None


def _first_seq(tools: Sequence[str], seqs: Sequence[int], tool: str) -> int | None:
    for name, seq in zip(tools, seqs, strict=False):
        if name == tool:
            return seq
    return None


@dataclass
class FeatureMatrix:
    """``values[i, j]``: trajectory i has feature j. Columns that are identical over the set
    are one feature (``aliases`` keeps the other names), so the same evidence is tested once."""

    features: list[Feature]
    values: np.ndarray  # bool, (trajectories, features)
    aliases: dict[str, list[str]]


def feature_matrix(trajectories: Sequence[Trajectory]) -> FeatureMatrix:
    """Every feature of ``trajectories`` that at least ``MIN_SUPPORT`` of them have and at least
    ``MIN_SUPPORT`` lack, one column each (identical columns merged, the first name kept)."""
    n = len(trajectories)
    tools = sorted(
        {tool for t in trajectories for tool in t.tools} | {tool for t in trajectories for tool in t.tool_errors}
    )
    index = {tool: k for k, tool in enumerate(tools)}
    counts = np.zeros((n, len(tools)), dtype=np.int32)
    first = np.full((n, len(tools)), np.iinfo(np.int32).max, dtype=np.int64)
    errors = np.zeros((n, len(tools)), dtype=bool)
    for i, t in enumerate(trajectories):
        for position, tool in enumerate(t.tools):
            k = index[tool]
            counts[i, k] += 1
            if first[i, k] > position:
                first[i, k] = position
        for tool in t.tool_errors:
            errors[i, index[tool]] = True

    columns: list[tuple[Feature, np.ndarray]] = []
    called = counts > 0
    for tool, k in index.items():
        columns.append((Feature(f"calls {tool}", "calls", (tool,)), called[:, k]))
        columns.append((Feature(f"never calls {tool}", "never_calls", (tool,)), ~called[:, k]))
        for times in REPEAT_COUNTS:
            columns.append((Feature(f"calls {tool} {times}+ times", "repeats", (tool,)), counts[:, k] >= times))
        columns.append((Feature(f"tool error in {tool}", "tool_error", (tool,)), errors[:, k]))
    for a, ka in index.items():
        for b, kb in index.items():
            if a == b:
                continue
            columns.append(
                (
                    Feature(f"{a} before {b}", "before", (a, b)),
                    called[:, ka] & called[:, kb] & (first[:, ka] < first[:, kb]),
                )
            )
            columns.append(
                (
                    Feature(f"{b} without {a} first", "without_first", (a, b)),
                    called[:, kb] & ~(first[:, ka] < first[:, kb]),
                )
            )
    raised = np.array([t.error is not None for t in trajectories], dtype=bool)
    columns.append((Feature("raised an error", "raised"), raised))
    for limit in sorted({t.limit_type for t in trajectories if t.limit_type}):
        columns.append(
            (Feature(f"hit the {limit} limit", "limit"), np.array([t.limit_type == limit for t in trajectories]))
        )
    no_tools = np.asarray(~called.any(axis=1)) if tools else np.ones(n, dtype=bool)
    columns.append((Feature("no tool calls", "no_tools"), no_tools))
    columns.append((Feature("empty answer", "empty_answer"), np.array([not t.answer_chars for t in trajectories])))
    for label, unit, values in (
        ("turns", "", [float(t.turns) for t in trajectories]),
        ("tokens", "", [float(t.total_tokens) for t in trajectories]),
        ("time", " s", [float(t.total_time_s) if t.total_time_s is not None else np.nan for t in trajectories]),
    ):
        arr = np.array(values, dtype=float)
        if n and not np.all(np.isnan(arr)):
            cut = float(np.nanpercentile(arr, 75))
            shown = f"{cut:g}{unit}" if unit == "" else f"{cut:.1f}{unit}"
            columns.append((Feature(f"{label} above {shown}", "long_tail"), np.nan_to_num(arr, nan=-np.inf) > cut))

    kept: list[Feature] = []
    kept_values: list[np.ndarray] = []
    aliases: dict[str, list[str]] = {}
    seen: dict[bytes, str] = {}
    for feature, column in columns:
        support = int(column.sum())
        if support < MIN_SUPPORT or n - support < MIN_SUPPORT:
            continue
        key = np.packbits(column).tobytes()
        if key in seen:
            aliases[seen[key]].append(feature.name)
            continue
        seen[key] = feature.name
        aliases[feature.name] = []
        kept.append(feature)
        kept_values.append(column)
    matrix = np.column_stack(kept_values) if kept_values else np.zeros((n, 0), dtype=bool)
    return FeatureMatrix(kept, matrix.astype(bool), aliases)
