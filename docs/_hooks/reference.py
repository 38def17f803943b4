"""Generates the reference pages from the code they describe, at every ``mkdocs build``.

Nothing here is written by hand: the CLI pages come from the argparse parser, the settings page
from the settings models, the SQL page from the header comments of ``sql/*.sql``, the lake page
from ``lake/layout.py`` and the schema page from the exported JSON Schemas. A reference cannot
drift from the code, and ``mkdocs build --strict`` fails on a link to a page that does not exist.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]

# Example values for the layout's parameters, by name: each reference row shows a real path.
_EXAMPLES: dict[str, Any] = {
    "repo": "acme/agent",
    "commit": "3d1aabc" + "0" * 33,
    "head": "3d1aabc" + "0" * 33,
    "task": "triage/runbook_lookup",
    "batch": "b5c0e2a91f3d",
    "pr": 42,
    "name": "main",
    "table": "samples",
    "source": "github",
    "delivery_id": "8f2b4c1e-0d6a",
    "env_digest": "e" * 16,
    "digest": "ab" + "0" * 62,
    "agent_version": "v1",
    "task_id": "tinystats-001",
    "sample_idx": 0,
    "run_id": "r-0a1b2c3d",
    "branch": "main",
    "pid": 4242,
    "token": "5f1c" + "0" * 28,
    "ext": "svg",
    "retired_at": "20261203T120000Z",
    "quarantined_at": "20261203T120000Z",
    "fmt": "eval",
    "content": "0123456789abcdef",
}


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def cli_reference() -> str:
    from evalrunner_assets import cli

    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: a fixed width here
    parser = cli.build_parser()
    parser.prog = "evalrunner"
    out = [
        "# CLI reference",
        "",
        "Every `evalrunner` command and its options, as `evalrunner <command> --help` prints them.",
        "`./dev <command>` runs the same inside the project's environment.",
        "",
    ]

    def walk(p: argparse.ArgumentParser, depth: int) -> None:
        out.extend([f"{'#' * min(depth, 6)} `{p.prog}`", "", "```text", p.format_help().rstrip(), "```", ""])
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                    walk(child, depth + 1)

    walk(parser, 2)
    return "\n".join(out)


def settings_reference() -> str:
    from evalrunner_assets.execution import sandbox_settings

    out = [
        "# Settings reference",
        "",
        "## The sandbox",
        "",
        "The sandbox settings, each defined once in `evalrunner_assets/execution/sandbox_settings.py`:",
        "the CLI's options, the Dagster `SandboxResource` fields and the Kubernetes backend's",
        "configuration all take their names, defaults and help from there, and the deploy files are",
        "checked against it by a test. [Configuration](../configuration.md) lists every other",
        "environment variable.",
        "",
        "| environment variable | type | default | resource field | meaning |",
        "|---|---|---|---|---|",
    ]
    for s in sandbox_settings.SETTINGS:
        default = "unset" if s.default is None else f"`{s.default}`"
        choices = f" One of {', '.join(f'`{c}`' for c in s.choices)}." if s.choices else ""
        out.append(
            f"| `{s.env}` | {s.type.__name__} | {default} | `{s.resource_field}` | {_md_escape(s.help)}{choices} |"
        )
    from evalrunner_assets import lake_settings

    out += [
        "",
        "## The lake",
        "",
        "Defined once in `evalrunner_assets/lake_settings.py` and read when a lake is opened: the lake, the Dagster",
        "`LakeResource` and the CLI take them from there.",
        "",
        "| environment variable | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for ls in lake_settings.SETTINGS:
        default = "unset" if ls.default is None else f"`{ls.default}`"
        out.append(f"| `{ls.env}` | {ls.type.__name__} | {default} | {_md_escape(ls.help)} |")
    from evalrunner_assets import github_settings
    from evalrunner_assets.gateway import settings as gateway_settings

    for title, where, readers, table in (
        (
            "GitHub",
            "evalrunner_assets/github_settings.py",
            "the GitHub client and credentials, the Dagster `GitHubResource` and the CLI's GitHub commands",
            github_settings.SETTINGS,
        ),
        (
            "The model gateway",
            "evalrunner_assets/gateway/settings.py",
            "the gateway's providers and `GatewaySettings.from_env`",
            gateway_settings.SETTINGS,
        ),
    ):
        out += [
            "",
            f"## {title}",
            "",
            f"Defined once in `{where}` and read when they are used: {readers} take them from there.",
            "Secrets are never logged, and never reach a sandbox.",
            "",
            "| environment variable | type | default | meaning |",
            "|---|---|---|---|",
        ]
        for gs in table:
            default = "unset" if gs.default is None else f"`{gs.default}`"
            secret = " A secret." if gs.secret else ""
            out.append(f"| `{gs.env}` | {gs.type.__name__} | {default} | {_md_escape(gs.help)}{secret} |")
    return "\n".join(out) + "\n"


def sql_reference() -> str:
    out = [
        "# SQL reference",
        "",
        "Every query evalrunner runs lives in `sql/`, one per file. The views are what",
        "`evalrunner sql` queries see; the others are the engine's own queries. Each entry is the",
        "file's header comment.",
        "",
    ]
    for path in sorted((ROOT / "sql").glob("*.sql")):
        header: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("--"):
                break
            header.append(line[2:].removeprefix(" "))
        out.extend([f"## `{path.name}`", "", "```text", *(header or ["(no header comment)"]), "```", ""])
    return "\n".join(out)


def lake_reference() -> str:
    from lake.layout import LAYOUT, Window

    examples = dict(_EXAMPLES, window=Window(0, 8))
    at = {k: examples[k] for k in ("repo", "commit", "task", "window", "batch")}
    # The two methods that take another lake path: a failure record, a batch record.
    examples.update(failure_rel=LAYOUT.batch_failure(**at), rel=LAYOUT.batch_record(**at))
    out = [
        "# Lake layout reference",
        "",
        "Every path in the lake is built by one method of `lake.layout.LakeLayout`; nothing else",
        "builds lake paths (a test checks it). Each row is the method called with example values",
        "(repository `acme/agent`, a task `triage/runbook_lookup`, the first window, PR 42).",
        "",
        "| method | example path | what it is |",
        "|---|---|---|",
    ]
    for name, method in inspect.getmembers(LAYOUT, inspect.ismethod):
        if name.startswith("_") or name.startswith("parse"):
            continue
        params = [p for p in inspect.signature(method).parameters.values()]
        args = {p.name: examples[p.name] for p in params if p.name in examples}
        try:
            path = method(**args)
        except Exception as exc:  # a method whose arguments the examples do not cover
            path = f"({type(exc).__name__}: {exc})"
        doc = inspect.getdoc(method) or ""
        first = doc.split("\n\n")[0]
        out.append(f"| `{name}({', '.join(p.name for p in params)})` | `{path}` | {_md_escape(first)} |")
    return "\n".join(out) + "\n"


def schema_reference() -> str:
    out = [
        "# JSON Schemas",
        "",
        "The documents evalrunner reads and writes have JSON Schemas, exported from their models",
        "(`python -m evalrunner_assets.pipeline.schemas`; a test fails while a file differs from its",
        "model) beside the manifest schema a repository's `.evals/list` must satisfy.",
        "",
    ]
    for path in sorted((ROOT / "evalrunner_assets" / "discovery").glob("*.schema.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        title = schema.get("title", path.stem)
        out.extend([f"## `{path.name}`: {title}", ""])
        if schema.get("description"):
            out.extend([_md_escape(schema["description"]), ""])
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            out.extend(["| field | required | description |", "|---|---|---|"])
            for field, spec in props.items():
                desc = _md_escape(str(spec.get("description", "")))
                out.append(f"| `{field}` | {'yes' if field in required else ''} | {desc} |")
            out.append("")
        out.extend(['??? note "the whole schema"', "", "    ```json"])
        out.extend("    " + line for line in json.dumps(schema, indent=2).splitlines())
        out.extend(["    ```", ""])
    return "\n".join(out)


# Pages copied from where they live in the repository (each is also read on GitHub there).
_INCLUDED = {
    "statistics.md": "evalrunner_assets/stats/README.md",
    "deploy.md": "deploy/README.md",
}

_GENERATED = {
    "reference/cli.md": cli_reference,
    "reference/settings.md": settings_reference,
    "reference/sql.md": sql_reference,
    "reference/lake-layout.md": lake_reference,
    "reference/schemas.md": schema_reference,
}


def on_files(files: Files, config: Any) -> Files:
    for uri, make in _GENERATED.items():
        files.append(File.generated(config, uri, content=make()))
    for uri, source in _INCLUDED.items():
        files.append(File.generated(config, uri, content=(ROOT / source).read_text(encoding="utf-8")))
    return files
