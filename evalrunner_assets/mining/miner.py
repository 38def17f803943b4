"""Failure patterns: the features failing trajectories share and passing ones lack.

For two groups of trajectories (a task's failing vs passing samples at one commit, or a
comparison's head trajectories on inputs the head fails and the base passes vs the base's on the
same inputs) every feature of ``features.feature_matrix`` gets a 2x2 table, a one-sided Fisher
exact test (is it more common among the failures?) and a lift, the ratio of its rates. The
p-values are adjusted together by Benjamini–Hochberg, so at most ``fdr`` of the findings reported
as significant are expected to be chance. Only these deterministic counts decide significance; a
model may later name or summarise findings, never pick them.

Features are tested when enough trajectories of both groups together have and lack them
(``features.MIN_SUPPORT``): a rule that ignores the outcome, so it does not bias the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import hypergeom

from evalrunner_assets.errors import UserError
from evalrunner_assets.mining.features import Feature, FeatureMatrix, Trajectory, feature_matrix

DEFAULT_FDR = 0.05
# Fewer trajectories than this in either group: nothing to contrast.
MIN_GROUP = 5


class NothingToContrast(UserError):
    """The groups are too small to contrast (no failures, no passes, too few samples)."""


@dataclass(frozen=True)
class Finding:
    """A feature significantly more common among the failing trajectories."""

    feature: Feature
    failing_with: int  # failing trajectories that have it
    failing: int  # failing trajectories
    passing_with: int
    passing: int
    lift: float  # rate among failing / rate among passing (inf when no passing one has it)
    p_value: float  # one-sided Fisher exact
    q_value: float  # Benjamini–Hochberg adjusted
    samples: tuple[str, ...]  # sample ids of the failing trajectories that have it
    aliases: tuple[str, ...] = ()  # other features with exactly the same trajectories

    @property
    def headline(self) -> str:
        return (
            f"Pattern seen in {self.failing_with} / {self.failing} failing samples "
            f"({self.passing_with} / {self.passing} passing): {self.feature.name}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "feature": self.feature.name,
            "kind": self.feature.kind,
            "tools": list(self.feature.tools),
            "headline": self.headline,
            "failing_with": self.failing_with,
            "failing": self.failing,
            "passing_with": self.passing_with,
            "passing": self.passing,
            "lift": None if np.isinf(self.lift) else round(self.lift, 4),
            "p_value": self.p_value,
            "q_value": self.q_value,
            "samples": list(self.samples),
            "aliases": list(self.aliases),
        }


@dataclass
class Contrast:
    """What mining two groups found: every significant finding, best first."""

    findings: list[Finding]
    failing: int
    passing: int
    tested: int  # features tested (the Benjamini–Hochberg family)
    fdr: float
    left_out: int = 0  # trajectories whose outcome could not be told
    summary: str | None = None  # a model's name for the findings, when asked for (never decides)
    # The trajectories contrasted (failing first) and their features: where the notes go.
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)
    matrix: FeatureMatrix | None = field(default=None, repr=False)

    def failing_with(self, finding: Finding) -> list[Trajectory]:
        """The failing trajectories that show ``finding``."""
        if self.matrix is None:
            return []
        j = [f.name for f in self.matrix.features].index(finding.feature.name)
        return [self.trajectories[i] for i in np.flatnonzero(self.matrix.values[: self.failing, j])]


def benjamini_hochberg(p_values: np.ndarray) -> np.ndarray:
    """The Benjamini–Hochberg adjusted p-values (q-values), in the input's order."""
    m = len(p_values)
    if m == 0:
        return p_values.astype(float)
    order = np.argsort(p_values, kind="stable")
    ranked = p_values[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(ranked[::-1])[::-1]
    q = np.empty(m, dtype=float)
    q[order] = np.minimum(adjusted, 1.0)
    return q


def contrast(
    failing: Sequence[Trajectory],
    passing: Sequence[Trajectory],
    *,
    fdr: float = DEFAULT_FDR,
    what: str = "the task",
    left_out: int = 0,
) -> Contrast:
    """The features significantly enriched in ``failing`` against ``passing``, ranked by lift
    (then by how many failures show them). Raises NothingToContrast, with the counts, when a
    group has fewer than ``MIN_GROUP`` trajectories."""
    if not 0 < fdr < 1:
        raise ValueError(f"fdr must be between 0 and 1, not {fdr}")
    if len(failing) < MIN_GROUP or len(passing) < MIN_GROUP:
        raise NothingToContrast(
            f"nothing to contrast in {what}: {len(failing)} failing and {len(passing)} passing "
            f"trajectories (at least {MIN_GROUP} of each are needed)"
            + (f"; {left_out} more could not be told passed or failed (no score)" if left_out else "")
        )
    trajectories = [*failing, *passing]
    matrix: FeatureMatrix = feature_matrix(trajectories)
    n_fail, n_pass = len(failing), len(passing)
    fail_with = matrix.values[:n_fail].sum(axis=0)
    pass_with = matrix.values[n_fail:].sum(axis=0)
    support = fail_with + pass_with
    # One-sided Fisher exact: P(X >= fail_with) for X ~ Hypergeometric(total, support, n_fail).
    p = hypergeom.sf(fail_with - 1, n_fail + n_pass, support, n_fail) if len(matrix.features) else np.array([])
    p = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    q = benjamini_hochberg(p)
    findings = []
    for j, feature in enumerate(matrix.features):
        if q[j] > fdr:
            continue
        rate_fail, rate_pass = fail_with[j] / n_fail, pass_with[j] / n_pass
        if rate_fail <= rate_pass:
            continue
        lift = float("inf") if rate_pass == 0 else float(rate_fail / rate_pass)
        rows = np.flatnonzero(matrix.values[:n_fail, j])
        samples = tuple(dict.fromkeys(failing[int(i)].sample_id for i in rows))
        findings.append(
            Finding(
                feature=feature,
                failing_with=int(fail_with[j]),
                failing=n_fail,
                passing_with=int(pass_with[j]),
                passing=n_pass,
                lift=lift,
                p_value=float(p[j]),
                q_value=float(q[j]),
                samples=samples,
                aliases=tuple(matrix.aliases.get(feature.name, ())),
            )
        )
    # A smoothed lift ranks an infinite one by its evidence: 14 / 21 against 0 beats 3 / 21 against 0.
    findings.sort(
        key=lambda f: (
            -((f.failing_with + 0.5) / (f.failing + 1)) / ((f.passing_with + 0.5) / (f.passing + 1)),
            -f.failing_with,
            f.feature.name,
        )
    )
    return Contrast(
        findings, n_fail, n_pass, len(matrix.features), fdr, left_out=left_out, trajectories=trajectories, matrix=matrix
    )
