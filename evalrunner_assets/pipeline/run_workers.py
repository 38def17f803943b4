"""Which runs under way have lost their run worker (plain Python: no Dagster here).

Dagster's ``DefaultRunLauncher`` (a local instance, ``evalrunner serve``) starts each run in a
process of its own and never checks on it: a worker killed by ``kill -9`` or the OOM killer
leaves its run STARTED for ever. The run-worker reaper (``sensors/run_workers.py``) asks
:func:`judge` which runs under way have no live worker any more and marks those failed.

A run names its worker processes in two ways:

- its own run tags (:data:`WORKER_PID_TAG`, :data:`WORKER_HOST_TAG`, :data:`WORKER_STARTED_TAG`),
  written by the first step of every evalrunner job from the process executing it
  (:func:`worker_tags`); the host is known only this way;
- Dagster's engine event "Started process for run (pid: N)", written by the run worker a
  launcher started (the daemon's runs; not ``execute_in_process`` runs of the CLI).

Both are on the same host (a step runs in its run worker or in a child of it). A run is judged
only when that host is this one, and is dead only when every process it names is gone: no such
pid, a zombie, or a pid now held by a process that started after the worker was recorded (the
kernel reuses pids). A run that names no process or another host, or whose process is alive, is
left alone, with the reason.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

# Run tags of the process executing a run (written by its first step). Bookkeeping for the
# reaper, not for people: under the prefix Dagster's UI hides from the Runs list and run pages
# (its HIDDEN_TAG_PREFIX). Runs tagged before that carry the visible names (LEGACY_TAGS).
HIDDEN_TAG_PREFIX = ".dagster/"
WORKER_PID_TAG = f"{HIDDEN_TAG_PREFIX}evalrunner/worker-pid"
WORKER_HOST_TAG = f"{HIDDEN_TAG_PREFIX}evalrunner/worker-host"
WORKER_STARTED_TAG = f"{HIDDEN_TAG_PREFIX}evalrunner/worker-started"  # the process's start time (epoch seconds)
# The process that started the worker (its parent: Dagster's code server for a launched run)
# and that process's start time: while it lives, it may end the run itself when the worker dies.
LAUNCHER_PID_TAG = f"{HIDDEN_TAG_PREFIX}evalrunner/launcher-pid"
LAUNCHER_STARTED_TAG = f"{HIDDEN_TAG_PREFIX}evalrunner/launcher-started"
LEGACY_TAGS = {
    tag: tag.removeprefix(HIDDEN_TAG_PREFIX) for tag in (WORKER_PID_TAG, WORKER_HOST_TAG, WORKER_STARTED_TAG)
}
# Set on a run the reaper failed: its sensor may relaunch it (value "true").
WORKER_LOST_TAG = "evalrunner/worker-lost"

# A process's start time read from /proc is exact to a clock tick, but the boot time it is
# added to is whole seconds; times from two readings on one host agree within this.
START_TIME_SLACK_S = 2.0


@dataclass(frozen=True)
class WorkerProcess:
    """A process that a run says executes it."""

    pid: int
    source: str  # where the run names it: "run tags" / "engine event"
    started_at: float | None = None  # the process's own start time, when recorded
    seen_at: float | None = None  # a moment it was known to be running (the process started before)


@dataclass(frozen=True)
class RunUnderWay:
    """A run in STARTING or STARTED, with the processes it names and their host."""

    run_id: str
    job_name: str
    status: str  # "STARTING" / "STARTED"
    since: float | None  # when it entered that status (epoch seconds), if known
    host: str | None  # the host of its worker, None when not recorded
    workers: tuple[WorkerProcess, ...]
    launcher: WorkerProcess | None = None  # the process that started its worker, when recorded


@dataclass(frozen=True)
class ProcessInfo:
    """What the process table says about a pid that exists."""

    started_at: float | None  # epoch seconds, None when the table cannot tell
    zombie: bool  # exited, not yet reaped by its parent: gone for our purposes
    command: str = ""
    # A zombie's exit status as waitpid(2) reports it, when the table can tell (/proc's
    # "exit_code"; reads 0 without ptrace access, so 0 is taken as unknown).
    exit_status: int | None = None


def describe_exit(status: int) -> str:
    """A waitpid(2) status in the words Dagster's code server uses for a run worker that died
    ("was terminated by signal 9 (SIGKILL)"), so both reporters of one death read alike."""
    if status & 0x7F:
        number = status & 0x7F
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown signal"
        return f"was terminated by signal {number} ({name})"
    return f"exited with code {(status >> 8) & 0xFF}"


class ProcessTable(Protocol):
    def lookup(self, pid: int) -> ProcessInfo | None:
        """The process with this pid, or None when there is none."""
        ...


@dataclass(frozen=True)
class Judgement:
    run: RunUnderWay
    dead: bool
    reason: str  # why it is dead, or why it was left alone
    worker: WorkerProcess | None = None  # the process the reason is about
    # Dead, but the process that started the worker lives (a zombie's parent, or the recorded
    # launcher): when that is the Dagster code server that launched the run, it fails the run
    # itself within a second, saying how the worker died. Two writers failing one run would
    # report one death twice, so the reaper gives it time first (sensors/run_workers.py).
    awaiting_parent: bool = False


def _gone(worker: WorkerProcess, info: ProcessInfo | None) -> str | None:
    """Why ``worker`` is gone, or None while its pid is held by the worker itself."""
    if info is None:
        return "no such process"
    if info.zombie:
        how = describe_exit(info.exit_status) if info.exit_status else "has exited"
        return f"it {how}, a zombie awaiting its parent"
    if info.started_at is not None:
        if worker.started_at is not None and abs(info.started_at - worker.started_at) > START_TIME_SLACK_S:
            return f"the pid now belongs to another process ({info.command or '?'}, started at {info.started_at:.0f})"
        if worker.seen_at is not None and info.started_at > worker.seen_at + START_TIME_SLACK_S:
            return f"the pid now belongs to a process started later ({info.command or '?'})"
    return None


def judge_run(
    run: RunUnderWay, table: ProcessTable, this_host: str, now: float, starting_timeout_s: float
) -> Judgement:
    """Whether ``run``'s run worker is gone from this host (see the module docstring)."""
    if run.status == "STARTING" and run.since is not None and now - run.since < starting_timeout_s:
        return Judgement(run, False, f"starting for {now - run.since:.0f} s (under {starting_timeout_s:g} s)")
    if not run.workers:
        return Judgement(run, False, "no worker pid recorded yet")
    if run.host is None:
        pids = ", ".join(str(w.pid) for w in run.workers)
        return Judgement(run, False, f"the host of its worker (pid {pids}) is not recorded")
    if run.host != this_host:
        return Judgement(run, False, f"its worker runs on {run.host}, not on this host ({this_host})")
    reasons: list[tuple[WorkerProcess, str, bool]] = []
    for worker in run.workers:
        info = table.lookup(worker.pid)
        why = _gone(worker, info)
        if why is None:
            return Judgement(run, False, f"its worker pid {worker.pid} ({worker.source}) is alive", worker)
        reasons.append((worker, why, info is not None and info.zombie))
    worker, why, zombie = reasons[0]
    launcher_alive = run.launcher is not None and _gone(run.launcher, table.lookup(run.launcher.pid)) is None
    return Judgement(run, True, why, worker, awaiting_parent=zombie or launcher_alive)


