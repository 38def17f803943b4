"""The model an agent repository's agent config names, read at the exact commit.

An agent config (``agent.yaml``, ``agent.yml`` or ``agent.json`` at the repository root, the
first that exists) may carry ``model:`` (an Inspect model id, e.g. ``openai/gpt-4o-mini``) and
``model_args:`` (a flat mapping of scalars). When it does, that is the model the pipeline runs
for that commit, unless a run setting names one explicitly (``pipeline.assess.model_choice``):
so a PR that changes only the ``model:`` line (a fine-tune's activation PR) changes what runs.

The controller reads the file from the commit's export (untrusted bytes): a regular file of at
most ``MAX_CONFIG_BYTES``, parsed with ``yaml.safe_load``; only the two fields are taken, and
``model_args`` must be flat (so no YAML alias can expand into something large).

A candidate's agent-config overrides (``rewrite_agent_config``) replace top-level keys of that
file (e.g. ``skills``, ``instructions``), keeping every other line byte for byte; the candidates
driver commits the result on top of the candidate's ref, so it is measured as a real commit.
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import ConfigDict

from evalrunner_assets.discovery._errors import DiscoveryError

MAX_CONFIG_BYTES = 256 * 1024
MODEL_PATTERN = re.compile(r"[A-Za-z0-9_.-]+/\S+")  # the candidates schema's rule for a model id
_SCALARS = (str, int, float, bool, type(None))


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error on one line, where it is first: ``line 1, column 8: expected ',' or ']'…``
    (PyYAML's own text spans several lines, and a terminal error shows only the first)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())


class AgentConfigError(DiscoveryError):
    """The agent config cannot be read, or its ``model``/``model_args`` are invalid (names the
    file and the field)."""


@dataclass(frozen=True)
class AgentModel:
    """``model`` and ``model_args`` as the agent config at one commit names them (kept in the
    commit's facts, ``CommitFacts.agent_model``)."""

    # Validated as a field of a pydantic document: unknown keys are an error there too.
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    model: str
    model_args: dict[str, Any] = field(default_factory=dict)
    file: str = "agent.yaml"  # where they were read, relative to the repository root

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def agent_config_file(root: str | Path) -> str | None:
    """The agent config the repository at ``root`` has (its name), or None."""
    # The files the config digest covers; imported here, as inspect_runner imports discovery.
    from evalrunner_assets.execution.inspect_runner import CONFIG_FILES

    for name in CONFIG_FILES:
        try:
            mode = (Path(root) / name).lstat().st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise AgentConfigError(f"{name} is not a regular file (a symlink or directory); make it a plain file")
        return name
    return None


def read_agent_model(root: str | Path) -> AgentModel | None:
    """The model the agent config at ``root`` names, or None (no agent config, or no ``model:``)."""
    name = agent_config_file(root)
    if name is None:
        return None
    path = Path(root) / name
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise AgentConfigError(f"{name} is {size} bytes; an agent config may have at most {MAX_CONFIG_BYTES}")
    try:
        data = yaml.safe_load(path.read_bytes())  # JSON is YAML
    except yaml.YAMLError as exc:
        raise AgentConfigError(f"{name} is not valid YAML ({yaml_problem(exc)})") from exc
    if data is None:
        return None
    if not isinstance(data, dict):
        raise AgentConfigError(f"{name}: the top level must be a mapping, not {type(data).__name__}")
    model, args = data.get("model"), data.get("model_args")
    if model is None:
        if args is not None:
            raise AgentConfigError(f"{name}: model_args is set but model is not; name the model they are for")
        return None
    if not isinstance(model, str) or not MODEL_PATTERN.fullmatch(model):
        raise AgentConfigError(
            f"{name}: model {model!r} is not an Inspect model id of the form provider/name "
            "(e.g. openai/gpt-4o-mini, simagent/support-agent)"
        )
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise AgentConfigError(f"{name}: model_args must be a mapping, not {type(args).__name__}")
    for key, value in args.items():
        if not isinstance(key, str) or not isinstance(value, _SCALARS):
            raise AgentConfigError(
                f"{name}: model_args.{key}: values must be strings, numbers, booleans or null "
                f"(got {type(value).__name__})"
            )
    json.dumps(args)  # scalars only: always serialisable, kept in batch keys as JSON
    return AgentModel(model=model, model_args=dict(args), file=name)


# --- overrides: a candidate's agent config with some top-level keys replaced -------------------

# The model is a candidate's own field (``model``/``model_args``): a measurement records which
# model ran and why, and an override of the same thing in the config would hide that.
RESERVED_OVERRIDE_KEYS = ("model", "model_args")


def check_override_value(value: Any, where: str) -> None:
    """``value`` is plain data that survives YAML and JSON unchanged: strings, numbers,
    booleans, null, lists and mappings with string keys (no dates, no sets, no objects)."""
    if isinstance(value, bool | int | float | str) or value is None:
        if isinstance(value, float) and value != value:  # NaN has no JSON spelling
            raise AgentConfigError(f"{where}: NaN is not a value an agent config can hold")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_override_value(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise AgentConfigError(f"{where}: key {key!r} is not a string")
            check_override_value(item, f"{where}.{key}")
        return
    raise AgentConfigError(
        f"{where}: {type(value).__name__} is not YAML/JSON data (strings, numbers, booleans, null, "
        "lists and mappings with string keys); quote it to make it a string"
    )


def check_overrides(overrides: Any, where: str) -> None:
    """Raise ``AgentConfigError`` naming ``where`` and the key when ``overrides`` is not a
    mapping of top-level agent-config keys (strings, not ``model``/``model_args``) to data."""
    if not isinstance(overrides, dict):
        raise AgentConfigError(
            f"{where}: agent_config must be a mapping of keys to values, not {type(overrides).__name__}"
        )
    for key, value in overrides.items():
        if not isinstance(key, str) or not key:
            raise AgentConfigError(f"{where}: agent_config key {key!r} is not a non-empty string")
        if key in RESERVED_OVERRIDE_KEYS:
            raise AgentConfigError(
                f"{where}: agent_config.{key}: the model is set with the candidate's own `model` and "
                "`model_args` fields, not as an agent-config override"
            )
        check_override_value(value, f"{where}: agent_config.{key}")


class _ConfigDumper(yaml.SafeDumper):
    """Safe YAML as agent configs are written by hand: list items indented under their key,
    multi-line strings as ``|`` blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        return super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value.rstrip("\n") and value == value.strip(" \t") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ConfigDumper.add_representer(str, _represent_str)


def _dump_yaml(data: Mapping[str, Any]) -> str:
    return yaml.dump(
        dict(data), Dumper=_ConfigDumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100
    )


def _rewrite_block_yaml(text: str, node: yaml.MappingNode, overrides: Mapping[str, Any]) -> str | None:
    """``text`` with each overridden top-level entry's lines replaced by the new entry and new
    keys appended; every other byte kept (comments, order, quoting). None when the mapping is
    not a plain block mapping at column 0 (the caller then writes the whole file anew)."""
    if node.flow_style:
        return None
    lines = text.splitlines(keepends=True)
    spans: dict[str, list[tuple[int, int]]] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.start_mark.column != 0:
            return None
        start = key_node.start_mark.line
        end_mark = value_node.end_mark
        end = end_mark.line if end_mark.column == 0 else end_mark.line + 1  # exclusive line index
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1  # blank lines a block scalar swallowed stay where they are
        spans.setdefault(str(key_node.value), []).append((start, end))
    replaced = {key: _dump_yaml({key: value}) for key, value in overrides.items() if key in spans}
    cut = sorted(((s, e, key) for key, found in spans.items() if key in replaced for s, e in found), reverse=True)
    for start, end, key in cut:  # from the bottom up, so earlier line numbers stay valid
        lines[start:end] = [replaced[key]]
        replaced[key] = ""  # a key written twice in the file keeps one entry
    out = "".join(lines)
    added = {key: value for key, value in overrides.items() if key not in spans}
    if added:
        out = (out if not out or out.endswith("\n") else out + "\n") + _dump_yaml(added)
    return out


def rewrite_agent_config(file: str, data: bytes, overrides: Mapping[str, Any]) -> bytes:
    """The agent config ``file`` (its bytes ``data``) with the top-level keys of ``overrides``
    replaced (or added). YAML stays YAML and keeps every untouched line byte for byte; JSON
    stays JSON (indented). The result is checked to parse to exactly the old mapping with the
    overrides applied."""
    check_overrides(dict(overrides), file)
    if len(data) > MAX_CONFIG_BYTES:
        raise AgentConfigError(f"{file} is {len(data)} bytes; an agent config may have at most {MAX_CONFIG_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AgentConfigError(f"{file} is not UTF-8 text ({exc})") from exc
    try:
        old = yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as exc:
        raise AgentConfigError(f"{file} is not valid YAML ({yaml_problem(exc)})") from exc
    if old is None:
        old = {}
    if not isinstance(old, dict):
        raise AgentConfigError(
            f"{file}: the top level must be a mapping to override its keys, not {type(old).__name__}"
        )
    wanted = {**old, **overrides}
    if file.endswith(".json"):
        out = json.dumps(wanted, indent=2, ensure_ascii=False) + "\n"
    else:
        node = yaml.compose(text) if old else None
        rewritten = _rewrite_block_yaml(text, node, overrides) if isinstance(node, yaml.MappingNode) else None
        try:
            ok = rewritten is not None and yaml.safe_load(rewritten) == wanted
        except yaml.YAMLError:
            ok = False  # e.g. an anchor defined in a replaced entry and used elsewhere
        out = rewritten if ok and rewritten is not None else _dump_yaml(wanted)
    encoded = out.encode("utf-8")
    if len(encoded) > MAX_CONFIG_BYTES:
        raise AgentConfigError(
            f"{file} with the overrides is {len(encoded)} bytes; an agent config may have at most {MAX_CONFIG_BYTES}"
        )
    return encoded
