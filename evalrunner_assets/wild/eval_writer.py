"""A redacted failure as an eval in the agent repository: its files and its ``.evals/list`` entry.

One eval per group of near-duplicate traces (:func:`group_traces`); each trace of the group is
one sample (its conversation up to the last user turn, with placeholders), so the eval counts
its sources. The captured environment is the tools' recorded results: the task replays them
(the tool answers with the result recorded for the same arguments, else the first one recorded
for that tool). The scorer is the submitter's choice: a deterministic check on the final answer
or the tools called, or a model-graded rubric (Inspect's ``model_graded_qa``; inside
evalrunner's sandboxes the grader's provider is reached through the model gateway).

Files are only computed here (:func:`build_eval`); :func:`write_eval` writes them into a
checkout, each to a temporary name then renamed, the manifest last.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalrunner_assets.errors import InputError
from evalrunner_assets.wild.formats import Trace

EVALS_DIR = "evals/wild"
MANIFEST = ".evals/list"
SIMILARITY = 0.8  # word-trigram Jaccard over the user turns and tool calls: one eval above it


class EvalWriteError(InputError):
    """The agent repository cannot take the eval (exit 2); the message names the file."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Check:
    """A deterministic scorer: the final answer ``contains`` / matches ``regex`` / the agent
    called ``tool``."""

    kind: str  # contains | regex | tool
    value: str

    def to_json(self) -> dict[str, str]:
        return {"type": "check", "kind": self.kind, "value": self.value}


@dataclass(frozen=True)
class Rubric:
    """A model-graded scorer: ``text`` says what a correct answer does; ``model`` grades."""

    text: str
    model: str

    def to_json(self) -> dict[str, str]:
        return {"type": "rubric", "rubric": self.text, "model": self.model}


def default_cohort(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"customer-reported/{now.year}-Q{(now.month - 1) // 3 + 1}"


_COHORT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
# The manifest's cohort is a Kubernetes label value (discovery/manifest.schema.json).
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9_.-]*[a-z0-9])?$")


def check_cohort(cohort: str) -> str:
    if not _COHORT.match(cohort):
        raise EvalWriteError(
            f"cohort {cohort!r} is not a cohort tag", "use words separated by '/', e.g. customer-reported/2026-Q4"
        )
    cohort_label(cohort)
    return cohort


def cohort_label(tag: str) -> str:
    """The manifest's cohort for a tag: lower-cased, '/' as '.' (``customer-reported/2026-Q4`` is
    ``customer-reported.2026-q4``), since a manifest cohort is label-safe."""
    label = tag.lower().replace("/", ".")
    if not _LABEL.match(label) or len(label) > 63:
        raise EvalWriteError(f"cohort {tag!r} makes no label-safe cohort name ({label!r})", "use a shorter tag")
    return label


# --- near duplicates ------------------------------------------------------------------------


def _signature(trace: Trace) -> frozenset[tuple[str, ...]]:
    words: list[str] = []
    for m in trace.messages:
        if m.role == "user":
            words += re.findall(r"[a-z0-9_{}]+", m.content.lower())
        words += [f"tool:{c.name}" for c in m.tool_calls]
    # Placeholders differ by number between traces; the stem is what matters.
    words = [re.sub(r"_\d+\}\}$", "}}", w) for w in words]
    return frozenset(tuple(words[i : i + 3]) for i in range(max(1, len(words) - 2)))


def similarity(a: Trace, b: Trace) -> float:
    sa, sb = _signature(a), _signature(b)
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def group_traces(traces: list[Trace], threshold: float = SIMILARITY) -> list[list[Trace]]:
    """Traces grouped with the first earlier one they are near-duplicates of, in order."""
    groups: list[list[Trace]] = []
    for t in traces:
        for g in groups:
            if similarity(g[0], t) >= threshold:
                g.append(t)
                break
        else:
            groups.append([t])
    return groups


# --- the eval's files -----------------------------------------------------------------------


@dataclass(frozen=True)
class EvalFiles:
    task_id: str
    cohort: str  # the tag, e.g. customer-reported/2026-Q4 (the manifest holds its label)
    sources: int
    scorer: dict[str, str]
    files: dict[str, str]  # repository path -> text
    entry: dict[str, Any]  # the task's .evals/list entry


