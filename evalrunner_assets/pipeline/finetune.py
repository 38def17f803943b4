"""Fine-tunes: a training set exported from the lake, a registry of trained models, and the
notification that compares a fine-tune with the current configuration.

A fine-tune is measured as a candidate (``pipeline.candidates``): the same windows of the same
seeded sample order as the reference, paired against it with the PR statistics. This module
holds what is particular to fine-tunes:

- ``export_training_set``: a SQL selection over the lake's views (default
  ``sql/finetune_training_samples.sql``: passing samples of the given commits) whose rows name
  the raw Inspect log holding each sample's messages (the Parquet tables keep scores, not
  conversations); the conversations, redacted, become chat JSONL in the format OpenAI's
  fine-tuning API takes (``{"messages": [{"role": ..., "content": ...}, ...]}`` per line). The
  file is written atomically, with a provenance file beside it (``<out>.provenance.json``).
- the registry ``ft/<repo>/<name>/finetune.json`` (lake/layout.py): base model, the model id to call,
  the training set's provenance and cost.
- ``notification_markdown``: ``eval | current | ft | Δ (CI) | cost/sample``.
- the activation PR's one-line change: ``activate_model_line`` puts the fine-tune's model id on
  the ``model:`` line of the agent config (the model the pipeline runs for a commit, see
  ``discovery.read_agent_model``) and changes nothing else; the PR comes from the branch
  ``activation_branch(name)`` = ``eval-runner/activate-<name>``.

Redaction (``redact``): every match of ``SECRET_PATTERNS`` becomes ``[REDACTED]`` (for
``key = value`` forms only the value), and so does every value of an ``EVALRUNNER_*``
environment variable of 6 or more characters.

Plain Python: ``evalrunner finetune`` (``evalrunner_assets/driver/finetune.py``) calls it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from evalrunner_assets.discovery import MODEL_PATTERN, yaml_problem
from evalrunner_assets.errors import InputError
from lake import LAYOUT, Lake

DEFAULT_SELECTION = "finetune_training_samples"
REQUIRED_COLUMNS = ("raw_path", "sample_id", "epoch")
REDACTED = "[REDACTED]"
ENV_PREFIX = "EVALRUNNER_"
MIN_ENV_SECRET = 6  # shorter env values (e.g. "1", "true") are settings, not secrets
SCHEMA_VERSION = 1


class FinetuneError(InputError, ValueError):
    """A training-set selection, a training set, a trainer or a fine-tune record is unusable
    (the message names the input and what to do)."""


# --- redaction ---------------------------------------------------------------------------------

# What looks like a credential. Whole-match patterns are replaced entirely; ``key = value``
# patterns keep the key (group 1 and 2) and replace the value.
SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("private key block", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)),
    ("OpenAI/Anthropic-style key", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("JWT", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("bearer token", re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{12,}")),
    (
        "key = value secret",
        re.compile(
            r"(?i)\b((?:api[_-]?key|secret|token|password|passwd|access[_-]?key)\w*)(\s*[:=]\s*[\"']?)[^\s\"',;]{8,}"
        ),
    ),
)


def env_secrets(env: Mapping[str, str]) -> list[str]:
    """Values of ``EVALRUNNER_*`` variables long enough to be secrets, longest first (so a value
    that contains another is replaced whole)."""
    values = {v for k, v in env.items() if k.startswith(ENV_PREFIX) and len(v) >= MIN_ENV_SECRET}
    return sorted(values, key=lambda v: (-len(v), v))


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    for value in secrets:
        text = text.replace(value, REDACTED)
    for _, pattern in SECRET_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: "".join(g or "" for g in m.groups()) + REDACTED, text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


# --- messages ----------------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for item in content or ():
        text = getattr(item, "text", None)
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(parts)


def chat_messages(messages: Sequence[Any], secrets: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Inspect chat messages as OpenAI fine-tuning messages (tool calls and tool results kept),
    every string redacted."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.role
        item: dict[str, Any] = {"role": role, "content": redact(_text(m.content), secrets)}
        if role == "assistant" and getattr(m, "tool_calls", None):
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.function,
                        "arguments": redact(json.dumps(call.arguments, sort_keys=True), secrets),
                    },
                }
                for call in m.tool_calls
            ]
        if role == "tool":
            item["tool_call_id"] = getattr(m, "tool_call_id", None) or ""
        out.append(item)
    return out


class _Logs:
    """Raw Inspect logs read once each, samples found by (id, epoch)."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self._samples: dict[str, dict[tuple[str, int], Any]] = {}

    def sample(self, raw_path: str, sample_id: str, epoch: int) -> Any:
        if raw_path not in self._samples:
            from lake.ingest import read_log_bytes

            try:
                data = self.lake.read_bytes(raw_path)
            except FileNotFoundError as exc:
                raise FinetuneError(
                    f"the raw log {self.lake.url(raw_path)} a selected sample names is missing"
                ) from exc
            _, log = read_log_bytes(data, self.lake.url(raw_path))
            self._samples[raw_path] = {(str(s.id), int(s.epoch)): s for s in log.samples or ()}
        found = self._samples[raw_path].get((str(sample_id), int(epoch)))
        if found is None:
            raise FinetuneError(f"sample {sample_id!r} epoch {epoch} is not in {self.lake.url(raw_path)}")
        return found


