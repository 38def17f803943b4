"""Candidates: named configurations of an agent repository, measured the same way and compared.

A candidate is a ref of the agent repository (its agent config, prompts and skills), optional
overrides of top-level agent-config keys (``agent_config``: e.g. which skills are on), and a model
with its arguments. Agent-config changes are commits: a branch that switches a skill on, or — for
overrides — a commit synthesized on top of the ref (``resolve_candidate``: the ref's tree with the
agent config rewritten, committed deterministically on ``refs/evalrunner/candidates/<name>`` of
the controller's copy). Either way a measurement names exactly what ran and its windows are reused
by batch key like any commit's.
Candidates are declared in the repository (``.evals/candidates.yaml``, validated against
``discovery/candidates.schema.json``) or added one at a time (``evalrunner candidates add``), and
stored in the lake with where they came from.

Every candidate runs the same windows of the same seeded sample order up to the same cap (no
early stop: the frontier needs every candidate on the same inputs), through the cohort series'
``measure_point`` — so windows already landed (a PR's base, a series point, an earlier
measurement) are reused. Each measurement is paired against the reference candidate per task
with the PR statistics (``series.compare_points``). For the frontier every two candidates are
compared on the suite (all tasks' shared inputs pooled, in a fixed interleaved order) with the
same anytime-valid test; ``sql/continuum_frontier.sql`` then marks a candidate dominated only
when a cheaper one is shown at least as good.

The promotion gate: a candidate passes when, against the reference, it is non-inferior on every
task (its anytime-valid interval's lower end above ``-margin``) and improved on one or cheaper.
Quality first, cost breaks ties: of the passing candidates, the cheapest is taken, then replaced
by each dearer one the suite test shows better.

Plain Python: the ``candidate_measurements`` and ``continuum_frontier`` assets and
``evalrunner candidates`` call it.
"""

from __future__ import annotations

import functools
import io
import json
import statistics
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from evalrunner_assets import stats
from evalrunner_assets.discovery import (
    AgentConfigError,
    check_overrides,
    rewrite_agent_config,
    yaml_problem,
)
from evalrunner_assets.errors import InputError
from evalrunner_assets.execution.inspect_runner import CONFIG_FILES, sample_order
from evalrunner_assets.execution.repo import RepoError, RepoSource
from evalrunner_assets.execution.sandbox import RepoExport, SandboxBackend
from evalrunner_assets.pipeline import series
from evalrunner_assets.pipeline.measure_in_order import SandboxSlots, measure_in_order
from evalrunner_assets.pipeline.spec import DEFAULT_MODEL
from evalrunner_assets.pricing import PriceTable
from lake import LAYOUT, Lake
from lake.schema import CANDIDATE_PAIRS_SCHEMA, CANDIDATE_ROWS_SCHEMA

SCHEMA_VERSION = 1
CANDIDATES_FILE = ".evals/candidates.yaml"
SCHEMA_FILE = "candidates.schema.json"
DEFAULT_CAP = 128


class CandidateError(InputError, ValueError):
    """A candidates file, a candidate or a setting is invalid (names the file and field)."""


