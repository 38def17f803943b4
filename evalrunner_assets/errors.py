"""What the command line tells a person when a command does not succeed, and its exit code.

One mapping for every command (:func:`explain`), applied by the one handler in ``cli.main``:

- a **user error** (an input the person can fix: a ref, a path, an option, the repository's
  ``.evals/list``, a query) prints one or two lines — what is wrong, with which input, how to
  fix it — and exits 2;
- an **outage** (the breaker tripped, the sandbox itself or the lake storage failed) exits 3;
- a **storage error** on the home, the lake or the Dagster instance (:func:`storage_error`):
  permission denied or a read-only file system exits 2 (a path the person must fix), a full disk
  or quota exits 3 (space runs out and comes back); the line names the path and the setting;
- a **cancellation** (Ctrl-C, at any moment: in a DuckDB query, in a Dagster run, while the
  instance starts) exits 130;
- anything else is a bug: one line and exit 1.

``compare``'s verdict that ``--fail-on`` names is no error: the command returns
:data:`EXIT_BLOCKED` (4) itself, after printing the summary.

A traceback is printed only with ``--debug`` (or ``EVALRUNNER_DEBUG=1``).

Every exception class the product defines subclasses :class:`EvalrunnerError`, through one of
its families when the exit code is not 1: :class:`InputError` (2), :class:`Outage` (3) or
:class:`Cancelled` (130); a class that subclasses a built-in today keeps it as a second base (so
``except ValueError`` still catches a ``RepoError``). :func:`explain` classifies by family, so
this module imports nothing of the other packages (it is a leaf every package may import; only
:mod:`evalrunner_assets.home`, another leaf, to name storage paths). :class:`UserError` is the
input error for what only the command line can check. Work the CLI runs through Dagster fails
with Dagster's wrappers around the original exception; the chain is searched through
``__cause__``/``__context__`` and Dagster's ``user_exception``.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USER = 2
EXIT_OUTAGE = 3
EXIT_BLOCKED = 4  # `compare` finished with a verdict its --fail-on blocks a merge on
EXIT_CANCELLED = 130

DEBUG_ENV = "EVALRUNNER_DEBUG"

# The message DuckDB's Python API raises (as a plain RuntimeError) when SIGINT arrives mid-query.
DUCKDB_INTERRUPTED = "Query interrupted"


class EvalrunnerError(BaseException):
    """The root of every exception the product defines. Subclass a family (or, for a failure
    that is a bug when it reaches the command line, this root together with ``Exception`` or the
    built-in the class subclasses): it derives from ``BaseException`` only so that
    :class:`Cancelled` can sit under it without ``except Exception`` catching a cancellation."""


class InputError(EvalrunnerError, Exception):
    """The family of bad inputs the person can fix (exit 2): a ref, a path, an option, a
    repository's ``.evals/list``, a query. An optional ``hint`` attribute says how (printed as
    the second line)."""


class Outage(EvalrunnerError, Exception):
    """The family of outages (exit 3): a provider, the gateway, the sandbox or the lake storage
    is down, and the same command succeeds once it is back."""


class Cancelled(EvalrunnerError):
    """The family of cancellations (exit 130). Not an ``Exception``: like ``KeyboardInterrupt``
    it passes through ``except Exception``."""


class UserError(InputError):
    """An input the person can fix; ``hint`` says how (printed as the second line). ``command``
    names the command in the message when it is not the one that ran (e.g. ``candidates add``)."""

    def __init__(self, message: str, hint: str | None = None, *, command: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        self.command = command


class LakeNotFound(UserError):
    """A command that reads the lake was pointed at a lake that does not exist."""


def debug_enabled() -> bool:
    """Whether ``--debug`` / ``EVALRUNNER_DEBUG=1`` asked for tracebacks and Dagster's own logs."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class Explanation:
    """What to print (``lines``, at most two) and the exit code."""

    exit_code: int
    lines: tuple[str, ...]


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what caused it: ``__cause__``, else ``__context__`` unless suppressed, and
    Dagster's ``user_exception`` (the error the asset raised, inside Dagster's step error)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        inner = getattr(current, "user_exception", None)
        if isinstance(inner, BaseException) and id(inner) not in seen:
            current = inner
        elif current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None