# --- export ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingSet:
    """Where a training set came from: enough to export the same file again and to check it."""

    path: str
    repo: str
    rows: int
    digest: str  # sha256 of the JSONL bytes
    selection: str  # "sql/finetune_training_samples.sql" or the custom file's path
    sql: str  # the selection's text
    params: dict[str, Any]
    lake: str  # the lake's root URL
    lake_snapshot: str  # sha256 over the committed batches the views read (batch id + log sha256)
    batches: int
    exported_at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def provenance_path(out: str | Path) -> Path:
    return Path(f"{out}.provenance.json")


def write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, then rename over ``path``: a reader sees
    the old file or the whole new one, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def select_samples(
    lake: Lake, params: Mapping[str, Any], sql_text: str, selection: str
) -> tuple[list[dict[str, Any]], str, int]:
    """Rows of ``sql_text`` over the lake's views (only the parameters it names are bound),
    with the lake snapshot digest and the number of committed batches read."""
    import duckdb

    from lake import duck

    records = [r for r in duck.read_records(lake) if r.status == "ok"]
    snapshot = hashlib.sha256("\n".join(sorted(f"{r.batch} {r.log_sha256}" for r in records)).encode()).hexdigest()
    con = duck.connect(lake, records=records, views=duck.VIEWS)
    try:
        bound = {k: v for k, v in params.items() if re.search(rf"\${k}\b", sql_text)}
        try:
            table = con.sql(sql_text, params=bound).to_arrow_table()
        except duckdb.Error as exc:
            raise FinetuneError(f"the training-set selection {selection} failed: {exc}") from exc
    finally:
        con.close()
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise FinetuneError(
            f"the training-set selection {selection} returns no {', '.join(missing)} column(s); "
            f"it must return {', '.join(REQUIRED_COLUMNS)} (see sql/{DEFAULT_SELECTION}.sql)"
        )
    return table.to_pylist(), snapshot, len(records)


