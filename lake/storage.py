"""The lake root: a local directory or ``gs://bucket/prefix``, behind one small API.

Every write is atomic and deterministic:
- local: the bytes go to a hidden temporary name in the target's directory, are fsynced,
  then renamed over the target, so a reader (or a crash) never sees half a file;
- GCS: one object PUT, which GCS makes visible all at once or not at all.
Writing the same path again with the same bytes is a no-op in effect (idempotent).
"""

from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec

from lake.layout import LAYOUT, LakeLayout, LakePathError

DEFAULT_LOCAL_ROOT = ".evalrunner/lake"


class LakeWriteError(RuntimeError):
    """A write to the lake failed; nothing was left at the target path."""


def _check_relative(rel: str) -> str:
    if not isinstance(rel, str) or not rel:
        raise LakePathError(f"lake path must be a non-empty string, got {rel!r}")
    if rel.startswith("/") or "\\" in rel:
        raise LakePathError(f"lake path {rel!r} must be relative and use '/' separators")
    norm = posixpath.normpath(rel)
    if norm != rel.rstrip("/") or norm.startswith("..") or "/../" in f"/{norm}/":
        raise LakePathError(f"lake path {rel!r} is outside the lake root or not normalized")
    return norm


def gcs_filesystem(endpoint_url: str | None = None, token: Any = None, **kwargs: Any):
    """A gcsfs filesystem; ``endpoint_url``/``token='anon'`` point it at an emulator."""
    # gcsfs otherwise probes the bucket type over gRPC, which stalls offline.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs

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

    def __post_init__(self) -> None:
        if self.root.startswith("gs://"):
            if self.fs is None:
                self.fs = gcs_filesystem(
                    endpoint_url=os.environ.get("EVALRUNNER_GCS_ENDPOINT") or None,
                    token=os.environ.get("EVALRUNNER_GCS_TOKEN") or None,
                )
            self._base = self.root[len("gs://") :].rstrip("/")
            self.is_local = False
        elif "://" in self.root:
            raise LakePathError(
                f"lake root {self.root!r}: only local directories and gs://bucket/prefix are supported"
            )
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
            try:
                self.fs.pipe_file(target, data)
            except Exception as exc:  # gcsfs raises assorted errors
                raise LakeWriteError(f"writing {self.url(rel)} failed: {exc}") from exc
        return self.url(rel)

    def write_once(self, rel: str, data: bytes) -> bool:
        """Write ``data`` only if nothing is at ``rel``; True if this call wrote it."""
        target = self.path(rel)
        if self.is_local:
            return self._write_local(target, data, exclusive=True)
        if self.fs.exists(target):
            return False
        self.write_bytes(rel, data)
        return True

    def _write_local(self, target: str, data: bytes, *, exclusive: bool) -> bool:
        directory = os.path.dirname(target)
        os.makedirs(directory, exist_ok=True)
        # The writer's pid in the name lets a sweep tell a dead writer's leftovers at once.
        tmp = os.path.join(directory, f".{os.path.basename(target)}.tmp-{os.getpid()}-{uuid.uuid4().hex}")
        try:
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
            raise LakeWriteError(f"writing {target} failed: {exc}") from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def put_file(self, rel: str, local_path: str) -> str:
        """Atomically copy a local file into the lake at ``rel``."""
        with open(local_path, "rb") as fh:
            return self.write_bytes(rel, fh.read())

    def remove(self, rel: str) -> None:
        """Delete ``rel`` if it exists."""
        target = self.path(rel)
        if self.fs.exists(target):
            self.fs.rm_file(target)

    # -- reads -------------------------------------------------------------------------------
    def read_bytes(self, rel: str) -> bytes:
        return self.fs.cat_file(self.path(rel))

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self.path(rel)))

    def glob(self, pattern: str) -> list[str]:
        """Lake-relative paths matching ``pattern`` (hidden temporary files never match)."""
        base = self._base.rstrip("/") + "/"
        out = []
        for p in self.fs.glob(self.path(pattern)):
            p = p if self.is_local else p.lstrip("/")
            rel = p[len(base) :] if p.startswith(base) else p
            if not posixpath.basename(rel).startswith("."):
                out.append(rel)
        return sorted(out)

    def listdir(self, rel: str) -> Iterator[str]:
        """Lake-relative paths directly under ``rel`` (empty if it does not exist)."""
        target = self.path(rel)
        if not self.fs.exists(target):
            return iter(())
        base = self._base.rstrip("/") + "/"
        names = []
        for p in self.fs.ls(target, detail=False):
            p = p if self.is_local else p.lstrip("/")
            rel_p = p[len(base) :] if p.startswith(base) else p
            if not posixpath.basename(rel_p).startswith("."):
                names.append(rel_p)
        return iter(sorted(names))


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
    return Lake(root or os.environ.get("EVALRUNNER_LAKE") or DEFAULT_LOCAL_ROOT, **kwargs)
