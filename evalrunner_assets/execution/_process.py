"""Local process control shared by the bubblewrap and unsafe-local backends.

The controller owns the process: it starts it in a new session (its own process group) with
resource limits applied in the child before ``exec``, drains stdout and stderr on threads so
the child never blocks on a full pipe, enforces the wall clock and cancellation by killing the
whole process group (and the sandbox's cgroup, when there is one), and only then reads the
output directory — without following links, regular files only, within caps.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import re
import resource
import signal
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from evalrunner_assets.execution.sandbox import Limits, SandboxStatus

STDERR_TAIL_BYTES = 16 * 1024
REPLY_LINE_BYTES = 1024 * 1024  # a warm worker's reply line; the log itself travels as a file

_SIGNAL_CAUSES: dict[int, str] = {
    signal.SIGKILL: "killed (SIGKILL: memory limit, pids limit or an external kill)",
    signal.SIGXCPU: "CPU time limit exceeded (SIGXCPU)",
    signal.SIGXFSZ: "file size limit exceeded (SIGXFSZ)",
    signal.SIGSEGV: "segmentation fault (SIGSEGV)",
    signal.SIGABRT: "aborted (SIGABRT)",
    signal.SIGBUS: "bus error (SIGBUS)",
}


def describe_signal(sig: int) -> str:
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return _SIGNAL_CAUSES.get(sig, f"killed by {name}")


# --- cgroups: the only pids limit that holds for a process running as root ------------------


def _chunks(fd: int) -> Iterator[bytes]:
    """Everything readable from ``fd`` until EOF (or the pipe breaks), in chunks."""
    while True:
        try:
            b = os.read(fd, 65536)
        except OSError:
            return
        if not b:
            return
        yield b


def _event_count(path: Path, key: str) -> int:
    """The value of ``key`` in a cgroup ``*.events``-style file (0 if absent or unreadable)."""
    try:
        for line in path.read_text().splitlines():
            name, _, val = line.partition(" ")
            if name == key:
                return int(val or 0)
    except (OSError, ValueError):
        pass
    return 0


class Cgroup:
    """A per-sandbox cgroup (v1 ``pids`` + optional ``memory`` hierarchies, or one v2 group).

    RLIMIT_NPROC counts processes per real uid and is never enforced for uid 0, so when the
    controller runs as root (CI containers, this machine) a fork bomb is only bounded by a
    cgroup ``pids.max``. Memory is capped for the whole sandbox too when the controller can."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls, limits: Limits, prefix: str = "evalrunner") -> Cgroup | None:
        # The owner's pid in the name lets a later controller remove what a killed one left.
        name = f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        v1_pids = Path("/sys/fs/cgroup/pids")
        if (v1_pids / "cgroup.procs").exists():
            made: list[Path] = []
            try:
                d = v1_pids / name
                d.mkdir()
                made.append(d)
                (d / "pids.max").write_text(str(limits.pids))
                mem = Path("/sys/fs/cgroup/memory")
                if (mem / "cgroup.procs").exists():
                    try:
                        md = mem / name
                        md.mkdir()
                        made.append(md)
                        (md / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
                    except OSError:
                        pass  # the pids limit is what we need; memory also has RLIMIT_AS
                return cls(made)
            except OSError:
                cls(made).remove()
                return None
        return cls._create_v2(limits, name)

    @classmethod
    def _create_v2(cls, limits: Limits, name: str) -> Cgroup | None:
        root = Path("/sys/fs/cgroup")
        try:
            own = Path("/proc/self/cgroup").read_text().splitlines()
            rel = next(line.split("::", 1)[1] for line in own if line.startswith("0::"))
        except (OSError, StopIteration):
            return None
        parent = root / rel.lstrip("/")
        try:
            if "pids" not in (parent / "cgroup.subtree_control").read_text().split():
                return None
            d = parent / name
            d.mkdir()
        except OSError:
            return None
        try:
            (d / "pids.max").write_text(str(limits.pids))
            try:
                (d / "memory.max").write_text(str(limits.memory_bytes))
            except OSError:
                pass
            return cls([d])
        except OSError:
            cls([d]).remove()
            return None

    @classmethod
    def sweep_dead_owners(cls, prefix: str = "evalrunner") -> list[Path]:
        """Remove the cgroups of controllers that no longer run (killed with ``kill -9``: their
        sandboxes died with them, the empty groups stayed). Returns the groups removed."""
        pattern = re.compile(rf"^{re.escape(prefix)}-(\d+)-[0-9a-f]{{12}}$")
        parents = [Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/memory")]
        try:
            own = Path("/proc/self/cgroup").read_text().splitlines()
            rel = next(line.split("::", 1)[1] for line in own if line.startswith("0::"))
            parents.append(Path("/sys/fs/cgroup") / rel.lstrip("/"))
        except (OSError, StopIteration):
            pass
        removed = []
        for parent in parents:
            try:
                entries = list(parent.iterdir())
            except OSError:
                continue
            for d in entries:
                m = pattern.match(d.name)
                if m and d.is_dir() and not pid_alive(int(m.group(1))):
                    cls([d]).remove()
                    if not d.exists():
                        removed.append(d)
        return removed

    def join_self(self) -> None:
        """Called in the child before exec: move this process into every hierarchy."""
        pid = str(os.getpid())
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(pid)

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return out

    def kill_all(self) -> None:
        for _ in range(250):  # up to ~5 s: dying processes leave the cgroup only once torn down
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def memory_oom_killed(self) -> bool:
        # cgroup v1 reports OOM kills in memory.oom_control, v2 in memory.events.
        return any(
            _event_count(d / "memory.oom_control", "oom_kill") or _event_count(d / "memory.events", "oom_kill")
            for d in self.dirs
        )

    def pids_limit_hit(self) -> bool:
        return any(_event_count(d / "pids.events", "max") for d in self.dirs)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def count_own_processes() -> int:
    """Processes of this real uid (what RLIMIT_NPROC counts)."""
    uid = os.getuid()
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def make_preexec(limits: Limits, cgroup: Cgroup | None, nproc: int | None) -> Callable[[], None]:
    """The child-side setup before exec: limits, then cgroup membership."""

    def preexec() -> None:
        mem = limits.memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_DATA, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if cgroup is not None:
            cgroup.join_self()

    return preexec


# --- output collection ----------------------------------------------------------------------


def collect_outputs(out_dir: Path, limits: Limits) -> tuple[dict[str, bytes], dict[str, str]]:
    """Regular files under ``out_dir`` (relative ``/`` names), read without following links.

    Everything else is listed in the rejected map with the reason, as are files beyond the
    size and count caps."""
    outputs: dict[str, bytes] = {}
    rejected: dict[str, str] = {}
    total = 0
    try:
        root_fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        return {}, {".": f"output directory unreadable: {exc.strerror}"}

    def walk(dir_fd: int, prefix: str, depth: int) -> None:
        nonlocal total
        for name in sorted(os.listdir(dir_fd)):
            rel = f"{prefix}{name}"
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError as exc:
                rejected[rel] = f"cannot stat: {exc.strerror}"
                continue
            if stat.S_ISLNK(st.st_mode):
                rejected[rel] = "symlink (not collected; links are never followed)"
            elif stat.S_ISDIR(st.st_mode):
                if depth >= 8:
                    rejected[rel] = "directory nested too deeply"
                    continue
                try:
                    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
                except OSError as exc:
                    rejected[rel] = f"cannot open directory: {exc.strerror}"
                    continue
                try:
                    walk(sub, rel + "/", depth + 1)
                finally:
                    os.close(sub)
            elif not stat.S_ISREG(st.st_mode):
                kind = (
                    "fifo"
                    if stat.S_ISFIFO(st.st_mode)
                    else ("socket" if stat.S_ISSOCK(st.st_mode) else "device or special file")
                )
                rejected[rel] = f"{kind} (only regular files are collected)"
            elif len(outputs) >= limits.output_files:
                rejected[rel] = f"over the file count cap ({limits.output_files})"
            elif total + st.st_size > limits.output_bytes:
                rejected[rel] = (
                    f"over the output size cap ({st.st_size} bytes; "
                    f"{limits.output_bytes - total} left of {limits.output_bytes})"
                )
            else:
                try:
                    # O_NOFOLLOW|O_NONBLOCK: a file swapped for a link or fifo after lstat fails here.
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
                except OSError as exc:
                    rejected[rel] = f"cannot open: {exc.strerror}"
                    continue
                try:
                    fst = os.fstat(fd)
                    if not stat.S_ISREG(fst.st_mode):
                        rejected[rel] = "not a regular file when opened"
                        continue
                    cap = limits.output_bytes - total
                    chunks, got = [], 0
                    while got <= cap:
                        b = os.read(fd, min(1 << 20, cap + 1 - got))
                        if not b:
                            break
                        chunks.append(b)
                        got += len(b)
                    if got > cap:
                        rejected[rel] = f"grew over the output size cap while read ({limits.output_bytes})"
                        continue
                    outputs[rel] = b"".join(chunks)
                    total += got
                finally:
                    os.close(fd)

    try:
        walk(root_fd, "", 0)
    finally:
        os.close(root_fd)
    return outputs, rejected


# --- a live child process -------------------------------------------------------------------


@dataclass
class _Drain:
    cap: int
    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0


def _piped(stream: IO[bytes] | None) -> IO[bytes]:
    """One of the child's pipes; LiveProcess starts every child with all three piped."""
    if stream is None:
        raise RuntimeError("the child was started without this pipe")
    return stream


class LiveProcess:
    """A child in its own session with drained pipes; killed as a whole process group."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str | None,
        preexec: Callable[[], None],
        stdout_cap: int,
        line_mode: bool = False,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            preexec_fn=preexec,
            start_new_session=True,  # own process group: killpg reaches every descendant
            close_fds=True,
            pass_fds=pass_fds,
        )
        self.pgid = self.proc.pid
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_len = 0
        self._stdout = _Drain(stdout_cap)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.line_violation = ""
        self._threads = [threading.Thread(target=self._drain_stderr, daemon=True)]
        self._threads.append(
            threading.Thread(target=self._read_lines if line_mode else self._drain_stdout, daemon=True)
        )
        for t in self._threads:
            t.start()

    def _drain_stdout(self) -> None:
        d = self._stdout
        for b in _chunks(_piped(self.proc.stdout).fileno()):
            room = d.cap - len(d.data)
            if room > 0:
                d.data += b[:room]
            d.dropped += max(0, len(b) - max(room, 0))

    def _read_lines(self) -> None:
        f = _piped(self.proc.stdout)
        while True:
            line = f.readline(REPLY_LINE_BYTES + 1)
            if not line:
                break
            if len(line) > REPLY_LINE_BYTES and not line.endswith(b"\n"):
                self.line_violation = f"a reply line over {REPLY_LINE_BYTES} bytes"
                # discard the rest of this line, keep draining so the child never blocks
                while line and not line.endswith(b"\n"):
                    line = f.readline(65536)
                self.lines.put(b"")
                continue
            self.lines.put(line)
        self.lines.put(None)

    def _drain_stderr(self) -> None:
        for b in _chunks(_piped(self.proc.stderr).fileno()):
            self._stderr.append(b)
            self._stderr_len += len(b)
            while self._stderr_len - len(self._stderr[0]) >= STDERR_TAIL_BYTES and len(self._stderr) > 1:
                self._stderr_len -= len(self._stderr.popleft())

    @property
    def stdin(self) -> IO[bytes]:
        return _piped(self.proc.stdin)

    def write_stdin(self, data: bytes, close: bool) -> None:
        def feed() -> None:
            try:
                stdin = self.stdin
                stdin.write(data)
                stdin.flush()
                if close:
                    stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass

        # On a thread: a child that never reads stdin must not block the controller.
        threading.Thread(target=feed, daemon=True).start()

    def stderr_tail(self, chars: int = 4000) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")[-chars:]

    @property
    def stdout(self) -> tuple[bytes, bool]:
        return bytes(self._stdout.data), self._stdout.dropped > 0

    def wait(self, deadline: float, cancel: threading.Event | None) -> SandboxStatus | None:
        """Wait for exit; on deadline or cancel kill the group and return TIMEOUT/CANCELLED."""
        while True:
            try:
                self.proc.wait(timeout=0.05)
                return None
            except subprocess.TimeoutExpired:
                pass
            if cancel is not None and cancel.is_set():
                self.kill()
                return SandboxStatus.CANCELLED
            if time.monotonic() >= deadline:
                self.kill()
                return SandboxStatus.TIMEOUT

    def kill(self) -> None:
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def join_pipes(self, timeout: float = 5.0) -> None:
        for t in self._threads:
            t.join(timeout)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


def classify_exit(returncode: int, *, signal_offset: int | None) -> tuple[SandboxStatus, str]:
    """Map an exit code to a status and a cause. ``signal_offset`` is 128 for wrappers that
    report a child's death by signal N as exit 128+N (bubblewrap); None for direct children."""
    if returncode == 0:
        return SandboxStatus.OK, ""
    if returncode < 0:
        return SandboxStatus.KILLED, describe_signal(-returncode)
    if signal_offset is not None and returncode > signal_offset:
        sig = returncode - signal_offset
        if sig in (signal.SIGKILL, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT):
            return SandboxStatus.KILLED, describe_signal(sig)
    return SandboxStatus.EXIT_NONZERO, f"exited with code {returncode}"


def parse_reply(line: bytes) -> dict | str:
    """A warm worker's reply: a JSON object, or a string saying why it is not one."""
    if not line:
        return "empty reply line"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"reply is not valid UTF-8 at byte {exc.start}"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"reply is not valid JSON at position {exc.pos}: {exc.msg}"
    if not isinstance(obj, dict):
        return f"reply is JSON {type(obj).__name__}, not an object"
    return obj


__all__ = [
    "Cgroup",
    "LiveProcess",
    "classify_exit",
    "collect_outputs",
    "count_own_processes",
    "describe_signal",
    "make_preexec",
    "parse_reply",
]
