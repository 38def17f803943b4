"""Runs INSIDE the sandbox: list a task's sample ids, or serve eval windows warm.

``python -m evalrunner_assets.execution._inspect_worker ids SPEC [TASK_ARGS_JSON]``
    writes ``{"task": name, "ids": [...], "input_digests": [...]}`` to
    ``$EVALRUNNER_OUT/sample_ids.json``. A sample without an id gets Inspect's own positional id
    (its 1-based position in the dataset, what ``inspect eval`` assigns); each id's input digest
    (``evalrunner_assets.sample_digest``) lets pairing check that head and base ran the same input.

``python -m evalrunner_assets.execution._inspect_worker serve``
    the warm worker: one JSON request per stdin line, one JSON reply per stdout line.
    Requests: ``{"op": "ping"}`` (answered once Inspect is imported), ``{"op": "ids", "spec", "task_args"}`` or ``{"op": "eval", "spec", "model",
    "model_args", "task_args", "sample_ids", "seed", "epochs"}``. Each eval writes its log into
    ``$EVALRUNNER_OUT`` (the controller collects it after the reply). Inspect is imported once,
    so successive windows pay no interpreter or import start-up.

Task code runs in this process, so everything written here — files and replies — is
untrusted input to the controller, which validates it.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import time
import traceback
from typing import Any, TextIO

IDS_FILE = "sample_ids.json"
# The last stderr line of a cold listing that raised: what the task's own code raised, and where.
TASK_ERROR_MARK = "evalrunner-task-error: "


def _out_dir() -> str:
    return os.environ.get("EVALRUNNER_OUT", "/work/out")


def _write_json(name: str, value: Any) -> None:
    path = os.path.join(_out_dir(), name)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


def exact_selector(task_name: str, sample_id: str | int) -> str | int:
    """An Inspect ``sample_id`` selector that matches exactly this id.

    Inspect matches ids with ``fnmatch`` and reads ``<task>:<id>`` as a task scope, so glob
    characters are bracket-escaped and the task prefix is always given (it is stripped once)."""
    if isinstance(sample_id, int):
        return sample_id
    escaped = "".join(f"[{c}]" if c in "*?[" else c for c in sample_id)
    return f"{task_name}:{escaped}"


def describe_error(exc: BaseException) -> str:
    """``Type: message (at path:line)``: what was raised, at the innermost frame of the
    repository's own code (a task file that fails at import names its file and line)."""
    message = exc.msg if isinstance(exc, SyntaxError) and exc.msg else exc
    text = " ".join(f"{type(exc).__name__}: {message}".split())
    root = os.environ.get("EVALRUNNER_REPO")
    where = None
    if root:
        prefix = os.path.join(os.path.realpath(root), "")
        frames = [(f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__)]
        if isinstance(exc, SyntaxError) and exc.filename:
            frames.append((exc.filename, exc.lineno))  # the line that does not parse
        for filename, lineno in frames:
            path = os.path.realpath(filename)
            if path.startswith(prefix):
                where = f"{os.path.relpath(path, prefix)}:{lineno}"
    return text + (f" (at {where})" if where else "")


# A warm worker serves one commit export (read-only), so a task and its listing cannot change
# while it lives: the task is loaded once, not on every window. Loading it (parsing the task file,
# building the dataset) was most of a small window's cost, and one Task object evaluated window
# after window is what a single `inspect eval` over all the samples does too.
_LISTINGS: dict[str, dict[str, Any]] = {}
_TASKS: dict[str, Any] = {}


def _key(spec: str, task_args: dict[str, Any]) -> str:
    return json.dumps([spec, task_args], sort_keys=True)


def _check_syntax(spec: str) -> None:
    """Raise the task file's SyntaxError: Inspect finds tasks by parsing the file, and for a file
    that does not parse it says only "Task named … not found"."""
    file = spec.rpartition("@")[0] or spec
    if file.endswith(".py") and os.path.isfile(file):
        with open(file, encoding="utf-8", errors="replace") as f:
            compile(f.read(), file, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)


def load_task(spec: str, task_args: dict[str, Any]) -> Any:
    key = _key(spec, task_args)
    if key not in _TASKS:
        from inspect_ai._eval.loader import load_tasks

        _check_syntax(spec)
        tasks = load_tasks([spec], task_args)
        if len(tasks) != 1:
            raise ValueError(f"spec {spec!r} names {len(tasks)} tasks; give exactly one (file.py@task)")
        _TASKS[key] = tasks[0]
    return _TASKS[key]