# --- declarations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CandidateSettings:
    """How every candidate of a repository is measured and judged (the same for all of them)."""

    cap: int = DEFAULT_CAP  # inputs per task: the first ``cap`` of the seeded order
    seed: int = 0
    epochs: int = 1
    alpha: float = 0.05  # paired tests: split over the tasks (vs reference) or the pairs (suite)
    margin: float = 0.05  # non-inferiority / equivalence margin on the mean paired difference
    max_cost_per_sample: float | None = None  # promotion budget in US dollars; None = no budget

    def __post_init__(self) -> None:
        if isinstance(self.cap, bool) or not isinstance(self.cap, int) or self.cap < 8:
            raise CandidateError(f"settings.cap {self.cap!r} must be an integer of at least 8")
        if not 0.0 < self.alpha < 1.0:
            raise CandidateError(f"settings.alpha {self.alpha!r} must be in (0, 1)")
        if not 0.0 < self.margin < 1.0:
            raise CandidateError(f"settings.margin {self.margin!r} must be in (0, 1)")
        if self.max_cost_per_sample is not None and self.max_cost_per_sample <= 0:
            raise CandidateError(f"settings.max_cost_per_sample {self.max_cost_per_sample!r} must be positive")

    def series_settings(self, candidate: Candidate) -> series.SeriesSettings:
        """The cohort-series settings that measure ``candidate`` (same windows as every other)."""
        return series.SeriesSettings(
            model=candidate.model or DEFAULT_MODEL,
            model_args=dict(candidate.model_args),
            model_override=candidate.model is not None,
            seed=self.seed,
            epochs=self.epochs,
            cap=self.cap,
            alpha=self.alpha,
            margin=self.margin,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Candidate:
    """One named configuration: a ref of the agent repository, overrides of its agent config's
    top-level keys, and a model with its args."""

    name: str
    ref: str | None = None  # branch, tag or SHA; None = the repository's default branch
    # None: the model the agent config at ``ref`` names (``model:``), else the default model;
    # the measurement records which model ran and why.
    model: str | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    # Top-level keys of the agent config at ``ref`` replaced (or added), e.g. {"skills": [...]};
    # measured as the commit ``resolve_candidate`` synthesizes. Never ``model``/``model_args``.
    agent_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            check_overrides(self.agent_config, f"candidate {self.name!r}")
        except AgentConfigError as exc:
            raise CandidateError(str(exc)) from exc

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.agent_config:
            del out["agent_config"]  # a candidate without overrides keeps its earlier record
        return out


@dataclass(frozen=True)
class CandidateSet:
    """A repository's candidates, which one is the reference, and how they are measured."""

    reference: str
    candidates: dict[str, Candidate]
    settings: CandidateSettings = field(default_factory=CandidateSettings)


@functools.lru_cache(maxsize=1)
def candidates_schema() -> dict[str, Any]:
    """The JSON Schema of ``.evals/candidates.yaml`` (shipped next to the manifest schema)."""
    text = resources.files("evalrunner_assets.discovery").joinpath(SCHEMA_FILE).read_text("utf-8")
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _field_path(path: Sequence[Any], data: Any) -> str:
    out = ""
    node = data
    for part in path:
        if isinstance(part, int):
            name = node[part].get("name") if isinstance(node, list) and isinstance(node[part], dict) else None
            out += f"[{part}]" + (f" ({name!r})" if isinstance(name, str) else "")
        else:
            out += f".{part}" if out else str(part)
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
    return out or "(top level)"


def parse_candidates(data: Any, *, source: str = CANDIDATES_FILE) -> CandidateSet:
    """Validate a parsed candidates document; errors name ``source`` and the field."""
    validator = jsonschema.Draft202012Validator(candidates_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.path))))
    if errors:
        first = errors[0]
        where = _field_path(list(first.absolute_path), data)
        message = first.message
        if first.validator == "pattern" and first.validator_value == candidates_schema()["$defs"]["name"]["pattern"]:
            message = f"{first.instance!r} is not a candidate name: 1-63 characters of [a-z0-9_.-], starting with a letter or digit"
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise CandidateError(f"{source}: {where}: {message}{more}")
    candidates: dict[str, Candidate] = {}
    for i, item in enumerate(data["candidates"]):
        name = item["name"]
        if name in candidates:
            raise CandidateError(f"{source}: candidates[{i}].name: {name!r} is declared twice")
        try:
            candidates[name] = Candidate(
                name=name,
                ref=item.get("ref"),
                model=item.get("model"),
                model_args=dict(item.get("model_args") or {}),
                description=item.get("description", ""),
                agent_config=dict(item.get("agent_config") or {}),
            )
        except CandidateError as exc:
            raise CandidateError(f"{source}: candidates[{i}]: {exc}") from exc
    if data["reference"] not in candidates:
        raise CandidateError(
            f"{source}: reference: {data['reference']!r} is not one of the candidates ({', '.join(candidates)})"
        )
    try:
        settings = CandidateSettings(**(data.get("settings") or {}))
    except CandidateError as exc:
        raise CandidateError(f"{source}: {exc}") from exc
    return CandidateSet(reference=data["reference"], candidates=candidates, settings=settings)


def parse_candidates_text(text: str | bytes, *, source: str = CANDIDATES_FILE) -> CandidateSet:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CandidateError(f"{source}: not valid YAML ({yaml_problem(exc)})") from exc
    return parse_candidates(data, source=source)


def read_candidates_file(export: RepoExport) -> CandidateSet | None:
    """The candidates an exported commit declares (None when it has no candidates file)."""
    path = Path(export.path) / CANDIDATES_FILE
    if not path.is_file():
        return None
    return parse_candidates_text(path.read_bytes(), source=f"{CANDIDATES_FILE} at {export.commit[:12]}")


# --- the lake: declarations --------------------------------------------------------------------


def save_candidate(lake: Lake, repo: str, candidate: Candidate, provenance: Mapping[str, Any]) -> str:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "repo": repo,
        "candidate": candidate.to_dict(),
        "provenance": {**provenance, "stored_at": _now()},
    }
    return lake.write_bytes(LAYOUT.candidate(repo, candidate.name), json.dumps(doc, indent=2, sort_keys=True).encode())


