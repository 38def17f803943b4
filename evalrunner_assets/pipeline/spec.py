"""What a comparison is asked to judge: written once to the lake when the comparison starts.

The request pins everything the loop needs to decide "what next" from the lake alone, so the
sensor, a restarted daemon and the CLI all reach the same decision.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from evalrunner_assets.pipeline.keys import comparison_key
from evalrunner_assets.pipeline.open_index import mark_open
from lake import LAYOUT, Lake
from lake.layout import check_commit, check_repo

DEFAULT_MODEL = "simagent/support-agent"
AFFINITY_MODES = ("off", "order", "prune")


class ComparisonRequestError(ValueError):
    """A comparison request is malformed (names the field and the problem)."""


@dataclass(frozen=True)
class ComparisonRequest:
    """One PR head judged against its base."""

    repo: str  # owner/name
    source: str  # where the repo is fetched from: local path or clone URL
    pr: str  # PR number, or "local" for a CLI comparison
    base_sha: str
    head_sha: str
    base_ref: str = ""  # for people: the base branch name
    head_ref: str = ""
    model: str = DEFAULT_MODEL
    model_args: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    epochs: int = 1
    affinity: str = "order"
    changed_files: tuple[str, ...] = ()
    alpha: float = 0.05
    margin: float = 0.05
    min_pairs: int = 8
    cap: int = 256  # most pairs per task
    budget_samples: int | None = None  # most samples (both arms) the whole comparison may run
    extra_samples: int = 0  # raised by `/eval more N`
    # Most US dollars of model calls, enforced by the model gateway (it stops forwarding once
    # spent; the comparison ends with status "budget_spent"). Needs the model's price.
    budget_usd: float | None = None
    max_tasks: int | None = None
    requested_at: str = ""  # ISO 8601, when the comparison was first asked for

    def __post_init__(self) -> None:
        check_repo(self.repo)
        check_commit(self.base_sha)
        check_commit(self.head_sha)
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(self.pr)):
            raise ComparisonRequestError(f"pr {self.pr!r} must be a number or a path-safe name")
        if self.affinity not in AFFINITY_MODES:
            raise ComparisonRequestError(f"affinity {self.affinity!r} must be one of {', '.join(AFFINITY_MODES)}")
        if not (0 < self.alpha < 1):
            raise ComparisonRequestError(f"alpha {self.alpha!r} must be in (0, 1)")
        if not (0 < self.margin < 1):
            raise ComparisonRequestError(f"margin {self.margin!r} must be in (0, 1)")
        if self.epochs < 1:
            raise ComparisonRequestError(f"epochs {self.epochs!r} must be at least 1")
        if self.budget_usd is not None and (
            isinstance(self.budget_usd, bool)
            or not isinstance(self.budget_usd, (int, float))
            or not self.budget_usd >= 0
        ):
            raise ComparisonRequestError(f"budget_usd {self.budget_usd!r} must be a non-negative number of dollars")
        if self.cap < self.min_pairs:
            raise ComparisonRequestError(f"cap {self.cap} is below min_pairs {self.min_pairs}")

    @property
    def key(self) -> str:
        return comparison_key(self.repo, self.pr, self.head_sha)

    @property
    def model_args_json(self) -> str:
        return json.dumps(self.model_args, sort_keys=True, separators=(",", ":"))

    def to_json(self) -> bytes:
        rec = asdict(self)
        rec["changed_files"] = list(self.changed_files)
        return json.dumps(rec, indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> ComparisonRequest:
        try:
            rec = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ComparisonRequestError(f"comparison request is not valid JSON: {exc}") from exc
        rec["changed_files"] = tuple(rec.get("changed_files") or ())
        known = set(cls.__dataclass_fields__)
        unknown = set(rec) - known
        if unknown:
            raise ComparisonRequestError(f"comparison request has unknown fields {sorted(unknown)}")
        return cls(**rec)

    def with_extra_samples(self, n: int) -> ComparisonRequest:
        return replace(self, extra_samples=self.extra_samples + n)


def request_path(repo: str, pr: str, head: str) -> str:
    return LAYOUT.comparison_artifact(repo, pr, head, "request.json")


def save_request(lake: Lake, request: ComparisonRequest) -> str:
    """Write (or replace, e.g. after `/eval more`) the request beside the comparison."""
    return lake.write_bytes(request_path(request.repo, request.pr, request.head_sha), request.to_json())


def load_request(lake: Lake, repo: str, pr: str, head: str) -> ComparisonRequest:
    rel = request_path(repo, pr, head)
    if not lake.exists(rel):
        raise ComparisonRequestError(f"no comparison request at {lake.url(rel)}")
    return ComparisonRequest.from_json(lake.read_bytes(rel))


def open_comparison(lake: Lake, request: ComparisonRequest) -> ComparisonRequest:
    """Write the request unless this comparison already has one (a redelivery or a restart
    keeps the original, including any `/eval more` allowance), and list it among the open
    comparisons the sampling sensor drives. Returns the request in force."""
    rel = request_path(request.repo, request.pr, request.head_sha)
    if not lake.write_once(rel, request.to_json()):
        request = ComparisonRequest.from_json(lake.read_bytes(rel))
    # After the request, so an open marker always has a request to read.
    mark_open(lake, request.repo, request.pr, request.head_sha)
    return request


def latest_request(lake: Lake, repo: str, pr: str) -> ComparisonRequest | None:
    """The most recently requested comparison of a PR (its newest head)."""
    rels = lake.glob(LAYOUT.comparison_requests_glob(repo, pr))
    requests = [ComparisonRequest.from_json(lake.read_bytes(rel)) for rel in rels]
    if not requests:
        return None
    return max(requests, key=lambda r: (r.requested_at, r.head_sha))
