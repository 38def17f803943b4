"""The trusted entrypoint of a Kubernetes sandbox pod (``python -m evalrunner_assets.execution.pod_wrapper``).

One pod runs three roles of this module, each in its own container:

``receive`` (init container)
    Reads one framed payload from its stdin (written by the controller through the attach
    API), checks sizes and digests, unpacks the repository tarball into the repo volume
    (which the sandbox container mounts read-only) and leaves the request's stdin bytes and a
    per-pod result key in the control volume. No untrusted code has run yet.

``run`` (the ``sandbox`` container, PID 1)
    Reads and deletes the result key, marks itself non-dumpable, then runs the untrusted
    command as a child in its own session with a clean environment and rlimits. The child's
    stdout/stderr go to pipes the wrapper drains into capped buffers -- never to the pod log.
    After the child exits the wrapper kills whatever it left behind, writes ``result.json``
    (HMAC-signed with the key the child never saw) and one summary line to the pod log, and
    exits 0. Exit codes other than 0 mean the wrapper itself failed.

``hold`` / ``collect`` (the ``collector`` container)
    ``hold`` keeps the pod alive after the sandbox container exited so the controller can run
    ``collect`` through the exec API: it streams the signed result, the captured stdout and the
    regular files of the output volume (mounted read-only here) as length-prefixed records.

``serve`` / ``call`` (a warm session pod)
    ``serve`` (the sandbox container) starts the untrusted worker once and relays successive
    requests to it as JSON lines; ``call`` (run through the exec API in the collector) drops
    request N into the inbox volume (read-only for the sandbox container), waits for the
    wrapper's signed reply N and streams it with the output files, like ``collect``.

``hold`` / ``exec`` / ``readfile`` / ``writefile`` (a workspace pod, one per Inspect sample)
    The sandbox container only holds; its repository volume is the sample's writable
    workspace. Each command of the sample is one ``exec`` of this module in that container
    (wall clock, rlimits, capped output, every leftover process killed); files go in and out
    through ``readfile``/``writefile``, confined to the workspace.

Why the split: anything the untrusted process prints could forge a message if it reached the
pod log (dagster-k8s parses Pipes messages out of it), so only the wrapper writes there; and the
pod never holds credentials, so results leave through the controller, never pushed from here.

This module imports only the standard library (``dagster_pipes`` optionally) and the
standard-library leaf ``evalrunner_assets.errors``, so it starts fast.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import hmac
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import IO

from evalrunner_assets.errors import EvalrunnerError

PROTOCOL_VERSION = 1
KEY_FILE = ".result-key"
STDIN_FILE = "stdin.bin"
STDOUT_FILE = "stdout.bin"
RESULT_FILE = "result.json"
PIPES_FILE = "pipes.jsonl"  # Dagster Pipes messages of the wrapper (never of the child)
MAX_HEADER_BYTES = 64 * 1024

EXIT_OK = 0
EXIT_BAD_PAYLOAD = 3  # receive: the payload failed a size/digest/format check
EXIT_NOT_DELIVERED = 4  # run: no result key, i.e. the repository was never delivered
EXIT_WRAPPER_ERROR = 5  # run: the wrapper could not start the child or write its result

_PR_SET_DUMPABLE = 4


class PayloadError(EvalrunnerError, ValueError):
    """The framed payload on stdin is malformed; the message says which part."""


# --- framing shared with the controller -------------------------------------------------


def encode_payload(tar_bytes: bytes, stdin_bytes: bytes, key: bytes) -> bytes:
    """The bytes the controller writes to the ``receive`` container's stdin."""
    header = {
        "version": PROTOCOL_VERSION,
        "tar_size": len(tar_bytes),
        "tar_sha256": hashlib.sha256(tar_bytes).hexdigest(),
        "stdin_size": len(stdin_bytes),
        "stdin_sha256": hashlib.sha256(stdin_bytes).hexdigest(),
        "key": key.hex(),
    }
    return json.dumps(header, sort_keys=True).encode() + b"\n" + tar_bytes + stdin_bytes


def result_mac(key: bytes, result: dict, stdout_bytes: bytes) -> str:
    """HMAC over the canonical result (without ``mac``) and the captured stdout."""
    body = {k: v for k, v in result.items() if k != "mac"}
    msg = json.dumps(body, sort_keys=True).encode() + b"\n" + hashlib.sha256(stdout_bytes).digest()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def write_record(out: IO[bytes], header: dict, data: bytes = b"") -> None:
    header = {**header, "size": len(data)}
    out.write(json.dumps(header, sort_keys=True).encode() + b"\n")
    out.write(data)