def load_candidates(lake: Lake, repo: str) -> dict[str, Candidate]:
    out: dict[str, Candidate] = {}
    for rel in lake.glob(LAYOUT.candidates_glob(repo)):
        try:
            doc = json.loads(lake.read_bytes(rel))
            candidate = Candidate(**doc["candidate"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CandidateError(f"candidate {lake.url(rel)} is not valid ({exc}); add the candidate again") from exc
        out[candidate.name] = candidate
    return dict(sorted(out.items()))


def candidate_provenance(lake: Lake, repo: str, name: str) -> dict[str, Any]:
    rel = LAYOUT.candidate(repo, name)
    return dict(json.loads(lake.read_bytes(rel)).get("provenance", {})) if lake.exists(rel) else {}


def save_settings(lake: Lake, repo: str, reference: str, settings: CandidateSettings) -> str:
    doc = {"repo": repo, "reference": reference, "settings": settings.to_dict()}
    return lake.write_bytes(LAYOUT.candidate_settings(repo), json.dumps(doc, indent=2, sort_keys=True).encode())


def load_settings(lake: Lake, repo: str) -> tuple[str | None, CandidateSettings]:
    """(reference name, settings); (None, defaults) when nothing was recorded."""
    rel = LAYOUT.candidate_settings(repo)
    if not lake.exists(rel):
        return None, CandidateSettings()
    try:
        doc = json.loads(lake.read_bytes(rel))
        return doc.get("reference"), CandidateSettings(**doc.get("settings", {}))
    except (json.JSONDecodeError, TypeError) as exc:
        raise CandidateError(f"candidate settings {lake.url(rel)} are not valid ({exc})") from exc


def store_declared(lake: Lake, repo: str, declared: CandidateSet, *, commit: str) -> list[str]:
    """Store a candidates file's declarations (provenance: the file at ``commit``); the names."""
    provenance = {"declared_in": CANDIDATES_FILE, "commit": commit}
    for candidate in declared.candidates.values():
        save_candidate(lake, repo, candidate, provenance)
    save_settings(lake, repo, declared.reference, declared.settings)
    return list(declared.candidates)


# --- what a candidate runs ----------------------------------------------------------------------

CANDIDATE_GIT_REF = "refs/evalrunner/candidates/{name}"


@dataclass(frozen=True)
class CandidateCommit:
    """The commit a candidate runs: its ref's commit, or the commit synthesized on top of it
    with the candidate's agent-config overrides."""

    commit: str  # what is exported and measured
    base_commit: str  # the candidate's ref, resolved
    overrides: dict[str, Any] | None = None  # provenance of a synthesized commit; None without overrides

    def provenance(self) -> dict[str, Any] | None:
        return (
            None
            if self.overrides is None
            else {**self.overrides, "base_commit": self.base_commit, "commit": self.commit}
        )


def canonical_overrides(agent_config: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides with every mapping's keys sorted, as the lake stores them (JSON,
    ``sort_keys``): a candidate read back from the lake synthesizes the same commit."""
    return json.loads(json.dumps(dict(agent_config), sort_keys=True))


def override_message(candidate: Candidate, base: str, file: str, overrides: Mapping[str, Any]) -> str:
    body = yaml.safe_dump(dict(overrides), sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)
    return (
        f"evalrunner candidate {candidate.name}: {file} with {', '.join(overrides)} overridden\n\n"
        f"Base: {base}\nFile: {file}\nOverrides:\n" + "".join(f"  {line}\n" for line in body.splitlines())
    )


def resolve_candidate(source: RepoSource, candidate: Candidate) -> CandidateCommit:
    """The commit ``candidate`` runs in ``source``. Without overrides: its ref (default branch
    when it names none). With overrides: a commit whose parent is the ref's commit and whose tree
    differs from it only in the agent config (its overridden keys; YAML stays YAML), committed
    with a fixed author, the parent's date and a message naming the candidate and overrides on
    ``refs/evalrunner/candidates/<name>`` — the same overrides on the same commit always give
    the same SHA, so a re-measure reuses every window."""
    where = f"candidate {candidate.name!r}"
    try:
        base = source.resolve_ref(candidate.ref or "HEAD")
    except RepoError as exc:
        raise CandidateError(f"{source.repo}: {where}: {exc}") from exc
    if not candidate.agent_config:
        return CandidateCommit(commit=base, base_commit=base)
    at = f"ref {candidate.ref or 'HEAD'} ({base[:12]})"
    try:
        found = source.root_file(base, CONFIG_FILES)
        if found is None:
            raise CandidateError(
                f"{source.repo}: {where}: {at} has no agent config ({', '.join(CONFIG_FILES)} at the "
                "repository root) for its agent_config overrides"
            )
        file, data = found
        overrides = canonical_overrides(candidate.agent_config)
        content = rewrite_agent_config(file, data, overrides)
        commit = source.commit_root_file(
            base,
            file,
            content,
            message=override_message(candidate, base, file, overrides),
            ref=CANDIDATE_GIT_REF.format(name=candidate.name),
        )
    except (AgentConfigError, RepoError) as exc:
        raise CandidateError(f"{source.repo}: {where}: overriding the agent config at {at}: {exc}") from exc
    return CandidateCommit(
        commit=commit,
        base_commit=base,
        overrides={
            "base_ref": candidate.ref or "HEAD",
            "file": file,
            "overrides": overrides,
            "git_ref": CANDIDATE_GIT_REF.format(name=candidate.name),
        },
    )


# --- one measurement ---------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _accounting(rows: Sequence[Mapping[str, Any]], prices: PriceTable) -> dict[str, Any]:
    """Cost, latency and tokens of one task's (or the suite's) sample rows. A sample whose cost
    is unknown makes the cost unknown (None), never $0.00."""
    costs = [prices.cost(r) for r in rows]
    times = [float(r["total_time_s"]) for r in rows if r.get("total_time_s") is not None]
    tokens = [int(r["total_tokens"]) for r in rows if r.get("total_tokens") is not None]
    n = len(rows)
    known = n > 0 and all(c is not None for c in costs)
    return {
        "samples": n,
        "cost_usd": round(sum(c for c in costs if c is not None), 8) if known else None,
        "cost_per_sample": (sum(c for c in costs if c is not None) / n) if known else None,
        "p50_latency_s": _median(times),
        "tokens_per_sample": (sum(tokens) / len(tokens)) if tokens else None,
        "input_tokens": sum(int(r.get("input_tokens") or 0) for r in rows),
        "output_tokens": sum(int(r.get("output_tokens") or 0) for r in rows),
    }


def measure_candidate(
    lake: Lake,
    backend: SandboxBackend,
    export: RepoExport,
    candidate: Candidate,
    settings: CandidateSettings,
    *,
    reference: str,
    pool: Any = None,
    workers: int = 1,
    cancel: threading.Event | None = None,
    prices: PriceTable | None = None,
    resolved: CandidateCommit | None = None,
    slots: SandboxSlots | None = None,
) -> dict[str, Any]:
    """Measure ``candidate`` at ``export`` (its resolved ref, or the commit with its overrides:
    ``resolved``): every task's windows up to the cap (landed windows reused), with cost per
    sample, p50 latency and tokens per task and suite."""
    prices = prices or PriceTable.default()
    ss = settings.series_settings(candidate)
    commit = series.MainCommit(sha=export.commit, committed_at="", subject=candidate.name, position=0)
    point = series.measure_point(
        lake,
        backend,
        export,
        ss,
        commit,
        branch="",
        pool=pool,
        workers=workers,
        cancel=cancel,
        stop_early=False,
        slots=slots,
    )
    suite_rows: list[dict[str, Any]] = []
    for name, task in point["tasks"].items():
        rows = series.point_task_rows(lake, point, name) if task["windows"] else []
        task.update(_accounting(rows, prices))
        suite_rows.extend(rows)
    point.update(
        {
            "kind": "candidate_measurement",
            "candidate": candidate.to_dict(),
            "name": candidate.name,
            "reference": reference,
            # The ref's commit, the overrides and the commit that carries them (None without).
            "agent_config_overrides": resolved.provenance() if resolved is not None else None,
            "measure_settings": settings.to_dict(),
            "suite": {**point["combined"], **_accounting(suite_rows, prices)},
            "vs_reference": {},
        }
    )
    return point


def measurement_matches(doc: Mapping[str, Any] | None, commit: str, candidate: Candidate, settings: CandidateSettings,
                        backend_name: str, runtime: str) -> bool:  # fmt: skip
    """A saved measurement is reused only when it measured the same thing the same way."""
    return (
        doc is not None
        and doc.get("schema_version") == series.SCHEMA_VERSION
        and doc.get("kind") == "candidate_measurement"
        and doc.get("commit") == commit
        and doc.get("candidate") == candidate.to_dict()
        and doc.get("measure_settings") == settings.to_dict()
        and doc.get("backend") == backend_name
        and doc.get("runtime_digest") == runtime
    )


def pair_with_reference(lake: Lake, doc: dict[str, Any], reference_doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with its per-task paired comparison against the reference (the PR statistics on
    the inputs both measured, alpha split over the shared tasks)."""
    if doc["name"] == reference_doc["name"]:
        doc["vs_reference"] = {}
        return doc
    settings = series.SeriesSettings(**doc["settings"])
    compared = series.compare_points(lake, reference_doc, doc, settings)
    doc["vs_reference"] = {"reference": reference_doc["name"], "tasks": compared["task_flags"]}
    return doc


def measured_model(doc: Mapping[str, Any]) -> str:
    """The model a measurement ran (recorded per point; older documents: their settings')."""
    return str((doc.get("model") or {}).get("model") or doc["settings"]["model"])


def measurement_rows(doc: Mapping[str, Any]) -> pa.Table:
    """A measurement as rows: one per task (``scope='task'``) and one for the suite."""
    base = {"repo": doc["repo"], "candidate": doc["name"], "commit": doc["commit"], "model": measured_model(doc)}
    is_reference = doc["name"] == doc["reference"]
    flags = doc.get("vs_reference", {}).get("tasks", {})
    rows = []
    for name, t in sorted(doc["tasks"].items()):
        iv = t["interval"] or [None, None]
        flag = flags.get(name, {})
        fiv = flag.get("interval") or [None, None]
        rows.append(
            {
                **base,
                "is_reference": is_reference,
                "scope": "task",
                "name": name,
                "mean": t["mean"],
                "lo": iv[0],
                "hi": iv[1],
                "inputs": t["inputs"],
                "cost_per_sample": t.get("cost_per_sample"),
                "p50_latency_s": t.get("p50_latency_s"),
                "tokens_per_sample": t.get("tokens_per_sample"),
                "label_vs_reference": flag.get("label"),
                "delta_vs_reference": flag.get("delta"),
                "delta_lo": fiv[0],
                "delta_hi": fiv[1],
            }
        )
    s = doc["suite"]
    iv = s["interval"] or [None, None]
    rows.append(
        {
            **base,
            "is_reference": is_reference,
            "scope": "suite",
            "name": "suite",
            "mean": s["mean"],
            "lo": iv[0],
            "hi": iv[1],
            "inputs": s["inputs"],
            "cost_per_sample": s.get("cost_per_sample"),
            "p50_latency_s": s.get("p50_latency_s"),
            "tokens_per_sample": s.get("tokens_per_sample"),
            "label_vs_reference": None,
            "delta_vs_reference": None,
            "delta_lo": None,
            "delta_hi": None,
        }
    )
    return pa.Table.from_pylist(rows, schema=CANDIDATE_ROWS_SCHEMA)


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def save_measurement(lake: Lake, doc: Mapping[str, Any]) -> str:
    """The measurement's rows, then its document."""
    lake.write_bytes(LAYOUT.candidate_rows(doc["repo"], doc["name"]), _parquet(measurement_rows(doc)))
    return lake.write_bytes(
        LAYOUT.candidate_measurement(doc["repo"], doc["name"]),
        json.dumps(doc, indent=2, sort_keys=True, default=str).encode(),
    )


def load_measurement(lake: Lake, repo: str, name: str) -> dict[str, Any] | None:
    rel = LAYOUT.candidate_measurement(repo, name)
    if not lake.exists(rel):
        return None
    try:
        return json.loads(lake.read_bytes(rel))
    except json.JSONDecodeError as exc:
        raise CandidateError(
            f"measurement {lake.url(rel)} is not valid JSON ({exc}); delete it to measure the candidate again"
        ) from exc


def load_measurements(lake: Lake, repo: str) -> dict[str, dict[str, Any]]:
    docs = [json.loads(lake.read_bytes(rel)) for rel in lake.glob(LAYOUT.candidate_measurements_glob(repo))]
    return {d["name"]: d for d in sorted(docs, key=lambda d: d["name"])}


@dataclass
class CandidatesRun:
    """What one run did: the measurements (reference first), which were measured now."""

    measurements: dict[str, dict[str, Any]]
    measured: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    windows_run: int = 0
    windows_reused: int = 0


def run_candidates(
    lake: Lake,
    backend: SandboxBackend,
    repo: str,
    *,
    resolve: Callable[[Candidate], CandidateCommit],
    export_for: Callable[[str], RepoExport],
    names: Sequence[str] | None = None,
    pool: Any = None,
    workers: int = 1,
    cancel: threading.Event | None = None,
    on_measurement: Callable[[dict[str, Any], bool], None] | None = None,
) -> CandidatesRun:
    """Measure the stored candidates ``names`` (all when None) of ``repo``, the reference first
    (always: the others pair against it), each paired against it. ``resolve`` gives the commit
    a candidate runs (``resolve_candidate``); a saved measurement of the same commit, settings
    and runtime is reused."""
    reference, settings = load_settings(lake, repo)
    candidates = load_candidates(lake, repo)
    if reference is None or reference not in candidates:
        raise CandidateError(
            f"{repo}: no reference candidate recorded; declare one in {CANDIDATES_FILE} or "
            "`evalrunner candidates add --reference`"
        )
    wanted = list(candidates) if names is None else list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in candidates]
    if unknown:
        raise CandidateError(
            f"{repo}: no candidate named {', '.join(map(repr, unknown))} (known: {', '.join(candidates)})"
        )
    order = [reference] + [n for n in wanted if n != reference]
    runtime = backend.runtime_digest()
    run = CandidatesRun(measurements={})
    reference_doc: dict[str, Any] | None = None

    resolving = threading.Lock()  # resolving may commit overrides into the one git mirror

    def measure(name: str, stop: threading.Event) -> tuple[dict[str, Any], bool, CandidateCommit]:
        candidate = candidates[name]
        with resolving:
            resolved = resolve(candidate)
        saved = load_measurement(lake, repo, name)
        if saved is not None and measurement_matches(
            saved, resolved.commit, candidate, settings, backend.name, runtime
        ):
            return saved, False, resolved
        doc = measure_candidate(
            lake,
            backend,
            export_for(resolved.commit),
            candidate,
            settings,
            reference=reference,
            pool=pool,
            workers=workers,
            cancel=stop,
            resolved=resolved,
            slots=slots,
        )
        return doc, True, resolved

    # Candidates are measured up to ``workers`` at a time in one pool of sandbox slots, and
    # paired and saved in order, the reference first (the others pair against it).
    with SandboxSlots(workers) as slots:
        for name, (doc, fresh, resolved) in measure_in_order(order, measure, ahead=max(1, workers), cancel=cancel):
            if cancel is not None and cancel.is_set():
                break  # a cancelled measurement is not saved: the next run measures it again
            candidate = candidates[name]
            if not fresh:
                doc["reference"] = reference
                run.reused.append(name)
            else:
                if not any(task["windows"] for task in doc["tasks"].values()):
                    raise CandidateError(
                        f"{repo}: candidate {name!r} ({candidate.model or 'its agent config model'} at "
                        f"{resolved.commit[:12]}"
                        f"{'' if resolved.overrides is None else f', its overrides on {resolved.base_commit[:12]}'}) "
                        "was not measured: "
                        f"every window failed ({_failure_causes(doc)}); no measurement was saved"
                    )
                doc["provenance"] = candidate_provenance(lake, repo, name)
                run.measured.append(name)
                run.windows_run += doc["execution"]["windows_run"]
                run.windows_reused += doc["execution"]["windows_reused"]
            if reference_doc is None:
                reference_doc = doc
            pair_with_reference(lake, doc, reference_doc)
            save_measurement(lake, doc)
            run.measurements[name] = doc
            if on_measurement is not None:
                on_measurement(doc, fresh)
    return run


