"""The stand-in price of the simulated model, importable without Inspect; it registers itself with the price table."""

from __future__ import annotations

from dataclasses import dataclass

from evalrunner_assets.pricing import register_price


@dataclass(frozen=True)
class TokenPrice:
    """US dollars per million tokens."""

    input_usd_per_mtok: float
    output_usd_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok) / 1_000_000


# The stand-in price of every ``simagent/*`` model (the same for all names). It registers itself
# with the pipeline's default price table below; Inspect also gets it (``set_model_info``), so
# each log's model usage carries ``total_cost``.
SIMAGENT_PRICE = TokenPrice(input_usd_per_mtok=1.00, output_usd_per_mtok=5.00)
register_price("simagent/*", SIMAGENT_PRICE.input_usd_per_mtok, SIMAGENT_PRICE.output_usd_per_mtok)