def _sample(trace: Trace) -> dict[str, Any]:
    messages = list(trace.messages)
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=len(messages) - 1)
    shown = messages[: last_user + 1]
    replays: dict[str, list[dict[str, str]]] = {}
    calls = {c.id: c for m in messages for c in m.tool_calls}
    for m in messages:
        if m.role == "tool":
            call = calls.get(m.tool_call_id or "")
            name = m.name or (call.name if call else "")
            if name:
                replays.setdefault(name, []).append(
                    {"arguments": call.arguments if call else "{}", "result": m.content}
                )
    for name in trace.tools:
        replays.setdefault(name, [])
    return {
        "input": [
            {"role": m.role, "content": m.content, **({"tool_call_id": m.tool_call_id} if m.tool_call_id else {})}
            for m in shown
            if m.role in ("system", "user") or (m.role == "assistant" and not m.tool_calls)
        ],
        "observed": next((m.content for m in reversed(messages) if m.role == "assistant" and m.content), ""),
        "failure": trace.failure,
        "format": trace.format,
        "tools": replays,
        "environment": trace.environment,
    }


def build_eval(group: list[Trace], cohort: str, scorer: Check | Rubric, name: str | None = None) -> EvalFiles:
    """The files of one eval from a group of redacted near-duplicate traces."""
    samples = [_sample(t) for t in group]
    first_user = next((i["content"] for i in samples[0]["input"] if i["role"] == "user"), "trace")
    digest = hashlib.sha256(json.dumps(samples, sort_keys=True).encode()).hexdigest()[:8]
    words = [w for w in re.findall(r"[a-z]+", re.sub(r"\{\{[^}]*\}\}", " ", first_user.lower())) if len(w) > 2][:4]
    slug = name or ("_".join([*words, digest]) if words else f"trace_{digest}")
    slug = re.sub(r"[^a-z0-9_]", "_", slug.lower())
    if not slug[0].isalpha():
        slug = f"t_{slug}"
    data = {
        "version": 1,
        "task": f"wild/{slug}",
        "cohort": cohort_label(cohort),
        "cohort_tag": cohort,
        "sources": len(group),
        "scorer": scorer.to_json(),
        "samples": samples,
    }
    files = {
        f"{EVALS_DIR}/{slug}.json": json.dumps(data, indent=2, sort_keys=True) + "\n",
        f"{EVALS_DIR}/{slug}.py": TASK_TEMPLATE.replace("__NAME__", slug),
    }
    entry = {
        "id": f"wild/{slug}",
        "workdir": ".",
        "spec": f"{EVALS_DIR}/{slug}.py@{slug}",
        "resources": [],
        "images": [],
        "cohort": cohort_label(cohort),
        "paths": [f"{EVALS_DIR}/{slug}.py", f"{EVALS_DIR}/{slug}.json"],
    }
    return EvalFiles(f"wild/{slug}", cohort, len(group), scorer.to_json(), files, entry)


# --- the manifest ---------------------------------------------------------------------------

_HEREDOC = "<<'MANIFEST'\n"