def _failure_causes(doc: Mapping[str, Any]) -> str:
    """Each task's first cause, e.g. ``triage/a: log_status: ValueError …``."""
    causes = [f"{name}: {task['failure']}" for name, task in sorted(doc["tasks"].items()) if task.get("failure")]
    return "; ".join(causes) if causes else "no task has samples to run"


def reading(doc: Mapping[str, Any]) -> str:
    """A measurement in words: ``runbook-skill 0.85 [0.80, 0.89] · $0.00123/sample · p50 0.04 s``
    (and, for a candidate with overrides, which keys on which commit gave which commit)."""
    s = doc["suite"]
    iv = s.get("interval") or [None, None]
    score = "n/a" if s["mean"] is None else f"{s['mean']:.2f} [{iv[0]:.2f}, {iv[1]:.2f}]"
    cost = "cost unknown" if s.get("cost_per_sample") is None else f"${s['cost_per_sample']:.6f}/sample"
    p50 = "" if s.get("p50_latency_s") is None else f" · p50 {s['p50_latency_s']:.2f} s"
    over = doc.get("agent_config_overrides")
    made = (
        f" · {', '.join(over['overrides'])} overridden on {over['base_commit'][:12]} (commit {over['commit'][:12]})"
        if over
        else ""
    )
    return f"{doc['name']} {score} · {cost}{p50}{made}"


