"""What a SWE-style task set, a run request and one attempt are (persisted formats)."""

from __future__ import annotations

import hashlib
import json
import re

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalrunner_assets.errors import EvalrunnerError

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_TEST_ID = re.compile(r"^[A-Za-z0-9_.\[\]/-]+::[A-Za-z0-9_.\[\]-]+$")
GOLD_RUNS_MIN = 3


class SweError(EvalrunnerError, ValueError):
    """Bad input to the SWE pipeline; the message names the input and what is wrong."""


def _check_name(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"{kind} {value!r} must be 1-63 characters of [a-z0-9_.-], starting with a letter or digit")
    return value


def _check_rel_path(kind: str, value: str) -> str:
    parts = value.split("/")
    if not value or value.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{kind} {value!r} must be a relative path without '.' or '..' segments")
    return value


class TaskSpec(BaseModel):
    """One task as a task-set file declares it (paths relative to the file's directory)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="task id, unique in the lake: [a-z0-9_.-]")
    problem: str = Field(description="the problem statement the agent is given")
    hidden_tests: str = Field(description="directory whose files are added to the checkout before grading")
    gold_patch: str = Field(description="unified diff (-p1) that fixes the task")
    fail_to_pass: list[str] = Field(description="tests (module::name) that must go from failing to passing")
    pass_to_pass: list[str] = Field(default_factory=list, description="tests that must keep passing")
    ref: str | None = Field(default=None, description="the commit or ref the task is pinned at (default: the set's)")

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        return _check_name("task id", v)

    @field_validator("fail_to_pass", "pass_to_pass")
    @classmethod
    def _tests(cls, v: list[str]) -> list[str]:
        for t in v:
            if not _TEST_ID.match(t):
                raise ValueError(f"test id {t!r} must look like 'package.module::test_name'")
        return v


class EnvironmentDecl(BaseModel):
    """The repository environment the tests run in, declared as ``.evals`` manifests declare
    theirs: a dependency file of the repository (``requirements*.txt``; ``uv.lock`` or
    ``pyproject.toml`` at the root), built once per digest
    (:mod:`~evalrunner_assets.execution.environment`)."""

    model_config = ConfigDict(extra="forbid")

    requirements: str = Field(description="repository-relative dependency file the environment is built from")

    @field_validator("requirements")
    @classmethod
    def _rel(cls, v: str) -> str:
        return _check_rel_path("environment.requirements", v)


class TaskSetSpec(BaseModel):
    """A task-set file (``taskset.json``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="task set name: [a-z0-9_.-]")
    description: str = ""
    repo: str = Field(description="repository id, owner/name")
    ref: str = Field(description="the ref every task is pinned at unless it names its own")
    test_cmd: str = Field(
        description="shell command run in the checkout; it must write JUnit XML to $EVALRUNNER_OUT/junit.xml"
    )
    environment: EnvironmentDecl | None = Field(
        default=None,
        description="the repository environment test_cmd needs (none: the sandbox's own Python, "
        "which on Kubernetes is the sandbox image's)",
    )
    tasks: list[TaskSpec] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name("task set name", v)


class SweTask(BaseModel):
    """A registered task: everything that pins it, stored in the lake."""

    id: str
    task_set: str
    repo: str
    commit: str = Field(description="the pinned commit (40 hex)")
    env_digest: str = Field(description="digest of the environment the tests run in, pinned at registration")
    env_source: str | None = Field(
        default=None, description="repository file the task's environment is built from (none: no environment)"
    )
    test_cmd: str
    problem: str
    hidden_tests_ref: str = Field(description="sha256 of the hidden-test bundle blob")
    hidden_paths: list[str] = Field(description="paths the hidden tests occupy in the checkout")
    gold_patch_ref: str = Field(description="sha256 of the gold patch blob")
    fail_to_pass: list[str]
    pass_to_pass: list[str]

    def digest(self) -> str:
        # A task without an environment keeps the digest it had before tasks could declare one.
        body = self.model_dump(exclude={"env_source"} if self.env_source is None else None)
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class TaskSet(BaseModel):
    name: str
    description: str = ""
    repo: str
    repo_source: str = Field(description="where the repository is fetched from (path or URL)")
    registered_at: str
    tasks: list[SweTask]

    def task(self, task_id: str) -> SweTask:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise SweError(f"task set {self.name!r} has no task {task_id!r}")


class RunSpec(BaseModel):
    """``POST /v1/runs``: one agent version on one task set, ``samples`` attempts per task."""

    model_config = ConfigDict(extra="forbid")

    agent_version: str = Field(description="agent version: [a-z0-9_.-]")
    task_set: str = Field(description="a registered task set")
    samples: int = Field(default=1, ge=1, le=100, description="attempts per task (sample_idx 0..samples-1)")
    budget_usd: float = Field(gt=0, le=100_000, description="most dollars of model time this run may spend")
    seed: int = Field(default=0, ge=0, description="sampling seed")
    prompt_version: str = Field(default="v1", description="prompt version (a reproducibility column)")
    step_timeout_s: float = Field(default=60.0, gt=0, le=3600, description="timeout of one model call")
    max_steps: int = Field(default=20, ge=1, le=200, description="most agent steps per attempt")

    @field_validator("agent_version", "task_set")
    @classmethod
    def _names(cls, v: str) -> str:
        return _check_name("name", v)

    @field_validator("prompt_version")
    @classmethod
    def _prompt(cls, v: str) -> str:
        return _check_name("prompt version", v)

    def run_id(self) -> str:
        """Deterministic from the request: the same request is the same run (idempotent)."""
        body = json.dumps(self.model_dump(), sort_keys=True).encode()
        return "r-" + hashlib.sha256(body).hexdigest()[:20]


def attempt_id(agent_version: str, task_id: str, sample_idx: int) -> str:
    return hashlib.sha256(f"{agent_version}\0{task_id}\0{sample_idx}".encode()).hexdigest()[:24]


# Attempt statuses: passed/failed count toward scores; policy_failed counts as a failure with
# its reason; invalid (the suite gave no sign it ran) and error (infrastructure) do not count.
STATUSES = ("passed", "failed", "policy_failed", "invalid", "error")
REPRO_FIELDS = ("env_digest", "commit", "agent_version", "prompt_version", "seed")

ATTEMPTS_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("run_id", pa.string()),
        ("agent_version", pa.string()),
        ("task_set", pa.string()),
        ("task_id", pa.string()),
        ("sample_idx", pa.int64()),
        ("status", pa.string()),
        ("passed", pa.bool_()),
        ("tests_passed_raw", pa.bool_()),  # what the tests said, before the policy check
        ("tests_passed", pa.int64()),
        ("tests_failed", pa.int64()),
        ("exit_code", pa.int64()),
        ("reason", pa.string()),
        ("policy_reason", pa.string()),
        ("sandbox_id", pa.string()),
        ("cost_usd", pa.float64()),
        ("steps", pa.int64()),
        ("repo", pa.string()),
        ("commit", pa.string()),
        ("env_digest", pa.string()),
        ("prompt_version", pa.string()),
        ("seed", pa.int64()),
        ("trajectory", pa.string()),  # lake-relative path of the trajectory document
        ("created_at", pa.string()),
    ]
)

FLAKE_SCHEMA = pa.schema(
    [
        ("task_set", pa.string()),
        ("task_id", pa.string()),
        ("test_id", pa.string()),
        ("runs", pa.int64()),
        ("failures", pa.int64()),
        ("flake_rate", pa.float64()),
        ("classification", pa.string()),  # stable | flaky | always_failing
        ("checked_at", pa.string()),
    ]
)
