"""What travels to and from a sandbox pod: the repository tarball delivered to its ``receive``
init container (:func:`build_repo_tarball`) and the signed result, stdout and outputs read
back through its ``collector`` container (:func:`verify_collected`).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import tarfile
from pathlib import Path

from evalrunner_assets.execution import pod_wrapper
from evalrunner_assets.execution.kubernetes.config import (
    KubernetesSandboxError,
)
from evalrunner_assets.execution.sandbox import (
    SandboxRequest,
    SandboxStatus,
)


def build_repo_tarball(export_path: str, max_bytes: int) -> bytes:
    """A deterministic tar of the export (regular files, directories, symlinks; owners and
    times zeroed). Raises :class:`KubernetesSandboxError` naming the path when it is too big or
    holds something else."""
    root = Path(export_path)
    if not root.is_dir():
        raise KubernetesSandboxError(f"export path {export_path!r} is not a directory")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                path = Path(dirpath) / name
                rel = path.relative_to(root).as_posix()
                info = tar.gettarinfo(str(path), arcname=rel)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                if info.isdir():
                    info.mode = 0o755
                    tar.addfile(info)
                elif info.issym():
                    tar.addfile(info)
                elif info.isreg():
                    info.mode = 0o755 if info.mode & 0o111 else 0o644
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    raise KubernetesSandboxError(
                        f"export {export_path!r} holds {rel!r}, which is neither a file, a directory nor a symlink"
                    )
                if buf.tell() > max_bytes:
                    raise KubernetesSandboxError(f"export {export_path!r} exceeds repo_size_limit_bytes={max_bytes}")
    return buf.getvalue()


def verify_collected(
    stream: bytes, key: bytes, request: SandboxRequest
) -> tuple[dict, bytes, dict[str, bytes], dict[str, str], bytes]:
    """Parse and check the collector's stream: the result must carry our HMAC, every file its
    digest, and the caps are enforced again here (the files are untrusted)."""
    try:
        records = pod_wrapper.read_records(stream)
    except pod_wrapper.PayloadError as exc:
        raise KubernetesSandboxError(f"collector stream malformed or truncated: {exc}") from exc
    if not records or records[0][0].get("kind") != "result":
        raise KubernetesSandboxError("collector stream does not start with the result record")
    header, raw = records[0]
    if header.get("missing"):
        raise KubernetesSandboxError(f"the wrapper wrote no result.json ({header.get('reason')})")
    result = json.loads(raw)
    if [h.get("kind") for h, _ in records[1:3]] != ["stdout", "pipes"]:
        raise KubernetesSandboxError("collector stream lacks the stdout and pipes records")
    stdout, pipes = records[1][1], records[2][1]
    expected = pod_wrapper.result_mac(key, result, stdout)
    if not hmac.compare_digest(str(result.get("mac", "")), expected):
        raise KubernetesSandboxError(
            "result.json does not carry this pod's signature: written by something other than the wrapper"
        )
    if hashlib.sha256(pipes).hexdigest() != result.get("pipes_sha256"):
        raise KubernetesSandboxError("pipes.jsonl differs from what the wrapper signed")
    outputs: dict[str, bytes] = {}
    rejected: dict[str, str] = {}
    total = 0
    ended = False
    for header, data in records[3:]:
        kind, name = header.get("kind"), str(header.get("name", ""))
        if kind == "end":
            ended = True
            continue
        if kind == "rejected":
            rejected[name] = str(header.get("reason", "rejected by the collector"))
            continue
        if kind != "file":
            raise KubernetesSandboxError(f"collector stream has an unknown record kind {kind!r}")
        parts = Path(name).parts
        if not name or name.startswith("/") or ".." in parts or "\0" in name:
            rejected[name] = "unsafe name"
        elif hashlib.sha256(data).hexdigest() != header.get("sha256"):
            rejected[name] = "digest mismatch in transit"
        elif len(outputs) >= request.limits.output_files:
            rejected[name] = f"more than {request.limits.output_files} output files"
        elif total + len(data) > request.limits.output_bytes:
            rejected[name] = f"output cap of {request.limits.output_bytes} bytes reached"
        else:
            outputs[name] = data
            total += len(data)
    if not ended:
        raise KubernetesSandboxError("collector stream ended before its end record (truncated)")
    return result, stdout, outputs, rejected, pipes


WRAPPER_STATUS = {s.value: s for s in SandboxStatus}
