"""Every path in the lake is built here and nowhere else.

Paths are relative to the lake root (a local directory or ``gs://bucket/prefix``) and use
``/`` separators whatever the platform. Identifiers are validated before they become path
segments, so no caller can build a path outside the lake.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from evalrunner_assets.errors import InputError

_SEGMENT = re.compile(r"^[A-Za-z0-9_.-]+$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_DELIVERY = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")

TABLES = ("samples", "events")
OPEN_COMPARISONS = "index/open-comparisons"
TEMP_WRITES = "index/temp-writes"


class LakePathError(InputError, ValueError):
    """An identifier cannot be used in a lake path (it names the input and the problem)."""


def _check_segments(kind: str, value: str) -> str:
    if not isinstance(value, str) or not value:
        raise LakePathError(f"{kind} must be a non-empty string, got {value!r}")
    if value.startswith("/"):
        raise LakePathError(f"{kind} {value!r} is an absolute path; expected a relative id")
    for seg in value.split("/"):
        if seg in ("", ".", ".."):
            raise LakePathError(f"{kind} {value!r} has an empty, '.' or '..' path segment")
        if not _SEGMENT.match(seg):
            raise LakePathError(f"{kind} {value!r} has a segment {seg!r} with characters outside [A-Za-z0-9_.-]")
    return value


def check_repo(repo: str) -> str:
    """A repository id: ``owner/name`` (exactly two path-safe segments)."""
    _check_segments("repo", repo)
    if repo.count("/") != 1:
        raise LakePathError(f"repo {repo!r} must look like 'owner/name'")
    return repo


def check_commit(commit: str) -> str:
    """A full 40-hex lowercase commit SHA."""
    if not isinstance(commit, str) or not _HEX40.match(commit):
        raise LakePathError(f"commit {commit!r} is not a full 40-hex lowercase SHA")
    return commit


def check_task(task: str) -> str:
    """A task id: one or more path-safe segments such as ``triage/runbook_lookup``."""
    return _check_segments("task id", task)


_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise LakePathError(
            f"{kind} name {name!r} must be 1-63 characters of [a-z0-9_.-], starting with a letter or digit"
        )
    return name


def partition_value(value: str) -> str:
    """A Hive partition value: ``/`` and other unsafe characters percent-encoded."""
    return quote(value, safe="")


def _task_annotations(repo: str, commit: str, task: str) -> str:
    """The directory of every source's notes on one (commit, task)."""
    return (
        f"annotations/repo={partition_value(check_repo(repo))}/commit={check_commit(commit)}/"
        f"task={partition_value(check_task(task))}"
    )


@dataclass(frozen=True, order=True)
class Window:
    """A contiguous slice ``[start, stop)`` of a task's seeded sample order."""

    start: int
    stop: int

    def __post_init__(self) -> None:
        if not (isinstance(self.start, int) and isinstance(self.stop, int)):
            raise LakePathError(f"window bounds must be integers, got {self.start!r}, {self.stop!r}")
        if self.start < 0 or self.stop <= self.start:
            raise LakePathError(f"window [{self.start}, {self.stop}) is empty or negative")

    @property
    def name(self) -> str:
        return f"w{self.start:06d}-{self.stop:06d}"

    @property
    def size(self) -> int:
        return self.stop - self.start

    @classmethod
    def parse(cls, name: str) -> Window:
        m = re.fullmatch(r"w(\d{6,})-(\d{6,})", name)
        if not m:
            raise LakePathError(f"window name {name!r} is not of the form w000000-000008")
        return cls(int(m.group(1)), int(m.group(2)))


def _repo_under(rel: str, top: str, what: str) -> str:
    """The ``owner/name`` of a path ``<top>/<owner>/<name>/…``."""
    parts = rel.split("/")
    if len(parts) < 4 or parts[0] != top:
        raise LakePathError(f"{rel!r} is not a path of a repository's {what}")
    return check_repo(f"{parts[1]}/{parts[2]}")


