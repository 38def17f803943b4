"""The options several commands share, each declared once with its argparse type (the
validation) and its help: ``--repo``/``--repo-id``, ``--backend``, ``--workers``, ``--seed``,
``--epochs``, ``--cap``, ``--alpha``, ``--half-width``, the commit selection of ``backfill`` and
``series register``, the run options of ``compare``/``demo`` and ``--fail-on``; and the parser
class every command uses."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn

from evalrunner_assets.errors import DEBUG_ENV, EXIT_BLOCKED

DEBUG_HELP = f"print tracebacks and Dagster's own log lines (also {DEBUG_ENV}=1)"
REPO_HELP = "local path or clone URL"
REPO_ID_HELP = "owner/name (default: from the URL, or local/<dir>)"
WORKERS_HELP = "sandboxes running at once (default: cores)"


class Parser(argparse.ArgumentParser):
    """Usage errors in two lines (what, and where to read more) with exit code 2, instead of the
    whole usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n  see `{self.prog} --help`\n")


Add = Callable[..., argparse.ArgumentParser]  # adds one command's parser (name, **kwargs)


# --- argparse types --------------------------------------------------------------------------


def count(minimum: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}{why}; give {minimum} or more")
        return value

    return parse


def between_0_and_half(what: str) -> Callable[[str], float]:
    """An argparse type: a number strictly between 0 and 0.5 (an error rate, a half-width)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0.0 < value < 0.5:
            raise argparse.ArgumentTypeError(f"{value} is not {what}: give a number between 0 and 0.5, e.g. 0.05")
        return value

    return parse


error_rate = between_0_and_half("an error rate")
half_width = between_0_and_half("a half-width")

# What --fail-on names, by the run verdict (a comparison ended before a decision is undecided:
# inconclusive). BROKEN: a task the PR broke.
FAIL_ON_VERDICTS = ("regressed", "broken", "inconclusive")
FAIL_ON_DEFAULT = "regressed,broken"


def fail_on(text: str) -> frozenset[str]:
    """An argparse type: ``never``, or a comma-separated list of verdicts that block a merge."""
    names = [name.strip().lower() for name in text.split(",")]
    if names == ["never"]:
        return frozenset()
    choices = f"give a comma-separated list of {', '.join(FAIL_ON_VERDICTS)}, or never"
    for name in names:
        if name == "never":
            raise argparse.ArgumentTypeError(f"{text!r}: never means no verdict blocks; give it alone")
        if name not in FAIL_ON_VERDICTS:
            what = f"{name!r} is not a verdict" if name else f"{text!r} has an empty name"
            raise argparse.ArgumentTypeError(f"{what}: {choices}")
    return frozenset(names)


# --- options ---------------------------------------------------------------------------------


def add_repo(p: argparse.ArgumentParser, *, repo_id_help: str = REPO_ID_HELP) -> None:
    """``--repo`` (required) and ``--repo-id``."""
    p.add_argument("--repo", required=True, help=REPO_HELP)
    add_repo_id(p, help=repo_id_help)


def add_repo_id(p: argparse.ArgumentParser, *, required: bool = False, help: str = REPO_ID_HELP) -> None:  # noqa: A002
    p.add_argument("--repo-id", required=required, default=None, help=help)


def add_backend(p: argparse.ArgumentParser, *, described: bool = False) -> None:
    """``--backend``: the sandbox backends the settings know (help text only where asked)."""
    from evalrunner_assets.execution import sandbox_settings

    p.add_argument(
        "--backend",
        choices=sandbox_settings.BACKEND.choices,
        default=sandbox_settings.BACKEND.default,
        help=sandbox_settings.BACKEND.help if described else None,
    )


def add_workers(p: argparse.ArgumentParser, help: str = WORKERS_HELP) -> None:  # noqa: A002
    p.add_argument("--workers", type=count(0), default=0, help=help)


def add_seed(p: argparse.ArgumentParser, help: str | None = None) -> None:  # noqa: A002
    p.add_argument("--seed", type=int, default=0, help=help)


def add_epochs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=count(1), default=1)


def add_cap(p: argparse.ArgumentParser, *, minimum: int, why: str = "", help: str) -> None:  # noqa: A002
    p.add_argument("--cap", type=count(minimum, why), default=256, help=help)


def add_commit_selection(p: argparse.ArgumentParser) -> None:
    """The repository, the branch and which of its first-parent commits (one of three ways)."""
    add_repo(p)
    p.add_argument("--branch", default="main", help="the branch whose first-parent history is measured")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--since", default=None, help="commits since this date (ISO, e.g. 2025-01-31)")
    which.add_argument("--last", type=count(1), default=None, help="the newest N commits")
    which.add_argument("--every", type=count(1), default=None, help="every K-th commit, counted back from the tip")


def add_run_options(p: argparse.ArgumentParser) -> None:
    """What a comparison runs with (``compare`` and ``demo``)."""
    from evalrunner_assets.execution import sandbox_settings
    from evalrunner_assets.pipeline.spec import DEFAULT_MODEL, ComparisonRequest

    min_pairs = ComparisonRequest.model_fields["min_pairs"].default
    p.add_argument(
        "--model",
        default=None,
        help="Inspect model for both commits, e.g. openai/gpt-4o (default: the model each commit's agent config "
        f"names in `model:`, else {DEFAULT_MODEL})",
    )
    add_seed(p, help="seed of the sample order and the model")
    add_epochs(p)
    add_cap(
        p,
        minimum=min_pairs,
        why=" (the pairs a task needs before any decision)",
        help="most pairs per task (default: %(default)s)",
    )
    p.add_argument(
        "--alpha",
        type=error_rate,
        default=ComparisonRequest.model_fields["alpha"].default,
        help="chance of any false IMPROVED or REGRESSED task in the comparison, split over its tasks "
        "and both directions (default: %(default)s; 2x this bounds each direction alone by it)",
    )
    p.add_argument("--budget", type=count(1), default=None, help="most samples in all (both arms)")
    p.add_argument(
        "--budget-usd",
        type=float,
        default=None,
        help="most dollars of model calls, enforced by the model gateway (needs the model's "
        "price in the price table, $EVALRUNNER_PRICES)",
    )
    p.add_argument(
        "--model-gateway",
        action="store_true",
        help="run the model gateway even when --model is not openai/… or anthropic/… (e.g. "
        "for a model-graded scorer); keys are read from OPENAI_API_KEY / ANTHROPIC_API_KEY",
    )
    p.add_argument(
        "--affinity",
        choices=("off", "order", "prune"),
        default="order",
        help="changed-file affinity: run matched tasks first, or skip unmatched ones",
    )
    add_workers(
        p,
        help="sandboxes running at once (default: cores locally, the pod cap on Kubernetes: "
        f"{sandbox_settings.MAX_CONCURRENT_PODS.default})",
    )
    add_backend(p, described=True)


def add_fail_on(p: argparse.ArgumentParser, default: str, why: str) -> None:
    # Not part of the request: it changes the exit code, not what is measured, so a rerun with
    # another --fail-on resumes the same comparison.
    p.add_argument(
        "--fail-on",
        type=fail_on,
        default=fail_on(default),
        metavar="VERDICTS",
        help=f"exit with code {EXIT_BLOCKED} when the verdict is one of these: a comma-separated list of "
        f"{', '.join(FAIL_ON_VERDICTS)}, or never (default: {default}; {why})",
    )


def sandbox_override(args: argparse.Namespace) -> Any:
    """The ``SandboxResource`` ``--backend``/``--workers`` ask for, or None for the default one
    (bubblewrap, as many workers as cores)."""
    from resources import SandboxResource

    backend, workers = getattr(args, "backend", "bubblewrap"), getattr(args, "workers", 0)
    if backend == "bubblewrap" and not workers:
        return None
    return SandboxResource(backend_name=backend, max_workers=workers or 0)
