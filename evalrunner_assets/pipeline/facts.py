"""What one commit declares, learnt in the sandbox once and kept in the lake.

For a commit: the validated manifest (``raw/<repo>/<sha>/manifest.json``) and, per task, the
Inspect task name, its sample ids (listed in the sandbox: task code is untrusted; Inspect's
positional ids for samples without one) with each sample's input digest, and the digest of the
agent configuration the task sees (``raw/<repo>/<sha>/tasks.json``), and the model the agent
config names, if any (``agent_model``: the model that commit runs unless a run setting names
one; ``discovery.read_agent_model``). The input digests listed
here say before anything runs which ids changed input between two commits; pairing itself uses
the digest each landed row carries (what actually ran). Both files are
written once; a second materialization of the same commit reads them back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalrunner_assets.discovery import (
    LIST_PATH,
    AgentModel,
    DiscoveryError,
    DiscoverySandboxFailure,
    discover,
    read_agent_model,
)
from evalrunner_assets.documents.codec import dump_document, parse_document
from evalrunner_assets.execution.environment import (
    BuiltEnvironment,
    EnvironmentBuildError,
    EnvironmentInfo,
    EnvironmentStore,
    detect_environment,
    remote_builder,
    spec_for_file,
)
from evalrunner_assets.execution.inspect_runner import (
    InspectRunError,
    SampleListing,
    TaskRunConfig,
    config_digest,
    list_sample_ids_many,
)
from evalrunner_assets.execution.sandbox import RepoExport, SandboxBackend
from lake import LAYOUT, Lake
from lake.batch import RunSettings

# Lists the given tasks' samples: per task, its SampleListing or the listing's error.
IdLister = Callable[[list[TaskRunConfig], "threading.Event | None"], dict[str, "SampleListing | InspectRunError"]]


FACTS_SCHEMA_VERSION = 2  # 1: before the version field (same fields, read as is)


class TaskFacts(BaseModel):
    """One task of a commit as listed in the sandbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = Field(description="Manifest task id.")
    spec: str = Field(description="Inspect task spec, relative to workdir.")
    workdir: str = Field(description="Directory the task runs in, relative to the repository root.")
    cohort: str = Field(description="The manifest's cohort of the task.")
    paths: tuple[str, ...] = Field(description="Path globs whose change makes the task 'matched' (affinity).")
    inspect_task: str | None = Field(description="Inspect's name of the task; null when listing failed.")
    sample_ids: tuple[str, ...] = Field(description="The task's sample ids, in dataset order.")
    config_digest: str = Field(description="Digest of the agent configuration the task sees.")
    failure: str | None = Field(default=None, description="Why the sample ids could not be listed.")
    failure_kind: Literal["task_load", "listing"] | None = Field(
        default=None,
        description="What the failure is: 'task_load', the repository's task code failed to load (its "
        "fault); 'listing', the sandbox failed to list it (infrastructure). Null when listing succeeded.",
    )
    env_digest: str = Field(
        default="", description="The commit's repository environment ('' when it declares no dependencies)."
    )
    env_source: str = Field(default="", description="The file its dependencies come from.")
    input_digests: tuple[str, ...] = Field(
        default=(), description="One input digest per sample id, same order (empty: not known)."
    )

    @field_validator("input_digests", mode="before")
    @classmethod
    def _none_is_unknown(cls, value: Any) -> Any:
        return () if value is None else value

    @model_validator(mode="before")
    @classmethod
    def _kind_of_older_failures(cls, data: Any) -> Any:
        # Facts written before failure_kind: a load failure's text starts "loading " (the
        # runner's one wording for it); any other failure was the sandbox's.
        if isinstance(data, dict) and data.get("failure") and not data.get("failure_kind"):
            kind = "task_load" if str(data["failure"]).startswith("loading ") else "listing"
            data = {**data, "failure_kind": kind}
        return data

    @property
    def load_error(self) -> str | None:
        """Why the task's own code could not be loaded; None when it loaded (or the sandbox failed)."""
        return self.failure if self.failure_kind == "task_load" else None

    def changed_inputs(self, other: TaskFacts) -> list[str]:
        """Ids listed on both commits whose input digests differ (none when either listing has
        no digests: facts learnt before digests were listed)."""
        if not self.input_digests or not other.input_digests:
            return []
        mine = dict(zip(self.sample_ids, self.input_digests))
        theirs = dict(zip(other.sample_ids, other.input_digests))
        return sorted(i for i in set(self.sample_ids) & set(other.sample_ids) if mine.get(i) != theirs.get(i))


