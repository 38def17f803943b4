"""The Dockerfile cannot be built here (no container engine), so it is linted by parsing:
its install steps must be the commands ./dev runs, and runtime stages must not run as root."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    out, buf = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        buf += " " + stripped.rstrip("\\").strip() if buf else stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            word, _, rest = buf.partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def stages(text: str) -> dict[str, list[tuple[str, str]]]:
    result: dict[str, list[tuple[str, str]]] = {}
    current = None
    for word, rest in instructions(text):
        if word == "FROM":
            current = rest.split(" AS ")[-1].strip() if " AS " in rest else rest
            result[current] = []
        elif current is not None:
            result[current].append((word, rest))
    return result


def pip_installs(commands: list[str]) -> list[tuple[str, list[str]]]:
    """Normalised pip installs: (constraints file, targets), ignoring quiet/cache flags and paths."""
    found = []
    for cmd in commands:
        words = [w.replace('"$here/', "").replace("$here/", "").replace('"', "") for w in shlex.split(cmd, posix=False)]
        if "pip" not in words or "install" not in words:
            continue
        args = words[words.index("install") + 1 :]
        constraints, targets, i = None, [], 0
        while i < len(args):
            if args[i] == "-c":
                constraints = args[i + 1]
                i += 2
                continue
            if not args[i].startswith("-"):
                targets.append(args[i])
            i += 1
        found.append((constraints, targets))
    return found


def test_dockerfile_parses_into_build_sandbox_and_code_location_stages():
    s = stages(DOCKERFILE.read_text())
    assert list(s) == ["build", "sandbox", "code-location"]
    assert all(
        word in {"ARG", "ENV", "RUN", "COPY", "WORKDIR", "USER", "ENTRYPOINT", "CMD", "EXPOSE"}
        for st in s.values()
        for word, _ in st
    )


def test_image_installs_with_the_same_commands_as_dev():
    dev_lines = [line for line in (ROOT / "dev").read_text().splitlines() if "pip install" in line]
    dev = pip_installs(dev_lines)
    runs = [rest for word, rest in stages(DOCKERFILE.read_text())["build"] if word == "RUN"]
    image = pip_installs(runs)
    assert dev and len(dev) == len(image)
    for (dev_c, dev_t), (img_c, img_t) in zip(dev, image):
        assert dev_c == img_c == "constraints.txt"
        # ./dev installs the project ($here) editable with the dev extra; the image installs it
        # plainly from the build context. Everything else must be identical.
        assert [re.sub(r"\[dev\]$", "", t.replace("$here", ".")) for t in dev_t] == img_t


def test_image_build_context_includes_every_packaged_directory():
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    build = stages(DOCKERFILE.read_text())["build"]
    assert ("COPY", ". /src") in build  # the whole context, so new packages cannot be forgotten
    ignored = [
        ln.strip()
        for ln in (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    for pattern in packages:
        top = pattern.rstrip("*")
        assert top not in ignored, f"{top} is packaged but excluded from the build context"
    for needed in ("pyproject.toml", "constraints.txt", "README.md"):
        assert needed not in ignored


def test_runtime_stages_run_as_a_non_root_user():
    for name in ("sandbox", "code-location"):
        users = [rest for word, rest in stages(DOCKERFILE.read_text())[name] if word == "USER"]
        assert users, f"stage {name} sets no USER"
        uid = users[-1].split(":")[0]
        assert uid.isdigit() and int(uid) != 0, (
            f"stage {name} must end as a numeric non-root uid (PSA runAsNonRoot checks numerically)"
        )


def test_sandbox_image_matches_the_pod_spec():
    from evalrunner_assets.execution.kubernetes import KubernetesSandboxConfig
    from evalrunner_assets.execution.kubernetes.manifests import _wrapper_command

    sandbox = dict(stages(DOCKERFILE.read_text())["sandbox"])
    assert sandbox["ENTRYPOINT"] == '["python", "-m", "evalrunner_assets.execution.pod_wrapper"]'
    assert _wrapper_command() == ["python", "-m", "evalrunner_assets.execution.pod_wrapper"]
    uid = int(sandbox["USER"].split(":")[0])
    assert uid == KubernetesSandboxConfig.model_fields["run_as_user"].default


def test_base_image_is_pinned_by_digest():
    args = {
        rest.split("=", 1)[0]: rest.split("=", 1)[1]
        for word, rest in instructions(DOCKERFILE.read_text())
        if word == "ARG" and "=" in rest
    }
    froms = [rest.split(" AS ")[0] for word, rest in instructions(DOCKERFILE.read_text()) if word == "FROM"]
    assert set(froms) == {"${PYTHON_IMAGE}"}
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", args["PYTHON_IMAGE"])


def test_dagster_home_belongs_to_the_code_location_user():
    stage = stages(DOCKERFILE.read_text())["code-location"]
    env = " ".join(rest for word, rest in stage if word == "ENV")
    home = re.search(r"DAGSTER_HOME=(\S+)", env).group(1)
    uid_gid = [rest for word, rest in stage if word == "USER"][-1]
    copies = [rest for word, rest in stage if word == "COPY" and rest.rstrip("/").endswith(home)]
    assert copies and all(c.startswith(f"--chown={uid_gid} ") for c in copies)
    uid, gid = uid_gid.split(":")
    runs = " ".join(rest for word, rest in stage if word == "RUN")
    assert re.search(
        rf"install -d -o {uid} -g {gid} .*{re.escape(home)}", runs
    )  # the directory itself, not only the files