def read_records(stream: bytes) -> list[tuple[dict, bytes]]:
    """Parse the ``collect`` stream; raises :class:`PayloadError` naming the bad record."""
    records: list[tuple[dict, bytes]] = []
    pos = 0
    while pos < len(stream):
        nl = stream.find(b"\n", pos, pos + MAX_HEADER_BYTES)
        if nl < 0:
            raise PayloadError(f"collect record {len(records)}: header has no newline within {MAX_HEADER_BYTES} bytes")
        try:
            header = json.loads(stream[pos:nl])
            size = int(header["size"])
        except (ValueError, KeyError, TypeError) as exc:
            raise PayloadError(f"collect record {len(records)}: header is not valid JSON with a size ({exc})") from exc
        start, end = nl + 1, nl + 1 + size
        if size < 0 or end > len(stream):
            raise PayloadError(f"collect record {len(records)}: declares {size} bytes, stream ends first")
        records.append((header, stream[start:end]))
        pos = end
    return records


# --- receive ------------------------------------------------------------------------------


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(min(left, 1 << 20))
        if not chunk:
            raise PayloadError(f"stdin ended {left} bytes short of the declared {n}")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(stdin: IO[bytes], repo: Path, control: Path, max_bytes: int) -> dict:
    line = stdin.readline(MAX_HEADER_BYTES)
    if not line.endswith(b"\n"):
        raise PayloadError("payload header: missing or longer than 64 KiB")
    try:
        header = json.loads(line)
    except ValueError as exc:
        raise PayloadError(f"payload header is not JSON: {exc}") from exc
    if header.get("version") != PROTOCOL_VERSION:
        raise PayloadError(f"payload version {header.get('version')!r}, expected {PROTOCOL_VERSION}")
    tar_size, stdin_size = int(header["tar_size"]), int(header["stdin_size"])
    if tar_size + stdin_size > max_bytes:
        raise PayloadError(f"payload of {tar_size + stdin_size} bytes exceeds the cap of {max_bytes}")
    tar_bytes = _read_exact(stdin, tar_size)
    if hashlib.sha256(tar_bytes).hexdigest() != header["tar_sha256"]:
        raise PayloadError("repository tarball digest mismatch")
    stdin_bytes = _read_exact(stdin, stdin_size)
    if hashlib.sha256(stdin_bytes).hexdigest() != header["stdin_sha256"]:
        raise PayloadError("stdin digest mismatch")
    key = bytes.fromhex(header["key"])
    if len(key) < 16:
        raise PayloadError("result key shorter than 16 bytes")

    repo.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
        # The data filter refuses absolute names, '..', links leaving the tree and device files.
        tar.extractall(repo, filter="data")
    (control / STDIN_FILE).write_bytes(stdin_bytes)
    fd = os.open(control / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return {"event": "evalrunner-sandbox-received", "tar_sha256": header["tar_sha256"], "tar_size": tar_size}


# --- run ----------------------------------------------------------------------------------


def _make_undumpable() -> None:
    # A non-dumpable process cannot be ptraced, nor its /proc/<pid>/fd opened, by a process of
    # the same uid without CAP_SYS_PTRACE: the child can neither read the result key from our
    # memory nor write to our stdout (the pod log) through /proc/1/fd/1.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _child_limits(cpu_seconds: int, file_size_bytes: int) -> Callable[[], None]:
    import resource

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_bytes, file_size_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _piped(stream: IO[bytes] | None) -> IO[bytes]:
    """A child's stream that was opened with ``PIPE`` (so never None)."""
    if stream is None:
        raise RuntimeError("the child was started without this pipe")
    return stream


class _Capture(threading.Thread):
    """Drains one pipe: keeps the first ``head`` bytes, or a ring of the last ``tail`` bytes."""

    def __init__(self, pipe: IO[bytes], *, head: int = 0, tail: int = 0) -> None:
        super().__init__(daemon=True)
        self.pipe, self.head, self.tail = pipe, head, tail
        self.data = bytearray()
        self.total = 0

    def run(self) -> None:
        while True:
            chunk = self.pipe.read(65536)
            if not chunk:
                break
            self.total += len(chunk)
            if self.head:
                room = self.head - len(self.data)
                if room > 0:
                    self.data += chunk[:room]
            else:
                self.data += chunk
                if len(self.data) > self.tail:
                    del self.data[: len(self.data) - self.tail]


def _kill_leftovers(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if os.getpid() != 1:
        return
    # As PID 1 of the container we can see every process the child spawned, including those
    # that escaped its session with setsid: kill them all so nothing touches the output
    # volume after the result is written.
    for _ in range(50):
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != 1]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.02)


