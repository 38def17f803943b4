"""Repository environments: a repository's declared dependencies, installed once per digest.

Where the dependencies come from, in this order (the first that applies wins):

1. the file the manifest names (``{"environment": {"requirements": "evals/requirements.txt"}}``
   in ``.evals/list``'s output; ``uv.lock`` / ``pyproject.toml`` by those names, anything else
   read as a requirements file);
2. ``uv.lock`` at the repository root (with its ``pyproject.toml``): exported with
   ``uv export --frozen`` and installed as locked, without resolving;
3. ``pyproject.toml`` with ``[project.dependencies]`` or a ``[build-system]``: resolved;
4. ``requirements.txt`` at the root (or the only ``requirements*.txt`` there): resolved.

A repository whose ``pyproject.toml`` has a ``[build-system]`` is a package and is installed
too, *editable from* ``/work/repo`` — the path where every sandbox sees the commit it runs —
so its own entry points (an ``inspect_ai`` model provider, say) are registered and its code is
always the commit's, while the environment is shared by every commit with the same digest.

What an environment is. A virtualenv on the controller's own interpreter holding only what the
controller lacks; a ``.pth`` then adds the controller's site-packages after its own, so
evalrunner's packages (inspect_ai, the sandbox workers) stay importable. They also keep the
controller's versions: during the build the controller's distributions are present as metadata
stubs, so ``uv`` sees them installed and resolves under constraints pinning them (a repository
that needs another ``inspect-ai`` gets an error naming it, and nothing is shadowed); the stubs
are removed afterwards. Locked versions of packages the controller provides are replaced by the
controller's (``uv export --no-emit-package``); the repository's direct requirements on them
must still admit the controller's version, and ``uv pip check`` verifies the result.

Digest: sha256 over the repository's id, the dependency files' bytes (the lock, ``pyproject.toml`` and ``setup.*``
when the project is installed, or the requirements file), the Python version, the platform and
the controller's distributions (not the index URL: an environment is what the files pin, and a
resolved — unlocked — one is whatever the index offered when it was first built). Environments live in a local cache (``$EVALRUNNER_ENVS``,
default ``<evalrunner home>/envs/<digest>``) because local sandboxes use them in place; the
lake records each one (``envs/<digest>/environment.json``). A build happens once per digest:
a file lock serialises builders, the build writes into a temporary directory (shown to the
build sandbox at the final path, so scripts and paths inside are right) that is renamed into
place only when complete; a failed build leaves nothing.

On Kubernetes (a backend with ``ensure_environment``) the environment is a volume claim per
digest on the cluster, built by a Job and mounted read-only into pods at ``/envs/<digest>``
(:meth:`~evalrunner_assets.execution.kubernetes.KubernetesBackend.ensure_environment`); this
module then only writes the lake record.

The install runs untrusted code (sdist and project builds), so it runs in a sandbox whose only
network is the package index (``$EVALRUNNER_PACKAGE_INDEX``, default PyPI): a loopback index
is relayed by a :class:`~evalrunner_assets.execution.channel.UnixForwarder` on the same port;
any other index through :class:`IndexProxy`, an HTTP proxy that allows only the index's host
(and ``$EVALRUNNER_PACKAGE_HOSTS``, default ``files.pythonhosted.org`` for PyPI).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import tomllib
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from evalrunner_assets.discovery_error import DiscoveryError
from evalrunner_assets.execution.channel import UnixForwarder, UnixService, _splice
from evalrunner_assets.execution.sandbox import (
    Channel,
    Limits,
    RepoExport,
    SandboxBackend,
    SandboxRequest,
    SandboxResult,
    SandboxStatus,
    WritableMount,
)

PACKAGE_INDEX_ENV = "EVALRUNNER_PACKAGE_INDEX"
PACKAGE_HOSTS_ENV = "EVALRUNNER_PACKAGE_HOSTS"
ENVS_DIR_ENV = "EVALRUNNER_ENVS"
DEFAULT_INDEX = "https://pypi.org/simple"
PYPI_FILE_HOSTS = ("files.pythonhosted.org",)
PROXY_PORT = 3128  # inside the build sandbox, for an index that is not on loopback
MARKER = ".evalrunner-env.json"  # written last into a complete environment
CONTROLLER_PTH = "_evalrunner_controller.pth"
BUILD_DIR = ".evalrunner-build"  # inputs of the build inside the environment, removed after
STUB_INSTALLER = "evalrunner-controller-stub"
BUILD_LIMITS = Limits(
    wall_seconds=900.0, cpu_seconds=1800, memory_bytes=4 * 1024**3, pids=256, output_files=8, output_bytes=4 * 1024**2
)

KIND_LOCK = "uv.lock"
KIND_PYPROJECT = "pyproject"
KIND_REQUIREMENTS = "requirements"


# --- errors ---------------------------------------------------------------------------------


# Discovery's error base is the user-facing one the CLI and reports already handle.
class EnvironmentBuildError(DiscoveryError):
    """A repository's dependencies could not be installed; the message names the file and the
    package. ``infrastructure`` is True when the sandbox or the index, not the repository, failed."""

    def __init__(
        self,
        message: str,
        *,
        source: str = "",
        package: str | None = None,
        infrastructure: bool = False,
        log_tail: str = "",
    ) -> None:
        super().__init__(message)
        self.source = source
        self.package = package
        self.infrastructure = infrastructure
        self.log_tail = log_tail


# --- what to install ------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvSpec:
    """What a commit's environment is built from, and its digest."""

    kind: str  # "uv.lock" | "pyproject" | "requirements"
    source: str  # repository-relative file the dependencies come from
    install_project: bool  # the repository is a package: installed editable from /work/repo
    digest: str
    project_requirements: tuple[str, ...] = ()  # [project.dependencies], for the lock's checks


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distribution_name(d: metadata.Distribution) -> str | None:
    """The distribution's ``Name`` field, None when its metadata lacks one (a broken install)."""
    # Membership then item, not .get: typeshed declares PackageMetadata.get only from Python 3.12.
    return d.metadata["Name"] if "Name" in d.metadata else None


