"""The bubblewrap SandboxEnvironment provider, resolved by name through Inspect's registry (the
project's `inspect_ai` entry point) and used by a real in-process Inspect eval."""

from __future__ import annotations

from pathlib import Path

import inspect_ai
from inspect_ai import Task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import Score, Target, accuracy, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox

import tests.helpers.inspect_models  # noqa: F401  (registers the offline lakeprobe model)
from evalrunner_assets.execution.inspect_sandbox import BubblewrapSandboxConfig


@solver
def edit_and_probe():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        sb = sandbox()
        await sb.write_file("notes/written.txt", "from the controller\n")
        probe = await sb.exec(
            [
                "bash",
                "-c",
                "cat notes/written.txt; echo edit >> README.md; "
                "python -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=2)' "
                "2>/dev/null && echo NET || echo NONET; ls /root 2>&1 | head -1",
            ]
        )
        state.metadata["probe"] = probe.stdout
        state.metadata["readme"] = await sb.read_file("README.md")
        try:
            await sb.read_file("/etc/hostname")
            state.metadata["outside"] = "read"
        except PermissionError:
            state.metadata["outside"] = "refused"
        return state

    return solve


@scorer(metrics=[accuracy()])
def probe_scorer():
    async def score(state: TaskState, target: Target) -> Score:
        probe = state.metadata["probe"]
        ok = "from the controller" in probe and "NONET" in probe and state.metadata["readme"].endswith("edit\n")
        return Score(value="C" if ok and state.metadata["outside"] == "refused" else "I", explanation=probe)

    return score


def test_inspect_eval_runs_tools_in_the_bubblewrap_provider(tmp_path, bwrap_backend):
    export = tmp_path / "export"
    export.mkdir()
    (export / "README.md").write_text("pinned\n")
    task = Task(
        dataset=[Sample(input="probe", id="s1"), Sample(input="probe", id="s2")],
        solver=edit_and_probe(),
        scorer=probe_scorer(),
        sandbox=("bubblewrap", BubblewrapSandboxConfig(export_path=str(export), commit="1" * 40)),
    )
    [log] = inspect_ai.eval(task, model="lakeprobe/probe", log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    assert log.samples and all(s.scores and s.scores["probe_scorer"].value == "C" for s in log.samples), [
        s.scores for s in log.samples or []
    ]
    # Each sample edited its own copy: the export itself is untouched.
    assert (export / "README.md").read_text() == "pinned\n"
    assert not (Path(export) / "notes").exists()


@solver
def read_setup_and_tmp():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        sb = sandbox()
        await sb.write_file("/tmp/scratch/note.txt", "kept between calls\n")
        probe = await sb.exec(["bash", "-c", "cat setup.txt data.txt /tmp/scratch/note.txt; echo made > /tmp/made.txt"])
        state.metadata["probe"] = probe.stdout
        state.metadata["made"] = await sb.read_file("/tmp/made.txt")
        return state

    return solve


@scorer(metrics=[accuracy()])
def setup_scorer():
    async def score(state: TaskState, target: Target) -> Score:
        want = "ready\nfrom files\nkept between calls\n"
        ok = state.metadata["probe"] == want and state.metadata["made"] == "made\n"
        return Score(value="C" if ok else "I", explanation=repr(state.metadata))

    return score


def test_a_samples_setup_script_and_files_run_in_the_bubblewrap_provider(tmp_path, bwrap_backend):
    # Inspect writes a sample's setup script to /tmp and runs it in a later call: the sample's
    # /tmp persists between its calls (each sample its own), so `setup` works as under Docker.
    export = tmp_path / "export"
    export.mkdir()
    samples = [
        Sample(input="x", id=f"s{i}", files={"data.txt": "from files\n"}, setup="echo ready > setup.txt")
        for i in range(2)
    ]
    task = Task(
        dataset=samples,
        solver=read_setup_and_tmp(),
        scorer=setup_scorer(),
        sandbox=("bubblewrap", BubblewrapSandboxConfig(export_path=str(export), commit="1" * 40)),
    )
    [log] = inspect_ai.eval(task, model="lakeprobe/probe", log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    assert log.samples and all(s.error is None for s in log.samples), [s.error for s in log.samples]
    assert all(s.scores["setup_scorer"].value == "C" for s in log.samples), [
        s.scores["setup_scorer"].explanation for s in log.samples
    ]
