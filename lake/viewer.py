"""``evalrunner view``: Inspect's own log viewer over the lake's raw logs."""

from __future__ import annotations

import os
import sys

from lake.storage import Lake


def view_command(lake: Lake, *, host: str | None = None, port: int | None = None) -> list[str]:
    """The ``inspect view`` command line for the lake's raw logs (``raw/``, all repos).

    For a ``gs://`` lake the gs URL is passed and Inspect reads it through its own gcsfs, with
    the machine's Google credentials; against an emulator set ``STORAGE_EMULATOR_HOST`` for it.
    """
    log_dir = lake.url(lake.layout.raw_prefix())
    if lake.is_local:
        os.makedirs(log_dir, exist_ok=True)  # inspect view refuses a missing directory
    # logs sit in raw/<repo>/<commit>/<task>/<window>/, and they come from untrusted repository
    # code, so they are listed recursively and shown as plain text
    cmd = [
        sys.executable,
        "-m",
        "inspect_ai",
        "view",
        "start",
        "--log-dir",
        log_dir,
        "--recursive",
        "--no-trust-content",
    ]
    if host:
        cmd += ["--host", host]
    if port:
        cmd += ["--port", str(port)]
    return cmd
