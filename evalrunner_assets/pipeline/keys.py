"""Partition keys as plain strings (Dagster-free, so domain code and the CLI share them)."""

from __future__ import annotations

import re

_COMMIT_KEY = re.compile(r"^(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@(?P<sha>[0-9a-f]{40})$")
_COMPARISON_KEY = re.compile(
    r"^(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)#(?P<pr>[A-Za-z0-9_.-]+)@(?P<head>[0-9a-f]{40})$"
)


def commit_key(repo: str, sha: str) -> str:
    """``owner/repo@<sha>``: one partition of ``commits``."""
    return f"{repo}@{sha}"


def parse_commit_key(key: str) -> tuple[str, str]:
    m = _COMMIT_KEY.match(key)
    if not m:
        raise ValueError(f"commit partition key {key!r} is not of the form owner/repo@<40-hex sha>")
    return m.group("repo"), m.group("sha")


def comparison_key(repo: str, pr: str | int, head: str) -> str:
    """``owner/repo#<pr>@<head sha>``: one partition of ``comparisons``; a force-push is a new key."""
    return f"{repo}#{pr}@{head}"


def parse_comparison_key(key: str) -> tuple[str, str, str]:
    m = _COMPARISON_KEY.match(key)
    if not m:
        raise ValueError(f"comparison partition key {key!r} is not of the form owner/repo#<pr>@<40-hex head sha>")
    return m.group("repo"), m.group("pr"), m.group("head")
