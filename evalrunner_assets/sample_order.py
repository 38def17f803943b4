"""The seeded, pre-committed order of a task's sample ids (the Statistics page, evalrunner_assets/stats/README.md).

Shared by execution (which window of ids a sandbox runs) and statistics (the order pairs are
read in); neither owns it, so both import it from here. Pure standard library.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def seeded_order(sample_ids: Iterable[str | int], seed: int | str) -> list[str]:
    """A seeded, pre-committed order of sample ids: sorted by sha256(seed, id).

    Stable when samples are added or removed (each id keeps its hash), unlike a shuffle of the
    whole dataset; the same for head and base because it depends only on the ids.
    """
    ids = {str(s) for s in sample_ids}
    return sorted(ids, key=lambda s: (hashlib.sha256(f"{seed}\x00{s}".encode()).hexdigest(), s))
