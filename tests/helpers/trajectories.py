"""Trajectories for the miner built in the test (no lake): one per sample, with its tools in
order, its tool errors and its score."""

from __future__ import annotations

from evalrunner_assets.mining.features import Trajectory


def trajectory(
    i: int, tools: list[str], *, score: float | None, errors: tuple[str, ...] = (), error: str | None = None
) -> Trajectory:
    seqs = tuple(10 * (k + 1) for k in range(len(tools)))
    return Trajectory(
        batch="b1",
        sample_id=f"s{i:03d}",
        epoch=1,
        score=score,
        error=error,
        limit_type=None,
        tools=tuple(tools),
        tool_seqs=seqs,
        tool_errors=errors,
        tool_error_seqs=tuple(seqs[tools.index(e)] for e in errors),
        turns=len(tools) + 1,
        total_tokens=100,
        total_time_s=1.0,
        first_error_seq=None,
        answer_chars=20,
    )
