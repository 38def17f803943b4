"""Hostile repositories against the bubblewrap sandbox: every probe contained and reported.

Each probe is a repository whose ``.evals/list`` (or Inspect task code) tries one escape. A
probe that *succeeds* prints a valid manifest carrying what it got, so a containment failure
shows up as a discovery that passed; a contained probe exits non-zero, and discovery reports
that as its own typed error.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from evalrunner_assets.discovery import (
    ListFailed,
    ListKilled,
    ListOutputTooLarge,
    ListTimeout,
    discover,
)
from evalrunner_assets.execution.bubblewrap import BubblewrapBackend
from evalrunner_assets.execution.repo import RepoSource
from evalrunner_assets.execution.sandbox import (
    Limits,
    NetworkPolicy,
    SandboxRequest,
    SandboxStatus,
    SandboxUnavailable,
)

LEAK = 'echo \'{"version":1,"tasks":[{"id":"leaked","spec":"x.py","leak":"\'"$1"\'"}]}\''


def probe_export(make_repo, tmp_path: Path, script: str, extra: dict[str, str] | None = None):
    """A repo whose executable ``.evals/list`` is ``script`` (sh), exported at its commit."""
    files = {".evals/list": "#!/bin/sh\nleak() { " + LEAK + "; exit 0; }\n" + script, **(extra or {})}
    repo, sha = make_repo(files, executable=(".evals/list",))
    src = RepoSource("probe/repo", str(repo))
    return src.export(sha, tmp_path / "export" / sha[:12])


def host_processes_matching(needle: str, settle_s: float = 3.0) -> list[int]:
    """Live host processes whose command line contains ``needle`` (after letting killed ones
    finish exiting: a SIGKILLed process stays visible until the kernel has torn it down)."""
    deadline = time.monotonic() + settle_s
    while True:
        found = _matching(needle)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _matching(needle: str) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if needle in cmd and int(entry.name) != os.getpid():
                out.append(int(entry.name))
    return out


def test_reading_a_host_secret_outside_the_export_fails(bwrap_backend, make_repo, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t-value-123")
    beside = tmp_path / "export" / "secret-beside.txt"
    beside.parent.mkdir(parents=True)
    beside.write_text("s3cr3t-value-123")
    script = f"""
for f in {secret} {beside} ../secret-beside.txt /work/secret-beside.txt /proc/1/root{secret} \
         /etc/shadow /root/.bash_history /work/main/.git/config; do
  if [ -r "$f" ] && v=$(cat "$f" 2>/dev/null) && [ -n "$v" ]; then leak "$f=$v"; fi
done
echo "contained: no host file readable" >&2; exit 3
"""
    export = probe_export(make_repo, tmp_path, script)
    with pytest.raises(ListFailed, match="exited with code 3") as info:
        discover(bwrap_backend, export)
    assert "contained" in info.value.stderr_tail
    assert "s3cr3t" not in info.value.stderr_tail
    assert secret.read_text() == "s3cr3t-value-123"


def test_credentials_in_the_parent_environment_are_not_visible(bwrap_backend, make_repo, tmp_path, monkeypatch):
    creds = {
        "GITHUB_TOKEN": "ghp_probe_token_value",
        "AWS_SECRET_ACCESS_KEY": "aws-probe-secret",
        "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "gcp.json"),
    }
    (tmp_path / "gcp.json").write_text('{"private_key": "gcp-probe-key"}')
    for k, v in creds.items():
        monkeypatch.setenv(k, v)
    script = """
all=$(env; cat /proc/self/environ /proc/1/environ 2>/dev/null | tr '\\0' '\\n')
for needle in ghp_probe aws-probe GOOGLE_APPLICATION gcp.json; do
  case "$all" in *"$needle"*) leak "$needle";; esac
