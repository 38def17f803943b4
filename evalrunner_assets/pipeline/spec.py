"""What a comparison is asked to judge: written once to the lake when the comparison starts.

The request pins everything the loop needs to decide "what next" from the lake alone, so the
sensor, a restarted daemon and the CLI all reach the same decision.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evalrunner_assets.documents.codec import DocumentError, describe_validation, dump_document, parse_document
from evalrunner_assets.pipeline.keys import comparison_key
from evalrunner_assets.pipeline.open_index import mark_open
from lake import LAYOUT, Lake
from lake.batch import RunSettings
from lake.layout import check_commit, check_repo

DEFAULT_MODEL = "simagent/support-agent"
AFFINITY_MODES = ("off", "order", "prune")


class ComparisonRequestError(DocumentError):
    """A comparison request is malformed (names the field and the problem)."""


REQUEST_SCHEMA_VERSION = 2  # 1: model, model_args, seed and epochs at the top level, no version field
_SETTINGS_FIELDS = ("model", "model_args", "seed", "epochs")


def _names_a_model(settings: Any) -> bool:
    """Whether run settings (a record or its fields) name another model or any model args than
    the defaults: then they are an explicit choice, not a fallback for the agent config."""
    if isinstance(settings, RunSettings):
        return settings.model != DEFAULT_MODEL or bool(settings.model_args)
    if isinstance(settings, dict):
        return settings.get("model", DEFAULT_MODEL) != DEFAULT_MODEL or bool(settings.get("model_args"))
    return False


class ComparisonRequest(BaseModel):
    """One PR head judged against its base: ``comparisons/<repo>/<pr>/<head>.request.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    schema_version: int = Field(default=REQUEST_SCHEMA_VERSION, description="Version of this document's format.")
    repo: str = Field(description="Repository id, 'owner/name'.")
    source: str = Field(description="Where the repository is fetched from: a local path or a clone URL.")
    pr: str = Field(description="PR number, or a path-safe name such as 'local' for a CLI comparison.")
    base_sha: str = Field(description="The base commit (40 hex): what the PR is judged against.")
    head_sha: str = Field(description="The PR's head commit (40 hex).")
    base_ref: str = Field(default="", description="For people: the base branch name.")
    head_ref: str = Field(default="", description="For people: the head branch name.")
    settings: RunSettings = Field(
        default_factory=lambda: RunSettings(model=DEFAULT_MODEL),
        description="Model, model arguments, seed and epochs of both arms' runs. Each commit runs the model its "
        "agent config names (`model:`) unless model_override is set; this model only where it names none.",
    )
    model_override: bool = Field(
        default=False,
        description="True: settings.model and settings.model_args were set explicitly (`--model`, a run setting) "
        "and run on both arms, whatever the agent configs name. A request naming another model or any model "
        "args than the defaults sets it itself (never ignored silently).",
    )
    affinity: Literal["off", "order", "prune"] = Field(
        default="order", description="Whether tasks matching the changed files run first ('order') or alone ('prune')."
    )
    changed_files: tuple[str, ...] = Field(default=(), description="Files the PR changes (for affinity).")
    alpha: float = Field(default=0.05, gt=0, lt=1, description="Error rate of the whole comparison.")
    margin: float = Field(default=0.05, gt=0, lt=1, description="Smallest score change that counts as a change.")
    min_pairs: int = Field(default=8, description="Fewest pairs before a task may be decided.")
    cap: int = Field(default=256, description="Most pairs per task.")
    budget_samples: int | None = Field(
        default=None, description="Most samples (both arms) the whole comparison may run; null: no limit."
    )
    extra_samples: int = Field(default=0, description="Samples added to the budget by `/eval more N`.")
    budget_usd: float | None = Field(
        default=None,
        ge=0,
        description="Most US dollars of model calls, enforced by the model gateway (the comparison ends with "
        "status 'budget_spent'). Needs the model's price.",
    )
    max_tasks: int | None = Field(default=None, description="Compare at most this many tasks; null: all.")
    requested_at: str = Field(default="", description="ISO 8601, when the comparison was first asked for.")

    @classmethod
    def build(cls, **fields: Any) -> ComparisonRequest:
        """A request from a caller's fields (CLI flags, a webhook): a bad one raises
        :class:`ComparisonRequestError` naming the field."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            message, field = describe_validation(exc, "comparison request")
            raise ComparisonRequestError(message, field=field) from exc

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        """Version 1 kept the run settings at the top level; they are one nested record now."""
        if isinstance(data, dict) and any(f in data for f in _SETTINGS_FIELDS):
            if "settings" in data:
                raise ValueError(f"give the run settings once, as 'settings', not also as {list(_SETTINGS_FIELDS)}")
            flat = {f: data[f] for f in _SETTINGS_FIELDS if f in data}
            flat.setdefault("model", DEFAULT_MODEL)
            data = {k: v for k, v in data.items() if k not in _SETTINGS_FIELDS} | {"settings": flat}
        if isinstance(data, dict) and "schema_version" not in data:
            data = {**data, "schema_version": REQUEST_SCHEMA_VERSION}
        if isinstance(data, dict) and not data.get("model_override") and _names_a_model(data.get("settings")):
            data = {**data, "model_override": True}
        return data

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value > REQUEST_SCHEMA_VERSION:
            raise ValueError(f"version {value} is newer than this evalrunner reads ({REQUEST_SCHEMA_VERSION})")
        return value

    @field_validator("pr")
    @classmethod
    def _path_safe_pr(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            raise ValueError(f"pr {value!r} must be a number or a path-safe name")
        return value

    @field_validator("budget_usd", mode="before")
    @classmethod
    def _dollars(cls, value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"budget_usd {value!r} must be a non-negative number of dollars")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ComparisonRequest:
        check_repo(self.repo)
        check_commit(self.base_sha)
        check_commit(self.head_sha)
        if self.cap < self.min_pairs:
            raise ValueError(f"cap {self.cap} is below min_pairs {self.min_pairs}")
        return self

    @property
    def key(self) -> str:
        return comparison_key(self.repo, self.pr, self.head_sha)

    def to_json(self) -> bytes:
        return dump_document(self)

    @classmethod
    def from_json(cls, data: bytes | str, where: str = "comparison request") -> ComparisonRequest:
        return parse_document(cls, data, where, ComparisonRequestError)

    def with_extra_samples(self, n: int) -> ComparisonRequest:
        return self.model_copy(update={"extra_samples": self.extra_samples + n})


def request_path(repo: str, pr: str, head: str) -> str:
    return LAYOUT.comparison_artifact(repo, pr, head, "request.json")


def save_request(lake: Lake, request: ComparisonRequest) -> str:
    """Write (or replace, e.g. after `/eval more`) the request beside the comparison."""
    return lake.write_bytes(request_path(request.repo, request.pr, request.head_sha), request.to_json())


def load_request(lake: Lake, repo: str, pr: str, head: str) -> ComparisonRequest:
    rel = request_path(repo, pr, head)
    if not lake.exists(rel):
        raise ComparisonRequestError(f"no comparison request at {lake.url(rel)}")
    return ComparisonRequest.from_json(lake.read_bytes(rel), lake.url(rel))


def open_comparison(lake: Lake, request: ComparisonRequest) -> ComparisonRequest:
    """Write the request unless this comparison already has one (a redelivery or a restart
    keeps the original, including any `/eval more` allowance), and list it among the open
    comparisons the sampling sensor drives. Returns the request in force."""
    rel = request_path(request.repo, request.pr, request.head_sha)
    if not lake.write_once(rel, request.to_json()):
        request = ComparisonRequest.from_json(lake.read_bytes(rel), lake.url(rel))
    # After the request, so an open marker always has a request to read.
    mark_open(lake, request.repo, request.pr, request.head_sha)
    return request


def _model_shown(r: ComparisonRequest) -> str:
    return r.settings.model if r.model_override else "the agent config's model"


# What a comparison measures, by the option that sets it: a second `compare` of the same head
# with another value would mix two measurements (or two sequential designs, for --cap) in one.
_MEASURED: tuple[tuple[str, Callable[[ComparisonRequest], Any], Callable[[ComparisonRequest], str]], ...] = (
    ("--base", lambda r: r.base_sha, lambda r: f"{r.base_ref or r.base_sha[:12]} ({r.base_sha[:7]})"),
    ("--model", lambda r: (r.settings.model, r.model_override), _model_shown),
    ("model args", lambda r: sorted(r.settings.model_args.items()), lambda r: str(dict(r.settings.model_args))),
    ("--seed", lambda r: r.settings.seed, lambda r: str(r.settings.seed)),
    ("--epochs", lambda r: r.settings.epochs, lambda r: str(r.settings.epochs)),
    ("--cap", lambda r: r.cap, lambda r: str(r.cap)),
    ("--alpha", lambda r: r.alpha, lambda r: f"{r.alpha:g}"),
    ("--affinity", lambda r: r.affinity, lambda r: r.affinity),
)


def request_conflicts(saved: ComparisonRequest, new: ComparisonRequest) -> list[str]:
    """What ``new`` (the same comparison asked for again) would measure differently from the
    request in force, one ``"--epochs 3 (it ran with 1)"`` per option; empty when it may resume."""
    return [
        f"{flag} {show(new)} (it ran with {show(saved)})"
        for flag, value, show in _MEASURED
        if value(saved) != value(new)
    ]


def with_limits_of(saved: ComparisonRequest, new: ComparisonRequest) -> ComparisonRequest:
    """The request in force with ``new``'s spending limits (a rerun with a larger budget)."""
    return saved.model_copy(update={"budget_samples": new.budget_samples, "budget_usd": new.budget_usd})


def latest_request(lake: Lake, repo: str, pr: str) -> ComparisonRequest | None:
    """The most recently requested comparison of a PR (its newest head)."""
    rels = lake.glob(LAYOUT.comparison_requests_glob(repo, pr))
    requests = [ComparisonRequest.from_json(lake.read_bytes(rel), lake.url(rel)) for rel in rels]
    if not requests:
        return None
    return max(requests, key=lambda r: (r.requested_at, r.head_sha))