# --- the frontier ------------------------------------------------------------------------------


def suite_pairing(lake: Lake, a: Mapping[str, Any], b: Mapping[str, Any], seed: int) -> stats.Pairing:
    """``a`` (head) against ``b`` (base) on every shared task's shared inputs, pooled: each
    task's pairs in its seeded order, the tasks interleaved position by position (a fixed order
    that does not depend on the scores)."""
    shared = sorted(
        t
        for t in a["tasks"]
        if t in b["tasks"] and a["tasks"][t]["mean"] is not None and b["tasks"][t]["mean"] is not None
    )
    per_task: list[stats.Pairing] = []
    for name in shared:
        head = series.point_task_rows(lake, a, name)
        base = series.point_task_rows(lake, b, name)
        task_ids = sorted({str(r["sample_id"]) for r in head} | {str(r["sample_id"]) for r in base})
        per_task.append(stats.pair_task(head, base, order=sample_order(task_ids, seed)))
    ids: list[str] = []
    heads: list[float] = []
    bases: list[float] = []
    longest = max((p.n_pairs for p in per_task), default=0)
    for i in range(longest):
        for name, p in zip(shared, per_task, strict=True):
            if i < p.n_pairs:
                ids.append(f"{name}:{p.sample_ids[i]}")
                heads.append(p.head[i])
                bases.append(p.base[i])
    return stats.Pairing(tuple(ids), tuple(heads), tuple(bases))


