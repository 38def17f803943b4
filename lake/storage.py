"""The lake root: a local directory or ``gs://bucket/prefix``, behind one small API.

Every write is atomic and deterministic:
- local: the bytes go to a hidden temporary name in the target's directory, are fsynced,
  then renamed over the target, so a reader (or a crash) never sees half a file;
- GCS: one object PUT, which GCS makes visible all at once or not at all.
Writing the same path again with the same bytes is a no-op in effect (idempotent).

Create-only writes (``write_once``) are atomic on both: a hard link that fails if the target
exists (local), or an upload with the precondition ``ifGenerationMatch=0`` (GCS), so of many
concurrent writers exactly one wins and the others see "exists".

Faults of the store itself (unreachable, timeouts, 5xx, permission denied) are retried with
backoff and then raised as :class:`LakeUnavailable`; a full disk is a :class:`LakeWriteError`
with ``disk_full`` set. Callers treat both as infrastructure failures, never as findings.
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec

from evalrunner_assets.errors import Outage
from evalrunner_assets.lake_settings import lake_settings
from lake.layout import LAYOUT, LakeLayout, LakePathError

DEFAULT_LOCAL_ROOT = ".evalrunner/lake"


class LakeWriteError(Outage, RuntimeError):
    """A write to the lake failed; nothing was left at the target path. ``disk_full`` when the
    cause was ENOSPC or EDQUOT (no space or quota left where the lake lives); the cause (an
    ``OSError``: read-only, permission denied, full) is chained."""

    def __init__(self, message: str, *, disk_full: bool = False, path: str | None = None) -> None:
        super().__init__(message)
        self.disk_full = disk_full
        self.path = path  # the file it was writing, when known


class LakeUnavailable(Outage, RuntimeError):
    """The lake's store could not be reached or refused the operation (connection refused,
    timeout, 5xx, permission denied) after retries: an infrastructure fault, not a finding
    about the data. The message names the operation and the lake URL."""


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _is_store_fault(exc: BaseException) -> bool:
    """Whether ``exc`` from a remote filesystem is the store failing (retry, then give up as
    LakeUnavailable) rather than an answer about the object (missing, exists, bad path)."""
    if isinstance(
        exc, (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, LakePathError, ValueError)
    ):
        return False
    return isinstance(exc, Exception)


def _check_relative(rel: str) -> str:
    if not isinstance(rel, str) or not rel:
        raise LakePathError(f"lake path must be a non-empty string, got {rel!r}")
    if rel.startswith("/") or "\\" in rel:
        raise LakePathError(f"lake path {rel!r} must be relative and use '/' separators")
    norm = posixpath.normpath(rel)
    if norm != rel.rstrip("/") or norm.startswith("..") or "/../" in f"/{norm}/":
        raise LakePathError(f"lake path {rel!r} is outside the lake root or not normalized")
    return norm


class _OneLineRetryLog(logging.Filter):
    """gcsfs logs every request that ran out of retries with its traceback; the error reaches
    our caller as LakeUnavailable with its cause, so its log line keeps only the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


def gcs_filesystem(endpoint_url: str | None = None, token: Any = None, **kwargs: Any) -> Any:  # gcsfs ships no types
    """A gcsfs filesystem; ``endpoint_url``/``token='anon'`` point it at an emulator."""
    # gcsfs otherwise probes the bucket type over gRPC, which stalls offline.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs

    gcsfs_log = logging.getLogger("gcsfs")
    if not any(isinstance(f, _OneLineRetryLog) for f in gcsfs_log.filters):
        gcsfs_log.addFilter(_OneLineRetryLog())

    opts: dict[str, Any] = dict(kwargs)
    if endpoint_url:
        opts["endpoint_url"] = endpoint_url
    if token is not None:
        opts["token"] = token
    return gcsfs.GCSFileSystem(**opts)


