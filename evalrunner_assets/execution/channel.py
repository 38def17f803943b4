"""Channels: how a sandbox without network reaches one controller service, and nothing else.

Inside the sandbox (its own network namespace, loopback only), :func:`relay_main` listens on
``127.0.0.1:<port>`` for each channel and copies every connection to a unix socket that the
backend bound in from the controller. Then it ``exec``s the real command, so the command keeps
its pid, exit code and signals; the relay lives on as a forked child and exits when its parent
does (and with the sandbox's pid namespace under bubblewrap).

On the controller, a service listens on the unix socket: the model gateway, or a
:class:`UnixForwarder` that forwards to one fixed TCP address (an allow-listed package index).
The socket is the capability: what listens on it decides what a caller may do.

Run inside the sandbox as ``python -c <relay_main> --channel
PORT=SOCKET … -- COMMAND …`` (the backends build that prefix; see :func:`relay_prefix`).
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
from collections.abc import Sequence
from typing import Self

from evalrunner_assets.execution.sandbox import Channel

# Where channel sockets appear inside a sandbox (backends bind each one here).
SANDBOX_CHANNEL_DIR = "/run/evalrunner"
_BUF = 64 * 1024


def sandbox_socket_path(index: int) -> str:
    return f"{SANDBOX_CHANNEL_DIR}/channel-{index}.sock"


# `-c`, not `-m …channel`: the package imports this module first, and runpy warns about that
# into every sandboxed command's stderr.
_RELAY_MAIN = (
    "import sys; from evalrunner_assets.execution.channel import relay_main; sys.exit(relay_main(sys.argv[1:]))"
)


def relay_prefix(python: str, channels: Sequence[Channel], socket_paths: Sequence[str]) -> list[str]:
    """The argv prefix that starts the relay before the real command (``socket_paths`` are the
    sockets as the sandboxed process sees them, one per channel)."""
    argv = [python, "-c", _RELAY_MAIN]
    for ch, path in zip(channels, socket_paths, strict=True):
        argv += ["--channel", f"{ch.port}={path}"]
    return argv + ["--"]


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(_BUF)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        # Half-close so the other direction can still drain (HTTP/1.1 keep-alive, TLS close).
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _splice(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both directions end, then close both sockets."""
    t = threading.Thread(target=_pipe, args=(b, a), daemon=True)
    t.start()
    _pipe(a, b)
    t.join()
    a.close()
    b.close()


def _nodelay(s: socket.socket) -> None:
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass


def _serve_tcp_to_unix(listener: socket.socket, socket_path: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        # Bytes are copied as they arrive, so an answer often leaves in two sends (headers, then
        # body): with Nagle's algorithm the second waits for the client's delayed ACK (~40 ms).
        _nodelay(conn)
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(socket_path)
        except OSError:
            conn.close()  # the controller side is gone: the caller sees a reset, as with no server
            continue
        threading.Thread(target=_splice, args=(conn, upstream), daemon=True).start()


def _watch_parent(parent: int) -> None:
    # Without a pid namespace (unsafe-local) nothing else ends the relay with its command.
    import time

    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def relay_main(argv: Sequence[str]) -> int:
    """Parse ``--channel PORT=SOCKET … -- COMMAND …``, start the relay, ``exec`` COMMAND."""
    args = list(argv)
    if "--" not in args:
        print("channel relay: usage: --channel PORT=SOCKET ... -- COMMAND ...", file=sys.stderr)
        return 2
    split = args.index("--")
    opts, command = args[:split], args[split + 1 :]
    if not command:
        print("channel relay: no command after --", file=sys.stderr)
        return 2
    listeners: list[tuple[socket.socket, str]] = []
    it = iter(opts)
    for opt in it:
        if opt != "--channel":
            print(f"channel relay: unknown option {opt!r}", file=sys.stderr)
            return 2
        spec = next(it, "")
        port_s, _, path = spec.partition("=")
        try:
            port = int(port_s)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(128)
        except (ValueError, OSError) as exc:
            print(f"channel relay: cannot listen on 127.0.0.1:{port_s}: {exc}", file=sys.stderr)
            return 2
        listeners.append((s, path))
    # Bound before the fork, so the command never connects before the relay listens.
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # never hold the command's pipes open after it exits
            os.dup2(devnull, fd)
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
        threads = [threading.Thread(target=_serve_tcp_to_unix, args=(s, p), daemon=True) for s, p in listeners]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        os._exit(0)
    for s, _ in listeners:
        s.close()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"channel relay: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


class UnixService:
    """Controller side of a channel: a fresh unix socket (in a private directory named with the
    owner's pid, so a crashed controller's sockets are recognisable) whose connections are
    each handled on their own thread by :meth:`handle`. Use as a context manager."""

    socket_name = "service.sock"
    backlog = 128

    def __init__(self, *, socket_dir: str | None = None) -> None:
        self._dir = tempfile.mkdtemp(prefix=f"evalrunner-chan-{os.getpid()}-", dir=socket_dir)
        self.socket_path = os.path.join(self._dir, self.socket_name)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.socket_path)
        self._listener.listen(self.backlog)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def channel(self, port: int) -> Channel:
        return Channel(socket_path=self.socket_path, port=port)

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        import shutil

        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class UnixForwarder(UnixService):
    """Forwards each connection to one fixed TCP address (e.g. a package index on this host)."""

    socket_name = "forward.sock"

    def __init__(self, host: str, port: int, *, socket_dir: str | None = None) -> None:
        self.host, self.port = host, port
        super().__init__(socket_dir=socket_dir)

    def handle(self, conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection((self.host, self.port), timeout=30)
            upstream.settimeout(None)
            _nodelay(upstream)
        except OSError:
            conn.close()
            return
        _splice(conn, upstream)


if __name__ == "__main__":
    sys.exit(relay_main(sys.argv[1:]))
