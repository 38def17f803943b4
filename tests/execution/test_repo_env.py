"""Repository environments: declared dependencies installed once per digest, in a sandbox whose
only network is the package index (a real PEP 503 index on loopback, wheels made here)."""

from __future__ import annotations

import http.server
import socket
import threading
from pathlib import Path

import pytest

from evalrunner_assets.discovery import ManifestSchemaError, validate_manifest
from evalrunner_assets.execution.environment import (
    EnvironmentBuildError,
    EnvironmentStore,
    IndexProxy,
    detect_environment,
    runtime_with_env,
    spec_for_file,
)
from evalrunner_assets.execution.sandbox import RepoExport, SandboxRequest, SandboxStatus
from evalrunner_assets.pipeline.facts import TaskFacts
from evalrunner_assets.pipeline.windows import RunSettings, batch_key_for
from lake import Window
from tests.helpers.package_index_standin import PackageIndex, make_wheel
from tests.helpers.tinydep_evals import LIST, TASK

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    wheels = tmp_path_factory.mktemp("wheels")
    idx = PackageIndex(tmp_path_factory.mktemp("index"))
    # A dependency of its own on a package evalrunner already has: it must not be fetched.
    idx.add(make_wheel(wheels, "tinydep", "1.0", {"tinydep/__init__.py": "ANSWER = 41\n"}, ("pydantic>=2",)))
    yield idx
    idx.close()


def _repo(tmp_path: Path, files: dict[str, str]) -> RepoExport:
    root = tmp_path / "repo"
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return RepoExport("acme/agent", "0" * 40, str(root), "")


def test_requirements_are_importable_beside_evalrunners_own_packages(bwrap_backend, index, tmp_path):
    export = _repo(tmp_path, {"requirements.txt": "tinydep==1.0\n"})
    store = EnvironmentStore(tmp_path / "envs", index=index.url)
    env = store.ensure(bwrap_backend, export, detect_environment(export.path))
    assert env.packages == ("tinydep==1.0",) and not env.reused
    assert not any(r.startswith("/files/pydantic") for r in index.requests)  # the controller's is used
    probe = (
        "import tinydep, inspect_ai, pydantic, evalrunner_assets, sys; "
        "print(tinydep.ANSWER + 1, pydantic.VERSION, inspect_ai.__file__.startswith(sys.base_prefix) or 'venv')"
    )
    result = bwrap_backend.run(SandboxRequest(argv=("python", "-c", probe), export=export, python_env=env.path))
    assert result.status is SandboxStatus.OK, result.stderr_tail
    import pydantic

    assert result.stdout.decode().split()[:2] == ["42", pydantic.VERSION]
    # Without the environment the same import fails: nothing leaked into evalrunner's venv.
    bare = bwrap_backend.run(SandboxRequest(argv=("python", "-c", "import tinydep"), export=export))
    assert bare.status is SandboxStatus.EXIT_NONZERO and "ModuleNotFoundError" in bare.stderr_tail


def test_the_same_digest_is_built_once_even_by_concurrent_callers(bwrap_backend, index, tmp_path):
    export = _repo(tmp_path, {"requirements.txt": "tinydep\n"})
    spec = detect_environment(export.path)
    store = EnvironmentStore(tmp_path / "envs", index=index.url)
    results, errors = [], []

    def build() -> None:
        try:
            results.append(store.ensure(bwrap_backend, export, spec))
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.builds == 1
    assert sorted(r.reused for r in results) == [False, True]
    index.requests.clear()
    again = EnvironmentStore(tmp_path / "envs", index=index.url).ensure(bwrap_backend, export, spec)
    assert again.reused and index.requests == []


def test_a_missing_package_is_one_error_naming_the_file_and_package_and_leaves_nothing(bwrap_backend, index, tmp_path):
    export = _repo(tmp_path, {"evals/requirements.txt": "tinydep==1.0\nnosuchpkg==1.0\n"})
    store = EnvironmentStore(tmp_path / "envs", index=index.url)
    with pytest.raises(EnvironmentBuildError) as info:
        store.ensure(bwrap_backend, export, spec_for_file(export.path, "evals/requirements.txt"))
    msg = str(info.value)
    assert msg.startswith(f"evals/requirements.txt: no version of `nosuchpkg` on the package index {index.url}")
    assert info.value.package == "nosuchpkg" and not info.value.infrastructure
    assert [p.name for p in (tmp_path / "envs").iterdir() if not p.name.endswith(".lock")] == []


