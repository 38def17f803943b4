"""Pair head and base sample rows of one task by sample id (DESIGN §6)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evalrunner_assets.stats._errors import PairingError

_REQUIRED = ("sample_id", "epoch", "score", "error")


def seeded_order(sample_ids: Iterable[str | int], seed: int | str) -> list[str]:
    """A seeded, pre-committed order of sample ids: sorted by sha256(seed, id).

    Stable when samples are added or removed (each id keeps its hash), unlike a shuffle of the
    whole dataset; the same for head and base because it depends only on the ids.
    """
    ids = {str(s) for s in sample_ids}
    return sorted(ids, key=lambda s: (hashlib.sha256(f"{seed}\x00{s}".encode()).hexdigest(), s))


@dataclass(frozen=True)
class _ArmSummary:
    means: dict[str, float]
    errored: frozenset[str]
    errored_epochs: int
    epochs: int


def _summarize(rows: Iterable[Mapping[str, Any]], side: str) -> _ArmSummary:
    scores: dict[str, list[float]] = {}
    errored: set[str] = set()
    seen: set[tuple[str, int]] = set()
    errored_epochs = 0
    epochs = 0
    for index, row in enumerate(rows):
        missing = [k for k in _REQUIRED if k not in row]
        if missing:
            raise PairingError(f"{side} row {index} lacks {', '.join(missing)}; rows need {', '.join(_REQUIRED)}")
        sid, epoch, score, error = row["sample_id"], row["epoch"], row["score"], row["error"]
        if isinstance(sid, bool) or not isinstance(sid, (str, int)):
            raise PairingError(f"{side} row {index}: sample_id must be a string, got {sid!r}")
        sid = str(sid)
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)):
            raise PairingError(f"{side} sample {sid!r}: epoch must be an integer, got {epoch!r}")
        key = (sid, int(epoch))
        if key in seen:
            raise PairingError(f"{side} sample {sid!r} epoch {epoch} appears twice; each (sample_id, epoch) must be unique per side")
        seen.add(key)
        epochs += 1
        if error is not None and not isinstance(error, str):
            raise PairingError(f"{side} sample {sid!r} epoch {epoch}: error must be a string or None, got {error!r}")
        if error or score is None:
            # An epoch without a score cannot be paired; an error is a finding, not a 0.
            errored.add(sid)
            errored_epochs += 1
            continue
        if isinstance(score, bool) or not isinstance(score, (int, float, np.integer, np.floating)):
            raise PairingError(f"{side} sample {sid!r} epoch {epoch}: score must be a number in [0, 1], got {score!r}")
        value = float(score)
        if not (0.0 <= value <= 1.0) or math.isnan(value):
            raise PairingError(f"{side} sample {sid!r} epoch {epoch}: score {value!r} is outside [0, 1]; map scores with value_to_float first")
        scores.setdefault(sid, []).append(value)
    # A sample with any errored epoch is excluded whole: averaging only its clean epochs would
    # weight inputs unequally and hide errors that correlate with difficulty.
    means = {sid: float(np.mean(v)) for sid, v in scores.items() if sid not in errored}
    return _ArmSummary(means, frozenset(errored), errored_epochs, epochs)


@dataclass(frozen=True)
class Pairing:
    """Paired per-input scores of one task, in the pre-committed order they are consumed."""

    sample_ids: tuple[str, ...]
    head: tuple[float, ...]
    base: tuple[float, ...]
    errored_head: int = 0
    errored_base: int = 0
    unpaired_head: tuple[str, ...] = ()
    unpaired_base: tuple[str, ...] = ()
    errored_epochs_head: int = 0
    errored_epochs_base: int = 0
    _deltas: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (len(self.sample_ids) == len(self.head) == len(self.base)):
            raise PairingError(
                f"sample_ids, head and base must have equal lengths, got {len(self.sample_ids)}, {len(self.head)}, {len(self.base)}"
            )
        head = np.asarray(self.head, dtype=np.float64)
        base = np.asarray(self.base, dtype=np.float64)
        if head.size and (np.any(~np.isfinite(head)) or np.any(~np.isfinite(base)) or head.min() < 0 or head.max() > 1 or base.min() < 0 or base.max() > 1):
            raise PairingError("paired scores must be finite numbers in [0, 1]")
        object.__setattr__(self, "_deltas", head - base)

    @classmethod
    def from_scores(cls, head: Sequence[float], base: Sequence[float], sample_ids: Sequence[str] | None = None) -> "Pairing":
        """A pairing from per-input scores already in their pre-committed order."""
        ids = tuple(str(s) for s in sample_ids) if sample_ids is not None else tuple(str(i) for i in range(len(head)))
        return cls(ids, tuple(float(x) for x in head), tuple(float(x) for x in base))

    @property
    def n_pairs(self) -> int:
        return len(self.sample_ids)

    @property
    def deltas(self) -> np.ndarray:
        """head - base per pair, in order (a read-only copy)."""
        out = self._deltas.copy()
        out.setflags(write=False)
        return out

    def prefix(self, n: int) -> "Pairing":
        """The first ``n`` pairs (what the sequence had seen at that look)."""
        return Pairing(self.sample_ids[:n], self.head[:n], self.base[:n], self.errored_head, self.errored_base,
                       self.unpaired_head, self.unpaired_base, self.errored_epochs_head, self.errored_epochs_base)

    def swapped(self) -> "Pairing":
        """The same pairs with head and base exchanged."""
        return Pairing(self.sample_ids, self.base, self.head, self.errored_base, self.errored_head,
                       self.unpaired_base, self.unpaired_head, self.errored_epochs_base, self.errored_epochs_head)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.n_pairs,
            "errored_head": self.errored_head,
            "errored_base": self.errored_base,
            "errored_epochs_head": self.errored_epochs_head,
            "errored_epochs_base": self.errored_epochs_base,
            "unpaired_head": len(self.unpaired_head),
            "unpaired_base": len(self.unpaired_base),
            "unpaired_head_ids": list(self.unpaired_head),
            "unpaired_base_ids": list(self.unpaired_base),
        }


def pair_task(
    head_rows: Iterable[Mapping[str, Any]],
    base_rows: Iterable[Mapping[str, Any]],
    order: Sequence[str | int] | None = None,
) -> Pairing:
    """Pair one task's head and base rows by sample id.

    Each arm's epochs are averaged per sample id first (the input is the unit). Samples with an
    errored or unscored epoch are excluded on that side and counted; ids scored on one side
    only are counted as unpaired. Pairs follow ``order`` (the task's seeded sample order, the
    same for both arms); without it, :func:`seeded_order` with seed 0 is used. Every paired id
    must appear in ``order``, since the confidence sequence is only valid in a pre-committed order.
    """
    head = _summarize(head_rows, "head")
    base = _summarize(base_rows, "base")
    paired = set(head.means) & set(base.means)
    # Unpaired: scored on one side and absent from the other (not merely errored there).
    unpaired_head = sorted(set(head.means) - set(base.means) - base.errored)
    unpaired_base = sorted(set(base.means) - set(head.means) - head.errored)
    if order is None:
        ordered = seeded_order(paired, 0)
    else:
        position: dict[str, int] = {}
        for i, sid in enumerate(order):
            position.setdefault(str(sid), i)
        missing = sorted(paired - position.keys())
        if missing:
            shown = ", ".join(repr(m) for m in missing[:5])
            raise PairingError(f"{len(missing)} paired sample ids are not in `order` (e.g. {shown}); pass the task's full seeded sample order")
        ordered = sorted(paired, key=position.__getitem__)
    return Pairing(
        sample_ids=tuple(ordered),
        head=tuple(head.means[s] for s in ordered),
        base=tuple(base.means[s] for s in ordered),
        errored_head=len(head.errored),
        errored_base=len(base.errored),
        unpaired_head=tuple(unpaired_head),
        unpaired_base=tuple(unpaired_base),
        errored_epochs_head=head.errored_epochs,
        errored_epochs_base=base.errored_epochs,
    )


def arm_input_means(rows: Iterable[Mapping[str, Any]]) -> tuple[dict[str, float], int]:
    """One arm on its own, by the pairing rule: each input's mean over its epochs (inputs with
    an errored or unscored epoch excluded), and how many inputs were excluded that way."""
    summary = _summarize(rows, "arm")
    return dict(summary.means), len(summary.errored)
