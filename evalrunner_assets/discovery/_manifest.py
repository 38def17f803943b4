"""The manifest a repository's ``.evals/list`` prints: schema, model, validation."""

from __future__ import annotations

import functools
import json
import posixpath
from importlib import resources
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

from evalrunner_assets.discovery._errors import (
    ManifestNotJSON,
    ManifestSchemaError,
    SchemaViolation,
)

SCHEMA_FILE = "manifest.schema.json"


@functools.lru_cache(maxsize=1)
def manifest_schema() -> dict[str, Any]:
    """The JSON Schema shipped with the package (``manifest.schema.json``)."""
    text = resources.files("evalrunner_assets.discovery").joinpath(SCHEMA_FILE).read_text("utf-8")
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    schema = manifest_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


class ManifestTask(BaseModel):
    """One Inspect task a repository declares."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = Field(description="Path-safe id, e.g. 'triage/runbook_lookup'.")
    spec: str = Field(description="Inspect task spec relative to workdir, e.g. 'tasks.py@lookup'.")
    workdir: str = Field(default=".", description="Directory the task runs from, inside the repo.")
    resources: list[str | dict[str, Any]] = Field(default_factory=list, description="Resources the task needs.")
    images: list[str] = Field(default_factory=list, description="Container images the task uses.")
    cohort: str = Field(default="default", description="Cohort the task is reported in.")
    paths: list[str] = Field(default_factory=list, description="Globs of paths that affect the task.")


class Manifest(BaseModel):
    """A validated manifest. Unknown fields (top level and per task) are kept as given."""

    model_config = ConfigDict(extra="allow", frozen=True)

    version: Literal[1] = Field(description="Manifest format version.")
    images: list[str] = Field(default_factory=list, description="Images any task may use.")
    tasks: list[ManifestTask] = Field(description="The tasks.")
    environment: dict[str, str] | None = Field(
        default=None,
        description="Where the repository's dependencies are declared, e.g. "
        "{'requirements': 'evals/requirements.txt'} (default: uv.lock, pyproject.toml, requirements.txt).",
    )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with defaults filled in and unknown fields preserved."""
        data = self.model_dump(mode="json")
        if data.get("environment") is None:
            data.pop("environment", None)  # manifests without one keep their bytes
        return data

    def to_json_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2).encode() + b"\n"

    def task(self, task_id: str) -> ManifestTask:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(f"task {task_id!r} is not in the manifest")


# Pattern failures explained in words (the raw regex helps nobody).
_PATTERN_HELP = {
    "id": "is not a path-safe task id: use segments of [a-z0-9_.-] separated by '/', "
    "no '.' or '..' segment, no leading or trailing '/'",
    "spec": "is not a task spec: no whitespace, and it must not start with '-'",
    "cohort": "is not a cohort name: use lower-case letters, digits and '-', '_', '.', "
    "starting and ending with a letter or digit (at most 63 characters)",
}


def _task_named(data: Any, path: Any) -> str:
    """`` (task 'triage/x')`` when the error sits inside a task that has an id, else ''."""
    parts = list(path)
    if len(parts) >= 2 and parts[0] == "tasks" and isinstance(parts[1], int) and isinstance(data, dict):
        tasks = data.get("tasks")
        if isinstance(tasks, list) and parts[1] < len(tasks) and isinstance(tasks[parts[1]], dict):
            task_id = tasks[parts[1]].get("id")
            if isinstance(task_id, str) and task_id:
                return f" (task {task_id!r})"
    return ""


def _message(error: jsonschema.ValidationError) -> str:
    field = error.absolute_path[-1] if error.absolute_path else None
    if error.validator == "pattern" and field in _PATTERN_HELP:
        return f"{error.instance!r} {_PATTERN_HELP[field]}"
    return error.message


def _json_path(path: Any) -> str:
    out = "$"
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def _inside(rel: str) -> str | None:
    """Normalised relative path, or None if it is absolute or leaves its root."""
    if rel.startswith("/") or "\0" in rel or "\\" in rel:
        return None
    norm = posixpath.normpath(rel)
    if norm == ".." or norm.startswith("../"):
        return None
    return norm


def _semantic_violations(data: dict[str, Any]) -> list[SchemaViolation]:
    """Rules JSON Schema cannot say: unique ids, paths that stay inside the repository."""
    out: list[SchemaViolation] = []
    seen: dict[str, int] = {}
    for i, task in enumerate(data.get("tasks", [])):
        tid = task["id"]
        if tid in seen:
            out.append(
                SchemaViolation(f"$.tasks[{i}].id", f"duplicate task id {tid!r} (also at $.tasks[{seen[tid]}].id)")
            )
        else:
            seen[tid] = i
        workdir = task.get("workdir", ".")
        if _inside(workdir) is None:
            out.append(
                SchemaViolation(f"$.tasks[{i}].workdir", f"workdir {workdir!r} is absolute or leaves the repository")
            )
        spec_file = task["spec"].split("@", 1)[0]
        joined = posixpath.join(workdir if _inside(workdir) else ".", spec_file)
        if spec_file and _inside(joined) is None:
            out.append(SchemaViolation(f"$.tasks[{i}].spec", f"spec {task['spec']!r} points outside the repository"))
        for j, glob in enumerate(task.get("paths", [])):
            if _inside(glob) is None:
                out.append(
                    SchemaViolation(
                        f"$.tasks[{i}].paths[{j}]", f"path glob {glob!r} is absolute or leaves the repository"
                    )
                )
    req = (data.get("environment") or {}).get("requirements")
    if isinstance(req, str) and _inside(req) is None:
        out.append(
            SchemaViolation(
                "$.environment.requirements", f"requirements file {req!r} is absolute or leaves the repository"
            )
        )
    return out


def parse_manifest_bytes(raw: bytes, *, source: str = ".evals/list") -> Manifest:
    """Decode, parse and validate a manifest; every failure is its own typed error."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestNotJSON(
            f"output of {source} is not valid UTF-8 (byte {exc.start})", position=exc.start, source=source
        ) from None
    if not text.strip():
        raise ManifestNotJSON(f"output of {source} is empty; expected a JSON manifest", position=0, source=source)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestNotJSON(
            f"output of {source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} (char {exc.pos})",
            position=exc.pos,
            line=exc.lineno,
            column=exc.colno,
            source=source,
        ) from None
    return validate_manifest(data, source=source)


def validate_manifest(data: Any, *, source: str = "manifest") -> Manifest:
    """Validate a parsed manifest against the schema and the semantic rules."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    violations = [
        SchemaViolation(_json_path(e.absolute_path), _message(e) + _task_named(data, e.absolute_path)) for e in errors
    ]
    if not violations:
        violations = _semantic_violations(data)
    if violations:
        raise ManifestSchemaError(source, violations)
    return Manifest.model_validate(data)