@functools.lru_cache(maxsize=1)
def controller_distributions() -> dict[str, tuple[str, str]]:
    """canonical name -> (name, version) of every distribution the controller runs with
    (evalrunner itself excluded: it is not on any index)."""
    out: dict[str, tuple[str, str]] = {}
    for d in metadata.distributions():
        name = _distribution_name(d)
        if not name or _canonical(name) == "evalrunner":
            continue
        out.setdefault(_canonical(name), (name, d.version))
    return out


def controller_constraints() -> str:
    return "".join(f"{n}=={v}\n" for _, (n, v) in sorted(controller_distributions().items()))


def controller_site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(os.path.realpath(paths[k]) for k in ("purelib", "platlib")))


def _digest(kind: str, files: dict[str, bytes], repo: str) -> str:
    h = hashlib.sha256()
    h.update(
        json.dumps(
            {
                "kind": kind,
                "repo": repo,
                "python": sys.version.split()[0],
                "implementation": sys.implementation.name,
                "platform": f"{sys.platform}-{platform.machine()}",
            },
            sort_keys=True,
        ).encode()
    )
    h.update(hashlib.sha256(controller_constraints().encode()).digest())
    for rel in sorted(files):
        h.update(f"{rel}\0{len(files[rel])}\0".encode())
        h.update(files[rel])
    return h.hexdigest()[:24]


