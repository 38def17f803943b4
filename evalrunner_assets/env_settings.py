"""What a setting read from the environment is, and how a concern's settings are read at once.

Each concern defines its settings in one module (``github_settings.py``, ``gateway/settings.py``)
as :class:`EnvSetting` instances whose ``parse`` checks the text, and reads them with
:func:`read_env_settings` when they are used (never at import). Plain Python, standard library
only: every layer may import it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EnvSetting:
    """One setting; ``default`` None means unset. ``secret``: its value is a credential (never
    shown). A concern's subclass turns the variable's text into the setting's type in ``parse``,
    raising its own error that names the variable."""

    name: str
    type: type
    default: Any
    env: str
    help: str
    secret: bool = False

    def parse(self, value: str) -> Any:
        return value


def read_env_settings(
    settings: Sequence[EnvSetting], env: Mapping[str, str] | None, given: Mapping[str, Any], *, concern: str
) -> dict[str, Any]:
    """The fields ``settings`` take from ``env`` (default ``os.environ``, read now): unset or
    empty variables are left out (the field keeps its default). ``given`` (by setting name) are a
    caller's own values, e.g. a resource's config: one that is not None or empty wins, and its
    variable is not read."""
    env = os.environ if env is None else env
    unknown = set(given) - {s.name for s in settings}
    if unknown:
        raise TypeError(f"not {concern} settings: {', '.join(sorted(unknown))}")
    fields: dict[str, Any] = {}
    for setting in settings:
        mine = given.get(setting.name)
        if mine is not None and mine != "":
            fields[setting.name] = mine
        elif value := env.get(setting.env):
            fields[setting.name] = setting.parse(value)
    return fields
