"""DuckDB queries, one per file, named for what they return."""

from __future__ import annotations

from importlib import resources

# The pairing rule: table macros, in the order they must be created. The lake's connection
# (lake.duck) and the comparison engine (stats.pair_task) both create them from these files.
PAIRING_RULE = ("input_scores_of", "paired_inputs_of")


def load(name: str) -> str:
    """Text of ``sql/<name>.sql``; raises FileNotFoundError naming the query if absent."""
    path = resources.files(__name__) / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"no SQL query named {name!r} (looked for sql/{name}.sql)")
    return path.read_text(encoding="utf-8")


def names() -> list[str]:
    """Names of every query shipped in this package."""
    return sorted(p.name[:-4] for p in resources.files(__name__).iterdir() if p.name.endswith(".sql"))
