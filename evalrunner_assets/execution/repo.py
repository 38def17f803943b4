"""A repository at an exact commit: mirror once, resolve hex to a full SHA, export without ``.git``.

The exporter only ever takes commit SHAs (7–64 hex characters, resolved to the full 40-hex
SHA). Branch names, tags and other refs are refused: a ref moves, so a batch keyed by it would
not be reproducible. The CLI turns a user's ref into a SHA with :meth:`RepoSource.resolve_ref`
*before* anything reaches the sandbox layer.

An export is ``git archive`` output unpacked into a directory: no ``.git``, no other refs, no
history, so nothing of another branch or run can leak into a sandbox (docs/architecture.md, "Commit isolation").

A candidate's agent-config overrides become a real commit here (:meth:`RepoSource.commit_root_file`):
the ref's tree with one root file replaced, committed deterministically on a private ref of the
controller's copy, so it resolves, exports and keys batches like any other commit.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evalrunner_assets.errors import InputError
from evalrunner_assets.execution.sandbox import RepoExport

_HEX = re.compile(r"^[0-9a-fA-F]{7,64}$")
_REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|[^/\s]+@[^/\s]+:)")

# git must never read the invoking user's config, hooks or credentials helpers.
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "/bin/false",
    "LC_ALL": "C",
}


# Who commits what evalrunner synthesizes (a candidate's agent-config overrides); fixed, so the
# commit's SHA depends only on its tree, parent, date and message.
SYNTHESIZED_AUTHOR = ("evalrunner", "evalrunner@localhost")
PRIVATE_REFSPEC = "^refs/evalrunner/*"  # what a mirror's fetch and prune leave alone


class RepoError(InputError, ValueError):
    """A repository source, ref or commit cannot be used; the message names it."""


class RepoIdInUse(RepoError):
    """A repository id already names another source; pointing it elsewhere needs ``--repoint``."""

    def __init__(self, repo: str, registered: str, given: str) -> None:
        super().__init__(f"repository id {repo!r} already names {registered}, not {given}")
        self.repo, self.registered, self.given = repo, registered, given
        self.hint = (
            f"give this checkout its own --repo-id, or run `evalrunner repos add {repo} {given} --repoint` "
            "to point the id (and every series, candidate and comparison under it) at the new source"
        )


class RepoSubdirectory(RepoError):
    """A local path inside a checkout rather than its top level (``top``)."""

    def __init__(self, message: str, top: str) -> None:
        super().__init__(message)
        self.top = top


class CommitNotHex(RepoError):
    """The exporter was given something other than 7–64 hex characters (e.g. a branch name)."""


class CommitNotFound(RepoError):
    """No commit in the repository matches the given hex."""


class AmbiguousCommit(RepoError):
    """A short SHA matches more than one object."""


class RefNotFound(RepoError):
    """A branch, tag or other ref does not exist in the repository."""


def _git(
    args: list[str],
    *,
    cwd: str | None = None,
    git_dir: str | None = None,
    input: bytes | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.devnull, **_GIT_ENV, **(env or {})}
    cmd = ["git"]
    if git_dir is not None:
        cmd += ["--git-dir", git_dir]
    cmd += args
    proc = subprocess.run(cmd, cwd=cwd, env=env, input=input, capture_output=True)
    if check and proc.returncode != 0:
        raise RepoError(
            f"git {' '.join(args[:3])} failed ({proc.returncode}): "
            f"{proc.stderr.decode(errors='replace').strip()[-500:]}"
        )
    return proc


def tree_digest(root: str | Path) -> str:
    """sha256 over every file's relative path, kind/mode and bytes (sorted; symlinks by target)."""
    root = Path(root)
    h = hashlib.sha256()
    entries: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]):
            p = Path(dirpath) / name
            entries.append((p.relative_to(root).as_posix(), p))
    for rel, p in sorted(entries):
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            h.update(f"L {rel}\0{os.readlink(p)}\0".encode())
        elif stat.S_ISREG(st.st_mode):
            mode = "x" if st.st_mode & 0o111 else "f"
            h.update(f"{mode} {rel}\0{st.st_size}\0".encode())
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def _is_remote(source: str) -> bool:
    return bool(_REMOTE.match(source))