def _atomic_write(path: Path, data: bytes) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)  # the child may have planted a directory at the name
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()  # a leftover the child planted; O_EXCL below refuses anything else
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _signal_detail(sig: int) -> tuple[str, str]:
    name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
    if sig == signal.SIGXCPU:
        return "killed", f"{name}: CPU-time limit reached"
    if sig == signal.SIGXFSZ:
        return "killed", f"{name}: file-size limit reached"
    if sig == signal.SIGKILL:
        return "killed", f"{name}: killed (memory limit or external kill)"
    return "killed", f"killed by {name}"


def _take_key(control: Path) -> bytes | None:
    key_path = control / KEY_FILE
    try:
        key = key_path.read_bytes()
        key_path.unlink()
    except OSError as exc:
        print(json.dumps({"event": "evalrunner-sandbox-error", "detail": f"no result key: {exc}"}), flush=True)
        return None
    return key


def _child_cwd(args: argparse.Namespace) -> Path | None:
    repo = Path(args.repo).resolve()
    cwd = (repo / args.workdir).resolve()
    if cwd != repo and repo not in cwd.parents:
        print(
            json.dumps({"event": "evalrunner-sandbox-error", "detail": f"workdir {args.workdir!r} leaves the repo"}),
            flush=True,
        )
        return None
    return cwd


def _child_env(args: argparse.Namespace) -> dict[str, str]:
    # The same fixed variables as the local backends' sandboxes; nothing of our own leaks in.
    path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    if getattr(args, "python_env", None):  # a repository environment, mounted read-only
        path = f"{os.path.join(args.python_env, 'bin')}:{path}"
    env = {
        "PATH": path,
        "HOME": args.scratch,
        "TMPDIR": args.tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "EVALRUNNER_REPO": args.repo,
        "INSPECT_DISPLAY": "none",
        "NO_COLOR": "1",
    }
    if getattr(args, "out", None):  # a workspace pod has no output directory
        env["EVALRUNNER_OUT"] = args.out
    for item in args.env or []:
        name, _, value = item.partition("=")
        env[name] = value
    return env


def feed_stdin(child: subprocess.Popen, data: bytes) -> None:
    """Write ``data`` to the child's stdin (started with stdin=PIPE) and close it, from a thread,
    so a child that does not read cannot block the wrapper; one that exits early is fine."""
    child_stdin = child.stdin
    assert child_stdin is not None

    def feed() -> None:
        try:
            child_stdin.write(data)
            child_stdin.close()
        except (BrokenPipeError, OSError):
            pass

    threading.Thread(target=feed, daemon=True).start()