def compare_all(lake: Lake, docs: Mapping[str, Mapping[str, Any]], settings: CandidateSettings) -> pa.Table:
    """Every ordered pair of measured candidates on the suite: the label says how ``candidate``
    compares with ``other`` (``improved`` = better). Alpha is split over the unordered pairs,
    so a false "dominated" anywhere on the frontier stays below alpha."""
    names = [n for n, d in docs.items() if d["suite"]["mean"] is not None]
    n_pairs = max(1, len(names) * (len(names) - 1) // 2)
    params = stats.StatsParams(alpha=settings.alpha, margin=settings.margin, min_pairs=8, cap=max(8, settings.cap))
    rows: list[dict[str, Any]] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pairing = suite_pairing(lake, docs[a], docs[b], settings.seed)
            d = stats.decide_task(pairing, params, n_pairs, at_cap=True, forecast=False)
            lo, hi = d.anytime_interval
            mirror = {"improved": "regressed", "regressed": "improved"}
            for cand, other, label, sign in ((a, b, d.label, 1.0), (b, a, mirror.get(d.label, d.label), -1.0)):
                rows.append(
                    {
                        "repo": docs[a]["repo"],
                        "candidate": cand,
                        "other": other,
                        "label": label,
                        "pairs": d.pairs,
                        "delta": None if d.delta is None else sign * d.delta,
                        "lo": lo if sign > 0 else -hi,
                        "hi": hi if sign > 0 else -lo,
                    }
                )
    return pa.Table.from_pylist(rows, schema=CANDIDATE_PAIRS_SCHEMA)


def save_pairs(lake: Lake, repo: str, pairs: pa.Table) -> str:
    return lake.write_bytes(LAYOUT.candidate_pairs(repo), _parquet(pairs))


def frontier_rows(lake: Lake, repo: str) -> list[dict[str, Any]]:
    """``sql/continuum_frontier.sql`` over the stored measurement rows and suite pairs."""
    from lake import duck

    con = duck.connect_candidates(lake, repo)
    try:
        return duck.query(con, "continuum_frontier", {"repo": repo}).to_pylist()
    finally:
        con.close()


def frontier_steps(rows: Sequence[Mapping[str, Any]], pairs: pa.Table) -> list[dict[str, Any]]:
    """What each step up the frontier costs: consecutive frontier candidates by cost, with the
    paired suite difference between them and the extra cost per sample."""
    paired = {(r["candidate"], r["other"]): r for r in pairs.to_pylist()}
    on = [r for r in rows if r["status"] == "frontier"]
    steps = []
    for lower, upper in zip(on, on[1:], strict=False):
        p = paired.get((upper["candidate"], lower["candidate"]), {})
        extra = upper["cost_per_sample"] - lower["cost_per_sample"]
        gain = (upper["score"] or 0.0) - (lower["score"] or 0.0)
        steps.append(
            {
                "from": lower["candidate"],
                "to": upper["candidate"],
                "score_gain": gain,
                "paired_delta": p.get("delta"),
                "paired_interval": [p.get("lo"), p.get("hi")],
                "paired_label": p.get("label"),
                "extra_cost_per_sample": extra,
                "cost_ratio": (upper["cost_per_sample"] / lower["cost_per_sample"])
                if lower["cost_per_sample"]
                else None,
                "cost_per_point": (extra / (gain * 100)) if gain > 0 else None,  # $ per +0.01 of score
            }
        )
    return steps


def inputs_differing_from_reference(docs: Mapping[str, Mapping[str, Any]], reference: str) -> dict[str, list[str]]:
    """Per candidate, the tasks whose windows are not the reference's (a task failed on one
    side, or the cap or dataset differed): there the candidate is not on the same inputs."""
    ref = docs.get(reference)
    if ref is None:
        return {}
    out: dict[str, list[str]] = {}
    for name, doc in docs.items():
        tasks = sorted(set(ref["tasks"]) | set(doc["tasks"]))
        differ = [
            t for t in tasks if (ref["tasks"].get(t) or {}).get("windows") != (doc["tasks"].get(t) or {}).get("windows")
        ]
        if differ:
            out[name] = differ
    return out


# --- the promotion gate ------------------------------------------------------------------------


def promotion_gate(
    docs: Mapping[str, Mapping[str, Any]], reference: str, settings: CandidateSettings, pairs: pa.Table
) -> dict[str, Any]:
    """Which candidate (if any) replaces the reference, and why each one did or did not pass.

    Pass: measured on every task the reference has; on each, non-inferior (the anytime-valid
    interval of candidate − reference lies above ``-margin``); and improved on one task or
    cheaper per sample; and within ``max_cost_per_sample``. Of those passing, quality first,
    cost breaks ties: start from the cheapest and move to a dearer one only when the suite
    test shows it better than the one held."""
    ref = docs.get(reference)
    verdicts: dict[str, dict[str, Any]] = {}
    if ref is None:
        return {
            "reference": reference,
            "promoted": None,
            "decided_at": _now(),
            "reasons": [f"the reference {reference!r} is not measured"],
            "candidates": {},
        }
    ref_cost = ref["suite"].get("cost_per_sample")
    for name, doc in docs.items():
        if name == reference:
            continue
        reasons: list[str] = []
        failures: list[str] = []
        flags = doc.get("vs_reference", {}).get("tasks", {})
        improved = []
        for task in sorted(ref["tasks"]):
            if ref["tasks"][task]["mean"] is None:
                continue
            flag = flags.get(task)
            if flag is None:
                failures.append(f"{task}: not measured on the reference's inputs")
                continue
            lo = flag["interval"][0]
            if flag["label"] == "regressed":
                failures.append(f"{task}: regressed ({_signed(flag['delta'])}, interval {_iv(flag['interval'])})")
            elif lo <= -settings.margin:
                failures.append(
                    f"{task}: not shown non-inferior (interval {_iv(flag['interval'])} reaches -{settings.margin:g})"
                )
            else:
                reasons.append(f"{task}: non-inferior ({_signed(flag['delta'])}, interval {_iv(flag['interval'])})")
            if flag["label"] == "improved":
                improved.append(task)
        cost = doc["suite"].get("cost_per_sample")
        cheaper = cost is not None and ref_cost is not None and cost < ref_cost
        if improved:
            reasons.append(f"improved on {', '.join(improved)}")
        elif cheaper:
            reasons.append(f"cheaper: ${cost:.6f} vs ${ref_cost:.6f} per sample")
        else:
            failures.append("neither improved on a task nor cheaper than the reference")
        if settings.max_cost_per_sample is not None and (cost is None or cost > settings.max_cost_per_sample):
            failures.append(
                f"cost per sample {'unknown' if cost is None else f'${cost:.6f}'} is over the budget "
                f"${settings.max_cost_per_sample:.6f}"
            )
        verdicts[name] = {"passed": not failures, "reasons": failures or reasons, "cost_per_sample": cost}
    passing = sorted(
        (n for n, v in verdicts.items() if v["passed"]),
        key=lambda n: (float("inf") if verdicts[n]["cost_per_sample"] is None else verdicts[n]["cost_per_sample"], n),
    )
    labels = {(r["candidate"], r["other"]): r["label"] for r in pairs.to_pylist()}
    reasons = []
    held = passing[0] if passing else None
    if held is not None:
        reasons.append(f"{held}: the cheapest candidate that passed the gate")
        for name in passing[1:]:
            label = labels.get((name, held))
            if label == "improved":
                reasons.append(f"{name}: better than {held} on the suite (paired), worth its higher cost")
                held = name
            else:
                reasons.append(f"{name}: not shown better than {held} on the suite ({label}), and dearer")
    else:
        reasons.append(f"no candidate passed the gate: {reference} stays")
    return {
        "reference": reference,
        "promoted": held,
        "decided_at": _now(),
        "reasons": reasons,
        "candidates": verdicts,
        "settings": settings.to_dict(),
    }


def _signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f}"


