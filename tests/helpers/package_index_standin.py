"""A PEP 503 package index on loopback, serving wheels made in the test (never the internet).

``make_wheel`` writes a pure-Python wheel from a dict of files; ``wheel_from_source`` builds
one from a project directory (``examples/wheels-src/<pkg>``) offline with pip;
``wheel_from_installed`` repacks a distribution installed here (a build backend such as
setuptools, which building a repository's own package needs from the index).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import re
import subprocess
import sys
import threading
import zipfile
from importlib import metadata
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(out: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> Path:
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    members = {k: v.encode() for k, v in files.items()}
    members[f"{dist}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires)
    ).encode()
    members[f"{dist}.dist-info/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    path = Path(out) / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        records = []
        for member, data in members.items():
            z.writestr(member, data)
            records.append(_record_line(member, data))
        records.append(f"{dist}.dist-info/RECORD,,")
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join(records) + "\n")
    return path


def wheel_from_source(project: Path, out: Path) -> Path:
    """``pip wheel --no-deps --no-build-isolation`` (offline: the build backend is ours), from a
    copy of ``project`` so the build leaves nothing in the source tree."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="wheel-src-") as tmp:
        src = Path(tmp) / "src"
        dist = Path(tmp) / "dist"
        shutil.copytree(project, src)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "-w",
                str(dist),
                str(src),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
        (built,) = dist.glob("*.whl")
        dest = Path(out) / built.name
        shutil.copyfile(built, dest)
    return dest


def wheel_from_installed(dist_name: str, out: Path) -> Path:
    """A wheel of an installed pure-Python distribution, from the files its RECORD lists."""
    dist = metadata.distribution(dist_name)
    base = Path(dist.locate_file(""))
    info = next(p for p in (dist.files or []) if str(p).endswith(".dist-info/METADATA")).parent
    tag = "py3-none-any"
    path = Path(out) / f"{re.sub(r'[-_.]+', '_', dist.metadata['Name'])}-{dist.version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        records = []
        for f in dist.files or []:
            rel = str(f)
            if (
                rel.startswith("..")
                or "__pycache__" in rel
                or rel.endswith((".pyc", "/RECORD", "/INSTALLER", "/REQUESTED", "/direct_url.json"))
            ):
                continue
            data = (base / rel).read_bytes()
            z.writestr(rel, data)
            records.append(_record_line(rel, data))
        records.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return path


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # requests are recorded in server.requests instead
        pass

    def do_GET(self):  # noqa: N802
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        super().do_GET()


class PackageIndex:
    """Serves ``root/simple/<name>/`` pages and ``root/files/*.whl`` on 127.0.0.1; ``requests``
    lists every path asked for (an install that fetched nothing asked for nothing)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        (self.root / "files").mkdir(parents=True, exist_ok=True)
        (self.root / "simple").mkdir(exist_ok=True)
        handler = lambda *a, **k: _Handler(*a, directory=str(self.root), **k)  # noqa: E731
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.requests = []  # type: ignore[attr-defined]
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/simple"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def requests(self) -> list[str]:
        return self.server.requests  # type: ignore[attr-defined,no-any-return]

    def add(self, wheel: Path) -> None:
        dest = self.root / "files" / wheel.name
        if not dest.exists():
            dest.write_bytes(Path(wheel).read_bytes())
        self._reindex()

    def _reindex(self) -> None:
        by_name: dict[str, list[Path]] = {}
        for w in sorted((self.root / "files").glob("*.whl")):
            by_name.setdefault(re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower(), []).append(w)
        for name, wheels in by_name.items():
            d = self.root / "simple" / name
            d.mkdir(exist_ok=True)
            links = "".join(
                f'<a href="../../files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>\n'
                for w in wheels
            )
            (d / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
