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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from evalrunner_assets.errors import EvalrunnerError

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_REPO_SOURCE = EXAMPLES_DIR / "support-agent"
VARIANT_PATCHES_DIR = EXAMPLES_DIR / "support-agent-variants"

# Canonical order: a variant's commit date is fixed by its position here, so its SHA does not
# depend on which other variants were requested.
VARIANTS: tuple[str, ...] = ("improve-runbook", "regress-escalation", "no-op-wording")
BASE_BRANCH = "main"
BASE_MESSAGE = "Support agent: triage and status-update skills with their evals"
BASE_COMMIT_DATE = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
AUTHOR_NAME = "Support Agent Maintainers"
AUTHOR_EMAIL = "support-agent@example.com"
EXECUTABLE_FILES = (".evals/list",)
_IGNORED = shutil.ignore_patterns(".git", "__pycache__", "*.pyc")


class ExampleRepoError(EvalrunnerError, RuntimeError):
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
    git = Git(dest)
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


# --- a main-branch history (for cohort series) ----------------------------------------------

HISTORY_BRANCH = "main"
_REGRESSION_BEFORE = (
    "Before paging, call `service_owner` to find the team that owns the affected service, and page\n"
    "that team with `page_oncall` — not the team that reported the incident. Page once, with the\n"
    "incident's severity.\n"
)
_REGRESSION_AFTER = (
    "To keep response times short, page straight away with `page_oncall`: the team that reported\n"
    "the incident knows it best. Page once, with the incident's severity.\n"
)
_HARD_TASKS = """

# --- harder evals (cohort "hard"): the paging-severity incidents only -----------------------


def _severe_samples(request: str, target_of: Callable[[dict[str, Any]], str]) -> MemoryDataset:
    full = incident_samples(request, target_of)
    return MemoryDataset([s for s in full if (s.metadata or {}).get("severity") in PAGING_SEVERITIES],
                         name="triage-incidents-severe")


@task
def runbook_lookup_severe() -> Task:
    task_ = runbook_lookup()
    task_.dataset = _severe_samples(RUNBOOK_REQUEST, lambda incident: incident["runbook_id"])
    return task_


@task
def escalation_policy_severe() -> Task:
    task_ = escalation_policy()
    task_.dataset = _severe_samples(ESCALATION_REQUEST, lambda incident: f"page:{incident['owner']}")
    return task_
"""
HARD_COHORT_TASKS = (
    ("hard/runbook_lookup_severe", "evals/triage.py@runbook_lookup_severe", ["skills/triage/**", "evals/**"]),
    ("hard/escalation_policy_severe", "evals/triage.py@escalation_policy_severe", ["skills/triage/**", "evals/**"]),
)


@dataclass(frozen=True)
class HistoryCommit:
    sha: str
    message: str
    kind: str  # "base" | "neutral" | "regression" | "cohort_added" | "error" | "task_error"


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def _regress_escalation(root: Path) -> None:
    skill = root / "skills" / "triage" / "SKILL.md"
    text = skill.read_text(encoding="utf-8")
    if _REGRESSION_BEFORE not in text:
        raise ExampleRepoError(f"{skill} no longer holds the owner-lookup paragraph the history edits")
    skill.write_text(text.replace(_REGRESSION_BEFORE, _REGRESSION_AFTER), encoding="utf-8")


def _add_hard_cohort(root: Path) -> None:
    _append(root / "evals" / "triage.py", _HARD_TASKS)
    listing = root / ".evals" / "list"
    text = listing.read_text(encoding="utf-8")
    head, _, rest = text.partition("<<'MANIFEST'\n")
    body, _, tail = rest.partition("\nMANIFEST")
    manifest = json.loads(body)
    for task_id, spec, paths in HARD_COHORT_TASKS:
        manifest["tasks"].append(
            {
                "id": task_id,
                "workdir": ".",
                "spec": spec,
                "resources": [],
                "images": [],
                "cohort": "hard",
                "paths": paths,
            }
        )
    listing.write_text(f"{head}<<'MANIFEST'\n{json.dumps(manifest, indent=2)}\nMANIFEST{tail}", encoding="utf-8")