@dataclass
class RepoSource:
    """One repository: a local path (used in place) or a remote URL (mirrored once into
    ``cache_dir`` as a bare mirror and fetched on :meth:`update`).

    ``repo`` is the ``owner/name`` id recorded in exports and batch keys.
    """

    repo: str
    source: str
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        if _is_remote(self.source):
            if self.cache_dir is None:
                raise RepoError(f"remote repository {self.source!r} needs a cache_dir to mirror into")
            key = hashlib.sha256(self.source.encode()).hexdigest()[:16]
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", self.repo)
            self._git_dir = str(Path(self.cache_dir) / f"{safe}-{key}.git")
            self._remote = True
        else:
            path = Path(self.source).expanduser().resolve()
            if not path.exists():
                raise RepoError(f"{self.source!r} does not exist (nor is it a remote URL)")
            if not path.is_dir():
                raise RepoError(f"{self.source!r} is a file, not a git repository")
            proc = _git(["rev-parse", "--absolute-git-dir"], cwd=str(path), check=False)
            if proc.returncode != 0:
                raise RepoError(f"{self.source!r} is not a git repository (nor a remote URL)")
            # A subdirectory of a checkout would silently be read from the repository's root
            # (its .evals/list ignored, every task of the repository discovered).
            prefix = _git(["rev-parse", "--show-prefix"], cwd=str(path), check=False)
            if prefix.returncode == 0 and prefix.stdout.decode().strip():
                top = _git(["rev-parse", "--show-toplevel"], cwd=str(path)).stdout.decode().strip()
                raise RepoSubdirectory(
                    f"{self.source!r} is the subdirectory {prefix.stdout.decode().strip()!r} of the git "
                    f"repository {top!r}",
                    top=top,
                )
            self._git_dir = proc.stdout.decode().strip()
            self._remote = False

    # -- mirror ------------------------------------------------------------------------------

    @property
    def git_dir(self) -> str:
        return self._git_dir

    def ensure_mirror(self) -> bool:
        """Create the bare mirror if absent. Returns True when it was cloned just now."""
        if not self._remote or Path(self._git_dir, "HEAD").exists():
            return False
        Path(self._git_dir).parent.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".mirror-", dir=Path(self._git_dir).parent)
        try:
            _git(["clone", "--mirror", "--quiet", "--", self.source, tmp])
            os.rename(tmp, self._git_dir)  # atomic: a half-cloned mirror is never visible
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return True

    def update(self) -> None:
        """Fetch new commits and refs into the mirror (a no-op for local repositories)."""
        if self._remote and not self.ensure_mirror():
            _git(["remote", "update", "--prune"], git_dir=self._git_dir)

    # -- names -------------------------------------------------------------------------------

    def resolve_commit(self, commit: str) -> str:
        """7–64 hex characters → the full 40-hex SHA of an existing commit.

        Refuses anything that is not hex (branch names, tags, ``HEAD~1``), unknown commits and
        ambiguous short SHAs, each with its own error."""
        if not isinstance(commit, str) or not _HEX.match(commit):
            raise CommitNotHex(
                f"commit {commit!r} is not 7–64 hex characters; give a commit SHA "
                "(resolve branch names and tags with resolve_ref first)"
            )
        self.ensure_mirror()
        want = commit.lower()
        if len(want) > 40:
            raise CommitNotFound(f"commit {commit!r} is longer than a SHA-1 object name")
        proc = _git(
            ["rev-parse", "--verify", "--quiet", "--disambiguate=" + want]
            if len(want) < 40
            else ["cat-file", "-t", want],
            git_dir=self._git_dir,
            check=False,
        )
        if len(want) == 40:
            if proc.returncode != 0 or proc.stdout.decode().strip() != "commit":
                raise CommitNotFound(f"commit {commit!r} is not a commit in {self.repo}")
            return want
        # --disambiguate lists every object with that prefix; keep commits only.
        candidates = [c for c in proc.stdout.decode().split() if c]
        commits = [c for c in candidates if self._object_type(c) == "commit"]
        if not commits:
            raise CommitNotFound(f"no commit in {self.repo} starts with {commit!r}")
        if len(commits) > 1:
            raise AmbiguousCommit(
                f"short SHA {commit!r} is ambiguous in {self.repo}: matches {', '.join(sorted(commits))}"
            )
        return commits[0]

    def _object_type(self, sha: str) -> str:
        proc = _git(["cat-file", "-t", sha], git_dir=self._git_dir, check=False)
        return proc.stdout.decode().strip()

    def resolve_ref(self, ref: str) -> str:
        """A user's branch, tag, ``HEAD`` or SHA → full commit SHA (for the CLI, before export)."""
        if not isinstance(ref, str) or not ref or ref.startswith("-") or "\0" in ref:
            raise RefNotFound(f"ref {ref!r} is not a valid ref name")
        self.ensure_mirror()
        if _HEX.match(ref):
            try:
                return self.resolve_commit(ref)
            except CommitNotFound:
                pass  # a branch may be named like hex; fall through to the ref lookup
        proc = _git(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
            git_dir=self._git_dir,
            check=False,
        )
        if proc.returncode != 0:
            raise RefNotFound(f"ref {ref!r} does not name a commit in {self.repo}")
        return proc.stdout.decode().strip()

    def changed_files(self, base: str, head: str) -> list[str]:
        """Paths changed between two commits (sorted; renames count as both paths)."""
        b, h = self.resolve_commit(base), self.resolve_commit(head)
        proc = _git(["diff", "--name-only", "-z", "--no-renames", b, h], git_dir=self._git_dir)
        return sorted({p for p in proc.stdout.decode("utf-8", "replace").split("\0") if p})

    def first_parent_history(self, ref: str) -> list[tuple[str, str, str]]:
        """``ref``'s first-parent history, oldest first: (sha, ISO commit time, subject).

        First parents only: a branch's own line of commits (merges count once, as the merge
        commit), which is what a main-branch series is plotted over."""
        tip = self.resolve_ref(ref)
        proc = _git(["log", "--first-parent", "--reverse", "--format=%H%x1f%cI%x1f%s", tip], git_dir=self._git_dir)
        out = []
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            sha, when, subject = (line.split("\x1f") + ["", ""])[:3]
            if sha:
                out.append((sha, when, subject))
        return out

    # -- synthesized commits ----------------------------------------------------------------

    def root_file(self, commit: str, names: Sequence[str]) -> tuple[str, bytes] | None:
        """The first of ``names`` at the root of ``commit``'s tree: (name, bytes), or None.
        A name that is there but not a regular file (a symlink, a directory) is refused."""
        sha = self.resolve_commit(commit)
        proc = _git(["ls-tree", "-z", sha, "--", *names], git_dir=self._git_dir)
        entries: dict[str, tuple[str, str, str]] = {}
        for entry in proc.stdout.decode("utf-8", "replace").split("\0"):
            if entry:
                meta, _, path = entry.partition("\t")
                mode, kind, obj = meta.split()
                entries[path] = (mode, kind, obj)
        for name in names:
            if name not in entries:
                continue
            mode, kind, obj = entries[name]
            if kind != "blob" or mode not in ("100644", "100755"):
                raise RepoError(f"{name} at {sha[:12]} of {self.repo} is not a regular file (mode {mode})")
            return name, _git(["cat-file", "blob", obj], git_dir=self._git_dir).stdout
        return None

    def commit_root_file(self, base: str, name: str, content: bytes, *, message: str, ref: str) -> str:
        """A commit whose parent is ``base`` and whose tree is ``base``'s with the root file
        ``name`` holding ``content`` (its mode kept); every other entry is the same object.
        Author, committer and date are fixed (the date is ``base``'s commit date), so the same
        inputs give the same SHA on any machine. ``ref`` (e.g. ``refs/evalrunner/…``) keeps it
        reachable in this repository's copy; nothing is pushed anywhere."""
        sha = self.resolve_commit(base)
        if "/" in name or not name:
            raise RepoError(f"{name!r} is not a file at the repository root")
        if _git(["check-ref-format", ref], check=False).returncode != 0:
            raise RepoError(f"{ref!r} is not a valid git ref name")
        blob = _git(["hash-object", "-w", "--stdin"], git_dir=self._git_dir, input=content).stdout.decode().strip()
        listing = _git(["ls-tree", "-z", sha], git_dir=self._git_dir).stdout.decode("utf-8", "surrogateescape")
        entries = []
        for entry in listing.split("\0"):
            if not entry:
                continue
            meta, _, path = entry.partition("\t")
            mode, kind, obj = meta.split()
            if path == name:
                obj = blob
            entries.append(f"{mode} {kind} {obj}\t{path}")
        if not any(e.endswith(f"\t{name}") for e in entries):
            entries.append(f"100644 blob {blob}\t{name}")
        tree = _git(
            ["mktree", "-z"], git_dir=self._git_dir, input="\0".join(entries).encode("utf-8", "surrogateescape") + b"\0"
        )
        date = _git(["log", "-1", "--format=%ct %cz", sha], git_dir=self._git_dir).stdout.decode().strip()
        identity = {
            "GIT_AUTHOR_NAME": SYNTHESIZED_AUTHOR[0],
            "GIT_AUTHOR_EMAIL": SYNTHESIZED_AUTHOR[1],
            "GIT_COMMITTER_NAME": SYNTHESIZED_AUTHOR[0],
            "GIT_COMMITTER_EMAIL": SYNTHESIZED_AUTHOR[1],
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_DATE": date,
        }
        # The repository's own config could ask for signing or another message encoding.
        commit = _git(
            ["-c", "commit.gpgSign=false", "-c", "i18n.commitEncoding=UTF-8", "commit-tree",
             tree.stdout.decode().strip(), "-p", sha, "-F", "-"],
            git_dir=self._git_dir,
            input=message.encode("utf-8"),
            env=identity,
        ).stdout.decode().strip()  # fmt: skip
        self._keep_private_refs()
        _git(["update-ref", ref, commit], git_dir=self._git_dir)
        return commit

    def _keep_private_refs(self) -> None:
        """A mirror fetches ``+refs/*:refs/*`` with ``--prune``, which would delete the refs
        evalrunner writes (``refs/evalrunner/…``) on the next update and leave their commits to
        gc. A negative refspec (git 2.29+) keeps them out of fetching and pruning."""
        if not self._remote:
            return
        proc = _git(["config", "--get-all", "remote.origin.fetch"], git_dir=self._git_dir, check=False)
        if PRIVATE_REFSPEC in proc.stdout.decode().split():
            return
        version = re.search(r"(\d+)\.(\d+)", _git(["version"]).stdout.decode())
        if version is None or (int(version[1]), int(version[2])) < (2, 29):
            return  # an older git refuses negative refspecs; the commit is re-made when needed
        _git(["config", "--add", "remote.origin.fetch", PRIVATE_REFSPEC], git_dir=self._git_dir)

    # -- export ------------------------------------------------------------------------------

    def export(self, commit: str, dest: str | Path) -> RepoExport:
        """Export ``commit`` into the empty-or-absent directory ``dest`` via ``git archive``.

        Only regular files, executables, directories and symlinks are written, every member is
        checked to stay inside ``dest``; submodules (gitlinks) are absent from archives."""
        sha = self.resolve_commit(commit)
        dest = Path(dest)
        if dest.exists() and any(dest.iterdir()):
            raise RepoError(f"export destination {str(dest)!r} is not empty")
        dest.mkdir(parents=True, exist_ok=True)
        proc = _git(["archive", "--format=tar", sha], git_dir=self._git_dir)
        with tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:") as tar:
            # The 'data' filter refuses absolute names, '..', links leaving dest and devices.
            try:
                tar.extractall(dest, filter="data")
            except tarfile.FilterError as exc:
                shutil.rmtree(dest, ignore_errors=True)
                raise RepoError(f"commit {sha} of {self.repo} cannot be exported safely: {exc}") from exc
        os.chmod(dest, 0o755)
        return RepoExport(repo=self.repo, commit=sha, path=str(dest), tree_digest=tree_digest(dest))


def export_commit(source: RepoSource, commit: str, root: Path) -> RepoExport:
    """Export ``commit`` under ``root/<repo>/<sha>``, reusing a finished export.

    The export lands under a temporary name and is renamed into place, so a crash mid-export
    never leaves a half tree that a later run would take for complete."""
    sha = source.resolve_commit(commit)
    dest = root / source.repo / sha
    if dest.is_dir():
        return RepoExport(repo=source.repo, commit=sha, path=str(dest), tree_digest=tree_digest(dest))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{sha}.tmp-{uuid.uuid4().hex}"
    try:
        export = source.export(sha, tmp)
        os.rename(tmp, dest)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if dest.is_dir():  # another process finished the same export first
            return export_commit(source, sha, root)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return RepoExport(repo=export.repo, commit=sha, path=str(dest), tree_digest=export.tree_digest)