class CommitFacts(BaseModel):
    """What one commit declares: ``raw/<repo>/<sha>/tasks.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = Field(default=FACTS_SCHEMA_VERSION, description="Version of this document's format.")
    repo: str = Field(description="Repository id, 'owner/name'.")
    commit: str = Field(description="Commit SHA (40 hex).")
    tree_digest: str = Field(description="Digest of the exported tree.")
    discovery_source: str = Field(description="Where the manifest came from ('.evals/list' or the fallback).")
    tasks: dict[str, TaskFacts] = Field(default_factory=dict, description="Per task id, its facts.")
    environment: dict[str, Any] | None = Field(
        default=None, description="The commit's repository environment (EnvironmentInfo), if it has one."
    )
    agent_model: AgentModel | None = Field(
        default=None,
        description="The model (and model args) the commit's agent config names in `model:`, and the file: what "
        "the commit runs unless the comparison request sets a model. Null: it names none, or the facts were learnt "
        "before agent configs could name one.",
    )

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        # Version 1 (no schema_version field) had the same fields.
        if isinstance(data, dict) and "schema_version" not in data:
            data = {**data, "schema_version": FACTS_SCHEMA_VERSION}
        return data

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value > FACTS_SCHEMA_VERSION:
            raise ValueError(f"version {value} is newer than this evalrunner reads ({FACTS_SCHEMA_VERSION})")
        return value

    def to_json(self) -> bytes:
        return dump_document(self)

    @classmethod
    def from_json(cls, data: bytes, where: str = "commit facts") -> CommitFacts:
        return parse_document(cls, data, where)


def load_facts(lake: Lake, repo: str, commit: str) -> CommitFacts | None:
    rel = LAYOUT.commit_tasks(repo, commit)
    if not lake.exists(rel):
        return None
    return CommitFacts.from_json(lake.read_bytes(rel), lake.url(rel))


def learn_commit(
    lake: Lake,
    backend: SandboxBackend,
    export: RepoExport,
    *,
    model: str,
    cancel: threading.Event | None = None,
    lister: IdLister | None = None,
    envs: EnvironmentStore | None = None,
) -> CommitFacts:
    """Discover the commit's evals and list each task's sample ids, in the sandbox; land both.

    ``lister(cfgs, cancel)`` lists the tasks' ids (default: one warm sandbox per workdir); a
    driver that keeps warm sandboxes passes one that lists each task in the sandbox its windows
    will use. Raises :class:`DiscoveryError` when the repository declares no usable evals. A
    task whose ids cannot be listed is kept with its failure recorded (the comparison reports it).

    The repository's dependencies are installed first (``envs``; see
    :mod:`evalrunner_assets.execution.environment`) from the files found at the commit, so
    ``.evals/list`` may import them; a manifest naming another file (``environment``) gets that
    environment for its tasks. A failed install raises :class:`EnvironmentBuildError`."""
    existing = load_facts(lake, export.repo, export.commit)
    if existing is not None:
        return existing
    envs = envs or EnvironmentStore(lake=lake)
    spec = detect_environment(export)
    env = envs.ensure(backend, export, spec, cancel) if spec is not None else None
    result = discover(backend, export, cancel=cancel, python_env=env.path if env else None)
    agent = read_agent_model(export.path)  # an invalid model line fails discovery, naming the file
    named = (result.manifest.environment or {}).get("requirements")
    if named and (env is None or named != env.source):
        try:
            env = envs.ensure(backend, export, spec_for_file(export, named), cancel)
        except EnvironmentBuildError as exc:
            exc.args = (f"{exc} (named by {LIST_PATH}'s manifest `environment.requirements`)",)
            raise
    lake.write_bytes(LAYOUT.manifest(export.repo, export.commit), result.manifest.to_json_bytes())
    env_fields = _env_fields(env)
    cfgs = [
        TaskRunConfig(
            repo=export.repo,
            task=e.id,
            spec=e.spec,
            settings=RunSettings(model=model),
            workdir=e.workdir,
            env_digest=env_fields["env_digest"],
            python_env=env.path if env else None,
        )
        for e in result.manifest.tasks
    ]
    if lister is None:
        listed = list_sample_ids_many(backend, export, cfgs, cancel)
    else:
        listed = lister(cfgs, cancel)
    if cancel is not None and cancel.is_set():
        # A listing the cancellation cut short is no failure of the task's: the facts are written
        # once, so nothing is written and the commit is learnt again on resume.
        raise DiscoverySandboxFailure(f"learning {export.repo}@{export.commit[:7]} was cancelled")
    tasks: dict[str, TaskFacts] = {}
    for entry in result.manifest.tasks:
        got = listed[entry.id]
        name: str | None
        ids: list[str]
        digests: list[str]
        failure_kind: Literal["task_load", "listing"] | None = None
        if isinstance(got, InspectRunError):
            name, ids, digests, failure = None, [], [], str(got)
            failure_kind = "task_load" if got.task_load else "listing"
        else:
            (name, ids, digests), failure = got, None
        tasks[entry.id] = TaskFacts(
            task=entry.id,
            spec=entry.spec,
            workdir=entry.workdir,
            cohort=entry.cohort,
            paths=tuple(entry.paths),
            inspect_task=name,
            sample_ids=tuple(ids),
            config_digest=config_digest(export.path, entry.workdir, entry.spec),
            failure=failure,
            failure_kind=failure_kind,
            input_digests=tuple(digests),
            **env_fields,
        )
    facts = CommitFacts(
        repo=export.repo,
        commit=export.commit,
        tree_digest=export.tree_digest,
        discovery_source=result.source,
        tasks=tasks,
        environment=EnvironmentInfo.of(env).to_dict() if env is not None else None,
        agent_model=agent,
    )
    lake.write_bytes(LAYOUT.commit_tasks(export.repo, export.commit), facts.to_json())
    return facts


def _env_fields(env: BuiltEnvironment | None) -> dict[str, str]:
    return {"env_digest": env.digest if env else "", "env_source": env.source if env else ""}


def task_environment(
    backend: SandboxBackend,
    export: RepoExport,
    facts: TaskFacts,
    envs: EnvironmentStore | None = None,
    cancel: threading.Event | None = None,
) -> str | None:
    """The directory of the task's environment on this machine (built again from the commit's
    files when this machine has not got it), or None when the commit has none."""
    if not facts.env_digest:
        return None
    envs = envs or EnvironmentStore()
    # On a cluster the backend's own record says (a local directory could not be mounted).
    found = envs.built(facts.env_digest) if remote_builder(backend) is None else None
    if found is not None:
        return found
    spec = spec_for_file(export, facts.env_source)
    if spec.digest != facts.env_digest:
        raise EnvironmentBuildError(
            f"{facts.env_source}: the environment recorded for {export.repo}@{export.commit[:12]} "
            f"({facts.env_digest}) is not what this controller builds ({spec.digest}): evalrunner's own "
            "packages or Python differ from the ones that learnt the commit",
            source=facts.env_source,
            infrastructure=True,
        )
    return envs.ensure(backend, export, spec, cancel).path


def facts_summary(facts: CommitFacts) -> dict[str, Any]:
    """Counts for asset metadata."""
    return {
        "tasks": len(facts.tasks),
        "samples": sum(len(t.sample_ids) for t in facts.tasks.values()),
        "listing_failures": sum(1 for t in facts.tasks.values() if t.failure),
        "discovery_source": facts.discovery_source,
        "environment": (facts.environment or {}).get("digest", ""),
    }


__all__ = [
    "CommitFacts",
    "DiscoveryError",
    "TaskFacts",
    "facts_summary",
    "learn_commit",
    "load_facts",
    "task_environment",
]
