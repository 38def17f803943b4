"""One file's part of a unified diff (-p1), shared by the two ways a patch is taken: from a
workspace on this machine (:func:`evalrunner_assets.swe.grading.workspace_patch`) and from a
sandbox's workspace (:func:`evalrunner_assets.swe.sandboxes.sandbox_patch`)."""

from __future__ import annotations

import difflib


def unified_chunk(rel: str, old: list[str] | None, new: list[str] | None, added: bool, removed: bool) -> str:
    """One file's part of the patch: its unified diff, or a note when either side is not text
    (binary, oversized, a link or special file). ``added``/``removed``: the file is new/gone."""
    if old is None or new is None:
        return f"Binary or non-text file {rel} differs\n"
    if old and not old[-1].endswith("\n"):
        old[-1] += "\n\\ No newline at end of file\n"
    if new and not new[-1].endswith("\n"):
        new[-1] += "\n\\ No newline at end of file\n"
    return "".join(
        difflib.unified_diff(
            old,
            new,
            fromfile="/dev/null" if added else f"a/{rel}",
            tofile="/dev/null" if removed else f"b/{rel}",
        )
    )
