"""Reading and writing evalrunner's own JSON documents (request, commit facts, comparison).

Each document is a pydantic model with a ``schema_version``; a document written by an older
evalrunner is migrated in the model's validator, and a bad one raises :class:`DocumentError`
naming the file and the field. Their JSON Schemas are exported next to the manifest schema
(``evalrunner_assets/discovery/*.schema.json``, see :mod:`evalrunner_assets.pipeline.schemas`).
"""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from evalrunner_assets.errors import InputError


class DocumentError(InputError, ValueError):
    """A document in the lake (or given by a caller) is not valid: says which file and field."""

    def __init__(self, message: str, *, where: str = "", field: str = "") -> None:
        super().__init__(message)
        self.where = where
        self.field = field


def describe_validation(exc: ValidationError, what: str) -> tuple[str, str]:
    """(message, first field) of a pydantic error, with each failing field as a dotted path."""
    problems = []
    first = ""
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(document)"
        first = first or loc
        got = err.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r:.80})"
        problems.append(f"{loc}: {err['msg']}{shown}")
    return f"{what}: " + "; ".join(problems[:5]) + ("" if len(problems) <= 5 else f"; +{len(problems) - 5} more"), first


M = TypeVar("M", bound=BaseModel)


def parse_document(model: type[M], data: bytes | str, where: str, error: type[DocumentError] = DocumentError) -> M:
    """``data`` (JSON text) as ``model``; ``where`` (a file or URL) names it in any error."""
    try:
        raw = json.loads(data)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON: {exc}", where=where) from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        message, field = describe_validation(exc, where)
        raise error(message, where=where, field=field) from exc


def dump_document(doc: BaseModel, *, exclude_unset: bool = False) -> bytes:
    """A document's JSON as evalrunner writes it (sorted keys, indented). ``exclude_unset``
    leaves out the optional fields a document never set (a comparison that did not stop has no
    ``stopped_reason`` key, not a null one)."""
    return json.dumps(doc.model_dump(mode="json", exclude_unset=exclude_unset), indent=2, sort_keys=True).encode()
