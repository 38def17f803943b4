"""Pair head and base sample rows of one task by sample id and input digest (DESIGN §6).

The one pairing rule (``sql/paired_samples.sql`` states the same in SQL): an input pairs when
both arms ran its sample id and, where either arm knows the sample's input digest, both digests
are equal. Samples without ids carry Inspect's positional ids, so an id alone does not say the
inputs are the same; a mismatch is counted as unpaired (``changed_inputs``), never paired.
Errored epochs (the sample raised in the repository's code) score 0; see the stats README.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from evalrunner_assets.sample_order import seeded_order
from evalrunner_assets.stats._errors import PairingError

_REQUIRED = ("sample_id", "epoch", "score", "error")


@dataclass(frozen=True)
class _ArmSummary:
    means: dict[str, float]
    errored: frozenset[str]  # inputs with an errored epoch (scored 0)
    unscored: frozenset[str]  # inputs with an epoch neither scored nor errored (excluded)
    errored_epochs: int
    epochs: int
    digests: dict[str, str | None]  # per input; "" when its epochs disagree
    causes: tuple[tuple[str, str | None, int], ...]  # (error, where, inputs), most frequent first

    @property
    def inputs(self) -> int:
        return len(self.digests)


def _summarize(rows: Iterable[Mapping[str, Any]], side: str) -> _ArmSummary:
    scores: dict[str, list[float]] = {}
    errored: set[str] = set()
    unscored: set[str] = set()
    digests: dict[str, str | None] = {}
    first_error: dict[str, tuple[str, str | None]] = {}
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
            raise PairingError(
                f"{side} sample {sid!r} epoch {epoch} appears twice; each (sample_id, epoch) must be unique per side"
            )
        seen.add(key)
        epochs += 1
        digest = row.get("input_digest")
        if digest is not None and not isinstance(digest, str):
            raise PairingError(
                f"{side} sample {sid!r} epoch {epoch}: input_digest must be a string or None, got {digest!r}"
            )
        if sid in digests and digests[sid] != digest:
            digest = ""  # epochs of one id with different inputs: matches nothing
        digests[sid] = digest
        if error is not None and not isinstance(error, str):
            raise PairingError(f"{side} sample {sid!r} epoch {epoch}: error must be a string or None, got {error!r}")
        if error:
            # The sample raised in the repository's code: the agent failed it (score 0).
            errored.add(sid)
            errored_epochs += 1
            first_error.setdefault(sid, (error, row.get("error_where")))
            scores.setdefault(sid, []).append(0.0)
            continue
        if score is None:
            # Neither scored nor errored (e.g. a scorer value outside [0, 1]): not comparable.
            unscored.add(sid)
            continue
        if isinstance(score, bool) or not isinstance(score, (int, float, np.integer, np.floating)):
            raise PairingError(f"{side} sample {sid!r} epoch {epoch}: score must be a number in [0, 1], got {score!r}")
        value = float(score)
        if not (0.0 <= value <= 1.0) or math.isnan(value):
            raise PairingError(
                f"{side} sample {sid!r} epoch {epoch}: score {value!r} is outside [0, 1]; map scores with value_to_float first"
            )
        scores.setdefault(sid, []).append(value)
    # An input with an unscored epoch is excluded whole: averaging only its other epochs would
    # weight inputs unequally.
    means = {sid: float(np.mean(v)) for sid, v in scores.items() if sid not in unscored}
    causes = Counter(first_error.values())
    ranked = tuple(
        (err, where, n) for (err, where), n in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1] or ""))
    )
    return _ArmSummary(means, frozenset(errored), frozenset(unscored), errored_epochs, epochs, digests, ranked)


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
    # Ids both arms ran whose input digests differ: not the same input, so never paired.
    changed_inputs: tuple[str, ...] = ()
    unscored_head: int = 0
    unscored_base: int = 0
    inputs_head: int = 0  # distinct inputs each arm ran (rows seen), the denominator of errors
    inputs_base: int = 0
    # (error, where, inputs) per arm, most frequent first: what the errored inputs raised.
    error_causes_head: tuple[tuple[str, str | None, int], ...] = ()
    error_causes_base: tuple[tuple[str, str | None, int], ...] = ()
    _deltas: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (len(self.sample_ids) == len(self.head) == len(self.base)):
            raise PairingError(
                f"sample_ids, head and base must have equal lengths, got {len(self.sample_ids)}, {len(self.head)}, {len(self.base)}"
            )
        head = np.asarray(self.head, dtype=np.float64)
        base = np.asarray(self.base, dtype=np.float64)
        if head.size and (
            np.any(~np.isfinite(head))
            or np.any(~np.isfinite(base))
            or head.min() < 0
            or head.max() > 1
            or base.min() < 0
            or base.max() > 1
        ):
            raise PairingError("paired scores must be finite numbers in [0, 1]")
        object.__setattr__(self, "_deltas", head - base)

    @classmethod
    def from_scores(
        cls, head: Sequence[float], base: Sequence[float], sample_ids: Sequence[str] | None = None
    ) -> Pairing:
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

    def prefix(self, n: int) -> Pairing:
        """The first ``n`` pairs (what the sequence had seen at that look)."""
        return replace(self, sample_ids=self.sample_ids[:n], head=self.head[:n], base=self.base[:n])

    def swapped(self) -> Pairing:
        """The same pairs with head and base exchanged."""
        return replace(
            self,
            head=self.base,
            base=self.head,
            errored_head=self.errored_base,
            errored_base=self.errored_head,
            unpaired_head=self.unpaired_base,
            unpaired_base=self.unpaired_head,
            errored_epochs_head=self.errored_epochs_base,
            errored_epochs_base=self.errored_epochs_head,
            unscored_head=self.unscored_base,
            unscored_base=self.unscored_head,
            inputs_head=self.inputs_base,
            inputs_base=self.inputs_head,
            error_causes_head=self.error_causes_base,
            error_causes_base=self.error_causes_head,
        )

    def error_share(self, arm: str) -> float:
        """Share of the inputs ``arm`` ran that raised (0 when it ran none)."""
        errored, inputs = (
            (self.errored_head, self.inputs_head) if arm == "head" else (self.errored_base, self.inputs_base)
        )
        return errored / inputs if inputs else 0.0

    def error_cause(self, arm: str) -> str | None:
        """ "16/16 samples raised RuntimeError('boom') in solver 'agent'" for ``arm``; None
        when none of its samples raised."""
        errored, inputs = (
            (self.errored_head, self.inputs_head) if arm == "head" else (self.errored_base, self.inputs_base)
        )
        causes = self.error_causes_head if arm == "head" else self.error_causes_base
        if not errored or not causes:
            return None
        error, where, count = causes[0]
        text = " ".join(error.split())
        text = text if len(text) <= 160 else text[:157] + "..."
        place = ""
        if where:
            kind, _, name = where.partition(":")
            place = f" in {kind} {name!r}" if name else f" in {kind}"
        noun = "sample" if inputs == 1 else "samples"
        if count == errored:
            return f"{errored}/{inputs} {noun} raised {text}{place}"
        return f"{errored}/{inputs} {noun} raised errors ({count} {text}{place}; {len(causes) - 1} other cause(s))"

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
            "changed_inputs": len(self.changed_inputs),
            "changed_input_ids": list(self.changed_inputs),
            "unscored_head": self.unscored_head,
            "unscored_base": self.unscored_base,
            "inputs_head": self.inputs_head,
            "inputs_base": self.inputs_base,
            "error_head": self.error_cause("head"),
            "error_base": self.error_cause("base"),
        }


def pair_task(
    head_rows: Iterable[Mapping[str, Any]],
    base_rows: Iterable[Mapping[str, Any]],
    order: Sequence[str | int] | None = None,
) -> Pairing:
    """Pair one task's head and base rows by sample id and input digest.

    Each arm's epochs are averaged per sample id first (the input is the unit); an errored epoch
    scores 0. Inputs with an epoch neither scored nor errored are excluded on that side and
    counted (``unscored_*``); ids run on one side only are counted as unpaired; ids run on both
    whose ``input_digest`` differs (one side without a digest while the other has one counts
    as different; rows without digests on both sides pair by id) are counted as
    ``changed_inputs``, never paired. Pairs follow ``order`` (the task's seeded sample order, the
    same for both arms); without it, :func:`seeded_order` with seed 0 is used. Every paired id
    must appear in ``order``, since the confidence sequence is only valid in a pre-committed order.
    """
    head = _summarize(head_rows, "head")
    base = _summarize(base_rows, "base")
    both = set(head.means) & set(base.means)
    changed = sorted(s for s in both if head.digests[s] != base.digests[s] or head.digests[s] == "")
    paired = both - set(changed)
    # Unpaired: scored on one side and never run on the other (not merely unscored there).
    unpaired_head = sorted(set(head.means) - set(base.digests))
    unpaired_base = sorted(set(base.means) - set(head.digests))
    if order is None:
        ordered = seeded_order(paired, 0)
    else:
        position: dict[str, int] = {}
        for i, sid in enumerate(order):
            position.setdefault(str(sid), i)
        missing = sorted(paired - position.keys())
        if missing:
            shown = ", ".join(repr(m) for m in missing[:5])
            raise PairingError(
                f"{len(missing)} paired sample ids are not in `order` (e.g. {shown}); pass the task's full seeded sample order"
            )
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
        changed_inputs=tuple(changed),
        unscored_head=len(head.unscored),
        unscored_base=len(base.unscored),
        inputs_head=head.inputs,
        inputs_base=base.inputs,
        error_causes_head=head.causes,
        error_causes_base=base.causes,
    )


def arm_input_means(rows: Iterable[Mapping[str, Any]]) -> tuple[dict[str, float], int]:
    """One arm on its own, by the pairing rule: each input's mean over its epochs (an errored
    epoch scores 0, an input with an unscored epoch is left out), and how many inputs raised."""
    summary = _summarize(rows, "arm")
    return dict(summary.means), len(summary.errored)