def test_a_repository_pinning_another_inspect_ai_is_refused_naming_it(bwrap_backend, index, tmp_path):
    export = _repo(tmp_path, {"requirements.txt": "inspect-ai==0.3.1\n"})
    with pytest.raises(
        EnvironmentBuildError, match=r"requirements.txt: requires `inspect-ai==0.3.1` but evalrunner runs"
    ):
        EnvironmentStore(tmp_path / "envs", index=index.url).ensure(
            bwrap_backend, export, detect_environment(export.path)
        )


def test_a_locked_project_requiring_another_inspect_ai_is_refused_before_building(tmp_path):
    export = _repo(
        tmp_path,
        {
            "uv.lock": "version = 1\n",
            "pyproject.toml": '[project]\nname = "x"\nversion = "1"\ndependencies = ["inspect-ai<0.3"]\n',
        },
    )
    with pytest.raises(EnvironmentBuildError, match=r"pyproject.toml: requires `inspect-ai<0.3`"):
        EnvironmentStore(tmp_path / "envs", index="http://127.0.0.1:9/simple").ensure(
            None, export, detect_environment(export.path)
        )  # type: ignore[arg-type]


def test_detection_precedence_and_digest_inputs(tmp_path):
    export = _repo(tmp_path, {"requirements.txt": "a\n", "pyproject.toml": '[project]\nname = "x"\nversion = "1"\n'})
    assert detect_environment(export.path).source == "requirements.txt"  # no deps, no build-system
    (Path(export.path) / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\ndependencies = ["a"]\n')
    assert detect_environment(export.path).kind == "pyproject"
    (Path(export.path) / "uv.lock").write_text("version = 1\n")
    spec = detect_environment(export.path)
    assert spec.kind == "uv.lock" and not spec.install_project
    (Path(export.path) / "README.md").write_text("other files do not matter")
    assert detect_environment(export.path).digest == spec.digest
    (Path(export.path) / "uv.lock").write_text("version = 1\n# changed\n")
    assert detect_environment(export.path).digest != spec.digest
    assert detect_environment(_repo(tmp_path / "empty", {}).path) is None
    # Another repository with the same files gets its own environment (its build ran its code).
    other = RepoExport("other/agent", "0" * 40, export.path, "")
    assert (
        detect_environment(other).digest
        != detect_environment(RepoExport("acme/agent", "1" * 40, export.path, "")).digest
    )
    with pytest.raises(EnvironmentBuildError, match="leaves the repository"):
        spec_for_file(export.path, "../etc/passwd")


def test_the_environment_joins_the_batch_key_and_no_environment_keeps_it():
    facts = TaskFacts(
        task="t",
        spec="t.py@t",
        workdir=".",
        cohort="default",
        paths=(),
        inspect_task="t",
        sample_ids=("1", "2"),
        config_digest="c",
    )
    settings = RunSettings(model="m/x", model_args={}, seed=0, epochs=1)
    key = lambda f: batch_key_for(
        "acme/a",
        "0" * 40,
        f,
        settings,
        Window(0, 2),
        backend_name="bubblewrap",  # noqa: E731
        runtime_digest="r",
    )
    assert key(facts).runtime_digest == "r" and runtime_with_env("r", "") == "r"
    with_env = key(facts.model_copy(update={"env_digest": "e1"}))
    assert with_env.digest != key(facts).digest
    assert key(facts.model_copy(update={"env_digest": "e2"})).digest != with_env.digest
    assert key(facts.model_copy(update={"env_digest": "e1"})).digest == with_env.digest


def test_manifest_environment_is_validated():
    base = {"version": 1, "tasks": [{"id": "a", "spec": "a.py@a"}]}
    ok = validate_manifest({**base, "environment": {"requirements": "evals/requirements.txt"}})
    assert ok.environment == {"requirements": "evals/requirements.txt"}
    assert "environment" not in validate_manifest(base).to_dict()
    for bad, where in (
        ({"requirements": 3}, "$.environment.requirements"),
        ({"file": "x.txt"}, "$.environment"),
        ({"requirements": "../x.txt"}, "$.environment.requirements"),
    ):
        with pytest.raises(ManifestSchemaError) as info:
            validate_manifest({**base, "environment": bad})
        assert any(v.path == where for v in info.value.violations), info.value.violations


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = b"index page"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _through_proxy(sock_path: str, request: bytes) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.sendall(request)
    s.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def test_index_proxy_connects_only_to_allowed_hosts():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        with IndexProxy({"localhost"}, ports={port}) as proxy:
            allowed = _through_proxy(proxy.socket_path, f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
            assert allowed.startswith(b"HTTP/1.1 200")
            refused = _through_proxy(proxy.socket_path, f"CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n".encode())
            assert refused.startswith(b"HTTP/1.1 403") and proxy.refused == [f"127.0.0.2:{port}"]
            plain = _through_proxy(
                proxy.socket_path, f"GET http://localhost:{port}/simple/ HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
            )
            assert plain.startswith(b"HTTP/1.0 200") or plain.startswith(b"HTTP/1.1 200")
    finally:
        server.shutdown()
        server.server_close()


def test_evals_list_imports_a_declared_dependency_and_its_manifest_names_the_tasks_file(
    bwrap_backend, index, tmp_path, monkeypatch
):
    from evalrunner_assets.pipeline.facts import learn_commit
    from lake import open_lake

    monkeypatch.setenv("EVALRUNNER_ENVS", str(tmp_path / "envs"))
    monkeypatch.setenv("EVALRUNNER_PACKAGE_INDEX", index.url)
    export = _repo(
        tmp_path,
        {
            "requirements.txt": "tinydep==1.0\n",
            ".evals/list": LIST,
            "evals/requirements.txt": "tinydep==1.0  # what the tasks need\n",
            "evals/t.py": TASK,
        },
    )
    (Path(export.path) / ".evals/list").chmod(0o755)
    the_lake = open_lake(str(tmp_path / "lake"))
    facts = learn_commit(the_lake, bwrap_backend, export, model="mockllm/model")
    task = facts.tasks["t/answer"]
    assert task.failure is None and task.sample_ids == ("s0", "s1", "s2")
    named = spec_for_file(export, "evals/requirements.txt")
    assert task.env_digest == named.digest and task.env_source == "evals/requirements.txt"
    assert facts.environment["source"] == "evals/requirements.txt"
    built = sorted(p.name for p in (tmp_path / "envs").iterdir() if not p.name.startswith("."))
    assert built == sorted({named.digest, detect_environment(export).digest})
    assert the_lake.exists(f"envs/{named.digest}/environment.json")


def test_a_cold_window_runs_with_the_environment_mounted(bwrap_backend, index, tmp_path):
    from evalrunner_assets.execution.inspect_runner import TaskRunConfig, run_window_cold

    export = _repo(tmp_path, {"requirements.txt": "tinydep==1.0\n", "evals/t.py": TASK})
    spec = detect_environment(export.path)
    env = EnvironmentStore(tmp_path / "envs", index=index.url).ensure(bwrap_backend, export, spec)
    cfg = TaskRunConfig(
        repo="acme/agent",
        task="t/answer",
        spec="evals/t.py@answer",
        env_digest=env.digest,
        python_env=env.path,
        settings=RunSettings(model="simagent/support"),
    )
    run = run_window_cold(bwrap_backend, export, cfg, Window(0, 2))
    assert run.ok, run.failure_cause
    assert run.key.runtime_digest == runtime_with_env(bwrap_backend.runtime_digest(), env.digest)
    assert run.key.runtime_digest != bwrap_backend.runtime_digest()


def test_backends_that_cannot_build_environments_refuse_naming_the_file(tmp_path):
    class NoEnvironments:  # only the backend's name (and the absence of ensure_environment) counts
        name = "unsafe-local"

    export = _repo(tmp_path, {"requirements.txt": "tinydep\n"})
    with pytest.raises(
        EnvironmentBuildError, match=r"^requirements.txt: the repository declares dependencies.*bubblewrap"
    ):
        EnvironmentStore(tmp_path / "envs", index="http://127.0.0.1:9/simple").ensure(
            NoEnvironments(), export, detect_environment(export.path)
        )  # type: ignore[arg-type]
    assert not (tmp_path / "envs").exists()
