"""The model an agent repository's agent config names, read at the exact commit.

An agent config (``agent.yaml``, ``agent.yml`` or ``agent.json`` at the repository root, the
first that exists) may carry ``model:`` (an Inspect model id, e.g. ``openai/gpt-4o-mini``) and
``model_args:`` (a flat mapping of scalars). When it does, that is the model the pipeline runs
for that commit, unless a run setting names one explicitly (``pipeline.assess.model_choice``):
so a PR that changes only the ``model:`` line (a fine-tune's activation PR) changes what runs.

The controller reads the file from the commit's export (untrusted bytes): a regular file of at
most ``MAX_CONFIG_BYTES``, parsed with ``yaml.safe_load``; only the two fields are taken, and
``model_args`` must be flat (so no YAML alias can expand into something large).
"""

from __future__ import annotations

import json
import re
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import ConfigDict

from evalrunner_assets.discovery._errors import DiscoveryError

MAX_CONFIG_BYTES = 256 * 1024
MODEL_PATTERN = re.compile(r"[A-Za-z0-9_.-]+/\S+")  # the candidates schema's rule for a model id
_SCALARS = (str, int, float, bool, type(None))


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
        raise AgentConfigError(f"{name} is not valid YAML ({exc})") from exc
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
