"""Build the bundled example agent repo as a git repository: a base commit plus one branch per
pull-request variant.

The example files live in the source checkout (``examples/support-agent/`` and
``examples/support-agent-variants/*.patch``), found relative to this package — evalrunner is
installed editable, so the package directory sits inside the checkout.

Commits are made with fixed authors, dates and messages and without reading any git
configuration, so the SHAs are the same on every machine and every run.

    python -m evalrunner_assets.example_repo DEST [--variant NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_REPO_SOURCE = EXAMPLES_DIR / "support-agent"
VARIANT_PATCHES_DIR = EXAMPLES_DIR / "support-agent-variants"

# Canonical order: a variant's commit date is fixed by its position here, so its SHA does not
# depend on which other variants were requested.
VARIANTS: tuple[str, ...] = ("improve-runbook", "regress-escalation", "no-op-wording")
BASE_BRANCH = "main"
BASE_MESSAGE = "Support agent: triage and status-update skills with their evals"
BASE_COMMIT_DATE = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)
AUTHOR_NAME = "Support Agent Maintainers"
AUTHOR_EMAIL = "support-agent@example.com"
EXECUTABLE_FILES = (".evals/list",)
_IGNORED = shutil.ignore_patterns(".git", "__pycache__", "*.pyc")


class ExampleRepoError(RuntimeError):
    """The example repo could not be built; the message says what was wrong."""


@dataclass(frozen=True)
class VariantCommit:
    name: str
    branch: str
    sha: str  # full 40-hex commit SHA; its parent is the base commit
    message: str


@dataclass(frozen=True)
class ExampleRepo:
    path: Path
    base_branch: str
    base_sha: str
    variants: dict[str, VariantCommit]

    def sha(self, variant: str) -> str:
        """The head SHA of ``variant`` (or of the base for ``"base"``)."""
        if variant == "base":
            return self.base_sha
        if variant not in self.variants:
            raise KeyError(f"variant {variant!r} was not built; built: {sorted(self.variants)}")
        return self.variants[variant].sha


def variant_patch(name: str) -> Path:
    if name not in VARIANTS:
        raise ExampleRepoError(f"unknown variant {name!r}; known variants: {', '.join(VARIANTS)}")
    patch = VARIANT_PATCHES_DIR / f"{name}.patch"
    if not patch.is_file():
        raise ExampleRepoError(f"variant patch {patch} is missing")
    return patch


def variant_message(patch: Path) -> str:
    """The commit message a patch carries: its ``Subject:`` line and the text up to ``---``."""
    header = patch.read_text(encoding="utf-8").split("\n---\n", 1)[0]
    match = re.match(r"Subject:\s*(.+?)\n(.*)", header + "\n", re.DOTALL)
    if match is None:
        raise ExampleRepoError(f"{patch} has no 'Subject:' line to use as its commit message")
    subject, body = match.group(1).strip(), match.group(2).strip()
    return f"{subject}\n\n{body}\n" if body else f"{subject}\n"


def build_example_repo(dest: Path, variants: Sequence[str] = VARIANTS) -> ExampleRepo:
    """Create a git repo at ``dest`` (absent or empty) holding the example agent repo as the
    base commit on ``main`` and, for each requested variant, a branch of that name with one
    commit (the variant's patch) on top of the base. ``main`` is checked out at the end."""
    dest = Path(dest)
    requested = list(dict.fromkeys(variants))
    for name in requested:
        variant_patch(name)  # fail before touching the disk
    if not EXAMPLE_REPO_SOURCE.is_dir():
        raise ExampleRepoError(
            f"example repo not found at {EXAMPLE_REPO_SOURCE}; evalrunner must be installed "
            "from a source checkout (pip install -e .)"
        )
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ExampleRepoError(f"{dest} exists and is not an empty directory")

    shutil.copytree(EXAMPLE_REPO_SOURCE, dest, ignore=_IGNORED, dirs_exist_ok=True)
    _normalise_modes(dest)
    git = _Git(dest)
    git("-c", f"init.defaultBranch={BASE_BRANCH}", "init", "-q")
    git("add", "-A")
    base_sha = git.commit(BASE_MESSAGE, BASE_COMMIT_DATE)

    built = {}
    for position, name in enumerate(VARIANTS, start=1):
        if name not in requested:
            continue
        patch = variant_patch(name)
        message = variant_message(patch)
        git("checkout", "-q", "-b", name, base_sha)
        git("apply", "--index", "--whitespace=nowarn", str(patch.resolve()))
        sha = git.commit(message, BASE_COMMIT_DATE + timedelta(hours=position))
        built[name] = VariantCommit(name=name, branch=name, sha=sha, message=message)
    git("checkout", "-q", BASE_BRANCH)
    return ExampleRepo(path=dest, base_branch=BASE_BRANCH, base_sha=base_sha, variants=built)


def _normalise_modes(root: Path) -> None:
    # Git records only the executable bit; fix it so the tree (and SHA) never depends on the
    # modes the source checkout happens to have.
    for path in root.rglob("*"):
        if path.is_file():
            relative = path.relative_to(root).as_posix()
            path.chmod(0o755 if relative in EXECUTABLE_FILES else 0o644)


class _Git:
    """git in one repository, isolated from every user/system config on this machine."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(repo),
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": AUTHOR_NAME,
            "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
            "GIT_COMMITTER_NAME": AUTHOR_NAME,
            "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL,
        }

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> str:
        if shutil.which("git", path=self.env["PATH"]) is None:
            raise ExampleRepoError("git is not installed (needed to build the example repo)")
        result = subprocess.run(
            ["git", "-c", "core.autocrlf=false", "-c", "commit.gpgSign=false", *args],
            cwd=self.repo,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ExampleRepoError(
                f"git {' '.join(args)} failed in {self.repo} (exit {result.returncode}): "
                f"{result.stderr.strip()[-2000:]}"
            )
        return result.stdout.strip()

    def commit(self, message: str, when: datetime) -> str:
        date = when.isoformat()
        self("commit", "-q", "--no-verify", "-m", message,
             env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        return self("rev-parse", "HEAD")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evalrunner_assets.example_repo",
        description="Build the example agent repo with its pull-request variants as branches.",
    )
    parser.add_argument("dest", type=Path, help="directory to create (absent or empty)")
    parser.add_argument(
        "--variant", action="append", choices=VARIANTS,
        help="variant to build (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    try:
        repo = build_example_repo(args.dest, args.variant or VARIANTS)
    except ExampleRepoError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(
        {
            "path": str(repo.path),
            "base": {"branch": repo.base_branch, "sha": repo.base_sha},
            "variants": {v.name: {"branch": v.branch, "sha": v.sha} for v in repo.variants.values()},
        },
        indent=2,
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