def list_ids(spec: str, task_args: dict[str, Any]) -> dict[str, Any]:
    key = _key(spec, task_args)
    if key not in _LISTINGS:
        _LISTINGS[key] = _load_listing(spec, task_args)
    return _LISTINGS[key]


def _load_listing(spec: str, task_args: dict[str, Any]) -> dict[str, Any]:
    from evalrunner_assets.sample_digest import digest_of_sample

    task = load_task(spec, task_args)
    # Inspect numbers samples without ids 1..n in dataset order before selecting any.
    ids = [s.id if s.id is not None else i + 1 for i, s in enumerate(task.dataset)]
    digests = [digest_of_sample(s) for s in task.dataset]
    return {"task": task.name, "ids": ids, "input_digests": digests}


def run_eval(req: dict[str, Any]) -> dict[str, Any]:
    import inspect_ai

    listing = list_ids(req["spec"], req.get("task_args") or {})
    name = listing["task"]
    by_text = {str(i): i for i in listing["ids"]}
    missing = [s for s in req["sample_ids"] if s not in by_text]
    if missing:
        raise ValueError(f"sample ids not in the task's dataset: {missing[:5]}")
    selectors = [exact_selector(name, by_text[s]) for s in req["sample_ids"]]
    started = time.monotonic()
    logs = inspect_ai.eval(
        # the loaded task (its arguments applied when it was loaded); its log header is the one
        # `inspect eval SPEC -T …` writes
        load_task(req["spec"], req.get("task_args") or {}),
        model=req["model"],
        model_args=req.get("model_args") or {},
        sample_id=selectors,
        epochs=req.get("epochs") or 1,
        seed=req.get("seed"),
        log_dir=_out_dir(),
        log_format="eval",
        # An exception in the task's own code (solver, tool, scorer) is the agent's failure:
        # every sample runs and errored ones are recorded as such, not the whole log as an error.
        fail_on_error=False,
        # The log is read after the window ends, never live: real-time sample logging would
        # only add per-sample writes (it roughly doubles the time of a trivial sample).
        log_realtime=False,
        # Inspect's "none" still renders a rich results table after every eval (about a fifth of
        # a small window's time, written to stderr for the controller to drain); "log" logs the
        # same through `logging`, below the warning level (errors still reach stderr).
        display="log",
        log_level="warning",
    )
    return {
        "ok": True,
        "logs": [os.path.basename(log.location) for log in logs],
        "status": [log.status for log in logs],
        "eval_s": time.monotonic() - started,
    }


def serve(stdin: TextIO, proto: TextIO) -> int:
    t0 = time.monotonic()
    import inspect_ai  # noqa: F401  (the start-up that warm sessions pay once)
    from inspect_ai._eval.loader import load_tasks  # noqa: F401

    import_s = time.monotonic() - t0
    for line in stdin:
        if not line.strip():
            continue
        reply: dict[str, Any]
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "ping":  # the controller's start-up probe: Inspect is imported by now
                reply = {"ok": True, "import_s": import_s}
            elif op == "ids":
                result = list_ids(req["spec"], req.get("task_args") or {})
                _write_json(IDS_FILE, result)
                reply = {"ok": True, "count": len(result["ids"])}
            elif op == "eval":
                reply = run_eval(req)
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # report and keep serving: one bad window is not the session
            traceback.print_exc(file=sys.stderr)
            reply = {"ok": False, "error": describe_error(exc)[:2000]}
        proto.write(json.dumps(reply, default=str) + "\n")
        proto.flush()
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "serve":
        # Replies get a private copy of stdout; fd 1 itself goes to stderr, so anything the task
        # code prints cannot be mistaken for a reply (it can still forge one deliberately — the
        # controller trusts only files it validates).
        proto = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        return serve(sys.stdin, proto)
    if len(argv) >= 2 and argv[0] == "ids":
        task_args = json.loads(argv[2]) if len(argv) > 2 else {}
        try:
            _write_json(IDS_FILE, list_ids(argv[1], task_args))
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            print(TASK_ERROR_MARK + describe_error(exc)[:2000], file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
