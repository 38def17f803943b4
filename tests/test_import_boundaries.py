"""The import arrows of DESIGN §1-2 hold, read from the source with ``ast`` (module-level and
function-level imports alike, relative imports resolved), and lake paths are built only in
``lake/layout.py``.

The tables below are the rules; a failure names the file, the line and the rule it breaks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Everything that ships or runs against the product; tests are exempt (they wire anything).
SCANNED = ("evalrunner_assets", "lake", "resources", "sensors", "sql", "bench")

# --- Dagster lives in the thin layer -------------------------------------------------------

# Where `dagster` / `dagster_*` may be imported, and why.
DAGSTER_HOMES: dict[str, str] = {
    "evalrunner_assets/assets/": "thin Dagster assets over the domain",
    "evalrunner_assets/definitions.py": "the code location",
    "evalrunner_assets/partitions.py": "the named partition sets",
    "evalrunner_assets/jobs.py": "the defined jobs",
    "sensors/": "sensors (the webhook receiver and inbox import none, but live here)",
    "resources/": "ConfigurableResources, and the Kubernetes Pipes launcher",
    # The driver layer: the CLI records its work in Dagster (instance, partitions, runs), so
    # these import Dagster today. The `evalrunner` command itself (cli.py) imports none.
    "evalrunner_assets/driver.py": "driver layer: the CLI's runs on the local Dagster instance",
    "evalrunner_assets/backfill.py": "driver layer: `evalrunner backfill` records its runs in Dagster",
    "evalrunner_assets/candidates_run.py": "driver layer: `evalrunner candidates measure` runs the defined jobs",
    "evalrunner_assets/swe_run.py": "driver layer: the run API launches SWE runs on the Dagster instance",
    "bench/compare_overhead.py": "benchmark: times the Dagster-recorded path against bare Inspect",
}

# `dagster_pipes` is the dependency-free external-process side of Pipes (no Dagster in it). The
# pod's trusted wrapper speaks it when a Pipes launcher started the pod; nothing else may.
DAGSTER_PIPES_HOMES: dict[str, str] = {
    "evalrunner_assets/execution/pod_wrapper.py": "runs inside the sandbox pod as the Pipes external process",
}

# --- never-arrows between packages ---------------------------------------------------------

DOMAIN = (
    "evalrunner_assets/stats/",
    "evalrunner_assets/discovery/",
    "evalrunner_assets/execution/",
    "evalrunner_assets/gateway/",
    "evalrunner_assets/pipeline/",
    "evalrunner_assets/report/",
    "evalrunner_assets/swe/",
    "lake/",
    "sql/",
)
THIN_AND_DRIVER = (
    "evalrunner_assets.assets",
    "evalrunner_assets.definitions",
    "evalrunner_assets.partitions",
    "evalrunner_assets.jobs",
    "sensors",
    "resources",
    "evalrunner_assets.driver",
    "evalrunner_assets.cli",
    "evalrunner_assets.backfill",
)

# (files importing, modules they never import, why)
NEVER: list[tuple[tuple[str, ...], tuple[str, ...], str]] = [
    (
        ("evalrunner_assets/stats/",),
        (
            "lake",
            "evalrunner_assets.execution",
            "evalrunner_assets.pipeline",
            "evalrunner_assets.discovery",
            "evalrunner_assets.report",
            "evalrunner_assets.gateway",
            "resources",
            "sensors",
        ),
        "statistics are pure: callers pass plain values and build their own types",
    ),
    (
        ("evalrunner_assets/execution/",),
        ("evalrunner_assets.stats", "evalrunner_assets.pipeline"),
        "sandboxes run what they are given; deciding is the engine's",
    ),
    (
        ("resources/",),
        ("evalrunner_assets.pipeline", "evalrunner_assets.report"),
        "resources are connections to the outside, not the engine or its report",
    ),
    (
        ("evalrunner_assets/pipeline/",),
        ("evalrunner_assets.simagent",),
        "the engine knows no particular model; the example model registers its price itself",
    ),
    (
        ("lake/",),
        ("evalrunner_assets", "resources", "sensors"),
        "the lake is the bottom layer",
    ),
    (DOMAIN, THIN_AND_DRIVER, "the domain never reaches up into the Dagster wiring or the CLI"),
]

# Standard-library leaves that several layers share and none owns; any file may import them,
# and they import nothing of the project (checked below).
NEUTRAL = ("evalrunner_assets.sample_digest", "evalrunner_assets.sample_order")
PROJECT = ("evalrunner_assets", "lake", "resources", "sensors", "sql")

# --- lake paths ----------------------------------------------------------------------------

# The lake's top-level directories (DESIGN §3). A string that starts with one of them followed
# by "/" is a lake path; only the layout module writes those.
LAKE_TOP_DIRS = (
    "raw",
    "tables",
    "batches",
    "failures",
    "failures-retired",
    "gateway",
    "quarantine",
    "comparisons",
    "repos",
    "series",
    "envs",
    "inbox",
    "candidates",
    "tasksets",
    "annotations",
    "swe",
)
LAKE_PATH_SCANNED = ("evalrunner_assets", "lake", "resources", "sensors", "sql")
LAYOUT_FILE = "lake/layout.py"


def module_name(rel: str) -> str:
    parts = rel[: -len(".py")].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, rel: str) -> list[tuple[int, str]]:
    """(line, module) for every import in ``source`` (a file at ``rel``), at any depth; for
    ``from m import a`` both ``m`` and ``m.a`` (``a`` may be a submodule)."""
    package = module_name(rel).split(".")
    if not rel.endswith("__init__.py"):
        package = package[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=rel)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names if alias.name != "*"]
    return found


def python_files(roots: tuple[str, ...]) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for r in roots for p in (ROOT / r).rglob("*.py"))


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def in_files(rel: str, prefixes: tuple[str, ...]) -> bool:
    return any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in prefixes)


def is_dagster(module: str) -> bool:
    top = module.split(".")[0]
    return top == "dagster" or top.startswith("dagster_")


def broken_rules(rel: str, module: str) -> list[str]:
    """Why ``rel`` may not import ``module`` (empty when it may)."""
    why = []
    if is_dagster(module):
        if any(part.startswith("_") for part in module.split(".")[1:]):
            why.append("a private Dagster module (use the public API)")
        if module.split(".")[0] == "dagster_pipes":
            if not in_files(rel, tuple(DAGSTER_PIPES_HOMES)):
                why.append("dagster_pipes belongs to the pod wrapper only")
        elif not in_files(rel, tuple(DAGSTER_HOMES)):
            why.append(f"Dagster outside the thin layer ({', '.join(DAGSTER_HOMES)})")
    if module_name(rel) in NEUTRAL and under(module, PROJECT):
        why.append("a neutral module imports nothing of the project")
    if not under(module, NEUTRAL):
        why += [
            reason for importers, forbidden, reason in NEVER if in_files(rel, importers) and under(module, forbidden)
        ]
    return why


def boundary_violations(files: dict[str, str]) -> list[str]:
    """Every broken rule in ``files`` (relative path -> source), once per import statement
    (``from m import a`` is read as ``m`` and ``m.a``)."""
    found: dict[tuple[str, int, str], str] = {}
    for rel, source in files.items():
        for line, module in imports_of(source, rel):
            for why in broken_rules(rel, module):
                found.setdefault((rel, line, why), f"{rel}:{line} imports {module}: {why}")
    return list(found.values())


def lake_path_literals(files: dict[str, str]) -> list[str]:
    """String constants (f-string parts included, docstrings not) that start like a lake path,
    outside the layout module."""
    prefixes = tuple(f"{d}/" for d in LAKE_TOP_DIRS)
    out = []
    for rel, source in files.items():
        if rel == LAYOUT_FILE:
            continue
        tree = ast.parse(source, filename=rel)
        skipped = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        # An f-string's parts are judged with the f-string, not again on their own.
        skipped |= {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                first = node.values[0] if node.values else None
                text = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
                text = node.value
            else:
                continue
            if text.startswith(prefixes):
                out.append(f"{rel}:{node.lineno} builds a lake path by hand ({text[:40]!r}); add it to {LAYOUT_FILE}")
    return out


def read(roots: tuple[str, ...]) -> dict[str, str]:
    return {rel: (ROOT / rel).read_text(encoding="utf-8") for rel in python_files(roots)}


def test_every_import_keeps_the_layering():
    found = boundary_violations(read(SCANNED))
    assert not found, "\n".join(found)


def test_lake_paths_are_built_only_in_the_layout_module():
    found = lake_path_literals(read(LAKE_PATH_SCANNED))
    assert not found, "\n".join(found)


def test_every_rule_names_places_that_exist():
    # A renamed package would otherwise leave a rule that checks nothing.
    paths = [*DAGSTER_HOMES, *DAGSTER_PIPES_HOMES, *DOMAIN, *(p for importers, _, _ in NEVER for p in importers)]
    assert [p for p in paths if not (ROOT / p).exists()] == []
    modules = [*THIN_AND_DRIVER, *NEUTRAL, *(m for _, forbidden, _ in NEVER for m in forbidden)]
    missing = [m for m in modules if not any((ROOT / f"{m.replace('.', '/')}{ext}").exists() for ext in ("", ".py"))]
    assert missing == []


# --- the checker itself, on small sources written here -------------------------------------


@pytest.mark.parametrize(
    ("rel", "source", "broken"),
    [
        ("evalrunner_assets/stats/_x.py", "def f():\n    from lake.layout import Window\n", "statistics are pure"),
        ("evalrunner_assets/stats/_x.py", "from ..execution import sandbox\n", "statistics are pure"),
        ("evalrunner_assets/execution/x.py", "from evalrunner_assets.stats import seeded_order\n", "deciding"),
        ("evalrunner_assets/execution/x.py", "def f():\n    import dagster as dg\n", "Dagster outside"),
        ("evalrunner_assets/execution/x.py", "from dagster_k8s import PipesK8sClient\n", "Dagster outside"),
        ("resources/x.py", "from dagster._core.pipes.client import PipesMessageReader\n", "private Dagster"),
        ("resources/x.py", "from evalrunner_assets.pipeline.facts import learn_commit\n", "resources are"),
        ("resources/x.py", "from evalrunner_assets import report\n", "resources are"),
        ("evalrunner_assets/pipeline/x.py", "from evalrunner_assets.simagent import SIMAGENT_PRICE\n", "engine"),
        ("lake/x.py", "import sensors.inbox\n", "bottom layer"),
        ("evalrunner_assets/report/x.py", "from resources.github import GitHubResource\n", "reaches up"),
        ("evalrunner_assets/gateway/x.py", "from dagster_pipes import open_dagster_pipes\n", "pod wrapper only"),
        ("evalrunner_assets/sample_order.py", "from lake import LAYOUT\n", "neutral module"),
    ],
)
def test_the_checker_reports_each_kind_of_violation(rel, source, broken):
    found = boundary_violations({rel: source})
    assert any(broken in f for f in found), found


def test_the_checker_accepts_the_arrows_that_are_allowed():
    allowed = {
        "evalrunner_assets/stats/_x.py": "from evalrunner_assets.sample_order import seeded_order\n",
        "lake/ingest.py": "from evalrunner_assets.sample_digest import digest_of_sample\n",
        "evalrunner_assets/pipeline/x.py": "from evalrunner_assets.stats import decide_task\nfrom lake import LAYOUT\n",
        "resources/x.py": "import dagster as dg\nfrom evalrunner_assets.execution.repo import export_commit\n",
        "evalrunner_assets/execution/pod_wrapper.py": "def f():\n    from dagster_pipes import open_dagster_pipes\n",
        "evalrunner_assets/driver.py": "import dagster as dg\n",
    }
    assert boundary_violations(allowed) == []


def test_the_lake_path_check_sees_literals_and_f_strings_but_not_docstrings():
    source = '"""Records live in batches/<repo>/..."""\n\ndef f(rel):\n    return f"failures/{rel}", "comparisons/x"\n'
    found = lake_path_literals({"evalrunner_assets/pipeline/x.py": source})
    assert [f.split(" builds")[0] for f in found] == ["evalrunner_assets/pipeline/x.py:4"] * 2
    assert lake_path_literals({LAYOUT_FILE: source}) == []