def judge(
    runs: Iterable[RunUnderWay], table: ProcessTable, this_host: str, now: float, starting_timeout_s: float
) -> list[Judgement]:
    return [judge_run(r, table, this_host, now, starting_timeout_s) for r in runs]


def workers_from_tags(tags: Mapping[str, str]) -> tuple[str | None, WorkerProcess | None]:
    """(host, process) recorded in a run's tags; (None, None) when absent or malformed."""
    tags = {**{tag: tags[old] for tag, old in LEGACY_TAGS.items() if old in tags}, **tags}
    host = tags.get(WORKER_HOST_TAG) or None
    try:
        pid = int(tags[WORKER_PID_TAG])
    except (KeyError, ValueError):
        return host, None
    try:
        started = float(tags[WORKER_STARTED_TAG])
    except (KeyError, ValueError):
        started = None
    return host, WorkerProcess(pid, "run tags", started_at=started)


def launcher_from_tags(tags: Mapping[str, str]) -> WorkerProcess | None:
    """The process that started a run's worker, as its tags record it (None when absent)."""
    try:
        pid = int(tags[LAUNCHER_PID_TAG])
    except (KeyError, ValueError):
        return None
    try:
        started = float(tags[LAUNCHER_STARTED_TAG])
    except (KeyError, ValueError):
        started = None
    return WorkerProcess(pid, "launcher tag", started_at=started)


# -- this host's process table (Linux /proc) ------------------------------------------------------
class ProcTable:
    """The process table of this host, read from ``/proc``. Where /proc is missing (not Linux)
    a pid's existence comes from ``kill(pid, 0)`` and its start time is unknown."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self._boot: float | None = None
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def boot_time(self) -> float | None:
        if self._boot is None:
            try:
                with open(f"{self.proc}/stat", encoding="ascii") as f:
                    for line in f:
                        if line.startswith("btime "):
                            self._boot = float(line.split()[1])
            except OSError:
                return None
        return self._boot

    def lookup(self, pid: int) -> ProcessInfo | None:
        try:
            with open(f"{self.proc}/{pid}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except FileNotFoundError:
            return None
        except OSError:
            return self._lookup_by_signal(pid)
        # "pid (comm) state ppid …": comm may hold spaces and parentheses; the last ")" ends it.
        fields = stat[stat.rindex(")") + 2 :].split()
        state, start_ticks = fields[0], int(fields[19])
        zombie = state in ("Z", "X")
        # Field 52, "exit_code" (Linux 3.5+): fields[] starts at field 3.
        exit_status = int(fields[49]) if zombie and len(fields) > 49 else None
        boot = self.boot_time()
        return ProcessInfo(
            started_at=None if boot is None else boot + start_ticks / self._tick,
            zombie=zombie,
            command=self._command(pid),
            exit_status=exit_status or None,
        )

    def _command(self, pid: int) -> str:
        try:
            with open(f"{self.proc}/{pid}/cmdline", "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
        except OSError:
            return ""

    @staticmethod
    def _lookup_by_signal(pid: int) -> ProcessInfo | None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # someone else's process: it exists
        return ProcessInfo(started_at=None, zombie=False)


def this_host() -> str:
    return socket.gethostname()


def worker_tags(table: ProcTable | None = None) -> dict[str, str]:
    """The run tags naming this process as a run's worker (see :data:`WORKER_PID_TAG`)."""
    table = table or ProcTable()
    pid, parent = os.getpid(), os.getppid()
    tags = {WORKER_PID_TAG: str(pid), WORKER_HOST_TAG: this_host()}
    info = table.lookup(pid)
    if info is not None and info.started_at is not None:
        tags[WORKER_STARTED_TAG] = f"{info.started_at:.2f}"
    if parent > 1:  # pid 1 (init, a container's entry point) never ends a run
        tags[LAUNCHER_PID_TAG] = str(parent)
        launcher = table.lookup(parent)
        if launcher is not None and launcher.started_at is not None:
            tags[LAUNCHER_STARTED_TAG] = f"{launcher.started_at:.2f}"
    return tags
