"""``evalrunner view``: Inspect's own log viewer over the lake's raw logs, or over their annotated
copies (``LAYOUT.annotated_log``: the same logs with the notes on their samples)."""

from __future__ import annotations

import os
import sys
from urllib.parse import quote

from lake.layout import LAYOUT
from lake.storage import Lake


def view_command(lake: Lake, *, host: str | None = None, port: int | None = None, annotated: bool = False) -> list[str]:
    """The ``inspect view`` command line for the lake's raw logs (``raw/``, all repos), or with
    ``annotated`` for their annotated copies. Two directories, two viewers: Inspect's viewer
    reads only under its log directory, and the lake's root holds far more than logs.

    For a ``gs://`` lake the gs URL is passed and Inspect reads it through its own gcsfs, with
    the machine's Google credentials; against an emulator set ``STORAGE_EMULATOR_HOST`` for it.
    """
    log_dir = lake.url(lake.layout.annotated_logs_prefix() if annotated else lake.layout.raw_prefix())
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


def sample_url(view_url: str, raw_log: str, sample_id: str, epoch: int) -> str:
    """Where Inspect's viewer (started by :func:`view_command`, reachable at ``view_url``) shows
    one sample of the raw log at lake path ``raw_log``: its routes are in the URL's fragment,
    ``#/logs/<log path under the log dir>/samples/sample/<id>/<epoch>/``. An annotated copy has
    the raw log's path under its own log directory, so the annotated viewer's URL for the sample
    is this with that viewer's ``view_url``."""
    prefix = LAYOUT.raw_prefix() + "/"
    if not raw_log.startswith(prefix):
        raise ValueError(f"{raw_log!r} is not a raw log of the lake (under {prefix})")
    log_path = "/".join(quote(part, safe="") for part in raw_log[len(prefix) :].split("/"))
    return f"{view_url.rstrip('/')}/#/logs/{log_path}/samples/sample/{quote(sample_id, safe='')}/{int(epoch)}/"
