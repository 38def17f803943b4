"""`evalrunner finetune`: export a training set, register a fine-tune (training it with an
external trainer when no model id is given), measure it as a candidate, notify.

Training is a hook: ``EVALRUNNER_FINETUNE_TRAINER`` is a command run with the training set's
path as its last argument; the last line it prints is the model id to call (e.g.
``openai/ft:gpt-4o-mini:acme::abc123``). Registering measures the fine-tune as the candidate
``ft-<name>`` against the reference candidate on the same paired samples
(``driver.candidates.measure_candidates``: the same Dagster jobs), then writes
``ft/<repo>/<name>/notification.md`` and, when GitHub is configured, opens an issue with it.

Activating (``register(..., activate=True)`` or ``activate``) opens the one-line PR through
PyGithub: branch ``eval-runner/activate-<name>`` off the default branch, one commit changing
only the agent config's ``model:`` line to the fine-tune's model id. The agent config's model is
what the pipeline runs for a commit, so the normal PR pipeline judges that PR like any other.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evalrunner_assets.execution.inspect_runner import CONFIG_FILES
from evalrunner_assets.pipeline import candidates as cands
from evalrunner_assets.pipeline import finetune as ft
from lake import LAYOUT

TRAINER_ENV = "EVALRUNNER_FINETUNE_TRAINER"
TRAINER_TIMEOUT_S = 24 * 3600


def main_commits(resources: dict[str, Any], repo: str, source: str, branch: str = "main") -> list[str]:
    """The first-parent history of ``branch`` (what "the repo's main-branch commits" means)."""
    the_lake = resources["lake"].open()
    resources["repos"].register(the_lake, repo, source)
    src = resources["repos"].source(the_lake, repo)
    src.update()
    return [sha for sha, _, _ in src.first_parent_history(branch)]


def export(
    resources: dict[str, Any],
    repo: str,
    source: str,
    out: str | Path,
    *,
    sql_file: str | Path | None = None,
    branch: str = "main",
) -> ft.TrainingSet:
    commits = main_commits(resources, repo, source, branch)
    return ft.export_training_set(resources["lake"].open(), repo, out, commits=commits, sql_file=sql_file)


def train(training_set: str | Path, command: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Run the trainer on ``training_set``; the model id it printed last."""
    env = os.environ if env is None else env
    command = command or env.get(TRAINER_ENV)
    if not command:
        raise ft.FinetuneError(f"no model id given and no trainer configured: set {TRAINER_ENV} or pass --model")
    argv = [*shlex.split(command), str(training_set)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TRAINER_TIMEOUT_S, check=False)
    except OSError as exc:
        raise ft.FinetuneError(f"the trainer {command!r} could not start: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise ft.FinetuneError(f"the trainer {command!r} exited {proc.returncode}: " + " / ".join(tail))
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise ft.FinetuneError(f"the trainer {command!r} printed no model id")
    return lines[-1]


@dataclass
class Registered:
    finetune: ft.FineTune
    notification: str  # the Markdown
    measurements: dict[str, dict[str, Any]]
    activation: Any = None  # resources.OpenedPullRequest, when the activation PR was opened


def register(
    resources: dict[str, Any],
    repo: str,
    source: str,
    name: str,
    *,
    base_model: str,
    training_set: str | Path,
    model: str | None = None,
    training_cost_usd: float | None = None,
    trainer: str | None = None,
    instance: Any = None,
    activate: bool = False,
) -> Registered:
    from evalrunner_assets.driver import candidates as candidates_run

    ts = ft.load_training_set(training_set)
    the_lake = resources["lake"].open()
    LAYOUT.finetune(repo, name)  # checks the repository and name before anything trains
    trained_with = None
    if model is None:
        trained_with = trainer or os.environ.get(TRAINER_ENV)
        model = train(training_set, trained_with)
    candidates_run.declare_from_repo(resources, repo, source)
    reference, settings = cands.load_settings(the_lake, repo)
    known = cands.load_candidates(the_lake, repo)
    if reference is None or reference not in known:
        raise ft.FinetuneError(
            f"{repo} has no reference candidate to measure the fine-tune against: declare one in "
            f"{cands.CANDIDATES_FILE} or with `evalrunner candidates add --reference`"
        )
    candidate = cands.Candidate(
        name=ft.candidate_name(name),
        ref=known[reference].ref,
        model=model,
        model_args=dict(known[reference].model_args),
        description=f"fine-tune {name} of {base_model}",
    )
    cands.parse_candidates(  # the candidates file's rules apply (e.g. the model id's form)
        {
            "version": 1,
            "reference": candidate.name,
            "candidates": [candidate.to_dict() | {"ref": candidate.ref or "HEAD"}],
        },
        source=f"fine-tune {name}",
    )
    cands.save_candidate(the_lake, repo, candidate, {"declared_in": "evalrunner finetune register", "finetune": name})
    record = ft.FineTune(
        name=name,
        repo=repo,
        base_model=base_model,
        model=model,
        candidate=candidate.name,
        training_set=ts.to_dict(),
        training_cost_usd=training_cost_usd,
        trainer=trained_with,
    )
    ft.save_finetune(the_lake, record)
    result = candidates_run.measure_candidates(
        repo, source, names=[reference, candidate.name], instance=instance, resources=resources
    )
    current, measured = result.measurements[reference], result.measurements[candidate.name]
    suite_pair = _suite_pair(the_lake, repo, candidate.name, reference)
    verdict = result.frontier.get("promotion", {}).get("candidates", {}).get(candidate.name)
    markdown = ft.notification_markdown(record, current, measured, suite_pair, verdict)
    rel = LAYOUT.finetune_notification(repo, name)
    the_lake.write_bytes(rel, markdown.encode("utf-8"))
    record.notification = the_lake.url(rel)
    record.measurement = {
        "reference": reference,
        "suite": {k: measured["suite"].get(k) for k in ("mean", "interval", "cost_per_sample", "inputs")},
        "vs_reference": measured.get("vs_reference", {}),
        "suite_pair": suite_pair,
    }
    ft.save_finetune(the_lake, record)  # measured and notified in the lake, whatever GitHub answers
    github = resources.get("github")
    if github is not None and hasattr(github, "is_configured") and github.is_configured():
        record.issue_url = github.get_client().create_issue(
            repo, f"Fine-tune {name}: {model} against {reference}", markdown
        )
        ft.save_finetune(the_lake, record)
    opened = activate_finetune(resources, repo, name) if activate else None
    if opened is not None:
        record = ft.load_finetune(the_lake, repo, name)
    return Registered(finetune=record, notification=markdown, measurements=result.measurements, activation=opened)


def activate_finetune(resources: dict[str, Any], repo: str, name: str, *, base: str | None = None) -> Any:
    """Open fine-tune ``name``'s activation PR on GitHub (branch ``eval-runner/activate-<name>``
    off ``base``, default the repository's default branch): one commit changing only the agent
    config's ``model:`` line to its model id. Recorded on the fine-tune; returns the
    ``resources.OpenedPullRequest``."""
    the_lake = resources["lake"].open()
    record = ft.load_finetune(the_lake, repo, name)
    github = resources.get("github")
    if github is None or not (hasattr(github, "is_configured") and github.is_configured()):
        raise ft.FinetuneError(
            f"opening the activation PR of {name} needs GitHub: set EVALRUNNER_GITHUB_TOKEN(_FILE) or a GitHub App "
            "(EVALRUNNER_GITHUB_APP_ID + EVALRUNNER_GITHUB_PRIVATE_KEY)"
        )
    notification = the_lake.read_bytes(LAYOUT.finetune_notification(repo, name)).decode("utf-8") if (
        the_lake.exists(LAYOUT.finetune_notification(repo, name))
    ) else None  # fmt: skip
    opened = github.get_client().open_file_change_pr(
        repo,
        branch=ft.activation_branch(name),
        paths=CONFIG_FILES,
        edit=lambda path, text: ft.activate_model_line(path, text, record.model),
        message=f"Activate fine-tune {name}: model {record.model}\n\nFine-tuned from {record.base_model}.\n",
        title=f"Activate fine-tune {name} ({record.model})",
        body=ft.activation_body(record, notification),
        base=base,
    )
    record.activation = asdict(opened)
    ft.save_finetune(the_lake, record)
    return opened


def _suite_pair(the_lake: Any, repo: str, candidate: str, other: str) -> dict[str, Any] | None:
    import pyarrow.parquet as pq

    rel = LAYOUT.candidate_pairs(repo)
    if not the_lake.exists(rel):
        return None
    for row in pq.read_table(the_lake.fs.open(the_lake.path(rel), "rb")).to_pylist():
        if row["candidate"] == candidate and row["other"] == other:
            return dict(row)
    return None


def list_finetunes(resources: dict[str, Any], repo: str | None = None) -> Sequence[ft.FineTune]:
    return list(ft.load_finetunes(resources["lake"].open(), repo).values())