def _patch(name: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        Git(root)("apply", "--whitespace=nowarn", str(variant_patch(name).resolve()))

    return apply


def _note(line: str) -> Callable[[Path], None]:
    return lambda root: _append(root / "README.md", f"\n{line}\n")


# (message, kind, edit): the commits after the base, oldest first. One real regression
# (escalation_policy 0.80 -> 0.55), wording-only changes, and a cohort of harder evals.
HISTORY_STEPS: tuple[tuple[str, str, Callable[[Path], None]], ...] = (
    ("README: how to run the evals locally", "neutral", _note("Run the evals with `inspect eval evals/triage.py`.")),
    ("triage: reword the skill's description and style section", "neutral", _patch("no-op-wording")),
    ("README: who maintains the agent", "neutral", _note("Maintained by the support tooling team.")),
    ("README: link the paging policy", "neutral", _note("Paging policy: SEV1 and SEV2 page the owner's on-call.")),
    ("triage: page the reporting team straight away", "regression", _regress_escalation),
    ("README: note on response times", "neutral", _note("Response-time goals are tracked per team.")),
    ("README: status-page style notes", "neutral", _note("Status updates follow the status-page style guide.")),
    ("evals: harder triage evals on severe incidents", "cohort_added", _add_hard_cohort),
    ("README: list the eval cohorts", "neutral", _note("Cohorts: default (original suite) and hard.")),
    ("README: contact", "neutral", _note("Questions go to the support tooling channel.")),
    ("README: changelog pointer", "neutral", _note("See the git history for changes.")),
)


# Edits that make the repository's own code raise on every sample, and undo it: the solver all
# tasks share (the whole point errors) or the escalation scorer alone (one task errors).
_TRIAGE_EVALS = ("evals", "triage.py")
_INSTRUCTIONS_OK = "        state.messages.insert(0, ChatMessageSystem(content=prompt))\n"
_INSTRUCTIONS_RAISE = '        raise RuntimeError("skill index unavailable")\n'
_PAGING_OK = '        incident = state.metadata\n        pages = tool_calls(state, "page_oncall")\n'
_PAGING_RAISE = '        raise KeyError("paging_policy")\n' + _PAGING_OK


def _replace(old: str, new: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root.joinpath(*_TRIAGE_EVALS)
        text = path.read_text(encoding="utf-8")
        if text.count(old) != 1:
            raise ExampleRepoError(f"{path} does not hold the code the history edits: {old.strip()!r}")
        path.write_text(text.replace(old, new), encoding="utf-8")

    return edit


# (message, kind, edit) of steps that break the evals and repair them, for histories where a
# commit's samples raise ("error": every task's solver; "task_error": the escalation scorer).
ERROR_STEPS: dict[str, tuple[str, str, Callable[[Path], None]]] = {
    "break_solver": ("triage: load the skill index first", "error", _replace(_INSTRUCTIONS_OK, _INSTRUCTIONS_RAISE)),
    "fix_solver": ("triage: revert the skill index", "neutral", _replace(_INSTRUCTIONS_RAISE, _INSTRUCTIONS_OK)),
    "break_scorer": ("evals: check the paging policy table", "task_error", _replace(_PAGING_OK, _PAGING_RAISE)),
    "fix_scorer": ("evals: revert the paging policy table", "neutral", _replace(_PAGING_RAISE, _PAGING_OK)),
}
REGRESSION_STEP: tuple[str, str, Callable[[Path], None]] = HISTORY_STEPS[4]


def build_example_history(
    dest: Path,
    extra_neutral: int = 0,
    steps: Sequence[tuple[str, str, Callable[[Path], None]]] = HISTORY_STEPS,
) -> list[HistoryCommit]:
    """Create a git repo at ``dest`` whose ``main`` has the example's base commit followed by
    ``steps`` (default :data:`HISTORY_STEPS`, 12 commits in all), then ``extra_neutral``
    README-only commits (for benchmarks of long histories), with fixed dates one day apart.
    Returns the commits oldest first."""
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ExampleRepoError(f"{dest} exists and is not an empty directory")
    repo = build_example_repo(dest, variants=())
    git = Git(dest)
    commits = [HistoryCommit(repo.base_sha, BASE_MESSAGE, "base")]
    steps = list(steps) + [(f"README: note {i}", "neutral", _note(f"Note {i}.")) for i in range(1, extra_neutral + 1)]
    for day, (message, kind, edit) in enumerate(steps, start=1):
        edit(dest)
        _normalise_modes(dest)
        git("add", "-A")
        sha = git.commit(message + "\n", BASE_COMMIT_DATE + timedelta(days=day))
        commits.append(HistoryCommit(sha, message, kind))
    return commits


# --- candidate configurations (for the continuum frontier) ------------------------------------

CANDIDATES_SOURCE = VARIANT_PATCHES_DIR / "candidates.yaml"
CANDIDATES_MESSAGE = "evals: declare the candidate configurations"


def build_example_candidates(dest: Path) -> ExampleRepo:
    """Create a git repo at ``dest`` with the example's base commit, its ``improve-runbook``
    branch, and on ``main`` one more commit adding ``.evals/candidates.yaml`` (four candidates:
    main, the runbook skill, the runbook skill on the bigger model, a fine-tune). The returned
    repo's ``base_sha`` is that last commit."""
    repo = build_example_repo(dest, variants=("improve-runbook",))
    git = Git(Path(dest))
    target = Path(dest) / ".evals" / "candidates.yaml"
    shutil.copyfile(CANDIDATES_SOURCE, target)
    _normalise_modes(Path(dest))
    git("add", "-A")
    sha = git.commit(CANDIDATES_MESSAGE + "\n", BASE_COMMIT_DATE + timedelta(days=1))
    return ExampleRepo(path=repo.path, base_branch=repo.base_branch, base_sha=sha, variants=repo.variants)


def _normalise_modes(root: Path) -> None:
    # Git records only the executable bit; fix it so the tree (and SHA) never depends on the
    # modes the source checkout happens to have.
    for path in root.rglob("*"):
        if path.is_file():
            relative = path.relative_to(root).as_posix()
            path.chmod(0o755 if relative in EXECUTABLE_FILES else 0o644)


class Git:
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
        self("commit", "-q", "--no-verify", "-m", message, env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        return self("rev-parse", "HEAD")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evalrunner_assets.example_repo",
        description="Build the example agent repo with its pull-request variants as branches.",
    )
    parser.add_argument("dest", type=Path, help="directory to create (absent or empty)")
    parser.add_argument(
        "--variant",
        action="append",
        choices=VARIANTS,
        help="variant to build (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    try:
        repo = build_example_repo(args.dest, args.variant or VARIANTS)
    except ExampleRepoError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                "path": str(repo.path),
                "base": {"branch": repo.base_branch, "sha": repo.base_sha},
                "variants": {v.name: {"branch": v.branch, "sha": v.sha} for v in repo.variants.values()},
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