def _read_pyproject(root: Path, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise EnvironmentBuildError(
            f"pyproject.toml: cannot be read as TOML ({exc}); needed for {source}", source="pyproject.toml"
        ) from None


def _inside(root: Path, rel: str) -> Path:
    import posixpath

    if rel.startswith("/") or "\0" in rel or posixpath.normpath(rel).startswith(".."):
        raise EnvironmentBuildError(f"environment file {rel!r} is absolute or leaves the repository", source=rel)
    p = root / posixpath.normpath(rel)
    if p.is_symlink() or not p.is_file():
        raise EnvironmentBuildError(
            f"{rel}: no such regular file in the repository (named as the environment's dependencies)", source=rel
        )
    return p


def _root(export: RepoExport | str | Path) -> tuple[Path, str]:
    if isinstance(export, RepoExport):
        return Path(export.path), export.repo
    return Path(export), ""


def spec_for_file(export: RepoExport | str | Path, rel: str) -> EnvSpec:
    """The environment of a commit from one named file (see the module docstring). Given a
    :class:`RepoExport`, the digest is the repository's own: build output (which runs the
    repository's code) is shared by its commits, never with another repository."""
    root, repo = _root(export)
    path = _inside(root, rel)
    name = path.name
    files = {rel: path.read_bytes()}
    if name in ("uv.lock", "pyproject.toml"):
        if rel not in ("uv.lock", "pyproject.toml"):
            raise EnvironmentBuildError(
                f"{rel}: a uv.lock or pyproject.toml is read at the repository root only", source=rel
            )
        py = _read_pyproject(root, rel)
        project = py.get("project") or {}
        install_project = "build-system" in py
        deps = tuple(str(d) for d in project.get("dependencies") or ())
        files["pyproject.toml"] = (root / "pyproject.toml").read_bytes()
        if install_project:
            for extra in ("setup.py", "setup.cfg"):
                if (root / extra).is_file():
                    files[extra] = (root / extra).read_bytes()
        kind = KIND_LOCK if name == "uv.lock" else KIND_PYPROJECT
        return EnvSpec(kind, rel, install_project, _digest(kind, files, repo), deps)
    return EnvSpec(KIND_REQUIREMENTS, rel, False, _digest(KIND_REQUIREMENTS, files, repo))


def detect_environment(export: RepoExport | str | Path) -> EnvSpec | None:
    """The commit's environment from its files alone (no manifest), or None when it declares
    no dependencies."""
    root, _ = _root(export)
    if (root / "uv.lock").is_file() and (root / "pyproject.toml").is_file():
        return spec_for_file(export, "uv.lock")
    if (root / "pyproject.toml").is_file():
        py = _read_pyproject(root, "pyproject.toml")
        if (py.get("project") or {}).get("dependencies") or "build-system" in py:
            return spec_for_file(export, "pyproject.toml")
    if (root / "requirements.txt").is_file():
        return spec_for_file(export, "requirements.txt")
    others = sorted(p.name for p in root.glob("requirements*.txt") if p.is_file() and not p.is_symlink())
    if len(others) == 1:
        return spec_for_file(export, others[0])
    return None


def _lock_conflicts(spec: EnvSpec) -> None:
    """Direct requirements of a locked project on a package the controller provides must admit
    the controller's version (the lock's own pin of it is replaced)."""
    from packaging.requirements import InvalidRequirement, Requirement

    dists = controller_distributions()
    for text in spec.project_requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise EnvironmentBuildError(
                f"pyproject.toml: dependency {text!r} is not a valid requirement: {exc}", source="pyproject.toml"
            ) from None
        got = dists.get(_canonical(req.name))
        if got is not None and req.specifier and not req.specifier.contains(got[1], prereleases=True):
            raise EnvironmentBuildError(
                f"pyproject.toml: requires `{req.name}{req.specifier}` but evalrunner runs {got[0]} {got[1]} "
                f"(the sandboxes use evalrunner's own {got[0]}); widen the requirement to admit {got[1]}",
                source="pyproject.toml",
                package=req.name,
            )


# --- built environments ---------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltEnvironment:
    """An environment ready to mount: ``path`` is bound read-only into sandboxes."""

    digest: str
    path: str
    kind: str
    source: str
    reused: bool  # True when it existed already (nothing was installed this time)
    build_s: float = 0.0
    packages: tuple[str, ...] = ()  # name==version installed for the repository


def env_root() -> Path:
    from evalrunner_assets import home

    return Path(os.environ.get(ENVS_DIR_ENV) or home.home() / "envs").resolve()


def index_url() -> str:
    return os.environ.get(PACKAGE_INDEX_ENV) or DEFAULT_INDEX


def runtime_with_env(runtime_digest: str, env_digest: str | None) -> str:
    """The batch key's runtime digest for a commit with environment ``env_digest``: the
    backend's own when there is none (commits without dependencies keep sharing batches),
    otherwise a digest of both (a dependency change is never served from old batches)."""
    if not env_digest:
        return runtime_digest
    return hashlib.sha256(f"{runtime_digest}\0env\0{env_digest}".encode()).hexdigest()[:16]


class IndexProxy(UnixService):
    """An HTTP proxy on a unix socket that connects only to allowed hosts (CONNECT host:443 for
    HTTPS, absolute-form GET for HTTP). The build sandbox's only network."""

    socket_name = "proxy.sock"
    backlog = 64

    def __init__(
        self,
        hosts: set[str],
        *,
        ports: Iterable[int] = frozenset({80, 443}),
        socket_dir: str | None = None,
    ) -> None:
        self.hosts = {h.lower() for h in hosts}
        self.ports = set(ports)
        self.refused: list[str] = []
        super().__init__(socket_dir=socket_dir)

    def handle(self, conn: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    conn.close()
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            method, target, _ = (line.split(" ") + ["", ""])[:3]
            if method == "CONNECT":
                host, _, port_s = target.rpartition(":")
                port = int(port_s or 443)
                rest = b""
            else:
                parts = urlsplit(target)
                host, port = parts.hostname or "", parts.port or 80
                rest = head
            if host.lower() not in self.hosts or port not in self.ports:
                self.refused.append(f"{host}:{port}")
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                conn.close()
                return
            upstream = socket.create_connection((host, port), timeout=30)
            upstream.settimeout(None)
            if method == "CONNECT":
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                leftover = head.split(b"\r\n\r\n", 1)[1]
                if leftover:
                    upstream.sendall(leftover)
            else:
                upstream.sendall(rest)
            _splice(conn, upstream)
        except (OSError, ValueError):
            try:
                conn.close()
            except OSError:
                pass


def _index_access(url: str) -> tuple[Any, tuple[Channel, ...], dict[str, str]]:
    """(controller-side service to close, channels, sandbox env) for reaching ``url``."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise EnvironmentBuildError(f"{PACKAGE_INDEX_ENV}={url!r} is not an http(s) URL of a package index")
    if host in ("127.0.0.1", "localhost"):
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if port < 1024:
            raise EnvironmentBuildError(f"{PACKAGE_INDEX_ENV}={url!r}: a loopback index must use a port >= 1024")
        fwd = UnixForwarder("127.0.0.1", port)
        return fwd, (fwd.channel(port),), {}
    extra = os.environ.get(PACKAGE_HOSTS_ENV)
    hosts = {host} | (
        {h.strip() for h in extra.split(",") if h.strip()}
        if extra is not None
        else (set(PYPI_FILE_HOSTS) if host == "pypi.org" else set())
    )
    proxy = IndexProxy(hosts)
    proxy_url = f"http://127.0.0.1:{PROXY_PORT}"
    return (
        proxy,
        (proxy.channel(PROXY_PORT),),
        {"HTTPS_PROXY": proxy_url, "HTTP_PROXY": proxy_url, "UV_NATIVE_TLS": "1"},
    )


def _site_packages(env: Path) -> Path:
    return env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _write_stubs(site: Path) -> list[str]:
    """Metadata-only copies of the controller's distributions: the installer sees them as
    installed (and never fetches them), the resolver honours their requirements."""
    names = []
    for d in metadata.distributions():
        name = _distribution_name(d)
        if not name or _canonical(name) == "evalrunner":
            continue
        stub = site / f"{re.sub(r'[-_.]+', '_', name)}-{d.version}.dist-info"
        if stub.exists():
            continue
        stub.mkdir()
        (stub / "METADATA").write_text(
            d.read_text("METADATA") or f"Metadata-Version: 2.1\nName: {name}\nVersion: {d.version}\n"
        )
        (stub / "WHEEL").write_text(
            d.read_text("WHEEL") or "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        (stub / "INSTALLER").write_text(STUB_INSTALLER + "\n")
        (stub / "RECORD").write_text("")
        names.append(stub.name)
    return names


def _remove_stubs(site: Path, names: list[str]) -> None:
    for name in names:
        p = site / name
        if p.is_symlink() or not p.is_dir() or (p / "INSTALLER").read_text().strip() != STUB_INSTALLER:
            raise EnvironmentBuildError(
                f"the build replaced evalrunner's own {name} (a controller package); refusing the environment",
                infrastructure=False,
            )
        shutil.rmtree(p)


def finish_environment(env: Path, stubs: list[str], plan: dict[str, Any]) -> dict[str, Any]:
    """After the install: the stubs go, the ``.pth`` that appends the controller's
    site-packages comes, and the completion marker is written (last). Returns its record."""
    site = _site_packages(env)
    _remove_stubs(site, stubs)
    (site / CONTROLLER_PTH).write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in controller_site_dirs())
    )
    record = {
        "digest": plan.get("digest", ""),
        "kind": plan["kind"],
        "source": plan["source"],
        "install_project": plan["install_project"],
        "packages": _installed(site),
        "index": plan["index"],
        "python": sys.version.split()[0],
        "platform": f"{sys.platform}-{platform.machine()}",
        "built_from": plan.get("built_from", ""),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (env / MARKER).write_text(json.dumps(record, indent=2, sort_keys=True))
    return record


def _installed(site: Path) -> list[str]:
    out = []
    for p in sorted(site.glob("*.dist-info")):
        try:
            text = (p / "METADATA").read_text("utf-8", errors="replace")
        except OSError:
            continue
        meta = dict(re.findall(r"^(Name|Version): (.+)$", text, flags=re.M))
        if "Name" in meta:
            out.append(f"{meta['Name'].strip()}=={meta.get('Version', '').strip()}")
    return out


_NOT_FOUND = re.compile(r"Because ([A-Za-z0-9][\w.-]*) was not found in the package registry")
_NO_VERSION = re.compile(r"there (?:is|are) no versions? of ([A-Za-z0-9][\w.-]*)([^\s,]*)")
_CONFLICT = re.compile(r"you require ([A-Za-z0-9][\w.-]*)(\S*) and \1(\S*)")


def explain_failure(source: str, index: str, step: str, log: str) -> EnvironmentBuildError:
    """One line naming the file, the package and the cause, from the installer's output."""
    text = " ".join(line.strip() for line in log.splitlines())
    cause = next(
        (
            ln.strip()
            for ln in reversed(log.splitlines())
            if ln.strip().startswith(("error:", "cause:", "×", "╰─▶")) or "Because" in ln
        ),
        "",
    )
    detail = re.sub(r"\s+", " ", cause)[:400] or text[-400:]
    m = _NOT_FOUND.search(text)
    if m:
        return EnvironmentBuildError(
            f"{source}: no version of `{m.group(1)}` on the package index {index}: {detail}",
            source=source,
            package=m.group(1),
            log_tail=log[-4000:],
        )
    m = _CONFLICT.search(text)
    if m and _canonical(m.group(1)) in controller_distributions():
        name, ver = controller_distributions()[_canonical(m.group(1))]
        return EnvironmentBuildError(
            f"{source}: requires `{m.group(1)}{m.group(2)}` but evalrunner runs {name} {ver} (sandboxes use "
            f"evalrunner's own {name}); admit {ver} in {source}",
            source=source,
            package=m.group(1),
            log_tail=log[-4000:],
        )
    m = _NO_VERSION.search(text)
    if m:
        return EnvironmentBuildError(
            f"{source}: no version of `{m.group(1)}{m.group(2)}` on the package index {index}: {detail}",
            source=source,
            package=m.group(1),
            log_tail=log[-4000:],
        )
    infra = bool(re.search(r"Connection refused|tcp connect error|dns error|timed out|403 Forbidden", text))
    return EnvironmentBuildError(
        f"{source}: installing the repository's dependencies failed ({step}): {detail}",
        source=source,
        infrastructure=infra,
        log_tail=log[-4000:],
    )


def _sweep(root: Path) -> None:
    """Temporary build directories of builders that no longer run."""
    from evalrunner_assets.execution._process import pid_alive

    pattern = re.compile(r"^\.[0-9a-f]+\.tmp-(\d+)-")  # the build dir and its "-src" copy
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for p in entries:
        m = pattern.match(p.name)
        if m and not pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)


def remote_builder(backend: Any) -> Any:
    """``backend.ensure_environment`` when the backend keeps repository environments itself
    (on a cluster, not in this machine's directories), else None. Wrappers that run through an
    ``inner`` backend (the model gateway's) are looked through."""
    while backend is not None:
        found = getattr(backend, "ensure_environment", None)
        if found is not None:
            return found
        backend = getattr(backend, "inner", None)
    return None


class EnvironmentStore:
    """Builds and finds repository environments by digest (see the module docstring)."""

    def __init__(self, root: str | Path | None = None, *, index: str | None = None, lake: Any = None) -> None:
        self.root = Path(root).resolve() if root is not None else env_root()
        self.index = index or index_url()
        self.lake = lake
        self.builds = 0  # environments this store built (installs that ran)

    def path(self, digest: str) -> Path:
        return self.root / digest

    def built(self, digest: str) -> str | None:
        """The directory of a complete environment with this digest, if this machine has it."""
        path = self.path(digest)
        return str(path) if (path / MARKER).is_file() else None

    def find(self, spec: EnvSpec) -> BuiltEnvironment | None:
        path = self.path(spec.digest)
        marker = path / MARKER
        if not marker.is_file():
            return None
        rec = json.loads(marker.read_text())
        return BuiltEnvironment(
            spec.digest, str(path), spec.kind, spec.source, reused=True, packages=tuple(rec.get("packages", ()))
        )

    def ensure(
        self, backend: SandboxBackend, export: RepoExport, spec: EnvSpec, cancel: threading.Event | None = None
    ) -> BuiltEnvironment:
        """The environment of ``spec``, built (in ``backend``) unless it exists.

        A backend that keeps environments itself (``ensure_environment``: Kubernetes, one
        volume per digest on the cluster) builds and finds them there; the lake record is
        written here either way."""
        remote = remote_builder(backend)
        if remote is not None:
            if spec.kind == KIND_LOCK:
                _lock_conflicts(spec)
            built, record = remote(export, spec, index=self.index, cancel=cancel)
            if record is not None:
                self.builds += 1
                self._record(spec.digest, record)
            return built
        found = self.find(spec)
        if found is not None:
            return found
        if spec.kind == KIND_LOCK:
            _lock_conflicts(spec)  # before any sandbox: a pin evalrunner cannot honour
        if getattr(backend, "name", None) != "bubblewrap":
            # Built environments are local directories mounted at their own path: only the
            # bubblewrap backend can build and mount them here.
            raise EnvironmentBuildError(
                f"{spec.source}: the repository declares dependencies, and installing them needs the "
                f"bubblewrap or kubernetes backend (the {getattr(backend, 'name', backend)!r} backend "
                "cannot build repository environments)",
                source=spec.source,
            )
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{spec.digest}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent builders of one digest: one builds
            found = self.find(spec)
            if found is not None:
                return found
            _sweep(self.root)
            return self._build(backend, export, spec, cancel)

    def _record(self, digest: str, record: dict[str, Any]) -> None:
        if self.lake is not None:
            from lake import LAYOUT

            self.lake.write_bytes(LAYOUT.env_record(digest), json.dumps(record, indent=2, sort_keys=True).encode())

    def _build(
        self, backend: SandboxBackend, export: RepoExport, spec: EnvSpec, cancel: threading.Event | None
    ) -> BuiltEnvironment:
        final = self.path(spec.digest)
        tmp = self.root / f".{spec.digest}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        try:
            uv = shutil.which("uv", path=os.path.join(sys.prefix, "bin")) or shutil.which("uv")
            if uv is None:
                raise EnvironmentBuildError(
                    "uv is not installed in evalrunner's environment; reinstall evalrunner", infrastructure=True
                )
            subprocess.run(
                [uv, "venv", "--quiet", "--no-config", "--python", sys.executable, str(tmp)],
                check=True,
                capture_output=True,
                timeout=120,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "UV_NO_CACHE": "1"},
            )
            site = _site_packages(tmp)
            stubs = _write_stubs(site)
            build = tmp / BUILD_DIR
            build.mkdir()
            (build / "constraints.txt").write_text(controller_constraints())
            plan = {
                "kind": spec.kind,
                "source": spec.source,
                "install_project": spec.install_project,
                "index": self.index,
                "env": str(final),
                "constraints": str(final / BUILD_DIR / "constraints.txt"),
                "controller_packages": sorted(n for n, _ in controller_distributions().values()),
            }
            # The project's build writes into its source tree (egg-info): it gets a throwaway copy,
            # seen at the same /work/repo as every sandbox sees its commit.
            source = tmp.parent / f"{tmp.name}-src"
            shutil.copytree(export.path, source, symlinks=True)
            scratch = RepoExport(
                repo=export.repo, commit=export.commit, path=str(source), tree_digest=export.tree_digest
            )
            service, channels, env = _index_access(self.index)
            try:
                request = SandboxRequest(
                    argv=("python", "-m", "evalrunner_assets.execution._env_build", json.dumps(plan)),
                    export=scratch,
                    repo_writable=True,
                    env={
                        **env,
                        "UV_CACHE_DIR": "/work/home/uv-cache",
                        "UV_LINK_MODE": "copy",
                        "UV_PYTHON_DOWNLOADS": "never",
                        "UV_NO_PROGRESS": "1",
                    },
                    limits=BUILD_LIMITS,
                    channels=channels,
                    writable=(WritableMount(str(tmp), str(final)),),
                    labels={"repo": export.repo, "commit": export.commit, "step": "environment"},
                )
                result = backend.run(request, cancel=cancel)
            finally:
                service.close()
                shutil.rmtree(source, ignore_errors=True)
            if result.status is not SandboxStatus.OK:
                raise_build_failure(spec, self.index, result)
            shutil.rmtree(build)
            record = finish_environment(
                tmp, stubs, {**plan, "digest": spec.digest, "built_from": f"{export.repo}@{export.commit}"}
            )
            packages = tuple(record["packages"])
            build_s = time.monotonic() - started
            record["build_s"] = round(build_s, 3)
            (tmp / MARKER).write_text(json.dumps(record, indent=2, sort_keys=True))
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(tmp.parent / f"{tmp.name}-src", ignore_errors=True)
            raise
        self.builds += 1
        self._record(spec.digest, record)
        return BuiltEnvironment(
            spec.digest, str(final), spec.kind, spec.source, reused=False, build_s=build_s, packages=packages
        )


