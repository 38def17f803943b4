"""Dollar cost of samples: Inspect's own figure when it knows the model's price, else ours.

The price table maps a model name (or a ``provider/*`` glob) to US dollars per million input
and output tokens. It is configurable (``$EVALRUNNER_PRICES``: a JSON file
``{"openai/gpt-4o": {"input": 2.5, "output": 10}}``). A sample whose cost is neither logged nor
priced has an unknown cost — shown as unknown, never as $0.00.
"""

from __future__ import annotations

import fnmatch
import json
import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalrunner_assets.errors import InputError


class PriceTableError(InputError, ValueError):
    """The price table file is malformed (names the file and the entry)."""


# Default prices registered by model providers for their own models (``register_price``), so
# this module never imports a provider to learn its price; ``$EVALRUNNER_PRICES`` overrides them.
_REGISTERED_PRICES: dict[str, tuple[float, float]] = {}


def register_price(model: str, input_usd_per_mtok: float, output_usd_per_mtok: float) -> None:
    """Make ``model`` (a name or a ``provider/*`` glob) part of every default price table, at
    the given US dollars per million input and output tokens."""
    _REGISTERED_PRICES[model] = (float(input_usd_per_mtok), float(output_usd_per_mtok))


@dataclass(frozen=True)
class PriceTable:
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # model -> ($/Mtok in, out)

    @classmethod
    def default(cls) -> PriceTable:
        """The registered prices (:func:`register_price`), overridden by ``$EVALRUNNER_PRICES``."""
        prices = dict(_REGISTERED_PRICES)
        path = os.environ.get("EVALRUNNER_PRICES")
        if path:
            prices.update(cls.from_file(path).prices)
        return cls(prices)

    @classmethod
    def from_file(cls, path: str) -> PriceTable:
        try:
            with open(path, encoding="utf-8") as fh:
                raw = json.load(fh)
        except (OSError, json.JSONDecodeError) as exc:
            raise PriceTableError(f"price table {path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise PriceTableError(f"price table {path}: expected an object of model -> prices")
        prices = {}
        for model, entry in raw.items():
            try:
                prices[model] = (float(entry["input"]), float(entry["output"]))
            except (TypeError, KeyError, ValueError) as exc:
                raise PriceTableError(
                    f"price table {path}: entry {model!r} needs numeric 'input' and 'output' $/Mtok"
                ) from exc
        return cls(prices)

    def price(self, model: str | None) -> tuple[float, float] | None:
        if not model:
            return None
        if model in self.prices:
            return self.prices[model]
        for pattern, price in self.prices.items():
            if fnmatch.fnmatchcase(model, pattern):
                return price
        return None

    def cost(self, row: Mapping[str, Any]) -> float | None:
        """A sample's cost: the logged cost when present, else tokens × our price, else None."""
        if row.get("cost_usd") is not None:
            return float(row["cost_usd"])
        price = self.price(row.get("model"))
        if price is None or row.get("input_tokens") is None or row.get("output_tokens") is None:
            return None
        return (row["input_tokens"] * price[0] + row["output_tokens"] * price[1]) / 1e6


def sample_accounting(rows: Iterable[Mapping[str, Any]], prices: PriceTable) -> dict[str, Any]:
    """Samples, errors, tokens, cost and median latency of one arm's sample rows (the lake's
    ``samples`` columns). A sample whose cost is unknown makes the arm's cost unknown (None),
    never $0.00."""
    rows = list(rows)
    costs = [prices.cost(r) for r in rows]
    known = [c for c in costs if c is not None]
    samples = len(rows)
    cost_known = bool(samples) and len(known) == samples
    times = [r["total_time_s"] for r in rows if r.get("total_time_s") is not None]
    return {
        "samples": samples,
        "errors": sum(1 for r in rows if r.get("error")),
        "input_tokens": sum(r.get("input_tokens") or 0 for r in rows),
        "output_tokens": sum(r.get("output_tokens") or 0 for r in rows),
        "total_tokens": sum(r.get("total_tokens") or 0 for r in rows),
        "cost_usd": round(sum(known), 6) if cost_known else None,
        "cost_per_sample_usd": (sum(known) / samples) if cost_known else None,
        "latency_p50_s": statistics.median(times) if times else None,
    }


def usage_accounting(usages: Iterable[Mapping[str, Any] | None], prices: PriceTable) -> dict[str, Any]:
    """Samples, tokens and cost of windows that landed no rows (failed or cancelled), from the
    usage their logs recorded (``windows.log_usage``; None when no log was readable). A window
    whose use or price is unknown makes the total cost unknown (None), never $0.00."""
    out: dict[str, Any] = {
        "windows": 0,
        "samples": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "cost_usd": 0.0,
        "unknown_windows": 0,
    }
    for usage in usages:
        out["windows"] += 1
        costs = [prices.cost({"model": m, **u}) for m, u in ((usage or {}).get("models") or {}).items()]
        if usage is None or any(c is None for c in costs):
            out["unknown_windows"] += 1
        if usage is not None:
            for k in ("samples", "input_tokens", "output_tokens", "total_tokens"):
                out[k] += int(usage.get(k) or 0)
            out["cost_usd"] += sum(c for c in costs if c is not None)
    out["cost_usd"] = None if out["unknown_windows"] else round(out["cost_usd"], 6)
    return out