@dataclass
class Lake:
    """A lake rooted at ``root``; ``fs`` is an fsspec filesystem (local by default)."""

    root: str = DEFAULT_LOCAL_ROOT
    fs: Any = None
    layout: LakeLayout = field(default=LAYOUT)
    # Retries of a remote operation before LakeUnavailable, and the first backoff (doubling);
    # None: the settings' (evalrunner_assets/lake_settings.py), read when the lake is opened.
    retries: int | None = None
    retry_base_s: float | None = None

    def __post_init__(self) -> None:
        settings = lake_settings()
        self.retries = settings.retries if self.retries is None else self.retries
        self.retry_base_s = settings.retry_base_s if self.retry_base_s is None else self.retry_base_s
        if self.root.startswith("gs://"):
            if self.fs is None:
                self.fs = gcs_filesystem(endpoint_url=settings.gcs_endpoint, token=settings.gcs_token)
            self._base = self.root[len("gs://") :].rstrip("/")
            self.is_local = False
        elif "://" in self.root:
            raise LakePathError(f"lake root {self.root!r}: only local directories and gs://bucket/prefix are supported")
        else:
            self.fs = self.fs or fsspec.filesystem("file")
            self._base = os.path.abspath(self.root)
            self.is_local = True

    # -- paths -------------------------------------------------------------------------------
    def path(self, rel: str) -> str:
        """The filesystem path of ``rel`` (local absolute path, or ``bucket/prefix/rel``)."""
        rel = _check_relative(rel)
        return f"{self._base}/{rel}"

    def url(self, rel: str) -> str:
        """A URL a person or DuckDB can use: a local absolute path or ``gs://…``."""
        p = self.path(rel)
        return p if self.is_local else f"gs://{p}"

    # -- writes ------------------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> str:
        """Atomically write ``data`` at ``rel``; returns the object's URL."""
        target = self.path(rel)
        if self.is_local:
            self._write_local(target, data, exclusive=False)
        else:
            self._remote(f"writing {self.url(rel)}", lambda: self.fs.pipe_file(target, data))
        return self.url(rel)

    def write_once(self, rel: str, data: bytes) -> bool:
        """Write ``data`` only if nothing is at ``rel``; True if this call wrote it. Atomic
        against concurrent writers (local: hard link; GCS: ``ifGenerationMatch=0``)."""
        target = self.path(rel)
        if self.is_local:
            return self._write_local(target, data, exclusive=True)
        try:
            # gcsfs sends mode="create" as the upload precondition ifGenerationMatch=0; GCS
            # answers 412 (FileExistsError) when any generation of the object exists.
            self._remote(
                f"writing {self.url(rel)} (create-only)", lambda: self.fs.pipe_file(target, data, mode="create")
            )
        except FileExistsError:
            return False
        return True

    def _remote(self, what: str, op: Any) -> Any:
        """Run one remote operation: store faults retried with backoff, then LakeUnavailable."""
        attempt = 0
        while True:
            try:
                return op()
            except Exception as exc:
                if not _is_store_fault(exc):
                    raise
                if attempt >= (self.retries or 0):
                    raise LakeUnavailable(
                        f"{what} failed after {attempt + 1} attempts: {type(exc).__name__}: {str(exc)[:300]}"
                    ) from exc
                time.sleep((self.retry_base_s or 0.0) * 2**attempt)
                attempt += 1

    def _write_local(self, target: str, data: bytes, *, exclusive: bool) -> bool:
        directory = os.path.dirname(target)
        token = uuid.uuid4().hex
        # The writer's pid in the name lets a sweep tell a dead writer's leftovers at once.
        tmp = os.path.join(directory, f".{os.path.basename(target)}.tmp-{os.getpid()}-{token}")
        # Named in the lake's temp-write index while it exists, so a sweep after a kill finds it
        # without walking the lake (which grows with every PR): docs/scale.md.
        record = self.path(self.layout.temp_write_record(os.getpid(), token))
        try:
            os.makedirs(directory, exist_ok=True)  # a read-only or full disk fails here first
            _create_record(record, os.path.relpath(tmp, self._base))
            with open(tmp, "xb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            if exclusive:
                try:
                    os.link(tmp, target)  # fails if the target exists: create-only, atomically
                except FileExistsError:
                    return False
            else:
                os.replace(tmp, target)
            _fsync_dir(directory)
            return True
        except (LakePathError, FileExistsError):
            raise
        except OSError as exc:
            full = exc.errno in _DISK_FULL
            raise LakeWriteError(
                f"writing {target} failed: {exc}" + (" (the disk holding the lake is full)" if full else ""),
                disk_full=full,
                path=target,
            ) from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if os.path.exists(record):
                os.unlink(record)  # after the temporary file: never a temp file without its record

    def put_file(self, rel: str, local_path: str) -> str:
        """Atomically copy a local file into the lake at ``rel``."""
        with open(local_path, "rb") as fh:
            return self.write_bytes(rel, fh.read())

    def remove(self, rel: str) -> None:
        """Delete ``rel`` if it exists (a concurrent remover is not an error)."""
        target = self.path(rel)
        if self.is_local:
            try:
                os.unlink(target)
            except FileNotFoundError:
                pass
            return
        try:
            self._remote(f"removing {self.url(rel)}", lambda: self.fs.rm_file(target))
        except FileNotFoundError:
            pass

    # -- reads -------------------------------------------------------------------------------
    def read_bytes(self, rel: str) -> bytes:
        target = self.path(rel)
        if self.is_local:
            return self.fs.cat_file(target)
        return self._remote(f"reading {self.url(rel)}", lambda: self.fs.cat_file(target))

    def read_many(self, rels: list[str]) -> dict[str, bytes]:
        """Several objects in one batched call (remote lakes), keyed by filesystem path."""
        paths = [self.path(rel) for rel in rels]
        return self._remote(f"reading {len(paths)} objects from {self.root}", lambda: self.fs.cat(paths))

    def exists(self, rel: str) -> bool:
        target = self.path(rel)
        if self.is_local:
            return bool(self.fs.exists(target))
        return bool(self._remote(f"checking {self.url(rel)}", lambda: self.fs.exists(target)))

    def stat(self, rel: str) -> tuple[int, str] | None:
        """(size in bytes, version) of ``rel``, or None if it does not exist. The version
        changes whenever the object is rewritten (local: inode and mtime; GCS: generation)."""
        target = self.path(rel)
        if self.is_local:
            try:
                st = os.stat(target)
            except FileNotFoundError:
                return None
            return st.st_size, f"{st.st_ino}:{st.st_mtime_ns}"
        try:
            info = self._remote(f"checking {self.url(rel)}", lambda: self.fs.info(target))
        except FileNotFoundError:
            return None
        return int(info.get("size") or 0), str(info.get("generation") or info.get("updated") or "")

    def glob(self, pattern: str) -> list[str]:
        """Lake-relative paths matching ``pattern`` (hidden temporary files never match)."""
        base = self._base.rstrip("/") + "/"
        out = []
        target = self.path(pattern)
        found = (
            self.fs.glob(target)
            if self.is_local
            else self._remote(f"listing {self.url(pattern)}", lambda: self.fs.glob(target))
        )
        for p in found:
            p = p if self.is_local else p.lstrip("/")
            rel = p[len(base) :] if p.startswith(base) else p
            if not posixpath.basename(rel).startswith("."):
                out.append(rel)
        return sorted(out)

    def listdir(self, rel: str) -> Iterator[str]:
        """Lake-relative paths directly under ``rel`` (empty if it does not exist)."""
        target = self.path(rel)
        if not self.exists(rel):
            return iter(())
        base = self._base.rstrip("/") + "/"
        names = []
        listed = (
            self.fs.ls(target, detail=False)
            if self.is_local
            else self._remote(f"listing {self.url(rel)}", lambda: self.fs.ls(target, detail=False))
        )
        for p in listed:
            p = p if self.is_local else p.lstrip("/")
            rel_p = p[len(base) :] if p.startswith(base) else p
            if not posixpath.basename(rel_p).startswith("."):
                names.append(rel_p)
        return iter(sorted(names))

    def list_modified(self, rel: str) -> Iterator[tuple[str, float]]:
        """(lake-relative path, last-modified epoch seconds) of the objects directly under ``rel``,
        from the listing alone (no read per object), so age-based retention stays one call."""
        target = self.path(rel)
        if not self.exists(rel):
            return iter(())
        base = self._base.rstrip("/") + "/"
        if self.is_local:
            out = []
            with os.scandir(target) as entries:
                for e in entries:
                    if e.name.startswith(".") or not e.is_file(follow_symlinks=False):
                        continue
                    try:
                        out.append((f"{rel.rstrip('/')}/{e.name}", e.stat(follow_symlinks=False).st_mtime))
                    except FileNotFoundError:
                        continue  # removed by a concurrent writer
            return iter(sorted(out))
        listed = self._remote(f"listing {self.url(rel)}", lambda: self.fs.ls(target, detail=True))
        out = []
        for info in listed:
            if info.get("type") != "file":
                continue
            p = str(info["name"]).lstrip("/")
            rel_p = p[len(base) :] if p.startswith(base) else p
            if posixpath.basename(rel_p).startswith("."):
                continue
            mtime = info.get("mtime")
            if mtime is None:
                continue  # an object without a timestamp is never judged old
            out.append((rel_p, mtime.timestamp() if hasattr(mtime, "timestamp") else float(mtime)))
        return iter(sorted(out))


def _create_record(path: str, text: str) -> None:
    """Create the temp-write record ``path`` holding ``text``; its directory is made only when
    it is missing (once per lake, not once per write)."""
    try:
        fh = open(path, "x", encoding="utf-8")
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fh = open(path, "x", encoding="utf-8")
    with fh:
        fh.write(text)


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def open_lake(root: str | None = None, **kwargs: Any) -> Lake:
    """The lake at ``root`` (default: ``$EVALRUNNER_LAKE`` or ``./.evalrunner/lake``)."""
    return Lake(root or lake_settings().root or DEFAULT_LOCAL_ROOT, **kwargs)