def raise_build_failure(spec: EnvSpec, index: str, result: SandboxResult) -> None:
    """Raise the :class:`EnvironmentBuildError` a failed build sandbox's result means: the
    failing step and package from its ``build.json``, or an infrastructure failure."""
    report = _report(result.outputs.get("build.json"))
    if report is None or result.status is not SandboxStatus.EXIT_NONZERO:
        raise EnvironmentBuildError(
            f"{spec.source}: the environment build did not finish ({result.status.value}: "
            f"{result.detail or 'exit ' + str(result.exit_code)}); stderr ends: "
            f"{result.stderr_tail.strip()[-400:]}",
            source=spec.source,
            infrastructure=result.status is not SandboxStatus.EXIT_NONZERO,
            log_tail=result.stderr_tail,
        )
    raise explain_failure(spec.source, index, str(report.get("step")), str(report.get("log", "")))


def _report(raw: bytes | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


@dataclass
class EnvironmentInfo:
    """What a commit's facts say about its environment (kept in ``tasks.json``)."""

    digest: str
    kind: str
    source: str
    reused: bool
    build_s: float = 0.0
    packages: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, built: BuiltEnvironment) -> EnvironmentInfo:
        return cls(built.digest, built.kind, built.source, built.reused, round(built.build_s, 3), list(built.packages))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


__all__ = [
    "BuiltEnvironment",
    "EnvSpec",
    "EnvironmentBuildError",
    "EnvironmentInfo",
    "EnvironmentStore",
    "IndexProxy",
    "detect_environment",
    "env_root",
    "explain_failure",
    "index_url",
    "raise_build_failure",
    "remote_builder",
    "runtime_with_env",
    "spec_for_file",
]
