"""The lake's settings a deployment sets through its environment, each defined once.

Every setting has one name, type, default, environment variable and help text here; the lake
(:mod:`lake.storage`), the Dagster ``LakeResource``, the CLI and the generated settings reference
read them from here, at the time a lake is opened (never at import), and the deploy files are
checked against them by ``tests/lake/test_lake_settings.py``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalrunner_assets.errors import UserError


class LakeSettingError(UserError):
    """A lake variable's value is not its type (or is negative); the message names it."""


@dataclass(frozen=True)
class LakeSetting:
    """One setting; ``default`` None means unset."""

    name: str
    type: type
    default: Any
    env: str
    help: str

    def parse(self, value: str) -> Any:
        """``value`` (the variable's text) as this setting's type; an error names the variable."""
        if self.type is str:
            return value
        try:
            parsed = self.type(value)
        except ValueError:
            kind = "a whole number" if self.type is int else "a number"
            raise LakeSettingError(f"environment variable {self.env}={value!r} is not {kind}") from None
        if parsed < 0:
            raise LakeSettingError(f"environment variable {self.env}={value!r} is negative")
        return parsed


ROOT = LakeSetting(
    "root",
    str,
    None,
    "EVALRUNNER_LAKE",
    "Lake root: a directory or gs://bucket/prefix (unset: <EVALRUNNER_HOME>/lake).",
)
GCS_ENDPOINT = LakeSetting(
    "gcs_endpoint", str, None, "EVALRUNNER_GCS_ENDPOINT", "For a gs:// lake: another GCS endpoint (e.g. an emulator)."
)
GCS_TOKEN = LakeSetting(
    "gcs_token", str, None, "EVALRUNNER_GCS_TOKEN", "For a gs:// lake: a gcsfs token (anon, a key file)."
)
RETRIES = LakeSetting(
    "retries",
    int,
    1,
    "EVALRUNNER_LAKE_RETRIES",
    "Retries of a failed remote lake operation before it counts as an outage (gcsfs retries some errors itself first).",
)
RETRY_BASE_S = LakeSetting(
    "retry_base_s",
    float,
    0.5,
    "EVALRUNNER_LAKE_RETRY_BASE_S",
    "The first backoff between those retries, in seconds; doubling.",
)
LAND_PROCESSES = LakeSetting(
    "land_processes",
    int,
    None,
    "EVALRUNNER_LAND_PROCESSES",
    "Worker processes that parse a large .eval log (1,000 samples or more) while it lands "
    "(unset: one per CPU; 0 or 1: parse in the landing process).",
)
SETTINGS: tuple[LakeSetting, ...] = (ROOT, GCS_ENDPOINT, GCS_TOKEN, RETRIES, RETRY_BASE_S, LAND_PROCESSES)
BY_ENV: dict[str, LakeSetting] = {s.env: s for s in SETTINGS}


@dataclass(frozen=True)
class LakeSettings:
    root: str | None = ROOT.default
    gcs_endpoint: str | None = GCS_ENDPOINT.default
    gcs_token: str | None = GCS_TOKEN.default
    retries: int = RETRIES.default
    retry_base_s: float = RETRY_BASE_S.default
    land_processes: int | None = LAND_PROCESSES.default


def lake_settings(env: Mapping[str, str] | None = None) -> LakeSettings:
    """The settings the environment (default ``os.environ``, read now) gives; unset or empty
    variables keep their defaults."""
    env = os.environ if env is None else env
    fields: dict[str, Any] = {}
    for setting in SETTINGS:
        value = env.get(setting.env, "")
        if value.strip():
            fields[setting.name] = setting.parse(value.strip())
    return LakeSettings(**fields)
