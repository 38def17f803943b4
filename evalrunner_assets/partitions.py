"""The named dynamic partition sets, at the grain we schedule and backfill (DESIGN §4).

- ``commits``: ``owner/repo@<40-hex sha>``
- ``tasks``: task ids from manifests, e.g. ``triage/runbook_lookup``
- ``comparisons``: ``owner/repo#<pr>@<head sha>``
- ``main_commits``: ``owner/repo@<40-hex sha>`` of commits on a repository's series branch
  (one point of the cohort series each; added in first-parent order)
``task_samples`` is partitioned by the product ``commit × task``.
"""

from __future__ import annotations

import dagster as dg

from evalrunner_assets.pipeline.keys import commit_key

commits_partitions = dg.DynamicPartitionsDefinition(name="commits")
tasks_partitions = dg.DynamicPartitionsDefinition(name="tasks")
comparisons_partitions = dg.DynamicPartitionsDefinition(name="comparisons")
main_commits_partitions = dg.DynamicPartitionsDefinition(name="main_commits")
# ``owner/repo:name``: one candidate configuration; ``owner/repo``: a repository's frontier.
candidates_partitions = dg.DynamicPartitionsDefinition(name="candidates")
candidate_repos_partitions = dg.DynamicPartitionsDefinition(name="candidate_repos")
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
        have = set(instance.get_dynamic_partitions(name))
        missing = [k for k in keys if k not in have]
        if not missing:
            return
        try:
            instance.add_dynamic_partitions(name, missing)
            return
        except IntegrityError:
            if attempt == 2:
                raise