@dataclass(frozen=True)
class LakeLayout:
    """Relative paths of every lake object (docs/architecture.md, "The lake")."""

    def manifest(self, repo: str, commit: str) -> str:
        return f"raw/{check_repo(repo)}/{check_commit(commit)}/manifest.json"

    def commit_tasks(self, repo: str, commit: str) -> str:
        """Per-task facts learnt in the sandbox at this commit: sample ids, config digest."""
        return f"raw/{check_repo(repo)}/{check_commit(commit)}/tasks.json"

    def raw_log(
        self,
        repo: str,
        commit: str,
        task: str,
        window: Window,
        batch: str,
        fmt: str = "eval",
        content: str | None = None,
    ) -> str:
        """The Inspect log of one batch; ``batch`` is the batch-key digest.

        ``fmt`` is the log's format ('eval' or 'json'): Inspect picks its reader by extension.
        ``content`` (a digest prefix of the log's bytes) makes the name unique per log: two
        processes landing the same batch with different logs never overwrite each other's
        files; the batch record says which one is committed.
        """
        _check_segments("batch digest", batch)
        if fmt not in ("eval", "json"):
            raise LakePathError(f"log format {fmt!r} is not 'eval' or 'json'")
        return (
            f"raw/{check_repo(repo)}/{check_commit(commit)}/{check_task(task)}/"
            f"{window.name}/{batch}{_content(content)}.{fmt}"
        )

    def raw_prefix(self, repo: str | None = None, commit: str | None = None) -> str:
        parts = ["raw"]
        if repo is not None:
            parts.append(check_repo(repo))
            if commit is not None:
                parts.append(check_commit(commit))
        return "/".join(parts)

    def table_file(
        self,
        table: str,
        repo: str,
        commit: str,
        task: str,
        window: Window,
        batch: str,
        content: str | None = None,
    ) -> str:
        """One Parquet file of ``samples`` or ``events`` for one batch (``content``: as for
        :meth:`raw_log`, the digest prefix of the log the rows came from)."""
        if table not in TABLES:
            raise LakePathError(f"unknown table {table!r}; expected one of {TABLES}")
        _check_segments("batch digest", batch)
        return (
            f"tables/{table}/repo={partition_value(check_repo(repo))}/"
            f"commit={check_commit(commit)}/task={partition_value(check_task(task))}/"
            f"{window.name}.{batch}{_content(content)}.parquet"
        )

    def table_glob(self, table: str) -> str:
        if table not in TABLES:
            raise LakePathError(f"unknown table {table!r}; expected one of {TABLES}")
        return f"tables/{table}/*/*/*/*.parquet"

    def batch_record(self, repo: str, commit: str, task: str, window: Window, batch: str) -> str:
        """The batch's landing record (reproducibility fields, status, counts), written last."""
        _check_segments("batch digest", batch)
        return f"batches/{check_repo(repo)}/{check_commit(commit)}/{check_task(task)}/{window.name}.{batch}.json"

    def task_batch_records_glob(self, repo: str, commit: str, task: str) -> str:
        """Every batch record of one (commit, task): its landed windows."""
        return f"batches/{check_repo(repo)}/{check_commit(commit)}/{check_task(task)}/*.json"

    def table_prefix(self, table: str, repo: str, commit: str, task: str) -> str:
        """The directory of one (commit, task)'s files of ``samples`` or ``events``."""
        if table not in TABLES:
            raise LakePathError(f"unknown table {table!r}; expected one of {TABLES}")
        return (
            f"tables/{table}/repo={partition_value(check_repo(repo))}/"
            f"commit={check_commit(commit)}/task={partition_value(check_task(task))}"
        )

    def task_raw_prefix(self, repo: str, commit: str, task: str) -> str:
        """The directory of one (commit, task)'s Inspect logs."""
        return f"{self.raw_prefix(repo, commit)}/{check_task(task)}"

    def batch_failure(self, repo: str, commit: str, task: str, window: Window, batch: str) -> str:
        """An infrastructure failure of one batch that left no landable log (no log, crash,
        timeout). Kept apart from ``batches/`` so readers of committed batches never see it."""
        _check_segments("batch digest", batch)
        return f"failures/{check_repo(repo)}/{check_commit(commit)}/{check_task(task)}/{window.name}.{batch}.json"

    def failure_glob(self, repo: str, commit: str) -> str:
        """Every failure record of one commit (all tasks and windows)."""
        return f"failures/{check_repo(repo)}/{check_commit(commit)}/**/*.json"

    def retired_failure(self, failure_rel: str, retired_at: str) -> str:
        """Where a failure record goes when a later request retries its window: kept (it is
        evidence of an outage) under ``failures-retired/``, stamped with when it was retired.
        A commit's ``raw/…/tasks.json`` whose listing failed is retired the same way, under
        ``failures-retired/raw/…``."""
        if failure_rel.startswith("failures/") and failure_rel.endswith(".json"):
            stem = failure_rel[len("failures/") : -len(".json")]
        elif failure_rel.startswith("raw/") and failure_rel.endswith("/tasks.json"):
            stem = failure_rel[: -len(".json")]
        else:
            raise LakePathError(f"not a failure record or a commit's tasks.json: {failure_rel!r}")
        _check_segments("retirement time", retired_at)
        return f"failures-retired/{stem}.{retired_at}.json"

    def batch_glob(self) -> str:
        return "batches/**/*.json"

    def gateway_usage(self, repo: str, commit: str, task: str, window: Window, batch: str) -> str:
        """What one batch's sandbox sent through the model gateway (requests, retries, tokens and
        cost per model, budget refusals), as the gateway metered it: beside Inspect's own usage
        in the batch's log, written for landed and failed windows alike."""
        _check_segments("batch digest", batch)
        return f"gateway/{check_repo(repo)}/{check_commit(commit)}/{check_task(task)}/{window.name}.{batch}.json"

    def gateway_usage_glob(self, repo: str, commit: str) -> str:
        return f"gateway/{check_repo(repo)}/{check_commit(commit)}/**/*.json"

    def batch_records_prefix(self, repo: str) -> str:
        """The directory of one repository's batch records."""
        return f"batches/{check_repo(repo)}"

    def batches_root(self) -> str:
        """The directory of every batch record (also what a reachability probe looks at)."""
        return "batches"

    def quarantined(self, rel: str, quarantined_at: str) -> str:
        """Where a batch record goes when a file it vouches for does not match (or the record
        itself is unreadable): out of ``batches/``, so readers and the planner see the batch as
        absent and the next request runs it again; kept, with the reason, as evidence."""
        if not rel.startswith("batches/") or not rel.endswith(".json"):
            raise LakePathError(f"not a batch record path: {rel!r}")
        _check_segments("quarantine time", quarantined_at)
        return f"quarantine/{rel[: -len('.json')]}.{quarantined_at}.json"

    def quarantine_glob(self) -> str:
        return "quarantine/**/*.json"

    def comparison(self, repo: str, pr: int | str, head: str) -> str:
        return f"comparisons/{check_repo(repo)}/{_pr(pr)}/{check_commit(head)}.json"

    def all_comparisons_glob(self) -> str:
        """Every comparison document and the JSON artifacts beside it; :meth:`parse_comparison`
        tells them apart."""
        return "comparisons/*/*/*/*.json"

    def parse_comparison(self, rel: str) -> tuple[str, str, str]:
        """(repo, pr, head) of a document path made by :meth:`comparison`; an artifact beside it
        (``<head>.<name>``) or any other path raises :class:`LakePathError`."""
        parts = rel.split("/")
        head = parts[-1][: -len(".json")] if parts[-1].endswith(".json") else ""
        try:
            if len(parts) != 5 or self.comparison(f"{parts[1]}/{parts[2]}", parts[3], head) != rel:
                raise LakePathError("")
        except LakePathError:
            raise LakePathError(f"not a comparison document path: {rel!r}") from None
        return f"{parts[1]}/{parts[2]}", parts[3], head

    def comparison_requests_glob(self, repo: str, pr: int | str) -> str:
        """The requests of every head of one pull request (``comparison_artifact(…, "request.json")``)."""
        return f"comparisons/{check_repo(repo)}/{_pr(pr)}/*.request.json"

    def all_comparison_requests_glob(self, repo: str) -> str:
        """The requests of every comparison of one repository."""
        return f"comparisons/{check_repo(repo)}/*/*.request.json"

    def comparison_artifact(self, repo: str, pr: int | str, head: str, name: str) -> str:
        """Files beside a comparison: chart PNG/SVG, rendered comment markdown, check-run JSON."""
        _check_segments("artifact name", name)
        return f"comparisons/{check_repo(repo)}/{_pr(pr)}/{check_commit(head)}.{name}"

    def open_comparison(self, repo: str, pr: int | str, head: str) -> str:
        """The marker of a comparison that is not retired yet, so the sampling sensor lists the
        open ones instead of every PR ever. One directory per repository, files only: a closed
        comparison leaves no empty directory behind for the listing to walk."""
        return f"{OPEN_COMPARISONS}/{check_repo(repo)}/{_pr(pr)}@{check_commit(head)}.json"

    def temp_write_record(self, pid: int, token: str) -> str:
        """Names a local write's temporary file (``.<name>.tmp-<pid>-<token>``, its lake path
        inside) from just before it is created until just after it is gone, so a sweep after a
        kill lists this directory instead of walking the lake; empty between writes."""
        _check_segments("temporary write token", token)
        return f"{TEMP_WRITES}/{int(pid)}-{token}"

    def temp_write_records_root(self) -> str:
        """The directory of :meth:`temp_write_record` files: what the pre-compare sweep lists."""
        return TEMP_WRITES

    def parse_temp_write_record(self, rel: str) -> int | None:
        """The writer's pid of a record made by :meth:`temp_write_record` (None for anything else)."""
        m = re.fullmatch(rf"{re.escape(TEMP_WRITES)}/(\d+)-[0-9a-f]{{32}}", rel)
        return int(m.group(1)) if m else None

    def temp_writes_walked(self) -> str:
        """Written after the lake's one whole walk for temporary files that writers before the
        temp-write records left anywhere (the sweeps after it list the records only)."""
        return f"{TEMP_WRITES}.walked.json"

    def open_comparisons_glob(self) -> str:
        return f"{OPEN_COMPARISONS}/*/*/*.json"

    def parse_open_comparison(self, rel: str) -> tuple[str, str, str]:
        """(repo, pr, head) of a marker path made by :meth:`open_comparison`."""
        parts = rel.split("/")
        name = parts[-1][: -len(".json")] if parts[-1].endswith(".json") else ""
        pr, _, head = name.rpartition("@")
        try:
            if len(parts) != 5 or self.open_comparison(f"{parts[2]}/{parts[3]}", pr, head) != rel:
                raise LakePathError("")
        except LakePathError:
            raise LakePathError(f"not an open-comparison marker path: {rel!r}") from None
        return f"{parts[2]}/{parts[3]}", pr, head

    def repo_source(self, repo: str) -> str:
        """Where a repository is fetched from (clone URL or local path), recorded when it is
        first asked for, so assets partitioned only by commit can export it."""
        return f"repos/{check_repo(repo)}.json"

    def repo_sources_glob(self) -> str:
        """Every recorded repository source (ids are ``owner/name``)."""
        return "repos/*/*.json"

    def miner_findings(self, repo: str, commit: str, task: str, base: str | None = None) -> str:
        """What the trajectory miner found for one task at a commit (failing against passing
        trajectories), or, with ``base``, on the inputs the commit fails and ``base`` passes."""
        against = f".vs.{check_commit(base)}" if base is not None else ""
        return f"miner/{check_repo(repo)}/{check_commit(commit)}/{check_task(task)}{against}.json"

    def miner_findings_glob(self, repo: str | None = None) -> str:
        return f"miner/{check_repo(repo)}/**/*.json" if repo is not None else "miner/**/*.json"

    def annotations(self, repo: str, commit: str, task: str, source: str) -> str:
        """Notes one source (``trajectory-miner``, ...) attached to a task's trajectories at a
        commit: one row per note, on a sample or on one of its events."""
        return f"{_task_annotations(repo, commit, task)}/{_check_name('annotation source', source)}.parquet"

    def annotations_glob(self) -> str:
        return "annotations/*/*/*/*.parquet"

    def task_annotations_glob(self, repo: str, commit: str, task: str) -> str:
        """Every source's notes on one (commit, task)."""
        return f"{_task_annotations(repo, commit, task)}/*.parquet"

    def annotated_logs_prefix(self) -> str:
        """Where the annotated copies of raw logs are: the log directory of Inspect's viewer of
        the notes (a raw log's copy has the raw log's path below it)."""
        return "annotations/inspect"

    def annotated_log(self, raw_log: str) -> str:
        """The annotated copy of the raw log at ``raw_log`` (a path :meth:`raw_log` built): the
        same log with the notes on its samples, for Inspect's viewer. The raw log is never
        rewritten: it is the evidence."""
        prefix = self.raw_prefix() + "/"
        if not raw_log.startswith(prefix):
            raise LakePathError(f"{raw_log!r} is not a raw log of the lake (under {prefix})")
        rest = raw_log[len(prefix) :]
        parts = _check_segments("raw log", rest).split("/")
        # <owner>/<name>/<commit>/<task…>/<window>/<log>: not the manifest or tasks.json beside them
        if len(parts) < 6 or not rest.endswith((".eval", ".json")):
            raise LakePathError(f"{raw_log!r} is not a batch's Inspect log (.eval or .json under a window)")
        check_repo("/".join(parts[:2]))
        check_commit(parts[2])
        Window.parse(parts[-2])
        return f"{self.annotated_logs_prefix()}/{rest}"

    def task_annotated_logs_prefix(self, repo: str, commit: str, task: str) -> str:
        """The directory of one (commit, task)'s annotated log copies."""
        return f"{self.annotated_logs_prefix()}/{check_repo(repo)}/{check_commit(commit)}/{check_task(task)}"

    def task_annotated_logs_globs(self, repo: str, commit: str, task: str) -> list[str]:
        """Every annotated log copy of one (commit, task) (``.eval`` and ``.json`` logs)."""
        prefix = self.task_annotated_logs_prefix(repo, commit, task)
        return [f"{prefix}/**/*.eval", f"{prefix}/**/*.json"]

    def series_point(self, repo: str, commit: str) -> str:
        """One main-branch point of the cohort series (per-task means with intervals, cohort
        and combined pools, flags against the previous point)."""
        return f"series/{check_repo(repo)}/points/{check_commit(commit)}.json"

    def series_point_rows(self, repo: str, commit: str) -> str:
        """The same point flattened to rows (one per task, cohort and combined) for SQL."""
        return f"series/{check_repo(repo)}/rows/{check_commit(commit)}.parquet"

    def series_settings(self, repo: str) -> str:
        """How the repository's series is measured (branch, model, half-width, cap …): written
        by the first backfill, read by the push sensor and by backfills launched from the UI."""
        return f"series/{check_repo(repo)}/settings.json"

    def series_rows_glob(self) -> str:
        return "series/*/*/rows/*.parquet"

    def series_points_glob(self, repo: str) -> str:
        return f"series/{check_repo(repo)}/points/*.json"

    def every_series_points_glob(self) -> str:
        """Every repository's series points (``series_repo`` reads the repository off a match)."""
        return "series/*/*/points/*.json"

    def series_repo(self, rel: str) -> str:
        """The repository (``owner/name``) a path under ``series/`` belongs to."""
        return _repo_under(rel, "series", "series")

    def series_chart(self, repo: str, branch: str, ext: str) -> str:
        """The repository's cohort-series chart (``png`` or ``svg``) for one branch."""
        _check_segments("branch", branch)
        if ext not in ("png", "svg"):
            raise LakePathError(f"chart format {ext!r} is not 'png' or 'svg'")
        return f"series/{check_repo(repo)}/charts/{partition_value(branch)}.{ext}"

    def candidate(self, repo: str, name: str) -> str:
        """One candidate configuration of a repository (ref, model, model args) with where it
        was declared (its provenance)."""
        return f"candidates/{check_repo(repo)}/defs/{_check_name('candidate', name)}.json"

    def candidates_glob(self, repo: str) -> str:
        return f"candidates/{check_repo(repo)}/defs/*.json"

    def candidate_settings(self, repo: str) -> str:
        """Which candidate is the reference and how every candidate is measured."""
        return f"candidates/{check_repo(repo)}/settings.json"

    def candidate_measurement(self, repo: str, name: str) -> str:
        """A candidate's latest measurement: per task score with interval, cost per sample,
        p50 latency, tokens, and its paired comparison against the reference."""
        return f"candidates/{check_repo(repo)}/measurements/{_check_name('candidate', name)}.json"

    def candidate_measurements_glob(self, repo: str) -> str:
        return f"candidates/{check_repo(repo)}/measurements/*.json"

    def candidate_rows(self, repo: str, name: str) -> str:
        """The same measurement as rows (one per task and one for the suite) for SQL."""
        return f"candidates/{check_repo(repo)}/rows/{_check_name('candidate', name)}.parquet"

    def candidate_rows_glob(self, repo: str | None = None) -> str:
        """The measurement rows of ``repo``'s candidates (of every repository's when None)."""
        return f"candidates/{check_repo(repo)}/rows/*.parquet" if repo else "candidates/*/*/rows/*.parquet"

    def candidate_pairs(self, repo: str) -> str:
        """Every pair of measured candidates compared on the suite's shared inputs."""
        return f"candidates/{check_repo(repo)}/frontier/pairs.parquet"

    def candidate_pairs_glob(self) -> str:
        """The suite pairs of every repository's candidates."""
        return "candidates/*/*/frontier/pairs.parquet"

    def continuum_frontier(self, repo: str, ext: str) -> str:
        """The frontier: ``json`` (rows, steps, promotion decision), ``png``/``svg`` (chart),
        ``md`` (the tables as Markdown)."""
        if ext not in ("json", "png", "svg", "md"):
            raise LakePathError(f"frontier format {ext!r} is not 'json', 'png', 'svg' or 'md'")
        return f"candidates/{check_repo(repo)}/frontier/frontier.{ext}"

    def every_frontier_glob(self) -> str:
        """Every repository's frontier document (``candidates_repo`` reads the repository off a match)."""
        return "candidates/*/*/frontier/frontier.json"

    def candidates_repo(self, rel: str) -> str:
        """The repository (``owner/name``) a path under ``candidates/`` belongs to."""
        return _repo_under(rel, "candidates", "candidates")

    def promotion(self, repo: str) -> str:
        """The promotion gate's decision and its reasons."""
        return f"candidates/{check_repo(repo)}/frontier/promotion.json"

    def finetune(self, repo: str, name: str) -> str:
        """One registered fine-tune of a repository: base model, the model id to call, the
        training set's provenance (SQL, lake snapshot, rows, digest) and cost. Names are per
        repository: two repositories may each have a ``runbook-v1``."""
        return f"ft/{check_repo(repo)}/{_check_name('fine-tune', name)}/finetune.json"

    def finetunes_glob(self, repo: str | None = None) -> str:
        """Every fine-tune of ``repo`` (of every repository when None)."""
        return f"ft/{check_repo(repo)}/*/finetune.json" if repo else "ft/*/*/*/finetune.json"

    def legacy_finetunes_glob(self) -> str:
        """Fine-tunes registered before names were per repository (``ft/<name>/finetune.json``;
        each record names its repository): still read, never written."""
        return "ft/*/finetune.json"

    def finetune_notification(self, repo: str, name: str) -> str:
        """The fine-tune against the current configuration, as a Markdown table."""
        return f"ft/{check_repo(repo)}/{_check_name('fine-tune', name)}/notification.md"

    def env_record(self, env_digest: str) -> str:
        """The record of one built repository environment (what it holds, how it was built).
        The environment itself is a directory used in place by local sandboxes, so it lives in
        a cache under the evalrunner home; the lake keeps only this record."""
        _check_segments("environment digest", env_digest)
        return f"envs/{env_digest}/environment.json"

    # -- SWE-style task sets (evalrunner_assets/swe) -------------------------------------------
    def swe_task_set(self, name: str) -> str:
        """A registered task set: its tasks (repo, pinned commit, environment digest, test
        command, hidden-test and gold-patch refs) and where the repository is fetched from."""
        return f"swe/tasksets/{_check_name('task set', name)}.json"

    def swe_task_sets_glob(self) -> str:
        return "swe/tasksets/*.json"

    def swe_tasks_table(self, name: str) -> str:
        """The same tasks as Parquet rows, one per task, for SQL."""
        return f"swe/tasks/{_check_name('task set', name)}.parquet"

    def swe_blob(self, digest: str) -> str:
        """Content-addressed bytes: hidden-test bundles and gold patches (sha256 hex)."""
        if not re.fullmatch(r"[0-9a-f]{64}", digest or ""):
            raise LakePathError(f"blob digest {digest!r} is not 64 lowercase hex characters")
        return f"swe/blobs/{digest[:2]}/{digest}"

    def swe_blobs_prefix(self) -> str:
        """Where the hidden tests and gold patches live (the cheat policy flags reads of it)."""
        return "swe/blobs"

    def swe_attempt(self, agent_version: str, task_id: str, sample_idx: int) -> str:
        """One attempt's row (Parquet, one row). Named by its unique key (agent version, task,
        sample index) and written once, so a retry never adds a second sample."""
        return (
            f"swe/attempts/agent={_check_name('agent version', agent_version)}/"
            f"task={_check_name('task', task_id)}/sample={_sample_idx(sample_idx)}.parquet"
        )

    def swe_attempts_glob(self) -> str:
        return "swe/attempts/*/*/*.parquet"

    def swe_trajectory(self, agent_version: str, task_id: str, sample_idx: int) -> str:
        """One attempt's trajectory (steps: action, observation), patch, policy and grading
        detail, written before its row."""
        return (
            f"swe/trajectories/{_check_name('agent version', agent_version)}/"
            f"{_check_name('task', task_id)}/{_sample_idx(sample_idx)}.json"
        )

    def swe_run(self, run_id: str) -> str:
        """A submitted run (agent version, task set, samples, budget) and its launch record."""
        return f"swe/runs/{_check_name('run id', run_id)}.json"

    def swe_run_request(self, run_id: str) -> str:
        """A submitted run waiting for its Dagster run (which launch of the run it asks for):
        ``swe_run_sensor`` requests the run and removes the file once the run exists."""
        return f"swe/run-requests/{_check_name('run id', run_id)}.json"

    def swe_run_requests_glob(self) -> str:
        return "swe/run-requests/*.json"

    def swe_gold(self, name: str) -> str:
        """The latest gold-patch check of a task set: per task whether gold passed in every run,
        per-test flake rates, and the tests dropped from grading."""
        return f"swe/gold/{_check_name('task set', name)}/latest.json"

    def swe_gold_rows(self, name: str) -> str:
        """Per-test flake rates of the latest gold check, as Parquet rows."""
        return f"swe/gold/{_check_name('task set', name)}/flake_rates.parquet"

    def inbox(self, source: str, delivery_id: str) -> str:
        _check_segments("inbox source", source)
        if not _DELIVERY.match(delivery_id or ""):
            raise LakePathError(f"delivery id {delivery_id!r} is not a path-safe id")
        return f"inbox/{source}/{delivery_id}.json"

    def inbox_dead_letter(self, source: str, delivery_id: str) -> str:
        """A delivery the sensors could not handle, with the reason: ``inbox/<source>-dead/…``.
        Kept beside the inbox (not in it), so the queue moves on and a person can look."""
        _check_segments("inbox source", source)
        if not _DELIVERY.match(delivery_id or ""):
            raise LakePathError(f"delivery id {delivery_id!r} is not a path-safe id")
        return f"inbox/{source}-dead/{delivery_id}.json"

    def inbox_root(self) -> str:
        """Every inbox source (claims, queue, dead letters): swept for dead writers' temp files."""
        return "inbox"

    def inbox_prefix(self, source: str) -> str:
        return f"inbox/{_check_segments('inbox source', source)}"


def _content(content: str | None) -> str:
    if content is None:
        return ""
    if not re.fullmatch(r"[0-9a-f]{8,64}", content):
        raise LakePathError(f"content digest {content!r} is not 8-64 lowercase hex characters")
    return f".{content}"


def _sample_idx(sample_idx: int) -> str:
    if isinstance(sample_idx, bool) or not isinstance(sample_idx, int) or not 0 <= sample_idx < 10**6:
        raise LakePathError(f"sample index {sample_idx!r} is not an integer in 0..999999")
    return f"{sample_idx:06d}"


def _pr(pr: int | str) -> str:
    text = str(pr)
    if not _SEGMENT.match(text):
        raise LakePathError(f"pull request id {pr!r} is not path-safe")
    return text


LAYOUT = LakeLayout()
