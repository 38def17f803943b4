"""The model gateway's settings a deployment sets through its environment, each defined once.

Every setting has one name, type, default, environment variable and help text here; the
gateway (``GatewaySettings.from_env`` and its providers' table in ``_gateway.py``) and the
generated settings reference read them from here, when a gateway is made (never at import), and
the deploy files are checked against them by ``tests/gateway/test_gateway_settings.py``. The keys are
read by the controller only: no sandbox ever sees them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalrunner_assets.env_settings import EnvSetting, read_env_settings
from evalrunner_assets.errors import InputError


class GatewaySettingError(InputError, ValueError):
    """A gateway variable's value is not its type; the message names it."""


@dataclass(frozen=True)
class GatewaySetting(EnvSetting):
    """One gateway setting."""

    def parse(self, value: str) -> Any:
        """``value`` (the variable's text) as this setting's type; an error names the variable."""
        if self.type is int:
            try:
                return int(value)
            except ValueError:
                raise GatewaySettingError(f"{self.env}={value!r} is not an integer") from None
        return value


OPENAI_KEY = GatewaySetting(
    "openai_key", str, None, "OPENAI_API_KEY", "OpenAI's key, held by the gateway only.", secret=True
)
OPENAI_BASE = GatewaySetting(
    "openai_base", str, "https://api.openai.com/v1", "OPENAI_BASE_URL", "The gateway's upstream for openai/ models."
)
ANTHROPIC_KEY = GatewaySetting(
    "anthropic_key", str, None, "ANTHROPIC_API_KEY", "Anthropic's key, held by the gateway only.", secret=True
)
ANTHROPIC_BASE = GatewaySetting(
    "anthropic_base",
    str,
    "https://api.anthropic.com",
    "ANTHROPIC_BASE_URL",
    "The gateway's upstream for anthropic/ models.",
)
CONCURRENCY = GatewaySetting(
    "max_concurrency",
    int,
    8,
    "EVALRUNNER_GATEWAY_CONCURRENCY",
    "Model requests in flight per provider through the gateway.",
)
SETTINGS: tuple[GatewaySetting, ...] = (OPENAI_KEY, OPENAI_BASE, ANTHROPIC_KEY, ANTHROPIC_BASE, CONCURRENCY)
BY_ENV: dict[str, GatewaySetting] = {s.env: s for s in SETTINGS}


@dataclass(frozen=True)
class GatewayEnvSettings:
    openai_key: str | None = field(default=OPENAI_KEY.default, repr=False)
    openai_base: str = OPENAI_BASE.default
    anthropic_key: str | None = field(default=ANTHROPIC_KEY.default, repr=False)
    anthropic_base: str = ANTHROPIC_BASE.default
    max_concurrency: int = CONCURRENCY.default


def gateway_env_settings(env: Mapping[str, str] | None = None, **given: Any) -> GatewayEnvSettings:
    """The settings the environment (default ``os.environ``, read now) gives; unset or empty
    variables keep their defaults. ``given`` (by setting name) are a caller's own values: one
    that is not None or empty wins, and its variable is not read."""
    return GatewayEnvSettings(**read_env_settings(SETTINGS, env, given, concern="gateway"))
