"""The simulated models behind ``simagent/<name>``: what each costs and what it knows untold.

Every name not listed here is the standard model (``SIMAGENT_PRICE``, acts only on the guidance
in its prompt). The listed ones stand in for the levers a team weighs against the standard
model: a bigger model (better at everything, at a higher price) and a fine-tune (it learned one
piece of guidance in training, so it acts on it without the prompt saying so, at a fine-tuned
model's price). The per-sample draws do not depend on the model, so two models on the same
inputs pair with ties wherever their success probabilities agree (common random numbers).

Importable without Inspect (price tables and candidate settings read it).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._price import SIMAGENT_PRICE, TokenPrice


@dataclass(frozen=True)
class SimulatedModel:
    """How one ``simagent/<name>`` behaves and what it costs."""

    price: TokenPrice
    known_cues: frozenset[str] = frozenset()  # guidance acted on even when the prompt lacks it
    bonus: float = 0.0  # added to every behaviour's success probability (capped at 1)


STANDARD_MODEL = SimulatedModel(price=SIMAGENT_PRICE)

SIMULATED_MODELS: dict[str, SimulatedModel] = {
    # Three times the price; +0.10 on every behaviour.
    "support-agent-large": SimulatedModel(price=TokenPrice(3.00, 15.00), bonus=0.10),
    # Fine-tuned on runbook trajectories: puts the error code in the search query untold,
    # at twice the standard price (fine-tuned models are billed above their base).
    "support-agent-ft": SimulatedModel(price=TokenPrice(2.00, 10.00), known_cues=frozenset({"error_code_query"})),
}


def simulated_model(name: str) -> SimulatedModel:
    """The model ``simagent/<name>`` (the standard one for any name not listed)."""
    return SIMULATED_MODELS.get(name.removeprefix("simagent/"), STANDARD_MODEL)
