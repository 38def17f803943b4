"""The digest of what defines one Inspect sample: its input, target, choices, files and setup.

Samples without ids get Inspect's positional ids (1..n in dataset order), so an id alone does
not say that head and base ran the same input: a sample inserted at the top of a dataset shifts
every later id. Pairing therefore also requires equal input digests (``stats.pair_task``).

One function, used on both sides of the sandbox boundary: the sandboxed worker digests the
``Sample`` objects it lists (``raw/<repo>/<commit>/tasks.json``), and the lake's ingest digests
each ``EvalSample`` of a log (the ``samples.input_digest`` column, the value pairing uses). The
sample's ``metadata`` is left out on purpose: the log stores the task state's metadata, which a
solver may rewrite while it runs. Message ids, sources and provider-internal fields are left out
too (Inspect assigns ids when a message is built). Pure standard library: the worker imports it
inside the sandbox.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

DIGEST_CHARS = 32

# json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str), with
# the encoder built once: the lake digests every sample it lands
_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode


def _plain(value: Any) -> Any:
    """A JSON-able form of a content part or other pydantic value, without volatile fields."""
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        value = dump(mode="json", exclude_none=True)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in sorted(value.items()) if k not in ("id", "internal", "source", "metadata")}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _message(message: Any) -> dict[str, Any]:
    content = getattr(message, "content", None)
    out: dict[str, Any] = {
        "role": getattr(message, "role", None),
        "content": content if isinstance(content, str) else _plain(content),
    }
    calls = getattr(message, "tool_calls", None)
    if calls:
        out["tool_calls"] = [[c.function, _plain(c.arguments)] for c in calls]
    for name in ("tool_call_id", "function"):
        if getattr(message, name, None) is not None:
            out[name] = getattr(message, name)
    return out


def sample_input_digest(
    input: Any, target: Any = None, choices: Any = None, files: Any = None, setup: Any = None
) -> str:
    """sha256 (first 32 hex) over the canonical JSON of a sample's defining fields.

    ``input`` is a string or a list of chat messages; ``files`` may be the mapping a ``Sample``
    holds or the list of names a log keeps (only the names are digested)."""
    names = sorted(files) if files else []
    material = {
        "input": input if isinstance(input, str) else [_message(m) for m in (input or [])],
        "target": target if isinstance(target, str) or target is None else list(target),
        "choices": list(choices) if choices else None,
        "files": names,
        "setup": setup,
    }
    text = _canonical(material)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def digest_of_sample(sample: Any) -> str:
    """:func:`sample_input_digest` of an Inspect ``Sample`` or ``EvalSample``."""
    return sample_input_digest(
        sample.input, sample.target, sample.choices, getattr(sample, "files", None), getattr(sample, "setup", None)
    )
