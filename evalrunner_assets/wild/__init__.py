"""Evals from the wild: a real failure becomes an anonymised eval in a cohort (docs/wild.md).

The Python API an agent's own product calls (the CLI ``evalrunner wild import`` is a thin
layer over it)::

    from evalrunner_assets.wild import prepare, Check
    submission = prepare(["trace.jsonl"], scorer=Check("contains", "refund issued"))
    print(submission.summary())             # what will be sent: no original value
    submission.write(Path("agent-repo"))     # or: submission.open_pr(client, "owner/agent", branch=...)

:func:`prepare` reads and redacts everything in memory; nothing is written or sent until
:meth:`Submission.write` or :meth:`Submission.open_pr` is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from evalrunner_assets.wild.eval_writer import (
    MANIFEST,
    Check,
    EvalFiles,
    EvalWriteError,
    Rubric,
    build_eval,
    check_cohort,
    default_cohort,
    group_traces,
    planned_files,
    write_eval,
)
from evalrunner_assets.wild.formats import (
    EmptyTrace,
    NoFailure,
    Trace,
    TraceError,
    UnknownTraceFormat,
    read_trace_text,
    read_traces,
)
from evalrunner_assets.wild.preview import html_page, sent_summary, terminal_diff
from evalrunner_assets.wild.redact import STRUCTURED, Redactor, redact_text

__all__ = [
    "MANIFEST",
    "STRUCTURED",
    "Check",
    "EmptyTrace",
    "EvalFiles",
    "EvalWriteError",
    "NoFailure",
    "PullRequestOpener",
    "Redactor",
    "Rubric",
    "Submission",
    "Trace",
    "TraceError",
    "UnknownTraceFormat",
    "default_cohort",
    "pr_body",
    "prepare",
    "prepare_traces",
    "read_trace_text",
    "read_traces",
    "redact_text",
]


class PullRequestOpener(Protocol):
    """What opens the PR (``resources.github.GitHubClient`` does)."""

    def open_files_pr(
        self,
        repo: str,
        *,
        branch: str,
        files: dict[str, str],
        message: str,
        title: str,
        body: str,
        base: str | None = None,
    ) -> Any: ...


@dataclass
class Submission:
    """Redacted traces and the evals made of them, ready to be written or sent."""

    originals: list[Trace]  # in memory only: the preview's left pane
    redacted: list[Trace]
    evals: list[EvalFiles]
    redactor: Redactor

    def summary(self) -> str:
        return sent_summary(self.evals, self.redactor)

    def diff(self, color: bool = False) -> str:
        return terminal_diff(self.originals, self.redacted, color)

    def html(self, show_originals: bool = True) -> str:
        return html_page(self.originals if show_originals else None, self.redacted, self.evals, self.redactor)

    def default_branch(self) -> str:
        """The PR's branch unless one is given: ``wild/<the first eval's name>``."""
        return f"wild/{self.evals[0].task_id.split('/', 1)[1]}"

    def files(self, repo: Path) -> dict[str, str]:
        return planned_files(repo, self.evals)

    def write(self, repo: Path) -> list[Path]:
        """Write the evals into the checkout at ``repo`` (and ``.evals/list``)."""
        return write_eval(repo, self.files(repo))

    def open_pr(
        self, opener: PullRequestOpener, repo_id: str, checkout: Path, branch: str, base: str | None = None
    ) -> Any:
        """Open a PR on ``repo_id`` adding the evals; the manifest is edited from ``checkout``'s."""
        files = self.files(checkout)
        titles = ", ".join(e.task_id for e in self.evals)
        return opener.open_files_pr(
            repo_id,
            branch=branch,
            files=files,
            message=f"evals: add {titles} (reported in the wild)",
            title=f"Add {len(self.evals)} eval(s) from the wild: {titles}",
            body=pr_body(self),
            base=base,
        )


def pr_body(submission: Submission) -> str:
    lines = [
        "Evals from failures reported in the wild, anonymised before anything left the reporter's machine "
        "(`evalrunner wild import`).",
        "",
        "| eval | cohort | sources | scorer |",
        "| --- | --- | --- | --- |",
    ]
    for e in submission.evals:
        lines.append(f"| `{e.task_id}` | `{e.cohort}` | {e.sources} | {e.scorer.get('kind', e.scorer['type'])} |")
    found = ", ".join(f"{n} {k.lower()}" for k, n in sorted(submission.redactor.found.items())) or "nothing"
    lines += ["", f"Redacted: {found}. Placeholders (`{{{{person_1}}}}`, …) stand for the values removed."]
    return "\n".join(lines) + "\n"


def prepare(
    paths: list[Path],
    *,
    scorer: Check | Rubric,
    cohort: str | None = None,
    name: str | None = None,
    redactor: Redactor | None = None,
) -> Submission:
    """Read every trace in ``paths`` (all of them or none: a bad file raises a ``TraceError``),
    redact them with one placeholder mapping, merge near-duplicates, and build one eval per
    group. The scorer's own text is redacted too (a submitter may quote a name)."""
    check_cohort(cohort or default_cohort())  # before any file is read
    originals: list[Trace] = []
    for p in paths:
        originals += read_traces(Path(p))
    return prepare_traces(originals, scorer=scorer, cohort=cohort, name=name, redactor=redactor)


def prepare_traces(
    originals: list[Trace],
    *,
    scorer: Check | Rubric,
    cohort: str | None = None,
    name: str | None = None,
    redactor: Redactor | None = None,
) -> Submission:
    """:func:`prepare` of traces already read (e.g. :func:`read_trace_text` of a pasted trace)."""
    cohort = check_cohort(cohort or default_cohort())
    redactor = redactor or Redactor()
    redacted = [redactor.trace(t) for t in originals]
    if isinstance(scorer, Check) and scorer.kind != "regex":
        scorer = Check(scorer.kind, redactor.text(scorer.value)[0])
    elif isinstance(scorer, Rubric):
        scorer = Rubric(redactor.text(scorer.text)[0], scorer.model)
    groups = group_traces(redacted)
    if name and len(groups) > 1:
        raise EvalWriteError(f"--name {name} names one eval but the traces make {len(groups)}", "drop --name")
    evals = [build_eval(g, cohort, scorer, name) for g in groups]
    return Submission(originals, redacted, evals, redactor)