done
[ -r "$GOOGLE_APPLICATION_CREDENTIALS" ] && leak gcpfile
echo "contained: env is $(env | cut -d= -f1 | sort | tr '\\n' ' ')" >&2; exit 3
"""
    export = probe_export(make_repo, tmp_path, script)
    with pytest.raises(ListFailed) as info:
        discover(bwrap_backend, export)
    tail = info.value.stderr_tail
    assert "contained" in tail
    for value in creds.values():
        assert value not in tail
    for name in creds:
        assert name not in tail


@pytest.fixture
def loopback_server():
    """A TCP server on host loopback that records every connection it accepts."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    accepted: list[tuple] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, addr = srv.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(addr)
            try:
                conn.sendall(b"hello-from-host\n")
            finally:
                conn.close()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    yield srv.getsockname()[1], accepted
    stop.set()
    t.join(2)
    srv.close()


def test_connecting_to_a_host_loopback_server_fails(bwrap_backend, make_repo, tmp_path, loopback_server):
    port, accepted = loopback_server
    script = f"""
python - <<'EOF' || exit 3
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print(s.recv(100).decode())
except OSError as e:
    print("contained:", e, file=sys.stderr)
    sys.exit(1)
EOF
leak connected
"""
    export = probe_export(make_repo, tmp_path, script)
    with pytest.raises(ListFailed) as info:
        discover(bwrap_backend, export)
    assert "contained" in info.value.stderr_tail
    assert accepted == []


def test_model_egress_mode_shares_the_host_network_as_documented(bwrap_backend, make_repo, tmp_path, loopback_server):
    """The weaker, opt-in mode: bubblewrap cannot limit egress to one host (see bubblewrap.py)."""
    port, accepted = loopback_server
    export = probe_export(make_repo, tmp_path, "exit 0")
    req = SandboxRequest(
        argv=(
            "python",
            "-c",
            f"import socket; print(socket.create_connection(('127.0.0.1', {port}), timeout=2).recv(100).decode())",
        ),
        export=export,
        network=NetworkPolicy.MODEL_EGRESS,
        limits=Limits(wall_seconds=20),
    )
    result = bwrap_backend.run(req)
    assert result.status is SandboxStatus.OK, result.stderr_tail
    assert b"hello-from-host" in result.stdout
    assert len(accepted) == 1


def test_writing_outside_the_output_dir_fails_and_the_host_is_untouched(bwrap_backend, make_repo, tmp_path):
    host_target = tmp_path / "host-write-target"
    pkg_dir = Path(__file__).resolve().parents[2] / "evalrunner_assets"
    venv = Path(os.environ.get("VIRTUAL_ENV", Path(__import__("sys").prefix)))
    targets = [
        f"{host_target}",
        "/work/repo/planted",
        "/work/repo/.evals/planted",
        f"{pkg_dir}/planted.py",
        f"{venv}/planted",
        "/usr/planted",
        "/etc/planted",
        "/work/main/planted",
    ]
    script = (
        "ok=0\nfor t in " + " ".join(targets) + '; do\n  if echo x > "$t" 2>/dev/null; then leak "$t"; fi\ndone\n'
        "echo x > /work/out/allowed && echo x > /tmp/allowed && echo x > $HOME/allowed || exit 4\n"
        "echo contained >&2; exit 3\n"
    )
    export = probe_export(make_repo, tmp_path, script)
    before = sorted(p.name for p in Path(export.path).rglob("*"))
    with pytest.raises(ListFailed, match="exited with code 3"):
        discover(bwrap_backend, export)
    assert not host_target.exists()
    assert not (pkg_dir / "planted.py").exists()
    assert not (venv / "planted").exists()
    assert sorted(p.name for p in Path(export.path).rglob("*")) == before


@pytest.mark.slow
def test_a_fork_bomb_is_bounded_by_the_pids_limit_and_killed(bwrap_backend, make_repo, tmp_path):
    script = "bomb() { sleep 4711 & bomb | bomb & }; bomb; sleep 30\n"
    export = probe_export(make_repo, tmp_path, script)
    limits = replace(Limits(), pids=64)
    start = time.monotonic()
    with pytest.raises((ListTimeout, ListFailed, ListKilled)):
        discover(bwrap_backend, export, timeout=4, limits=limits)
    assert time.monotonic() - start < 30
    assert host_processes_matching("sleep 4711") == []