def _iv(iv: Sequence[float]) -> str:
    return f"[{iv[0]:+.2f}, {iv[1]:+.2f}]"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Frontier:
    rows: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    promotion: dict[str, Any]
    differing: dict[str, list[str]] = field(default_factory=dict)  # candidate -> tasks off the reference's inputs


def build_frontier(lake: Lake, repo: str) -> Frontier:
    """Compare every pair of measured candidates, compute the frontier in DuckDB, the steps up
    it and the promotion decision; store the pairs, the frontier document and the decision."""
    reference, settings = load_settings(lake, repo)
    docs = load_measurements(lake, repo)
    if not docs:
        raise CandidateError(f"{repo}: no candidate is measured yet; run `evalrunner candidates measure` first")
    pairs = compare_all(lake, docs, settings)
    save_pairs(lake, repo, pairs)
    rows = frontier_rows(lake, repo)
    steps = frontier_steps(rows, pairs)
    promotion = promotion_gate(docs, reference or "", settings, pairs)
    promotion["repo"] = repo
    doc = {"repo": repo, "reference": reference, "rows": rows, "steps": steps, "promotion": promotion}
    lake.write_bytes(LAYOUT.continuum_frontier(repo, "json"), json.dumps(doc, indent=2, default=str).encode())
    lake.write_bytes(LAYOUT.promotion(repo), json.dumps(promotion, indent=2, default=str).encode())
    return Frontier(
        rows=rows, steps=steps, promotion=promotion, differing=inputs_differing_from_reference(docs, reference or "")
    )


# --- partition keys ----------------------------------------------------------------------------


def candidate_key(repo: str, name: str) -> str:
    """``owner/repo:name``: one partition of ``candidates``."""
    return f"{repo}:{name}"


def parse_candidate_key(key: str) -> tuple[str, str]:
    repo, sep, name = key.rpartition(":")
    if not sep or repo.count("/") != 1 or not name:
        raise CandidateError(f"candidate partition key {key!r} is not of the form owner/repo:name")
    return repo, name