def is_cancellation(exc: BaseException) -> bool:
    """Ctrl-C, however it surfaced: ``KeyboardInterrupt``, Dagster's interrupted-execution error,
    or DuckDB's "Query interrupted"."""
    for e in chain(exc):
        if isinstance(e, (KeyboardInterrupt, Cancelled)) or type(e).__name__ == "DagsterExecutionInterruptedError":
            return True
        if isinstance(e, RuntimeError) and str(e).strip() == DUCKDB_INTERRUPTED:
            return True
        if type(e).__name__ == "InterruptException" and type(e).__module__.endswith("duckdb"):
            return True
    return False


def _outage(e: BaseException) -> bool:
    # A discovery error is the repository's (exit 2) unless the sandbox failed: that class is
    # an Outage as well.
    return isinstance(e, Outage)


# Storage errors by errno: the person must fix the path (exit 2), or space must come back (exit 3).
_NOT_WRITABLE = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
}
_NO_SPACE = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded"}
# An atomic write's temporary file (`.<name>.tmp-<pid>…`) is named by the file it was to become.
_TEMP_NAME = re.compile(r"^\.(?P<name>.+?)\.tmp-\d+")


def _within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root``, under it, or one of the directories creating it needs."""
    try:
        common = os.path.commonpath([path, root])
    except ValueError:
        return False
    return common in (path, root)


def _storage_owner(path: str) -> tuple[str, str] | None:
    """What ``path`` belongs to (the lake, the Dagster instance, evalrunner's home) and the
    setting that moves it; None for any other path."""
    import evalrunner_assets.home as home

    evalrunner_home = str(home.home())
    lake = home.lake_root()
    dagster = os.path.realpath(home.dagster_home())
    # The CLI sets DAGSTER_HOME itself once the instance is open: name it only when it was moved.
    dagster_moved = dagster != os.path.realpath(os.path.join(evalrunner_home, "dagster"))
    owners = [
        (dagster, "the Dagster instance", "DAGSTER_HOME" if dagster_moved else "EVALRUNNER_HOME (or DAGSTER_HOME)"),
        (evalrunner_home, "evalrunner's home", "EVALRUNNER_HOME"),
    ]
    if "://" not in lake:
        from evalrunner_assets.home import LAKE_ENV, lake_root_setting

        moved = LAKE_ENV if lake_root_setting() else f"EVALRUNNER_HOME (or {LAKE_ENV})"
        owners.insert(0, (os.path.realpath(lake), "the lake", moved))
    path = os.path.realpath(path)
    # The most specific owner: the lake and the instance usually live inside the home.
    found = [(len(root), what, setting) for root, what, setting in owners if _within(path, root)]
    if not found:
        return None
    _, what, setting = max(found)
    return what, setting


def _shown_path(path: str) -> str:
    directory, name = os.path.split(path)
    temp = _TEMP_NAME.match(name)
    return os.path.join(directory, temp.group("name")) if temp else path


@dataclass(frozen=True)
class StorageError:
    """A file-system error on a path, classified: ``exit_code`` 2 or 3, with what to print."""

    exit_code: int
    what: str
    hint: str
    ours: bool  # the path is under the home, the lake or the Dagster instance


def storage_error(errors: list[BaseException]) -> StorageError | None:
    """The first permission, read-only or full-disk error in ``errors`` (an exception's chain),
    naming its path: an ``OSError`` (its file name, else the path of the lake write it failed)
    or the SQLite error of the Dagster instance's storage (which names no file)."""
    import evalrunner_assets.home as home

    # The path of the lake write that failed (the lake's write error is an Outage with ``path``).
    written = next((p for p in (getattr(e, "path", None) for e in errors if isinstance(e, Outage)) if p), None)
    for e in errors:
        if isinstance(e, OSError) and e.errno is not None and (e.errno in _NOT_WRITABLE or e.errno in _NO_SPACE):
            path = e.filename if isinstance(e.filename, str) else written
            if path is None:
                continue
            owner = _storage_owner(path)
            target = f"{_shown_path(path)} ({owner[0]})" if owner else _shown_path(path)
            reason = _NOT_WRITABLE.get(e.errno) or _NO_SPACE[e.errno]
            return _storage_line(target, reason, e.errno, owner[1] if owner else None)
    for e in errors:
        if isinstance(e, sqlite3.OperationalError):
            message = first_line(e)
            if "readonly database" in message or "unable to open database file" in message:
                code = errno.EROFS
            elif "database or disk is full" in message:
                code = errno.ENOSPC
            else:
                continue
            path = str(home.dagster_home())
            owner = _storage_owner(path)
            setting = owner[1] if owner else "DAGSTER_HOME"
            return _storage_line(f"the Dagster instance's SQLite storage in {path}", message, code, setting)
    return None


def _storage_line(target: str, reason: str, code: int, setting: str | None) -> StorageError:
    """What to print for ``code`` on ``target``; ``setting`` moves the path (None: not ours)."""
    if code in _NO_SPACE:
        moved = f", or point {setting} at another disk" if setting else ""
        return StorageError(
            EXIT_OUTAGE,
            f"cannot write {target}: {reason}",
            f"free space there and run the command again (a comparison resumes where it stopped){moved}",
            setting is not None,
        )
    verb = "write" if code == errno.EROFS else "access"
    if setting is None:
        hint = "give the user running evalrunner access to that path, or choose another one"
    elif code == errno.EROFS:
        hint = f"point {setting} at a writable directory"
    else:
        hint = f"let the user running evalrunner read and write it, or point {setting} at a directory it can write"
    return StorageError(EXIT_USER, f"cannot {verb} {target}: {reason}", hint, setting is not None)


def first_line(text: object, limit: int = 400) -> str:
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def describe(e: BaseException) -> tuple[str, str | None]:
    """One line saying what is wrong (and with which input), and a hint how to fix it: the
    error's own ``cli_wording()`` when its class words it (discovery's do), else its message's
    first line and its ``hint``."""
    own = getattr(e, "cli_wording", None)
    if callable(own):
        what, hint = own()
        return str(what), hint
    return first_line(e), getattr(e, "hint", None)


def explain(exc: BaseException, command: str) -> Explanation:
    """What ``evalrunner <command>`` prints for ``exc`` (raised out of it), and its exit code."""
    prefix = f"evalrunner {command}"
    # An error may name the command in its message itself (e.g. ``candidates add``).
    named = next((c for c in (getattr(e, "command", None) for e in chain(exc)) if isinstance(c, str) and c), None)
    if named:
        prefix = f"evalrunner {named}"
    if is_cancellation(exc):
        if command in ("compare", "demo"):
            text = "cancelled; every sandbox was stopped, completed windows stay landed and the same command resumes"
        else:
            text = "cancelled"
        # What failed while the cancellation was saved (the engine's ComparisonCancelled): shown,
        # never swallowed, on one line.
        failed: list[str] = next((errs for errs in (getattr(e, "save_errors", None) for e in chain(exc)) if errs), [])
        if failed:
            return Explanation(
                EXIT_CANCELLED, (f"{prefix}: {text}", f"{prefix}: while cancelling, {first_line('; '.join(failed))}")
            )
        return Explanation(EXIT_CANCELLED, (f"{prefix}: {text}",))
    errors = list(chain(exc))
    where = next((w for w in (getattr(e, "where", None) for e in errors) if w), None)
    context = f"{where}: " if where else ""
    storage = storage_error(errors)
    if storage is not None and storage.ours:  # whatever it surfaced as: a lake write, a step, a recording
        return Explanation(storage.exit_code, (f"{prefix}: {storage.what}", f"  {storage.hint}"))
    for e in errors:
        if _outage(e):
            stopped = "stopped: " if type(e).__name__ == "ComparisonStopped" else ""
            line = f"{prefix}: {stopped}{context}{first_line(e)}"
            if getattr(e, "user_error", False):  # the breaker tripped on the request's own mistake
                hint = getattr(e, "hint", None)
                return Explanation(EXIT_USER, (line, f"  {hint}") if hint else (line,))
            return Explanation(EXIT_OUTAGE, (line,))
    for e in errors:
        if isinstance(e, InputError):
            what, hint = describe(e)
            lines = [f"{prefix}: {context}{what}"]
            if hint:
                lines.append(f"  {hint}")
            return Explanation(EXIT_USER, tuple(lines))
    if storage is not None:  # a path of the person's own (e.g. an --out file)
        return Explanation(storage.exit_code, (f"{prefix}: {storage.what}", f"  {storage.hint}"))
    innermost = errors[-1]
    return Explanation(
        EXIT_BUG,
        (
            f"{prefix}: unexpected {type(innermost).__name__}: {first_line(innermost)}",
            "  run it again with --debug for the traceback",
        ),
    )
