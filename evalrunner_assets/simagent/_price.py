"""The stand-in price of the simulated model, importable without Inspect (price tables read it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenPrice:
    """US dollars per million tokens."""

    input_usd_per_mtok: float
    output_usd_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok) / 1_000_000


# The stand-in price of every ``simagent/*`` model (the same for all names). Pipelines that keep
# their own price table should read it from here; Inspect also gets it (``set_model_info``), so
# each log's model usage carries ``total_cost``.
SIMAGENT_PRICE = TokenPrice(input_usd_per_mtok=1.00, output_usd_per_mtok=5.00)
