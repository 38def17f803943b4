"""The evals group's first asset, ``eval_manifest`` (what a commit's evals are), and the names
every asset of the group carries (group, owners, noun tag)."""

import dagster as dg

from evalrunner_assets.assets.metadata import manifest_metadata
from evalrunner_assets.assets.run_worker import record_run_worker
from evalrunner_assets.partitions import TASKS, add_partitions, commits_partitions
from evalrunner_assets.pipeline.facts import learn_commit
from evalrunner_assets.pipeline.keys import parse_commit_key
from evalrunner_assets.pipeline.spec import DEFAULT_MODEL
from resources import LakeResource, RepoResource, SandboxResource
from resources.sandbox import configured_backend_name

GROUP = "evals"

OWNERS = ["team:evals"]

NOUN_TAG = "evalrunner/noun"  # which of the design card's nouns an asset is


@dg.asset(
    partitions_def=commits_partitions,
    group_name=GROUP,
    kinds={"inspect", configured_backend_name()},
    owners=OWNERS,
    tags={NOUN_TAG: "eval-manifest"},
    backfill_policy=dg.BackfillPolicy.multi_run(1),
)
def eval_manifest(
    context: dg.AssetExecutionContext, lake: LakeResource, sandbox: SandboxResource, repos: RepoResource
) -> dg.MaterializeResult:
    """One partition is one commit (``owner/repo@sha``): its `.evals/list` manifest (or Inspect's
    own task listing) and each task's sample ids, learnt in the sandbox from a read-only export."""
    record_run_worker(context)
    repo, sha = parse_commit_key(context.partition_key)
    the_lake = lake.open()
    export = repos.export(the_lake, repo, sha)
    facts = learn_commit(the_lake, sandbox.backend(context), export, model=DEFAULT_MODEL)
    add_partitions(context.instance, TASKS, sorted(facts.tasks))
    return dg.MaterializeResult(metadata=manifest_metadata(the_lake, repo, sha, facts))
