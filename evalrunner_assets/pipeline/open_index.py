"""The lake's index of open comparisons: one marker file per comparison not yet retired.

A comparison is *open* from the moment its request is written until it is decided, its report is
materialized and its Dagster partitions are retired. The sampling sensor lists these markers
instead of every ``comparisons`` partition ever made, so its tick costs the open comparisons, not
all PRs. Markers are created write-once and removed last when a comparison is retired, so a crash
in between leaves the comparison open (and retired again on the next tick), never lost.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from evalrunner_assets.pipeline.keys import comparison_key, parse_comparison_key
from lake import LAYOUT, Lake


def mark_open(lake: Lake, repo: str, pr: str, head: str) -> None:
    """Record the comparison as open (idempotent: the first opening time is kept)."""
    record = {"comparison": comparison_key(repo, pr, head), "opened_at": datetime.now(UTC).isoformat()}
    lake.write_once(LAYOUT.open_comparison(repo, pr, head), json.dumps(record).encode())


def mark_open_key(lake: Lake, key: str) -> None:
    mark_open(lake, *parse_comparison_key(key))


def mark_closed(lake: Lake, repo: str, pr: str, head: str) -> None:
    """Drop the comparison from the index (a concurrent or repeated close is not an error)."""
    lake.remove(LAYOUT.open_comparison(repo, pr, head))


def is_open(lake: Lake, key: str) -> bool:
    return lake.exists(LAYOUT.open_comparison(*parse_comparison_key(key)))


def open_comparison_keys(lake: Lake) -> list[str]:
    """Partition keys (``owner/repo#pr@head``) of every open comparison, sorted."""
    return sorted(
        comparison_key(*LAYOUT.parse_open_comparison(rel)) for rel in lake.glob(LAYOUT.open_comparisons_glob())
    )