def test_a_fork_bomb_cannot_exceed_the_pids_limit(bwrap_backend, make_repo, tmp_path):
    """Counted from inside: forking stops at the cgroup's pids.max, not at host exhaustion."""
    export = probe_export(make_repo, tmp_path, "exit 0")
    code = (
        "import os, time\nn = 0\ntry:\n    while n < 500:\n        if os.fork() == 0:\n            time.sleep(30); os._exit(0)\n"
        "        n += 1\nexcept OSError as e:\n    print('stopped', n, e.errno)\n"
    )
    req = SandboxRequest(argv=("python", "-c", code), export=export, limits=Limits(wall_seconds=15, pids=40))
    result = bwrap_backend.run(req)
    assert result.status is SandboxStatus.OK, (result.detail, result.stderr_tail)
    words = result.stdout.decode().split()
    assert words[0] == "stopped" and int(words[1]) < 40
    assert host_processes_matching("time.sleep(30)") == []


def test_writing_a_multi_gigabyte_file_is_killed_at_the_file_size_limit(bwrap_backend, make_repo, tmp_path):
    script = "exec dd if=/dev/zero of=/work/out/big bs=1M count=3000\n"
    export = probe_export(make_repo, tmp_path, script)
    limits = replace(Limits(), file_size_bytes=32 * 1024**2)
    with pytest.raises(ListKilled, match="file size limit"):
        discover(bwrap_backend, export, limits=limits)
    # and directly: the output written is capped, nothing oversized is collected
    req = SandboxRequest(
        argv=(
            "sh",
            "-c",
            "dd if=/dev/zero of=/tmp/big bs=1M count=3000; exec dd if=/dev/zero of=/work/out/big bs=1M count=3000",
        ),
        export=export,
        limits=replace(limits, output_bytes=1024**2),
    )
    result = bwrap_backend.run(req)
    assert result.status is SandboxStatus.KILLED and "SIGXFSZ" in result.detail
    assert "big" not in result.outputs and "output size cap" in result.rejected_outputs["big"]
    assert "33554432 bytes" in result.rejected_outputs["big"]  # stopped exactly at the limit


def test_printing_megabytes_to_stdout_is_capped_and_reported(bwrap_backend, make_repo, tmp_path):
    script = "head -c 50000000 /dev/zero | tr '\\0' 'x'\n"
    export = probe_export(make_repo, tmp_path, script)
    with pytest.raises(ListOutputTooLarge, match="1048576-byte cap"):
        discover(bwrap_backend, export)
    req = SandboxRequest(argv=("sh", "-c", script), export=export, limits=Limits(stdout_bytes=1000))
    result = bwrap_backend.run(req)
    assert result.status is SandboxStatus.OK
    assert result.stdout_truncated and len(result.stdout) == 1000


def test_sleeping_forever_times_out_and_nothing_survives(bwrap_backend, make_repo, tmp_path):
    script = "setsid sleep 4242 & nohup sleep 4243 >/dev/null 2>&1 &\nsleep 4244\n"
    export = probe_export(make_repo, tmp_path, script)
    start = time.monotonic()
    with pytest.raises(ListTimeout, match="did not finish within 2s"):
        discover(bwrap_backend, export, timeout=2)
    assert time.monotonic() - start < 10
    assert host_processes_matching("sleep 424") == []


def test_background_processes_die_with_the_sandbox(bwrap_backend, make_repo, tmp_path):
    script = "setsid sleep 4252 >/dev/null 2>&1 < /dev/null &\n" + LEAK.replace("$1", "x") + "\n"
    export = probe_export(make_repo, tmp_path, script)
    result = discover(bwrap_backend, export)
    assert result.manifest.tasks[0].id == "leaked"  # ran to its end...
    assert host_processes_matching("sleep 4252") == []  # ...and took its children with it


