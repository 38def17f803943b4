"""Child processes that a test interrupts with SIGINT, as a terminal's Ctrl-C would."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """``preexec_fn`` for a child that a test sends SIGINT: a shell starts background jobs (a CI
    script's `cmd &`, nohup) with SIGINT ignored, children inherit that, and Python then never
    raises KeyboardInterrupt. A terminal's foreground command has the default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