def export_training_set(
    lake: Lake,
    repo: str,
    out: str | Path,
    *,
    commits: Sequence[str],
    sql_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> TrainingSet:
    """Write the selected samples' conversations, redacted, as chat JSONL to ``out`` (atomically),
    and their provenance to ``<out>.provenance.json``."""
    import sql as sql_queries

    if sql_file is None:
        selection, sql_text = f"sql/{DEFAULT_SELECTION}.sql", sql_queries.load(DEFAULT_SELECTION)
    else:
        selection = str(sql_file)
        try:
            sql_text = Path(sql_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise FinetuneError(f"cannot read the training-set selection {selection}: {exc}") from exc
    params = {"repo": repo, "commits": list(commits)}
    rows, snapshot, batches = select_samples(lake, params, sql_text, selection)
    if not rows:
        raise FinetuneError(
            f"the training-set selection {selection} found no samples for {repo} "
            f"({len(commits)} commit(s), {batches} committed batch(es) in the lake {lake.root}); "
            "measure the commits first (e.g. `evalrunner backfill` or `evalrunner candidates measure`)"
        )
    secrets = env_secrets(os.environ if env is None else env)
    logs = _Logs(lake)
    buf = io.StringIO()
    for row in rows:
        sample = logs.sample(row["raw_path"], row["sample_id"], row["epoch"])
        buf.write(json.dumps({"messages": chat_messages(sample.messages, secrets)}, ensure_ascii=False) + "\n")
    data = buf.getvalue().encode("utf-8")
    out = Path(out)
    result = TrainingSet(
        path=str(out),
        repo=repo,
        rows=len(rows),
        digest=hashlib.sha256(data).hexdigest(),
        selection=selection,
        sql=sql_text,
        params=params,
        lake=lake.root,
        lake_snapshot=snapshot,
        batches=batches,
        exported_at=_now(),
    )
    write_atomically(out, data)
    write_atomically(provenance_path(out), json.dumps(result.to_dict(), indent=2, sort_keys=True).encode())
    return result


def load_training_set(path: str | Path) -> TrainingSet:
    """A training set's provenance, checked against the file's bytes."""
    path = Path(path)
    side = provenance_path(path)
    if not path.is_file():
        raise FinetuneError(f"no training set at {path}; write one with `evalrunner finetune export`")
    if not side.is_file():
        raise FinetuneError(f"{path} has no provenance ({side.name}); export it with `evalrunner finetune export`")
    try:
        ts = TrainingSet(**json.loads(side.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError) as exc:
        raise FinetuneError(f"{side} is not a training-set provenance file ({exc})") from exc
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != ts.digest:
        raise FinetuneError(f"{path} changed since it was exported (sha256 {digest[:12]}, recorded {ts.digest[:12]})")
    return ts


# --- the registry ------------------------------------------------------------------------------


@dataclass
class FineTune:
    """One fine-tune: what it was trained from and on, what it cost and how to call it."""

    name: str
    repo: str
    base_model: str
    model: str  # the Inspect model id to call, e.g. openai/ft:gpt-4o-mini:acme::abc123
    candidate: str  # the candidate it is measured as
    training_set: dict[str, Any]
    training_cost_usd: float | None = None
    trainer: str | None = None  # the trainer command, when it trained here
    registered_at: str = field(default_factory=lambda: _now())
    measurement: dict[str, Any] = field(default_factory=dict)  # summary once measured
    notification: str | None = None  # lake URL of notification.md
    issue_url: str | None = None
    activation: dict[str, Any] | None = None  # the activation PR (resources.OpenedPullRequest fields)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}


def candidate_name(name: str) -> str:
    return f"ft-{name}"


def save_finetune(lake: Lake, ft: FineTune) -> str:
    return lake.write_bytes(
        LAYOUT.finetune(ft.repo, ft.name), json.dumps(ft.to_dict(), indent=2, sort_keys=True).encode()
    )


def _read_finetune(lake: Lake, rel: str) -> FineTune:
    try:
        doc = json.loads(lake.read_bytes(rel))
        doc.pop("schema_version", None)
        return FineTune(**doc)
    except (json.JSONDecodeError, TypeError) as exc:
        raise FinetuneError(f"fine-tune record {lake.url(rel)} is not valid ({exc})") from exc


def load_finetunes(lake: Lake, repo: str | None = None) -> dict[tuple[str, str], FineTune]:
    """Registered fine-tunes by (repository, name), of ``repo`` or of every repository.

    Records of the first layout (``ft/<name>/``, before names were per repository) are still
    read — each names its repository; a record at the per-repository path wins over one there."""
    out: dict[tuple[str, str], FineTune] = {}
    for rel in lake.glob(LAYOUT.legacy_finetunes_glob()):
        ft = _read_finetune(lake, rel)
        if repo is None or ft.repo == repo:
            out[(ft.repo, ft.name)] = ft
    for rel in lake.glob(LAYOUT.finetunes_glob(repo)):
        ft = _read_finetune(lake, rel)
        out[(ft.repo, ft.name)] = ft
    return dict(sorted(out.items()))


def load_finetune(lake: Lake, repo: str, name: str) -> FineTune:
    """One fine-tune of ``repo``; the error lists the ones it has."""
    found = load_finetunes(lake, repo)
    if (repo, name) not in found:
        known = ", ".join(n for _, n in found) or "none"
        raise FinetuneError(f"{repo} has no fine-tune named {name!r} (registered: {known})")
    return found[(repo, name)]


# --- the activation PR --------------------------------------------------------------------------

ACTIVATION_BRANCH_PREFIX = "eval-runner/activate-"
_YAML_MODEL_LINE = re.compile(r"^model:[ \t]*(?P<value>[^\n#]*?)[ \t]*(?:#[^\n]*)?$", re.M)
_JSON_MODEL = re.compile(r'"model"\s*:\s*(?P<value>"(?:[^"\\\n]|\\.)*")')


def activation_branch(name: str) -> str:
    """The head branch of fine-tune ``name``'s activation PR."""
    return ACTIVATION_BRANCH_PREFIX + name


def activate_model_line(path: str, text: str, model: str) -> str:
    """``text`` (the agent config ``path``) with its ``model:`` line naming ``model``, and no
    other change: one line of the file differs, and parsed, only ``model`` does."""
    if not MODEL_PATTERN.fullmatch(model):
        raise FinetuneError(f"{model!r} is not an Inspect model id of the form provider/name")
    is_json = path.endswith(".json")
    matches = list((_JSON_MODEL if is_json else _YAML_MODEL_LINE).finditer(text))
    if not matches:
        raise FinetuneError(
            f"{path} has no top-level `model` {'field' if is_json else 'line'}: add one naming the model the "
            "agent runs (e.g. `model: openai/gpt-4o-mini`), so that activating a fine-tune is a one-line change"
        )
    if len(matches) > 1:
        raise FinetuneError(f"{path} has {len(matches)} `model` lines; keep one, at the top level")
    m = matches[0]
    value = json.dumps(model) if is_json else model
    new = text[: m.start("value")] + value + text[m.end("value") :]
    try:
        before, after = yaml.safe_load(text), yaml.safe_load(new)  # JSON is YAML
    except yaml.YAMLError as exc:
        raise FinetuneError(f"{path} is not valid YAML/JSON ({yaml_problem(exc)})") from exc
    if not isinstance(before, dict) or not isinstance(after, dict) or after.get("model") != model:
        raise FinetuneError(f"{path}: the `model` line is not the top-level model field; move it to the top level")
    if before.get("model") == model:
        raise FinetuneError(f"{path} already names {model}: the fine-tune is active")
    if {k: v for k, v in before.items() if k != "model"} != {k: v for k, v in after.items() if k != "model"}:
        raise FinetuneError(f"{path}: changing the model line would change other fields too")
    return new


def activation_body(ft: FineTune, notification: str | None) -> str:
    """The activation PR's description: what it changes and the measurement behind it."""
    lines = [
        f"Activates fine-tune `{ft.name}`: the agent config's `model:` line becomes `{ft.model}` "
        f"(fine-tuned from `{ft.base_model}`). This is the only change; the PR pipeline judges it "
        "like any other PR, on the same paired samples.",
        "",
    ]
    if notification:
        lines += ["Measured when it was registered:", "", notification]
    return "\n".join(lines).rstrip() + "\n"


# --- the notification --------------------------------------------------------------------------


def _score(part: Mapping[str, Any] | None) -> str:
    if not part or part.get("mean") is None:
        return "n/a"
    iv = part.get("interval") or [None, None]
    if iv[0] is None:
        return f"{part['mean']:.2f}"
    return f"{part['mean']:.2f} [{iv[0]:.2f}, {iv[1]:.2f}]"


def _delta(delta: float | None, lo: float | None, hi: float | None, label: str | None) -> str:
    if delta is None:
        return "n/a"
    ci = "" if lo is None or hi is None else f" [{lo:+.2f}, {hi:+.2f}]"
    return f"{delta:+.2f}{ci} {label or ''}".strip()


def _cost(ft: float | None, current: float | None) -> str:
    def money(x: float | None) -> str:
        return "unknown" if x is None else f"${x:.6f}"

    return f"{money(ft)} (current {money(current)})"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def notification_markdown(
    ft: FineTune,
    current: Mapping[str, Any],
    measured: Mapping[str, Any],
    suite_pair: Mapping[str, Any] | None = None,
    verdict: Mapping[str, Any] | None = None,
) -> str:
    """The fine-tune against the current configuration (the reference candidate), per eval and
    for the suite: ``eval | current | ft | Δ (CI) | cost/sample``; Δ is the paired difference
    (fine-tune − current) with its anytime-valid interval and the PR label."""
    flags = measured.get("vs_reference", {}).get("tasks", {})
    # The model the reference ran (recorded per measurement; older ones: their settings').
    current_model = (current.get("model") or {}).get("model") or current["settings"]["model"]
    lines = [
        f"## Fine-tune `{ft.name}` ({ft.model}) against `{current['name']}` ({current_model})",
        "",
        "| eval | current | ft | Δ (CI) | cost/sample |",
        "|---|---|---|---|---|",
    ]
    for task in sorted(set(current["tasks"]) | set(measured["tasks"])):
        cur, new, flag = current["tasks"].get(task), measured["tasks"].get(task), flags.get(task) or {}
        iv = flag.get("interval") or [None, None]
        cells = [
            task,
            _score(cur),
            _score(new),
            _delta(flag.get("delta"), iv[0], iv[1], flag.get("label")),
            _cost((new or {}).get("cost_per_sample"), (cur or {}).get("cost_per_sample")),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    pair = suite_pair or {}
    cells = [
        "**suite**",
        _score(current["suite"]),
        _score(measured["suite"]),
        _delta(pair.get("delta"), pair.get("lo"), pair.get("hi"), pair.get("label")),
        _cost(measured["suite"].get("cost_per_sample"), current["suite"].get("cost_per_sample")),
    ]
    lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    ts = ft.training_set
    lines += [
        "",
        f"Base model {ft.base_model}; trained on {ts.get('rows')} conversation(s) of {ts.get('repo')} "
        f"selected by `{ts.get('selection')}` (training set sha256 {str(ts.get('digest'))[:12]}, "
        f"lake snapshot {str(ts.get('lake_snapshot'))[:12]})"
        + ("" if ft.training_cost_usd is None else f"; training cost ${ft.training_cost_usd:.2f}")
        + ".",
    ]
    if verdict:
        gate = "passes" if verdict.get("passed") else "does not pass"
        lines += ["", f"Promotion gate: {gate} — " + "; ".join(verdict.get("reasons", [])) + "."]
    return "\n".join(lines) + "\n"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