def test_cancellation_kills_the_process_group(bwrap_backend, make_repo, tmp_path):
    export = probe_export(make_repo, tmp_path, "exit 0")
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    req = SandboxRequest(argv=("sh", "-c", "sleep 4262 & sleep 4263"), export=export)
    start = time.monotonic()
    result = bwrap_backend.run(req, cancel=cancel)
    assert result.status is SandboxStatus.CANCELLED
    assert time.monotonic() - start < 5
    assert host_processes_matching("sleep 426") == []


def test_links_and_special_files_in_the_output_dir_are_not_collected(bwrap_backend, make_repo, tmp_path):
    host_file = tmp_path / "host-only.txt"
    host_file.write_text("host-secret-contents")
    export = probe_export(make_repo, tmp_path, "exit 0")
    script = (
        f"ln -s {host_file} /work/out/log.eval; ln -s /etc/passwd /work/out/passwd; "
        "mkfifo /work/out/fifo; mkdir /work/out/d; ln -s / /work/out/d/root; echo ok > /work/out/real.txt"
    )
    result = bwrap_backend.run(SandboxRequest(argv=("sh", "-c", script), export=export))
    assert result.status is SandboxStatus.OK, result.stderr_tail
    assert result.outputs == {"real.txt": b"ok\n"}
    assert "symlink" in result.rejected_outputs["log.eval"]
    assert "symlink" in result.rejected_outputs["passwd"]
    assert "symlink" in result.rejected_outputs["d/root"]
    assert "fifo" in result.rejected_outputs["fifo"]
    assert host_file.read_text() == "host-secret-contents"


def test_a_symlinked_log_is_an_infrastructure_failure_not_a_result(bwrap_backend, make_repo, tmp_path):
    from evalrunner_assets.execution.inspect_runner import REJECTED_OUTPUT, _window_run
    from lake.batch import BatchKey, RunSettings
    from lake.layout import Window

    export = probe_export(make_repo, tmp_path, "exit 0")
    result = bwrap_backend.run(SandboxRequest(argv=("ln", "-s", "/etc/passwd", "/work/out/w.eval"), export=export))
    key = BatchKey(
        repo="probe/repo",
        commit=export.commit,
        task="t",
        spec="t.py",
        window=Window(0, 1),
        settings=RunSettings(model="m", seed=0),
    )
    run = _window_run(key, "cold", result, ["a"], 1, {})
    assert run.infrastructure_failure and run.failure_kind == REJECTED_OUTPUT
    assert "symlink" in run.failure_cause and run.log_bytes is None


def test_the_sandbox_has_no_capabilities_and_no_nested_user_namespaces(bwrap_backend, make_repo, tmp_path):
    export = probe_export(make_repo, tmp_path, "exit 0")
    script = "grep CapEff /proc/self/status; unshare -U true && echo nested-userns-allowed; ls /home /root 2>&1; true"
    result = bwrap_backend.run(SandboxRequest(argv=("sh", "-c", script), export=export))
    out = result.stdout.decode()
    assert "CapEff:\t0000000000000000" in out
    assert "nested-userns-allowed" not in out
    assert "No such file" in out + result.stderr_tail or ".pyenv" not in out