def updated_manifest(listing: str, entries: list[dict[str, Any]], where: str = MANIFEST) -> str:
    """``.evals/list`` with ``entries`` appended to its tasks. Only the heredoc-of-JSON shape
    (the example repository's, and what ``evalrunner`` documents) can be edited safely."""
    head, found, rest = listing.partition(_HEREDOC)
    body, closed, tail = rest.partition("\nMANIFEST")
    if not found or not closed:
        raise EvalWriteError(
            f"{where}: not a heredoc of JSON (<<'MANIFEST' … MANIFEST), so evalrunner cannot add the eval to it",
            "add the printed entry to the script's output by hand, or write the manifest as a heredoc",
        )
    try:
        manifest = json.loads(body)
        tasks = manifest["tasks"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise EvalWriteError(f"{where}: the heredoc is not a manifest with a 'tasks' list") from None
    known = {t.get("id") for t in tasks}
    for e in entries:
        if e["id"] in known:
            raise EvalWriteError(f"{where}: task {e['id']} is already in the manifest", "give the eval another --name")
        tasks.append(e)
    return f"{head}{_HEREDOC}{json.dumps(manifest, indent=2)}\nMANIFEST{tail}"


def planned_files(repo: Path, evals: list[EvalFiles]) -> dict[str, str]:
    """Every file the evals add or change in the checkout at ``repo`` (the manifest included);
    raises before anything is written when one cannot be."""
    listing = repo / MANIFEST
    if not listing.is_file():
        raise EvalWriteError(f"{listing}: no eval manifest in the agent repository", "point --repo at its checkout")
    out: dict[str, str] = {}
    for e in evals:
        for path, text in e.files.items():
            if (repo / path).exists() or path in out:
                raise EvalWriteError(f"{repo / path} already exists", "give the eval another --name")
            out[path] = text
    out[MANIFEST] = updated_manifest(listing.read_text(encoding="utf-8"), [e.entry for e in evals], str(listing))
    return out


def write_eval(repo: Path, files: dict[str, str]) -> list[Path]:
    """Write ``files`` into the checkout: each to a temporary name first, then all renamed into
    place (the manifest last), so a failure leaves no partial eval."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path in sorted(files, key=lambda p: p == MANIFEST):
            target = repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.tmp-{os.getpid()}", dir=target.parent)
            staged.append((Path(name), target))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(files[path])
            if target.exists():
                os.chmod(name, target.stat().st_mode)
    except BaseException:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
        raise
    for temp, target in staged:
        os.replace(temp, target)
    return [t for _, t in staged]


TASK_TEMPLATE = '''"""An eval from a failure reported in the wild (evalrunner wild import): the conversation,
redacted (placeholders such as {{person_1}} stand for what was removed), the tools' recorded
results replayed, and the submitter's scorer. Data: the JSON file beside this one."""

from __future__ import annotations

import json
import re
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, model_graded_qa, scorer, stderr
from inspect_ai.solver import TaskState, generate, use_tools
from inspect_ai.tool import ToolDef

DATA = json.loads((Path(__file__).resolve().parent / "__NAME__.json").read_text(encoding="utf-8"))
_ROLES = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}


def _replay(name: str, recorded: list[dict[str, str]]) -> ToolDef:
    async def call(arguments: str = "{}") -> str:
        for r in recorded:
            if r["arguments"] == arguments:
                return r["result"]
        return recorded[0]["result"] if recorded else "no result was recorded for this tool"

    return ToolDef(call, name=name, description=f"{name} (its results as recorded)",
                   parameters={"arguments": "the call's arguments as JSON"})


@scorer(metrics=[accuracy(), stderr()])
def _check(kind: str, value: str):
    async def score(state: TaskState, target: Target) -> Score:
        answer = state.output.completion
        if kind == "tool":
            called = [c.function for m in state.messages for c in (getattr(m, "tool_calls", None) or [])]
            ok = value in called
        elif kind == "regex":
            ok = re.search(value, answer) is not None
        else:
            ok = value.lower() in answer.lower()
        return Score(value=CORRECT if ok else INCORRECT, answer=answer)

    return score


@task
def __NAME__() -> Task:
    spec = DATA["scorer"]
    samples = []
    for i, s in enumerate(DATA["samples"], 1):
        messages = [_ROLES[m["role"]](content=m["content"]) for m in s["input"] if m["role"] in _ROLES]
        target = spec.get("rubric", spec.get("value", ""))
        samples.append(Sample(id=i, input=messages, target=target, metadata={"failure": s["failure"]}))
    tools = {}
    for s in DATA["samples"]:
        for name, recorded in s["tools"].items():
            tools.setdefault(name, []).extend(recorded)
    if spec["type"] == "rubric":
        chosen = model_graded_qa(instructions=spec["rubric"], model=spec["model"])
    else:
        chosen = _check(spec["kind"], spec["value"])
    return Task(
        dataset=MemoryDataset(samples, name="__NAME__"),
        solver=[use_tools([_replay(n, r) for n, r in tools.items()]), generate()],
        scorer=chosen,
    )
'''