def run(args: argparse.Namespace) -> int:
    control = Path(args.control)
    key = _take_key(control)
    if key is None:
        return EXIT_NOT_DELIVERED
    _make_undumpable()
    cwd = _child_cwd(args)
    if cwd is None:
        return EXIT_WRAPPER_ERROR
    stdin_path = control / STDIN_FILE
    stdin_bytes = stdin_path.read_bytes() if stdin_path.exists() else b""
    env = _child_env(args)

    start = time.monotonic()
    status, detail, exit_code, sig = "ok", "", None, None
    terminated = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:  # pod deletion or deadline: take the child down with us
        terminated.set()

    signal.signal(signal.SIGTERM, on_term)
    try:
        child = subprocess.Popen(
            list(args.argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_child_limits(args.cpu_seconds, args.file_size_bytes),
        )
    except OSError as exc:
        status, detail = "crashed", f"could not start {args.argv[0]!r}: {exc}"
        child = None

    stdout_bytes, stdout_total, stderr_tail = b"", 0, ""
    if child is not None:
        out = _Capture(_piped(child.stdout), head=args.stdout_bytes)
        err = _Capture(_piped(child.stderr), tail=args.stderr_tail_bytes)
        out.start()
        err.start()

        feed_stdin(child, stdin_bytes)
        deadline = start + args.wall_seconds
        while child.poll() is None:
            if terminated.is_set():
                status, detail = "cancelled", "the pod was asked to stop (SIGTERM)"
                break
            if time.monotonic() >= deadline:
                status, detail = "timeout", f"wall-clock limit of {args.wall_seconds:g}s reached"
                break
            time.sleep(0.05)
        _kill_leftovers(child.pid)
        child.wait()
        out.join(timeout=5)
        err.join(timeout=5)
        stdout_bytes, stdout_total = bytes(out.data), out.total
        stderr_tail = bytes(err.data).decode("utf-8", "replace")
        if status == "ok":
            rc = child.returncode
            if rc < 0:
                sig = -rc
                status, detail = _signal_detail(sig)
            else:
                exit_code = rc
                if rc != 0:
                    status, detail = "exit_nonzero", f"exited with code {rc}"

    result = {
        "version": PROTOCOL_VERSION,
        "status": status,
        "exit_code": exit_code,
        "signal": sig,
        "detail": detail,
        "duration_s": round(time.monotonic() - start, 3),
        "stdout_total": stdout_total,
        "stdout_truncated": stdout_total > len(stdout_bytes),
        "stderr_tail": stderr_tail,
    }
    summary = {"event": "evalrunner-sandbox-result", "status": status, "exit_code": exit_code, "detail": detail}
    pipes_bytes = _report_to_pipes(summary, control)
    result["pipes_sha256"] = hashlib.sha256(pipes_bytes).hexdigest()
    result["mac"] = result_mac(key, result, stdout_bytes)
    try:
        _atomic_write(control / STDOUT_FILE, stdout_bytes)
        _atomic_write(control / RESULT_FILE, json.dumps(result, sort_keys=True).encode())
    except OSError as exc:
        print(json.dumps({"event": "evalrunner-sandbox-error", "detail": f"could not write result: {exc}"}), flush=True)
        return EXIT_WRAPPER_ERROR
    print(json.dumps(summary, sort_keys=True), flush=True)
    return EXIT_OK


def _report_to_pipes(summary: dict, control: Path) -> bytes:
    """When launched by dagster-k8s's PipesK8sClient, write the summary as Pipes messages to
    ``control/pipes.jsonl`` and return the file's bytes (their digest goes into the signed result).

    The controller's message reader reads the file through the collector, only after checking
    the signature; the child is dead by now, and anything it planted at that name is removed
    first, so every message in the file is the wrapper's."""
    if "DAGSTER_PIPES_CONTEXT" not in os.environ:
        return b""
    path = control / PIPES_FILE
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()
    try:
        from dagster_pipes import encode_env_var, open_dagster_pipes

        # The wrapper, not the environment, decides where its messages go.
        os.environ["DAGSTER_PIPES_MESSAGES"] = encode_env_var({"path": str(path)})
        with open_dagster_pipes() as pipes:
            pipes.report_custom_message(summary)
    except Exception as exc:  # a reporting failure must not turn a finished run into a crash
        print(json.dumps({"event": "evalrunner-pipes-error", "detail": str(exc)}), flush=True)
    data, _ = _read_regular(path, 1 << 20)
    return data or b""


# --- serve / call (warm sessions) ---------------------------------------------------------

REQUEST_FILE = "{seq}.json"  # in the inbox volume, written by ``call``
REPLY_FILE = "reply-{seq}.json"  # in the control volume, signed by ``serve``
REPLY_OUT_FILE = "reply-{seq}.out"
MAX_REQUEST_BYTES = 16 << 20


def _clear_dir(path: Path) -> None:
    """Empty ``path`` without following links (the child may have planted some)."""
    for entry in os.scandir(path):
        p = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                p.unlink()
            except OSError:
                pass


class _Lines(threading.Thread):
    """Reads the worker's reply lines (at most ``cap`` bytes each) into a queue; ``None`` at EOF."""

    def __init__(self, pipe: IO[bytes], cap: int) -> None:
        super().__init__(daemon=True)
        import queue

        self.pipe, self.cap = pipe, cap
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.violation = ""

    def run(self) -> None:
        while True:
            line = self.pipe.readline(self.cap + 1)
            if not line:
                break
            if len(line) > self.cap and not line.endswith(b"\n"):
                self.violation = f"a reply line exceeds {self.cap} bytes"
                break
            self.lines.put(line.rstrip(b"\n"))
        self.lines.put(None)


def serve(args: argparse.Namespace) -> int:
    """Run the untrusted worker once and relay requests N = 1, 2, ... from the inbox to its
    stdin; each reply line goes back as ``reply-N`` signed with the key the worker never saw.
    Ends when the worker exits or breaks the protocol (after a final signed reply), or on
    SIGTERM (pod deletion)."""
    import queue

    control, inbox, out = Path(args.control), Path(args.inbox), Path(args.out)
    key = _take_key(control)
    if key is None:
        return EXIT_NOT_DELIVERED
    _make_undumpable()
    cwd = _child_cwd(args)
    if cwd is None:
        return EXIT_WRAPPER_ERROR
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    try:
        child = subprocess.Popen(
            list(args.argv),
            cwd=cwd,
            env=_child_env(args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_child_limits(args.cpu_seconds, args.file_size_bytes),
        )
    except OSError as exc:
        print(
            json.dumps({"event": "evalrunner-sandbox-error", "detail": f"could not start {args.argv[0]!r}: {exc}"}),
            flush=True,
        )
        return EXIT_WRAPPER_ERROR
    child_stdin = child.stdin
    assert child_stdin is not None  # started with stdin=PIPE
    replies = _Lines(_piped(child.stdout), args.stdout_bytes)
    err = _Capture(_piped(child.stderr), tail=args.stderr_tail_bytes)
    replies.start()
    err.start()

    def ended() -> tuple[str, str, int | None, int | None]:
        if replies.violation:
            return "crashed", f"the worker broke the protocol: {replies.violation}", None, None
        rc = child.poll()
        if rc is None:
            return "crashed", "the worker closed its reply stream", None, None
        if rc < 0:
            status, detail = _signal_detail(-rc)
            return status, detail, None, -rc
        return "exit_nonzero" if rc else "crashed", f"the worker exited with code {rc} before replying", rc, None

    seq, status, calls = 0, "ok", 0
    while status == "ok" and not terminated.is_set():
        seq += 1
        request_path = inbox / REQUEST_FILE.format(seq=seq)
        while not request_path.exists() and child.poll() is None and not terminated.is_set():
            time.sleep(0.02)
        if terminated.is_set():
            break
        started = time.monotonic()
        reply, exit_code, sig, detail = b"", None, None, ""
        if child.poll() is not None:
            replies.join(timeout=5)
            status, detail, exit_code, sig = ended()
        else:
            for old in (REPLY_FILE, REPLY_OUT_FILE):  # read by the controller before it sent this request
                try:
                    (control / old.format(seq=seq - 1)).unlink()
                except OSError:
                    pass
            _clear_dir(out)
            request = request_path.read_bytes()
            try:
                child_stdin.write(request.rstrip(b"\n") + b"\n")
                child_stdin.flush()
            except (BrokenPipeError, OSError):
                pass
            line = None
            while not terminated.is_set():
                try:
                    line = replies.lines.get(timeout=0.05)
                    break
                except queue.Empty:
                    continue
            if terminated.is_set():
                break
            if line is None:
                try:
                    child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
                # Its last words are in the pipe still being drained; a leftover process holding
                # the pipe open gets a bounded wait.
                err.join(timeout=2)
                status, detail, exit_code, sig = ended()
            else:
                reply = line
                calls += 1
        result = {
            "version": PROTOCOL_VERSION,
            "seq": seq,
            "status": status,
            "exit_code": exit_code,
            "signal": sig,
            "detail": detail,
            "duration_s": round(time.monotonic() - started, 3),
            "stdout_total": len(reply),
            "stdout_truncated": False,
            "stderr_tail": bytes(err.data).decode("utf-8", "replace"),
            "pipes_sha256": hashlib.sha256(b"").hexdigest(),
        }
        result["mac"] = result_mac(key, result, reply)
        try:
            _atomic_write(control / REPLY_OUT_FILE.format(seq=seq), reply)
            _atomic_write(control / REPLY_FILE.format(seq=seq), json.dumps(result, sort_keys=True).encode())
        except OSError as exc:
            print(
                json.dumps({"event": "evalrunner-sandbox-error", "detail": f"could not write reply {seq}: {exc}"}),
                flush=True,
            )
            status = "crashed"
    _kill_leftovers(child.pid)
    child.wait()
    print(json.dumps({"event": "evalrunner-session-end", "calls": calls, "status": status}, sort_keys=True), flush=True)
    return EXIT_OK


def _read_request(stdin: IO[bytes]) -> bytes:
    """``call``'s stdin: a decimal length line, then that many bytes (no EOF needed, so the
    exec stream's stdin need not be closable)."""
    line = stdin.readline(32)
    try:
        size = int(line.strip())
    except ValueError as exc:
        raise PayloadError(f"request length line is not a number: {line[:32]!r}") from exc
    if not 0 < size <= MAX_REQUEST_BYTES:
        raise PayloadError(f"request of {size} bytes is outside 1..{MAX_REQUEST_BYTES}")
    data = _read_exact(stdin, size)
    if b"\n" in data.rstrip(b"\n"):
        raise PayloadError("a request must be one JSON line")
    return data


def call(
    inbox: Path,
    out_dir: Path,
    control: Path,
    seq: int,
    timeout: float,
    max_files: int,
    max_bytes: int,
    stdin: IO[bytes],
    sink: IO[bytes],
) -> int:
    request = _read_request(stdin)
    try:
        (inbox / REQUEST_FILE.format(seq=seq - 1)).unlink()  # answered: the controller got its reply
    except OSError:
        pass
    tmp = inbox / f".{seq}.tmp"
    tmp.write_bytes(request)
    os.replace(tmp, inbox / REQUEST_FILE.format(seq=seq))
    reply = control / REPLY_FILE.format(seq=seq)
    deadline = time.monotonic() + timeout
    while not reply.exists():
        if time.monotonic() >= deadline:
            write_record(
                sink, {"kind": "result", "missing": True, "timeout": True, "reason": f"no reply within {timeout:g}s"}
            )
            write_record(sink, {"kind": "end", "files": 0, "bytes": 0})
            sink.flush()
            return EXIT_OK
        time.sleep(0.02)
    return collect(
        out_dir,
        control,
        max_files,
        max_bytes,
        sink,
        result_name=REPLY_FILE.format(seq=seq),
        stdout_name=REPLY_OUT_FILE.format(seq=seq),
    )


# --- hold / collect ---------------------------------------------------------------------


def hold(max_seconds: float) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait(max_seconds)
    return EXIT_OK


def _read_regular(path: Path, limit: int) -> tuple[bytes | None, str]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"cannot open: {exc.strerror}"
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if st.st_size > limit:
            return None, f"larger than the {limit}-byte cap ({st.st_size} bytes)"
        data = fh.read(limit + 1)
        if len(data) > limit:
            return None, f"larger than the {limit}-byte cap"
        return data, ""


def collect(
    out_dir: Path,
    control: Path,
    max_files: int,
    max_bytes: int,
    sink: IO[bytes],
    result_name: str = RESULT_FILE,
    stdout_name: str = STDOUT_FILE,
) -> int:
    result, why = _read_regular(control / result_name, 1 << 20)
    write_record(sink, {"kind": "result", "missing": result is None, "reason": why}, result or b"")
    stdout, _ = _read_regular(control / stdout_name, 1 << 30)
    write_record(sink, {"kind": "stdout"}, stdout or b"")
    pipes, _ = _read_regular(control / PIPES_FILE, 1 << 20)
    write_record(sink, {"kind": "pipes"}, pipes or b"")
    n_files = total = 0
    for root, dirs, files in os.walk(out_dir, followlinks=False):
        dirs.sort()
        for name in sorted(files) + sorted(d for d in dirs if os.path.islink(os.path.join(root, d))):
            path = Path(root) / name
            rel = path.relative_to(out_dir).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                write_record(sink, {"kind": "rejected", "name": rel, "reason": "symlink"})
                continue
            if not stat.S_ISREG(mode):
                write_record(sink, {"kind": "rejected", "name": rel, "reason": "not a regular file"})
                continue
            if n_files >= max_files:
                write_record(sink, {"kind": "rejected", "name": rel, "reason": f"more than {max_files} output files"})
                continue
            data, why = _read_regular(path, max_bytes - total)
            if data is None:
                write_record(sink, {"kind": "rejected", "name": rel, "reason": why})
                continue
            n_files += 1
            total += len(data)
            write_record(sink, {"kind": "file", "name": rel, "sha256": hashlib.sha256(data).hexdigest()}, data)
    write_record(sink, {"kind": "end", "files": n_files, "bytes": total})
    sink.flush()
    return EXIT_OK


# --- exec / readfile / writefile (a workspace pod: the Inspect sandbox provider) -------------
#
# A workspace pod's sandbox container only holds (``hold``); the repository volume is its
# writable workspace. Every Inspect ``exec`` is one ``exec`` of this module in that container:
# it runs the command as its child with a clean environment, rlimits and a wall clock, kills
# every process the command left (a child subreaper, so a daemon that escaped with setsid is
# still ours), and streams the outcome back as records. Its output is the sandboxed command's
# and as untrusted as any tool output; what the wrapper enforces is the timeout and the caps.

_PR_SET_CHILD_SUBREAPER = 36
EXEC_RESULT = "exec-result"


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat_line = fh.read()
        except OSError:
            continue
        # Field 4 (ppid) follows the command name, which is in parentheses and may hold spaces.
        fields = stat_line[stat_line.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _kill_descendants(pgid: int) -> None:
    """Kill the child's process group, then every process reparented to us (we are the child
    subreaper, so orphans of the command land here, whatever session they made)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    me = os.getpid()
    for _ in range(100):
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        left = _children_of(me)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def _read_framed(stdin: IO[bytes], cap: int) -> bytes:
    """A decimal length line, then that many bytes (the exec stream's stdin need not close)."""
    line = stdin.readline(32)
    try:
        size = int(line.strip())
    except ValueError as exc:
        raise PayloadError(f"stdin length line is not a number: {line[:32]!r}") from exc
    if not 0 <= size <= cap:
        raise PayloadError(f"stdin of {size} bytes is outside 0..{cap}")
    return _read_exact(stdin, size)


def exec_command(args: argparse.Namespace, stdin: IO[bytes], sink: IO[bytes]) -> int:
    """One command in the workspace: records ``exec-result`` (JSON), ``stdout``, ``stderr``."""
    _become_subreaper()
    stdin_bytes = _read_framed(stdin, args.max_stdin_bytes) if args.stdin else None
    start = time.monotonic()
    status, detail, exit_code = "ok", "", None
    stdout_bytes, stdout_total, stderr_tail = b"", 0, b""
    cwd, _ = _workspace_path(args.repo, args.workdir)  # not _child_cwd: stdout is the record stream
    child = None
    if cwd is None:
        status, detail = "refused", f"working directory {args.workdir!r} leaves the workspace"
    else:
        try:
            child = subprocess.Popen(
                list(args.argv),
                cwd=cwd,
                env=_child_env(args),
                stdin=subprocess.PIPE if stdin_bytes is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=_child_limits(args.cpu_seconds, args.file_size_bytes),
            )
        except OSError as exc:
            # As a shell would report it: the command did not start, exit 127 (126: not runnable).
            status, exit_code = "exit_nonzero", 127 if isinstance(exc, FileNotFoundError) else 126
            detail = f"could not start {args.argv[0]!r}: {exc.strerror or exc}"
            stderr_tail = (detail + "\n").encode()
    if child is not None:
        out = _Capture(_piped(child.stdout), head=args.stdout_bytes)
        err = _Capture(_piped(child.stderr), tail=args.stderr_tail_bytes)
        out.start()
        err.start()
        if stdin_bytes is not None:
            feed_stdin(child, stdin_bytes)
        try:
            child.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            status, detail = "timeout", f"wall-clock limit of {args.timeout:g}s reached; its processes were killed"
        _kill_descendants(child.pid)
        child.wait()
        out.join(timeout=5)
        err.join(timeout=5)
        stdout_bytes, stdout_total, stderr_tail = bytes(out.data), out.total, bytes(err.data)
        if status == "ok":
            rc = child.returncode
            if rc < 0:
                status, detail = _signal_detail(-rc)
                exit_code = 128 - rc
            else:
                exit_code = rc
                status = "ok" if rc == 0 else "exit_nonzero"
    result = {
        "status": status,
        "exit_code": exit_code,
        "detail": detail,
        "duration_s": round(time.monotonic() - start, 3),
        "stdout_total": stdout_total,
        "stdout_truncated": stdout_total > len(stdout_bytes),
    }
    write_record(sink, {"kind": EXEC_RESULT}, json.dumps(result, sort_keys=True).encode())
    write_record(sink, {"kind": "stdout"}, stdout_bytes)
    write_record(sink, {"kind": "stderr"}, stderr_tail)
    sink.flush()
    return EXIT_OK


def _workspace_path(repo: str, rel: str) -> tuple[Path | None, str]:
    """``rel`` inside the workspace with every symlink resolved, or None and why not."""
    root = Path(os.path.realpath(repo))
    if os.path.isabs(rel) or ".." in Path(rel).parts:
        return None, f"{rel!r} is not a relative path inside the workspace"
    path = Path(os.path.realpath(root / rel))
    if path != root and root not in path.parents:
        return None, f"{rel!r} resolves outside the workspace"
    return path, ""


def read_file(repo: str, rel: str, max_bytes: int, sink: IO[bytes]) -> int:
    path, why = _workspace_path(repo, rel)
    error, data = "outside", b""
    if path is not None:
        error, why = "", ""
        if path.is_dir():
            error, why = "is-a-directory", f"{rel!r} is a directory"
        elif not path.exists():
            error, why = "not-found", f"{rel!r} does not exist"
        else:
            got, why = _read_regular(path, max_bytes)
            if got is None:
                error = "too-large" if "cap" in why else "unreadable"
            else:
                data = got
    write_record(sink, {"kind": "file", "error": error, "detail": why}, data)
    sink.flush()
    return EXIT_OK


def write_file(repo: str, rel: str, max_bytes: int, stdin: IO[bytes], sink: IO[bytes]) -> int:
    data = _read_framed(stdin, max_bytes)
    path, why = _workspace_path(repo, rel)
    error = "outside" if path is None else ""
    if path is not None:
        if path.is_dir():
            error, why = "is-a-directory", f"{rel!r} is a directory"
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                _atomic_write(path, data)
            except OSError as exc:
                error, why = "unwritable", f"{rel!r}: {exc.strerror or exc}"
    write_record(sink, {"kind": "written", "error": error, "detail": why, "bytes": len(data)})
    sink.flush()
    return EXIT_OK


# --- command line -------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pod_wrapper", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("receive")
    r.add_argument("--repo", required=True)
    r.add_argument("--control", required=True)
    r.add_argument("--max-bytes", type=int, required=True)
    x = sub.add_parser("run")
    x.add_argument("--repo", required=True)
    x.add_argument("--out", required=True)
    x.add_argument("--scratch", required=True)
    x.add_argument("--tmp", default="/tmp")
    x.add_argument("--control", required=True)
    x.add_argument("--workdir", default=".")
    x.add_argument("--python-env", default=None)
    x.add_argument("--wall-seconds", type=float, required=True)
    x.add_argument("--cpu-seconds", type=int, required=True)
    x.add_argument("--file-size-bytes", type=int, required=True)
    x.add_argument("--stdout-bytes", type=int, required=True)
    x.add_argument("--stderr-tail-bytes", type=int, default=16384)
    x.add_argument("--env", action="append", metavar="NAME=VALUE")
    x.add_argument("argv", nargs="+")
    v = sub.add_parser("serve")
    for flag in ("--repo", "--out", "--scratch", "--control", "--inbox"):
        v.add_argument(flag, required=True)
    v.add_argument("--tmp", default="/tmp")
    v.add_argument("--workdir", default=".")
    v.add_argument("--python-env", default=None)
    v.add_argument("--cpu-seconds", type=int, required=True)
    v.add_argument("--file-size-bytes", type=int, required=True)
    v.add_argument("--stdout-bytes", type=int, required=True)
    v.add_argument("--stderr-tail-bytes", type=int, default=16384)
    v.add_argument("--env", action="append", metavar="NAME=VALUE")
    v.add_argument("argv", nargs="+")
    k = sub.add_parser("call")
    k.add_argument("--inbox", required=True)
    k.add_argument("--out", required=True)
    k.add_argument("--control", required=True)
    k.add_argument("--seq", type=int, required=True)
    k.add_argument("--timeout", type=float, required=True)
    k.add_argument("--max-files", type=int, required=True)
    k.add_argument("--max-bytes", type=int, required=True)
    h = sub.add_parser("hold")
    h.add_argument("--max-seconds", type=float, required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", required=True)
    c.add_argument("--control", required=True)
    c.add_argument("--max-files", type=int, required=True)
    c.add_argument("--max-bytes", type=int, required=True)
    e = sub.add_parser("exec")
    e.add_argument("--repo", required=True)
    e.add_argument("--scratch", required=True)
    e.add_argument("--tmp", default="/tmp")
    e.add_argument("--workdir", default=".")
    e.add_argument("--python-env", default=None)
    e.add_argument("--timeout", type=float, required=True)
    e.add_argument("--cpu-seconds", type=int, required=True)
    e.add_argument("--file-size-bytes", type=int, required=True)
    e.add_argument("--stdout-bytes", type=int, required=True)
    e.add_argument("--stderr-tail-bytes", type=int, default=16384)
    e.add_argument("--stdin", action="store_true", help="stdin carries a length line and the command's input")
    e.add_argument("--max-stdin-bytes", type=int, default=64 << 20)
    e.add_argument("--env", action="append", metavar="NAME=VALUE")
    e.add_argument("argv", nargs="+")
    for name in ("readfile", "writefile"):
        f = sub.add_parser(name)
        f.add_argument("--repo", required=True)
        f.add_argument("--path", required=True)
        f.add_argument("--max-bytes", type=int, required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "receive":
        try:
            info = receive(sys.stdin.buffer, Path(args.repo), Path(args.control), args.max_bytes)
        except (PayloadError, tarfile.TarError, KeyError, ValueError, OSError) as exc:
            print(json.dumps({"event": "evalrunner-sandbox-error", "detail": f"receive: {exc}"}), flush=True)
            return EXIT_BAD_PAYLOAD
        print(json.dumps(info, sort_keys=True), flush=True)
        return EXIT_OK
    if args.cmd == "run":
        return run(args)
    if args.cmd == "serve":
        return serve(args)
    if args.cmd == "call":
        try:
            return call(
                Path(args.inbox),
                Path(args.out),
                Path(args.control),
                args.seq,
                args.timeout,
                args.max_files,
                args.max_bytes,
                sys.stdin.buffer,
                sys.stdout.buffer,
            )
        except PayloadError as exc:
            print(f"call: {exc}", file=sys.stderr, flush=True)
            return EXIT_BAD_PAYLOAD
    if args.cmd == "hold":
        return hold(args.max_seconds)
    if args.cmd in ("exec", "readfile", "writefile"):
        try:
            if args.cmd == "exec":
                return exec_command(args, sys.stdin.buffer, sys.stdout.buffer)
            if args.cmd == "readfile":
                return read_file(args.repo, args.path, args.max_bytes, sys.stdout.buffer)
            return write_file(args.repo, args.path, args.max_bytes, sys.stdin.buffer, sys.stdout.buffer)
        except PayloadError as exc:
            print(f"{args.cmd}: {exc}", file=sys.stderr, flush=True)
            return EXIT_BAD_PAYLOAD
    return collect(Path(args.out), Path(args.control), args.max_files, args.max_bytes, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main())