def test_bubblewrap_argv_mounts_tmp_before_binding_under_it(make_repo, tmp_path):
    from evalrunner_assets.execution._local import Staging

    export = probe_export(make_repo, tmp_path, "exit 0")
    backend = BubblewrapBackend(staging_dir=str(tmp_path / "staging"))
    staging = Staging.create(backend.staging_dir)
    argv = backend.build_argv(SandboxRequest(argv=("true",), export=export), staging)
    tmpfs_at = argv.index("--tmpfs")
    assert argv[tmpfs_at + 1] == "/tmp"
    binds_under_tmp = [i for i, a in enumerate(argv) if a in ("--bind", "--ro-bind") and argv[i + 2].startswith("/tmp")]
    assert all(i > tmpfs_at for i in binds_under_tmp)
    for flag in ("--unshare-all", "--die-with-parent", "--clearenv", "--new-session", "--disable-userns"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    dests = [argv[i + 2] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
    assert "/home" not in dests and "/root" not in dests and "/etc" not in dests
    assert [argv[i + 2] for i, a in enumerate(argv) if a == "--bind"] == ["/work/out"]
    assert "--share-net" not in argv
    staging.remove()


def test_preflight_without_bubblewrap_refuses_and_says_how_to_fix(tmp_path):
    backend = BubblewrapBackend(bwrap=str(tmp_path / "no-bwrap-here"))
    with pytest.raises(SandboxUnavailable, match="apt-get install -y bubblewrap"):
        backend.preflight()


def test_preflight_that_cannot_create_namespaces_refuses(tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxUnavailable, match="create new namespace.*user namespaces"):
        BubblewrapBackend(bwrap=str(fake)).preflight()


def test_unsafe_local_is_refused_when_ci_is_set(monkeypatch):
    from evalrunner_assets.execution.backends import make_backend
    from evalrunner_assets.execution.unsafe_local import UnsafeLocalRefused

    monkeypatch.setenv("CI", "true")
    with pytest.raises(UnsafeLocalRefused, match="refused when CI is set"):
        make_backend("unsafe-local")
    assert make_backend().name == "bubblewrap"


def test_secret_looking_environment_variables_are_refused(bwrap_backend, make_repo, tmp_path):
    from evalrunner_assets.execution._local import SandboxRequestError

    export = probe_export(make_repo, tmp_path, "exit 0")
    with pytest.raises(SandboxRequestError, match="OPENAI_API_KEY.*credential"):
        bwrap_backend.run(SandboxRequest(argv=("true",), export=export, env={"OPENAI_API_KEY": "x"}))


def test_unsafe_local_runs_only_when_chosen_and_warns(make_repo, tmp_path, monkeypatch):
    from evalrunner_assets.execution.backends import make_backend
    from evalrunner_assets.execution.unsafe_local import BANNER

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_unsafe_probe")
    export = probe_export(make_repo, tmp_path, "exit 0")
    with pytest.warns(UserWarning, match="UNSANDBOXED"):
        backend = make_backend("unsafe-local")
    assert "UNSAFE" in BANNER and backend.runtime_digest() != BubblewrapBackend().runtime_digest()
    result = backend.run(
        SandboxRequest(
            argv=("sh", "-c", "cat /work/repo/.evals/list >/dev/null && echo hi > /work/out/a.txt; env"), export=export
        )
    )
    assert result.status is SandboxStatus.OK, result.stderr_tail
    assert result.outputs == {"a.txt": b"hi\n"}
    assert b"ghp_unsafe_probe" not in result.stdout  # a clean environment, at least


def test_preflight_removes_what_a_killed_controller_left_and_spares_live_ones(tmp_path):
    import os
    import subprocess
    import sys
    import uuid

    from evalrunner_assets.execution._process import Cgroup
    from evalrunner_assets.execution.bubblewrap import BubblewrapBackend

    dead_pid = int(
        subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout
    )
    staging = tmp_path / "staging"
    dead_dir = staging / f"evalrunner-sbx-{dead_pid}-abc123"
    (dead_dir / "out" / "ro").mkdir(parents=True)
    (dead_dir / "out" / "ro" / "log.eval").write_bytes(b"x")
    os.chmod(dead_dir / "out" / "ro", 0o500)  # a sandbox may leave read-only directories
    live_dir = staging / f"evalrunner-sbx-{os.getpid()}-def456"
    (live_dir / "out").mkdir(parents=True)
    groups = []
    pids_root = Path("/sys/fs/cgroup/pids")
    if os.getuid() == 0 and (pids_root / "cgroup.procs").exists():
        for pid in (dead_pid, os.getpid()):
            g = pids_root / f"evalrunner-{pid}-{uuid.uuid4().hex[:12]}"
            g.mkdir()
            groups.append(g)
    try:
        BubblewrapBackend(staging_dir=str(staging)).preflight()
        assert not dead_dir.exists() and live_dir.exists()
        if groups:
            assert not groups[0].exists(), "the dead controller's cgroup stayed"
            assert groups[1].exists(), "a live controller's cgroup was removed"
    finally:
        for g in groups:
            if g.exists():
                Cgroup([g]).remove()
