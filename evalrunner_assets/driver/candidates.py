"""`evalrunner candidates`: declare candidates, measure them, and compute the frontier.

``measure`` reads ``.evals/candidates.yaml`` at the repository's default branch (when it has
one) into the lake, registers one ``candidates`` partition per candidate and one
``candidate_repos`` partition for the repository, then materializes ``candidate_measurements``
over the candidates (one single-run range through ``candidate_measurements_job``) and
``continuum_frontier`` for the repository through ``continuum_frontier_job`` — the same runs the
Dagster UI makes, so it shows them and can re-execute them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from evalrunner_assets.partitions import CANDIDATE_REPOS, CANDIDATES, add_partitions
from evalrunner_assets.pipeline import candidates as cands

RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


@dataclass
class CandidatesResult:
    repo: str
    declared: list[str]  # names read from the repository's candidates file (empty without one)
    measurements: dict[str, dict[str, Any]]
    frontier: dict[str, Any]  # the frontier document: rows, steps, promotion
    runs: int


def declare_from_repo(resources: dict[str, Any], repo: str, source: str, ref: str | None = None) -> list[str]:
    """Store the candidates ``.evals/candidates.yaml`` declares at ``ref`` (default branch)."""
    the_lake = resources["lake"].open()
    resources["repos"].register(the_lake, repo, source)
    src = resources["repos"].source(the_lake, repo)
    src.update()
    sha = src.resolve_ref(ref or "HEAD")
    declared = cands.read_candidates_file(resources["repos"].export(the_lake, repo, sha))
    if declared is None:
        return []
    return cands.store_declared(the_lake, repo, declared, commit=sha)


def add_candidate(
    resources: dict[str, Any],
    repo: str,
    candidate: cands.Candidate,
    *,
    reference: bool = False,
    settings: cands.CandidateSettings | None = None,
) -> cands.CandidateCommit | None:
    """Store one candidate (provenance: this command); ``reference`` makes it the reference.
    A candidate with agent-config overrides is resolved first (its ref must have an agent
    config), so a bad one is refused before it is stored; returns that commit (None without
    overrides)."""
    the_lake = resources["lake"].open()
    resolved = None
    if candidate.agent_config:
        src = resources["repos"].source(the_lake, repo)
        src.update()
        resolved = cands.resolve_candidate(src, candidate)
    cands.save_candidate(the_lake, repo, candidate, {"declared_in": "evalrunner candidates add"})
    current, current_settings = cands.load_settings(the_lake, repo)
    if reference or current is None or settings is not None:
        cands.save_settings(the_lake, repo, candidate.name if reference or current is None else current,
                            settings or current_settings)  # fmt: skip
    return resolved


def measure_candidates(
    repo: str,
    source: str,
    *,
    names: Sequence[str] | None = None,
    instance: dg.DagsterInstance | None = None,
    resources: dict[str, Any] | None = None,
) -> CandidatesResult:
    from evalrunner_assets.definitions import defs
    from evalrunner_assets.driver.comparison import default_resources, local_instance

    resources = resources or default_resources()
    declared = declare_from_repo(resources, repo, source)
    the_lake = resources["lake"].open()
    known = cands.load_candidates(the_lake, repo)
    if not known:
        raise cands.CandidateError(
            f"{repo} has no candidates: declare them in {cands.CANDIDATES_FILE} or with `evalrunner candidates add`"
        )
    chosen = list(known) if not names else list(names)
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise cands.CandidateError(f"{repo}: no candidate named {', '.join(map(repr, unknown))}")
    instance = instance or local_instance()
    keys = [cands.candidate_key(repo, n) for n in chosen]
    add_partitions(instance, CANDIDATES, keys)
    add_partitions(instance, CANDIDATE_REPOS, [repo])
    order = instance.get_dynamic_partitions(CANDIDATES)
    position = {k: i for i, k in enumerate(order)}
    keys.sort(key=position.__getitem__)
    contiguous = order[position[keys[0]] : position[keys[-1]] + 1] == keys
    ranges = [(keys[0], keys[-1])] if contiguous else [(k, k) for k in keys]
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    runs = 0
    for start, end in ranges:
        runs += 1
        defs.resolve_job_def("candidate_measurements_job").execute_in_process(
            instance=instance,
            resources=resources,
            raise_on_error=True,
            tags={RANGE_START_TAG: start, RANGE_END_TAG: end, "evalrunner/candidates": repo},
            run_config=quiet,
        )
    defs.resolve_job_def("continuum_frontier_job").execute_in_process(
        instance=instance, resources=resources, raise_on_error=True, partition_key=repo, run_config=quiet
    )
    runs += 1
    import json

    from lake import LAYOUT

    frontier = json.loads(the_lake.read_bytes(LAYOUT.continuum_frontier(repo, "json")))
    return CandidatesResult(
        repo=repo,
        declared=declared,
        measurements=cands.load_measurements(the_lake, repo),
        frontier=frontier,
        runs=runs,
    )
