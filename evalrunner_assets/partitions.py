"""The named dynamic partition sets, at the grain we schedule and backfill (docs/partitions.md).

- ``commits``: ``owner/repo@<40-hex sha>``
- ``tasks``: task ids from manifests, e.g. ``triage/runbook_lookup``
- ``comparisons``: ``owner/repo#<pr>@<head sha>``
- ``main_commits``: ``owner/repo@<40-hex sha>`` of commits on a repository's series branch
  (one point of the cohort series each; added in first-parent order)
``task_samples`` is partitioned by the product ``commit × task``.

Decided PRs are retired (:func:`retire_comparison`): their ``comparisons`` key goes, and so do
their ``commits`` keys unless an open comparison still needs them. The lake stays the record and
the event log keeps every materialization, so the sets hold the open work only. ``main_commits``
keeps the newest ``MAIN_COMMITS_KEPT`` keys (:func:`trim_main_commits`); older points stay in the
lake's series and a backfill adds their keys again. ``swe_runs`` keeps the newest
``SWE_RUNS_KEPT`` (:func:`trim_swe_runs`); a run's attempts stay in the lake and a failed run
submitted again adds its key back. README, "Partitions", gives the bounds.
"""

from __future__ import annotations

import dagster as dg

from evalrunner_assets.pipeline.keys import commit_key
from evalrunner_assets.pipeline.open_index import mark_closed
from evalrunner_assets.pipeline.spec import ComparisonRequest
from lake import Lake

# A year of pushes at 1,000 a day would pass Dagster's advised 100k partitions: the oldest go.
MAIN_COMMITS_KEPT = 20_000
# One key per submitted SWE run: the oldest go too (long finished; their attempts are in the lake).
SWE_RUNS_KEPT = 20_000

# The partition sets' names: everything that adds, reads or deletes keys spells them with these.
COMMITS = "commits"
TASKS = "tasks"
COMPARISONS = "comparisons"
MAIN_COMMITS = "main_commits"
CANDIDATES = "candidates"
CANDIDATE_REPOS = "candidate_repos"
SWE_RUNS = "swe_runs"
SWE_TASK_SETS = "swe_task_sets"

commits_partitions = dg.DynamicPartitionsDefinition(name=COMMITS)
tasks_partitions = dg.DynamicPartitionsDefinition(name=TASKS)
comparisons_partitions = dg.DynamicPartitionsDefinition(name=COMPARISONS)
main_commits_partitions = dg.DynamicPartitionsDefinition(name=MAIN_COMMITS)
# ``owner/repo:name``: one candidate configuration; ``owner/repo``: a repository's frontier.
candidates_partitions = dg.DynamicPartitionsDefinition(name=CANDIDATES)
candidate_repos_partitions = dg.DynamicPartitionsDefinition(name=CANDIDATE_REPOS)
# SWE-style task sets: one partition per submitted run (``r-<hex>``, from POST /v1/runs) and one
# per registered task set (its gold-patch check).
swe_runs_partitions = dg.DynamicPartitionsDefinition(name=SWE_RUNS)
swe_task_sets_partitions = dg.DynamicPartitionsDefinition(name=SWE_TASK_SETS)
commit_task_partitions = dg.MultiPartitionsDefinition({"commit": commits_partitions, "task": tasks_partitions})


def commit_task_key(repo: str, sha: str, task: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"commit": commit_key(repo, sha), "task": task})


def add_partitions(instance: dg.DagsterInstance, name: str, keys: list[str]) -> None:
    """Add the keys ``instance`` does not have yet to the dynamic partition set ``name``, in
    order. Two processes adding the same key at once is normal (two comparisons on one base):
    the loser of that race finds the key there on its second look."""
    from sqlalchemy.exc import IntegrityError

    keys = list(dict.fromkeys(keys))
    for attempt in range(3):
        have = set(instance.get_dynamic_partitions(name))  # one query; the sets hold open work only
        missing = [k for k in keys if k not in have]
        if not missing:
            return
        try:
            instance.add_dynamic_partitions(name, missing)
            return
        except IntegrityError:
            if attempt == 2:
                raise


def comparison_commit_keys(request: ComparisonRequest) -> list[str]:
    """The ``commits`` keys a comparison runs on (base and head)."""
    return list(dict.fromkeys(commit_key(request.repo, sha) for sha in (request.base_sha, request.head_sha)))


def retire_comparison(
    instance: dg.DagsterInstance, lake: Lake, request: ComparisonRequest, keep_commits: set[str]
) -> list[str]:
    """Retire a decided comparison: delete its ``comparisons`` key and those of its ``commits``
    keys not in ``keep_commits`` (the commits of comparisons still open), then drop it from the
    lake's open index. Returns the partition keys deleted.

    Materializations stay in the event log and every file stays in the lake; a later
    ``/eval more`` or a new PR on the same commit adds the keys again. Deleting first and closing
    last makes a crash in between harmless: the comparison is still listed as open, so the next
    tick retires it again (deleting a key that is gone is a no-op)."""
    deleted = []
    for key in comparison_commit_keys(request):
        if key not in keep_commits:
            instance.delete_dynamic_partition(COMMITS, key)
            deleted.append(key)
    instance.delete_dynamic_partition(COMPARISONS, request.key)
    deleted.append(request.key)
    mark_closed(lake, request.repo, request.pr, request.head_sha)
    return deleted


def _trim_oldest(
    instance: dg.DagsterInstance, name: str, incoming: list[str], keep: int, protected: frozenset[str] = frozenset()
) -> list[str]:
    """Delete the oldest keys of the dynamic set ``name`` so that, once ``incoming`` is added, at
    most ``keep`` remain (``incoming`` and ``protected`` keys are never deleted, even if that
    leaves more). Returns the keys deleted. The set lists keys in the order they were added, so
    the oldest go first."""
    have = instance.get_dynamic_partitions(name)
    present, wanted = set(have), set(incoming)
    excess = len(have) + len(wanted - present) - keep
    if excess <= 0:
        return []
    doomed = [k for k in have if k not in wanted and k not in protected][:excess]
    for key in doomed:
        instance.delete_dynamic_partition(name, key)
    return doomed


def trim_main_commits(instance: dg.DagsterInstance, incoming: list[str], keep: int = MAIN_COMMITS_KEPT) -> list[str]:
    """Make room for ``incoming`` in ``main_commits`` (first-parent order for pushes and
    backfills, so the oldest points go first); their series points, charts and materializations
    stay, and ``evalrunner backfill`` over them adds the keys again."""
    return _trim_oldest(instance, MAIN_COMMITS, incoming, keep)


def trim_swe_runs(
    instance: dg.DagsterInstance, incoming: list[str], keep: int = SWE_RUNS_KEPT, active: frozenset[str] = frozenset()
) -> list[str]:
    """Make room for ``incoming`` in ``swe_runs`` (submission order: the oldest runs go first;
    their attempts and records stay in the lake, their materializations in the event log).
    ``active``: runs queued or executing, whose keys their Dagster run still needs."""
    return _trim_oldest(instance, SWE_RUNS, incoming, keep, active)
