"""The comparison document: ``comparisons/<repo>/<pr>/<head>.json``, what a comparison decided.

Written by :func:`evalrunner_assets.pipeline.assess.assess` (and by the engine when a comparison
stops early); read by the report, the chart, the CLI, the sensors and the assets' metadata.
Optional parts a document did not set (``stopped_reason``, ``execution``, ``breaker`` …) are
left out of its JSON, as before it was a model.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalrunner_assets.documents.codec import dump_document, parse_document

COMPARISON_SCHEMA_VERSION = 1  # documents written before the field existed are read as version 1

Verdict = Literal["RUNNING", "IMPROVED", "REGRESSED", "UNCHANGED", "INCONCLUSIVE", "BROKEN"]
Label = Literal["improved", "regressed", "unchanged", "continue", "inconclusive", "broken"]
Status = Literal["running", "complete", "stopped", "cancelled", "budget_spent"]
Arm = Literal["head", "base"]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Interval(_Doc):
    lo: float | None = Field(description="Lower bound of the score delta (head − base).")
    hi: float | None = Field(description="Upper bound of the score delta.")
    level: float = Field(description="Coverage of the interval.")
    kind: str = Field(description="How the interval was built (and whether repeated looks keep it valid).")


class PairingSummary(_Doc):
    """How the task's head and base rows paired (``stats.Pairing.to_dict``)."""

    pairs: int = Field(description="Inputs paired (the unit of the decision).")
    errored_head: int = Field(default=0, description="Head inputs left out because every epoch errored.")
    errored_base: int = Field(default=0, description="Base inputs left out because every epoch errored.")
    errored_epochs_head: int = Field(default=0, description="Head epochs that errored.")
    errored_epochs_base: int = Field(default=0, description="Base epochs that errored.")
    unpaired_head: int = Field(default=0, description="Head inputs with no base counterpart.")
    unpaired_base: int = Field(default=0, description="Base inputs with no head counterpart.")
    unpaired_head_ids: list[str] = Field(default_factory=list, description="Their ids.")
    unpaired_base_ids: list[str] = Field(default_factory=list, description="Their ids.")
    changed_inputs: int = Field(default=0, description="Ids whose input changed between the commits (not paired).")
    changed_input_ids: list[str] = Field(default_factory=list, description="Their ids.")
    unscored_head: int = Field(default=0, description="Head rows without a score.")
    unscored_base: int = Field(default=0, description="Base rows without a score.")
    inputs_head: int = Field(default=0, description="Head inputs seen.")
    inputs_base: int = Field(default=0, description="Base inputs seen.")
    error_head: str | None = Field(default=None, description="The first error cause on the head arm.")
    error_base: str | None = Field(default=None, description="The first error cause on the base arm.")

    @field_validator("unpaired_head_ids", "unpaired_base_ids", "changed_input_ids", mode="before")
    @classmethod
    def _ids_are_text(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value


class TaskDecision(_Doc):
    """One task's decision at the last look (``stats.TaskDecision.to_dict``)."""

    label: Label = Field(description="improved / regressed / unchanged, or continue / inconclusive.")
    reason: str | None = Field(default=None, description="Why the task stopped (or could not be decided).")
    pairs: int = Field(description="Pairs the decision used.")
    decided_at: int | None = Field(default=None, description="Pairs at which the label was first reached.")
    n_tasks: int = Field(description="Tasks the error rate is split across (Bonferroni).")
    task_alpha: float = Field(description="This task's share of the error rate.")
    base_mean: float | None = Field(default=None, description="Mean score of the base arm over the pairs.")
    head_mean: float | None = Field(default=None, description="Mean score of the head arm over the pairs.")
    delta: float | None = Field(default=None, description="Mean paired delta, head − base.")
    anytime_interval: Interval = Field(description="Anytime-valid confidence sequence of the delta.")
    classical_interval: Interval | None = Field(default=None, description="Fixed-n paired t interval (reference).")
    head_better: int = Field(default=0, description="Pairs where head scored higher.")
    base_better: int = Field(default=0, description="Pairs where base scored higher.")
    ties: int = Field(default=0, description="Pairs with equal scores.")
    e_values: dict[str, float | None] = Field(default_factory=dict, description="Wealth of each sequential test.")
    p_value: float | None = Field(default=None, description="Anytime-valid p-value of 'no change'.")
    p_value_adjusted: float | None = Field(default=None, description="The same, adjusted over tasks.")
    p_improvement: float | None = Field(default=None, description="Posterior P(delta > 0), never used to stop.")
    p_improvement_note: str | None = Field(default=None, description="Why p_improvement is not shown.")
    p_above_margin: float | None = Field(default=None, description="Posterior P(delta > margin).")
    p_within_margin: float | None = Field(default=None, description="Posterior P(|delta| ≤ margin).")
    p_below_margin: float | None = Field(default=None, description="Posterior P(delta < −margin).")
    more_pairs_needed: int | None = Field(default=None, description="Forecast of further pairs to decide.")
    head_failed: bool = Field(default=False, description="The head arm failed on infrastructure.")
    base_failed: bool = Field(default=False, description="The base arm failed on infrastructure.")
    comparable: bool = Field(default=True, description="False when there is no baseline to compare with.")
    broken_arms: list[Arm] = Field(
        default_factory=list,
        description="Arms whose own task code is broken: it cannot be loaded, or more than the error cap of "
        "its inputs raised. ['head'] is the label 'broken'; both arms leave the task inconclusive.",
    )
    pairing: PairingSummary | None = Field(default=None, description="How the rows paired.")


class ArmAccounting(_Doc):
    """What one arm of one task ran and cost."""

    samples: int = Field(description="(sample, epoch) rows landed.")
    errors: int = Field(description="Rows with an error.")
    input_tokens: int = Field(description="Input tokens.")
    output_tokens: int = Field(description="Output tokens.")
    total_tokens: int = Field(description="Total tokens.")
    cost_usd: float | None = Field(description="Cost in US dollars; null when any row's cost is unknown.")
    cost_per_sample_usd: float | None = Field(description="Mean cost of a row; null when unknown.")
    latency_p50_s: float | None = Field(description="Median total time of a sample, seconds.")


class TaskDocument(_Doc):
    """One compared task."""

    decision: TaskDecision = Field(description="The task's decision.")
    affinity: Literal["matched", "unmatched"] = Field(description="Whether the PR's changed files touch the task.")
    pairs_possible: int = Field(description="Samples both commits list.")
    pairs_limit: int = Field(description="Most pairs this comparison may run (the cap).")
    positions_landed: int = Field(description="Positions of the sample order landed on both arms.")
    windows: int = Field(description="Windows landed on both arms.")
    failures: dict[Arm, str] = Field(default_factory=dict, description="Per arm, its first infrastructure failure.")
    load_errors: dict[Arm, str] = Field(
        default_factory=dict, description="Per arm, why the repository's task code could not be loaded there."
    )
    changed_inputs_listed: int = Field(default=0, description="Ids whose input digests differ, as listed.")
    head: ArmAccounting = Field(description="What the head arm ran and cost.")
    base: ArmAccounting = Field(description="What the base arm ran and cost.")
    cost_per_sample_delta_usd: float | None = Field(default=None, description="Head − base cost of a sample.")
    latency_p50_delta_s: float | None = Field(default=None, description="Head − base median latency.")
    more_samples_hint: str | None = Field(default=None, description="What more samples would take, for people.")
    path: list[tuple[int, float | None, float | None, float | None]] = Field(
        default_factory=list, description="The interval after each window: (pairs, delta, lo, hi)."
    )
    batches: dict[Arm, list[str]] = Field(default_factory=dict, description="Per arm, the batch digests used.")

    def arm(self, arm: Arm) -> ArmAccounting:
        return self.head if arm == "head" else self.base


class NewTaskResult(_Doc):
    """A task only the head has (a new eval): run on head alone up to the cap, measured, never
    paired and never part of the improved/regressed verdict (``stats.measure_arm``)."""

    status: Literal["measuring", "measured", "broken", "failed", "budget_spent"] = Field(
        description="measuring (windows left), measured (ran to its limit), broken (cannot load, or more than the "
        "error cap of its inputs raised: the PR adds an eval that does not run), failed (infrastructure), "
        "budget_spent (the run budget ended it)."
    )
    mean: float | None = Field(default=None, description="Mean score over its inputs (an errored input scores 0).")
    interval: tuple[float, float] | None = Field(
        default=None, description="Anytime-valid confidence sequence of the mean, at `level`."
    )
    level: float = Field(description="Coverage of the interval.")
    inputs: int = Field(default=0, description="Inputs scored.")
    inputs_run: int = Field(default=0, description="Inputs run, scored or not.")
    errored: int = Field(default=0, description="Inputs that raised in the repository's code.")
    unscored: int = Field(default=0, description="Inputs with no score in [0, 1] (left out).")
    samples_possible: int = Field(description="Samples the head lists.")
    limit: int = Field(description="Most inputs this comparison may run (the cap).")
    error_cause: str | None = Field(default=None, description="What its samples raised, when any did.")
    failure: str | None = Field(default=None, description="Why it could not be loaded or run, when it could not.")
    head: ArmAccounting = Field(description="What it ran and cost.")
    batches: list[str] = Field(default_factory=list, description="The batch digests used.")


class FinalVerdict(_Doc):
    """The run's verdict over its tasks (``stats.RunVerdict.to_dict``)."""

    verdict: Verdict = Field(description="The run's verdict.")
    reasons: list[str] = Field(default_factory=list, description="Why, for people.")
    p_improvement: float | None = Field(default=None, description="P(mean delta over tasks > 0), reported only.")
    p_improvement_kind: str | None = Field(default=None, description="What p_improvement is.")
    p_improvement_note: str | None = Field(default=None, description="Why p_improvement is not shown.")
    labels: dict[str, Label] = Field(default_factory=dict, description="Per task, its label.")
    counts: dict[str, int] = Field(default_factory=dict, description="Tasks per label.")
    broken: list[str] = Field(default_factory=list, description="Tasks this PR broke (label 'broken').")
    broken_on_both: list[str] = Field(
        default_factory=list, description="Tasks broken on both head and base (inconclusive: the task needs fixing)."
    )


class Params(_Doc):
    """The statistics parameters in force (``stats.StatsParams``)."""

    alpha: float
    margin: float
    min_pairs: int
    cap: int
    batch_size: int
    budget_samples: int | None = None
    budget_dollars: float | None = None
    error_cap: float
    error_cap_inputs: int
    design_cap: int | None = Field(
        default=None,
        description="The cap fixed before the first look (the request's cap): the group-sequential tests "
        "make no claim past it, so raising the allowance (`/eval more`) keeps the error rate.",
    )


class FailedWindows(_Doc):
    """What windows that landed no rows used (``pricing.usage_accounting``)."""

    windows: int = Field(description="Windows that failed or were cancelled.")
    samples: int = Field(description="Samples their logs recorded.")
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_usd: float | None = Field(description="Their cost; null when any window's use or price is unknown.")
    unknown_windows: int = Field(description="Windows whose use is unknown.")


class NextWindow(_Doc):
    arm: Arm
    commit: str = Field(description="Commit SHA the window runs on.")
    task: str
    window: str = Field(description="Window name, e.g. w000008-000016.")


class ArmModel(_Doc):
    """The model one arm ran, and where that choice came from (``assess.model_choice``)."""

    model: str = Field(description="Inspect model name.")
    model_args: dict[str, Any] = Field(default_factory=dict, description="Model arguments (Inspect `-M`).")
    source: str = Field(
        description="Why this model: 'run setting' (the request names it), 'agent config (<file>)' (the "
        "commit's `model:` line) or 'default'."
    )


class ComparisonDocument(_Doc):
    """One comparison's state: its verdict, per task its decision and accounting, what runs next."""

    schema_version: int = Field(default=COMPARISON_SCHEMA_VERSION, description="Version of this document's format.")
    comparison: str = Field(description="The comparison's key, 'owner/repo#pr@head'.")
    repo: str = Field(description="Repository id, 'owner/name'.")
    pr: str = Field(description="PR number, or a path-safe name for a CLI comparison.")
    head_sha: str = Field(description="The PR's head commit.")
    base_sha: str = Field(description="The base commit.")
    base_ref: str = Field(default="", description="The base branch name.")
    head_ref: str = Field(default="", description="The head branch name.")
    model: str = Field(
        default="",
        description="The request's model: what both arms ran unless an agent config names another (see arm_models).",
    )
    status: Status = Field(description="running, complete, or why it ended early (stopped, cancelled, budget_spent).")
    verdict: Verdict = Field(description="The run's verdict (RUNNING until decided).")
    stopped_reason: str | None = Field(default=None, description="Why the comparison ended early.")
    final_verdict: FinalVerdict = Field(description="The verdict with its reasons and P(improvement).")
    params: Params | None = Field(default=None, description="The statistics parameters in force.")
    tasks: dict[str, TaskDocument] = Field(default_factory=dict, description="Per compared task.")
    task_order: list[str] = Field(default_factory=list, description="Tasks in the order they were sampled.")
    skipped_tasks: list[str] = Field(default_factory=list, description="Tasks left out by affinity 'prune'.")
    new_tasks: list[str] = Field(default_factory=list, description="Tasks only the head has.")
    new_task_results: dict[str, NewTaskResult] = Field(
        default_factory=dict, description="Per new task, its measurement on head alone."
    )
    removed_tasks: list[str] = Field(default_factory=list, description="Tasks only the base has.")
    samples_run: int = Field(default=0, description="Samples landed, both arms.")
    samples_possible: int = Field(default=0, description="Most samples the comparison may run.")
    spend_usd: float | None = Field(default=None, description="Model spend; null when unknown.")
    spend_known: bool = Field(default=False, description="Whether every row's cost is known.")
    failed_windows: FailedWindows | None = Field(default=None, description="What failed windows used.")
    next_windows: list[NextWindow] = Field(default_factory=list, description="Windows planned next.")
    trajectories: dict[Arm, str] = Field(default_factory=dict, description="Per arm, where its Inspect logs are.")
    arm_models: dict[Arm, ArmModel] = Field(
        default_factory=dict, description="Per arm, the model it ran and why (a run setting, its agent config)."
    )
    computed_at: str = Field(default="", description="ISO 8601, when the document was computed.")
    breaker: dict[str, Any] | None = Field(default=None, description="The outage breaker's trip, when it stopped.")
    execution: dict[str, Any] | None = Field(
        default=None, description="How the run went (scheduler, sandboxes, planning): a summary for people."
    )

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        # Documents from before the version field had the version-1 shape.
        if isinstance(data, dict) and "schema_version" not in data:
            data = {**data, "schema_version": COMPARISON_SCHEMA_VERSION}
        return data

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value > COMPARISON_SCHEMA_VERSION:
            raise ValueError(f"version {value} is newer than this evalrunner reads ({COMPARISON_SCHEMA_VERSION})")
        return value

    def ordered_tasks(self) -> list[tuple[str, TaskDocument]]:
        """The tasks in sampling order (by name when no order was recorded)."""
        names = self.task_order or sorted(self.tasks)
        return [(t, self.tasks[t]) for t in names if t in self.tasks]

    def to_json(self) -> bytes:
        return dump_document(self, exclude_unset=True)

    @classmethod
    def from_json(cls, data: bytes | str, where: str = "comparison document") -> ComparisonDocument:
        return parse_document(cls, data, where)
