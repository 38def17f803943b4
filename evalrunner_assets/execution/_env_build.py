"""Runs INSIDE the environment-build sandbox: install a repository's dependencies with uv.

``python -m evalrunner_assets.execution._env_build PLAN_JSON`` (the controller writes the plan;
see :mod:`evalrunner_assets.execution.environment`). The virtualenv already exists at
``plan["env"]`` (bound writable), with the controller's distributions present as metadata
stubs. Steps: export a ``uv.lock`` to pinned requirements (``uv export --frozen``), install
under constraints pinning the controller's versions, then ``uv pip check``. On failure writes
``$EVALRUNNER_OUT/build.json`` with the failing step and uv's output, and exits 1.

With ``plan["standalone"]`` (a Kubernetes build Job, whose pod runs the evalrunner image: the
same packages as the controller) the pod also does the controller's parts itself: it creates
the virtualenv and the stubs first, and removes the stubs and adds the ``.pth`` afterwards;
the environment's record (as in its marker file) is written to ``$EVALRUNNER_OUT/environment.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.environ.get("EVALRUNNER_REPO", "/work/repo")  # the wrapper says where the commit is


def _run(step: str, argv: list[str]) -> None:
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    sys.stderr.write(proc.stderr[-20000:])
    if proc.returncode != 0:
        _fail(step, proc.stderr + proc.stdout)


def _fail(step: str, log: str) -> None:
    out = os.path.join(os.environ.get("EVALRUNNER_OUT", "/work/out"), "build.json")
    with open(out + ".tmp", "w") as f:
        json.dump({"ok": False, "step": step, "log": log[-20000:]}, f)
    os.replace(out + ".tmp", out)
    sys.exit(1)


def main(argv: list[str]) -> int:
    plan = json.loads(argv[0])
    python = os.path.join(plan["env"], "bin", "python")
    if plan.get("standalone"):
        import shutil
        from pathlib import Path

        from evalrunner_assets.execution import environment as envmod

        # A build that failed earlier may have left a partial environment on the volume.
        shutil.rmtree(plan["env"], ignore_errors=True)
        _run("uv venv", ["uv", "venv", "--quiet", "--no-config", "--python", sys.executable, plan["env"]])
        stubs = envmod._write_stubs(envmod._site_packages(Path(plan["env"])))
        constraints = os.path.join(os.environ.get("HOME", "/tmp"), "constraints.txt")
        with open(constraints, "w") as f:
            f.write(envmod.controller_constraints())
        plan = {
            **plan,
            "constraints": constraints,
            "controller_packages": sorted(n for n, _ in envmod.controller_distributions().values()),
        }
        _install(plan, python)
        record = envmod.finish_environment(Path(plan["env"]), stubs, plan)
        # The controller cannot read the volume: the record travels back as a signed output.
        out = os.path.join(os.environ.get("EVALRUNNER_OUT", "/work/out"), "environment.json")
        with open(out + ".tmp", "w") as f:
            json.dump(record, f, sort_keys=True)
        os.replace(out + ".tmp", out)
        return 0
    _install(plan, python)
    return 0


def _install(plan: dict, python: str) -> None:
    common = ["--no-config", "--python", python]
    install = ["uv", "pip", "install", *common, "--index-url", plan["index"], "-c", plan["constraints"]]
    home = os.environ.get("HOME", "/tmp")
    if plan["kind"] == "uv.lock":
        locked = os.path.join(home, "locked-requirements.txt")
        exclude = [a for name in plan["controller_packages"] for a in ("--no-emit-package", name)]
        _run(
            "uv export",
            [
                "uv",
                "export",
                "--no-config",
                "--frozen",
                "--no-dev",
                "--no-hashes",
                "--no-header",
                "--no-annotate",
                "--no-emit-project",
                "--format",
                "requirements.txt",
                "--directory",
                REPO,
                *exclude,
                "-o",
                locked,
            ],
        )
        # The lock is complete: install exactly what it pins, resolving nothing.
        args = install + ["--no-deps", "-r", locked]
        if plan["install_project"]:
            args += ["-e", REPO]
        _run("uv pip install", args)
    elif plan["kind"] == "pyproject":
        target = ["-e", REPO] if plan["install_project"] else ["-r", os.path.join(REPO, "pyproject.toml")]
        _run("uv pip install", install + target)
    else:
        _run("uv pip install", install + ["-r", os.path.join(REPO, plan["source"])])
    _run("uv pip check", ["uv", "pip", "check", *common])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
