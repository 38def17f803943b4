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

# The rules name folders: a module's layer is the folder it stands in. The code location's
# three top-level modules (definitions, partitions, jobs) stay where `dagster dev` and the
# `[tool.dagster]` table look for them.

# The thin layer: Dagster's own objects over the domain.
THIN_LAYER: dict[str, str] = {
    "evalrunner_assets/assets/": "thin Dagster assets over the domain",
    "evalrunner_assets/definitions.py": "the code location",
    "evalrunner_assets/partitions.py": "the named partition sets",
    "evalrunner_assets/jobs.py": "the defined jobs",
    "sensors/": "the Dagster sensors and schedules",
    "resources/": "ConfigurableResources, and the Kubernetes Pipes launcher",
}
# The one other layer that imports Dagster: it runs the engine for the CLI and the run API and
# records the work in Dagster (the local instance, partitions, runs). The `evalrunner` command
# itself (cli/) imports none.
DRIVER_LAYER: dict[str, str] = {
    "evalrunner_assets/driver/": "the driver layer: the CLI's and the run API's runs on the Dagster instance",
}
# Where `dagster` / `dagster_*` may be imported, and why.
DAGSTER_HOMES: dict[str, str] = {
    **THIN_LAYER,
    **DRIVER_LAYER,
    "bench/": "benchmarks: compare_overhead times the Dagster-recorded path against bare Inspect",
}
# Folders that must never import Dagster, though they sit next to the layers that do.
NO_DAGSTER: dict[str, str] = {
    "evalrunner_assets/github/": "the GitHub inbox is domain logic: the receiver and the sensors share it",
    "evalrunner_assets/http/": "the HTTP apps (webhook receiver, SWE run API, web pages) serve requests without Dagster",
    "evalrunner_assets/wild/": "evals from the wild run in the reporter's environment and its product: no Dagster",
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
    "evalrunner_assets/documents/",
    "evalrunner_assets/execution/",
    "evalrunner_assets/gateway/",
    "evalrunner_assets/pipeline/",
    "evalrunner_assets/report/",
    "evalrunner_assets/swe/",
    "evalrunner_assets/wild/",
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
    "evalrunner_assets.http",  # the HTTP apps sit with the CLI: entry points over the domain
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
    (
        ("evalrunner_assets/documents/",),
        (
            "evalrunner_assets.pipeline",
            "evalrunner_assets.report",
            "evalrunner_assets.gateway",
            "evalrunner_assets.execution",
            "lake",
        ),
        "documents are the shapes the engine writes and the report reads: below both, they own no behaviour",
    ),
    (DOMAIN, THIN_AND_DRIVER, "the domain never reaches up into the Dagster wiring or the CLI"),
]

# Standard-library leaves that several layers share and none owns; any file may import them,
# and they import nothing of the project (checked below).
NEUTRAL = (
    "evalrunner_assets.sample_digest",
    "evalrunner_assets.sample_order",
    "evalrunner_assets.discovery_error",
    "evalrunner_assets.pricing",  # the price table: the engine, the gateway and the example model
    "evalrunner_assets.errors",  # the exception root and its families, and the exit codes
    "evalrunner_assets.home",  # where evalrunner's home, the lake and the Dagster instance are
    "evalrunner_assets.lake_settings",  # the lake's environment variables, defined once
    "evalrunner_assets.env_settings",  # what a setting read from the environment is
)
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
            why.append(f"Dagster outside the thin layer and the driver ({', '.join(DAGSTER_HOMES)})")
        for folder, reason in NO_DAGSTER.items():
            if in_files(rel, (folder,)):
                why.append(f"Dagster in {folder}: {reason}")
    if module_name(rel) in NEUTRAL and under(module, PROJECT) and not under(module, NEUTRAL):
        why.append("a neutral module imports nothing of the project but other neutral modules")
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


# --- no import cycles, no other package's private modules or names -------------------------


def package_of(rel: str) -> str:
    """The package a file belongs to (a package's ``__init__`` belongs to the package itself)."""
    name = module_name(rel)
    return name if rel.endswith("__init__.py") else name.rpartition(".")[0]


def import_targets(source: str, rel: str, modules: set[str]) -> list[tuple[int, str]]:
    """(line, module) for every import in ``source``, at any depth, resolved to the module of
    ``modules`` that holds what it names: ``import a.b.c`` is ``a.b.c``; ``from a.b import c`` is
    ``a.b.c`` when that is a module, else ``a.b`` (a package's ``__init__`` when ``a.b`` is a
    package). Imports of nothing in ``modules`` are left out."""

    def holder(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    package = package_of(rel).split(".")
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=rel)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, holder(alias.name)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if sub in modules else holder(base)))
    return [(line, target) for line, target in found if target]


def module_graph(files: dict[str, str]) -> dict[str, dict[str, str]]:
    """module -> {module it imports: where (``file:line``, the first such import)}."""
    names = {module_name(rel): rel for rel in files}
    graph: dict[str, dict[str, str]] = {m: {} for m in names}
    for rel, source in files.items():
        me = module_name(rel)
        for line, target in import_targets(source, rel, set(names)):
            if target != me:
                graph[me].setdefault(target, f"{rel}:{line}")
    return graph


def strongly_connected(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The sets of modules that reach each other (Tarjan), those of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def shortest_path(graph: dict[str, dict[str, str]], start: str, goal: str, within: set[str]) -> list[str]:
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w in within and w not in paths:
                    paths[w] = [*paths[v], w]
                    if w == goal:
                        return paths[w]
                    nxt.append(w)
        frontier = nxt
    return []


def import_cycles(files: dict[str, str]) -> list[str]:
    """Every import cycle, named module by module in import order with the line of each arrow:
    for each arrow inside a set of modules that reach each other, the shortest cycle through it
    (so every arrow that takes part in a cycle is on one reported)."""
    return cycles_of(module_graph(files))


def package_node(module: str) -> str:
    """The node of the package graph a module belongs to: ``evalrunner_assets.<package>`` for a
    package directory of ``evalrunner_assets`` (its subpackages included), a top-level module
    of ``evalrunner_assets`` (``cli``, ``errors``, ``home`` …) is its own node, and ``lake``,
    ``resources``, ``sensors`` and ``sql`` are one node each."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "evalrunner_assets" else parts[0]


def package_graph(files: dict[str, str]) -> dict[str, dict[str, str]]:
    """package -> {package it imports: where (``file:line``, the first such import)}, read from
    the module graph (function-level imports included)."""
    graph: dict[str, dict[str, str]] = {}
    for me, targets in sorted(module_graph(files).items()):
        mine = graph.setdefault(package_node(me), {})
        for target, where in sorted(targets.items(), key=lambda tw: _where_key(tw[1])):
            if package_node(target) != package_node(me):
                mine.setdefault(package_node(target), where)
    for targets in list(graph.values()):
        for target in targets:
            graph.setdefault(target, {})
    return graph


def _where_key(where: str) -> tuple[str, int]:
    rel, _, line = where.rpartition(":")
    return rel, int(line)


def package_cycles(files: dict[str, str]) -> list[str]:
    """Every cycle between packages, named as :func:`import_cycles` names module cycles, each
    arrow with one import line (the first in its importing package) that makes it."""
    return cycles_of(package_graph(files), "package cycle")


def cycles_of(graph: dict[str, dict[str, str]], kind: str = "import cycle") -> list[str]:
    """For each arrow inside a set of nodes that reach each other, the shortest cycle through
    it, named node by node in import order with the line of each arrow."""
    out: dict[tuple[str, ...], str] = {}
    for members in strongly_connected(graph):
        within = set(members)
        for u in members:
            for v in sorted(graph[u]):
                if v not in within:
                    continue
                cycle = [u, *shortest_path(graph, v, u, within)] if v != u else [u]
                # One name per cycle, whichever arrow found it: start at its smallest module.
                first = cycle[:-1].index(min(cycle[:-1]))
                ring = tuple(cycle[first:-1] + cycle[:first])
                arrows = [f"{a} ({graph[a][b]})" for a, b in zip(ring, ring[1:] + ring[:1])]
                out.setdefault(ring, f"{kind}: " + " -> ".join([*arrows, ring[0]]))
    return [out[ring] for ring in sorted(out)]


def private_imports(files: dict[str, str]) -> list[str]:
    """Imports of a private module (``_name.py``) or a private name (``_name``) that lives in
    another package. Within one package, siblings' private names are free to use, and so are
    they to the package's own subpackages (``execution/kubernetes/`` is part of ``execution``)."""
    found: dict[tuple[str, int, str], str] = {}
    for rel, source in files.items():
        mine = package_of(rel)
        for line, module in imports_of(source, rel):
            if not under(module, PROJECT):
                continue
            parts = module.split(".")
            for i, part in enumerate(parts[1:], start=1):
                if not part.startswith("_") or (part.startswith("__") and part.endswith("__")):
                    continue
                # A private module, or a private name in a package's __init__, is its package's;
                # a private name in a module is the package that module is in.
                owner = parts[:i] if (ROOT / "/".join(parts[:i])).is_dir() else parts[: i - 1]
                if not under(mine, (".".join(owner),)):
                    private = ".".join(parts[: i + 1])
                    found.setdefault(
                        (rel, line, private),
                        f"{rel}:{line} imports {private}, private to {'.'.join(owner)}: "
                        "use (or add) that package's public name",
                    )
                break
    return list(found.values())


def read(roots: tuple[str, ...]) -> dict[str, str]:
    return {rel: (ROOT / rel).read_text(encoding="utf-8") for rel in python_files(roots)}


def test_every_import_keeps_the_layering():
    found = boundary_violations(read(SCANNED))
    assert not found, "\n".join(found)


def test_lake_paths_are_built_only_in_the_layout_module():
    found = lake_path_literals(read(LAKE_PATH_SCANNED))
    assert not found, "\n".join(found)


def test_no_module_imports_itself_round_a_cycle():
    # Function-level imports count: a cycle deferred into a function is still a cycle.
    found = import_cycles(read(PROJECT))
    assert not found, "\n".join(found)


# Package cycles not yet broken: (the packages of the cycle in its reported order, why it stays).
# Empty: every package cycle found when this rule was added has been removed.
ALLOWED_PACKAGE_CYCLES: dict[tuple[str, ...], str] = {}


def test_no_package_imports_itself_round_a_cycle():
    # Packages are layers: if two reach each other (function-level imports included), neither
    # is below the other. A failure names the cycle and, per arrow, one import that makes it.
    found = [c for c in package_cycles(read(PROJECT)) if _ring_of(c) not in ALLOWED_PACKAGE_CYCLES]
    assert not found, "\n".join(found)


def test_every_allowed_package_cycle_still_exists():
    # A cycle that was broken comes off the allow-list, so it cannot come back unnoticed.
    present = {_ring_of(c) for c in package_cycles(read(PROJECT))}
    assert [ring for ring in ALLOWED_PACKAGE_CYCLES if ring not in present] == []


def _ring_of(cycle: str) -> tuple[str, ...]:
    return tuple(arrow.split(" (")[0] for arrow in cycle.split(": ", 1)[1].split(" -> ")[:-1])


def test_no_package_imports_another_packages_private_modules_or_names():
    # What ships; the benchmarks, like the tests, time internals and may reach them.
    found = private_imports(read(PROJECT))
    assert not found, "\n".join(found)


def test_every_rule_names_places_that_exist():
    # A renamed package would otherwise leave a rule that checks nothing.
    paths = [
        *DAGSTER_HOMES,
        *DAGSTER_PIPES_HOMES,
        *NO_DAGSTER,
        *DOMAIN,
        *(p for importers, _, _ in NEVER for p in importers),
    ]
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
        ("lake/x.py", "import sensors.pr\n", "bottom layer"),
        ("evalrunner_assets/report/x.py", "from resources.github import GitHubResource\n", "reaches up"),
        ("evalrunner_assets/gateway/x.py", "from dagster_pipes import open_dagster_pipes\n", "pod wrapper only"),
        ("evalrunner_assets/sample_order.py", "from lake import LAYOUT\n", "neutral module"),
        ("evalrunner_assets/github/x.py", "import dagster as dg\n", "Dagster in evalrunner_assets/github/"),
        ("evalrunner_assets/http/x.py", "def f():\n    from dagster import DagsterInstance\n", "Dagster in"),
        ("evalrunner_assets/cli/x.py", "import dagster as dg\n", "Dagster outside"),
        ("evalrunner_assets/stats/_x.py", "from evalrunner_assets.http import webhook\n", "reaches up"),
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
        "evalrunner_assets/driver/comparison.py": "import dagster as dg\n",
        "evalrunner_assets/http/webhook.py": "from evalrunner_assets.github.inbox import read_inbox\n",
    }
    assert boundary_violations(allowed) == []


def test_only_the_thin_layer_and_the_driver_may_import_dagster():
    # The product's Dagster homes are the thin layer and the driver folder, nothing else; the
    # folders that must not import it are neither.
    product = [home for home in DAGSTER_HOMES if not home.startswith("bench/")]
    assert sorted(product) == sorted([*THIN_LAYER, *DRIVER_LAYER])
    assert [f for f in NO_DAGSTER if in_files(f, tuple(DAGSTER_HOMES))] == []
    # Folders, not files, apart from the code location's three top-level modules.
    files = [home for home in DAGSTER_HOMES if not home.endswith("/")]
    assert sorted(files) == [
        "evalrunner_assets/definitions.py",
        "evalrunner_assets/jobs.py",
        "evalrunner_assets/partitions.py",
    ]


def test_the_lake_path_check_sees_literals_and_f_strings_but_not_docstrings():
    source = '"""Records live in batches/<repo>/..."""\n\ndef f(rel):\n    return f"failures/{rel}", "comparisons/x"\n'
    found = lake_path_literals({"evalrunner_assets/pipeline/x.py": source})
    assert [f.split(" builds")[0] for f in found] == ["evalrunner_assets/pipeline/x.py:4"] * 2
    assert lake_path_literals({LAYOUT_FILE: source}) == []


def test_the_cycle_check_names_each_cycle_in_order_hidden_ones_included():
    files = {
        "evalrunner_assets/stats/__init__.py": "from ._decide import decide\n",
        "evalrunner_assets/stats/_decide.py": "def decide():\n    from evalrunner_assets.stats import helper\n",
        "evalrunner_assets/report/a.py": "from . import b\n",
        "evalrunner_assets/report/b.py": "import evalrunner_assets.report.c\n",
        "evalrunner_assets/report/c.py": "def f():\n    from .a import x\n",
        "evalrunner_assets/report/d.py": "from .a import x\nfrom evalrunner_assets.stats import decide\n",
    }
    assert [c.split(": ", 1)[1] for c in import_cycles(files)] == [
        "evalrunner_assets.report.a (evalrunner_assets/report/a.py:1)"
        " -> evalrunner_assets.report.b (evalrunner_assets/report/b.py:1)"
        " -> evalrunner_assets.report.c (evalrunner_assets/report/c.py:2)"
        " -> evalrunner_assets.report.a",
        "evalrunner_assets.stats (evalrunner_assets/stats/__init__.py:1)"
        " -> evalrunner_assets.stats._decide (evalrunner_assets/stats/_decide.py:2)"
        " -> evalrunner_assets.stats",
    ]


def test_the_package_cycle_check_names_each_package_cycle_with_one_import_per_arrow():
    files = {
        "evalrunner_assets/gateway/__init__.py": "from ._gateway import G\n",
        "evalrunner_assets/gateway/_gateway.py": "from evalrunner_assets.pipeline.pricing import P\n",
        "evalrunner_assets/pipeline/__init__.py": "",
        "evalrunner_assets/pipeline/pricing.py": "P = 1\n",
        "evalrunner_assets/pipeline/engine.py": "import json\ndef f():\n    from evalrunner_assets.gateway import G\n",
        "evalrunner_assets/driver/comparison.py": "import lake\n",
        "lake/__init__.py": "from lake.x import y\n",
        "lake/x.py": "def f():\n    from evalrunner_assets.driver.comparison import z\n",
        "evalrunner_assets/stats/__init__.py": "import lake\nfrom evalrunner_assets.stats import _x\n",
        "evalrunner_assets/stats/_x.py": "from evalrunner_assets import stats\n",
    }
    assert [c.split(": ", 1)[1] for c in package_cycles(files)] == [
        "evalrunner_assets.driver (evalrunner_assets/driver/comparison.py:1) -> lake (lake/x.py:2)"
        " -> evalrunner_assets.driver",
        "evalrunner_assets.gateway (evalrunner_assets/gateway/_gateway.py:1)"
        " -> evalrunner_assets.pipeline (evalrunner_assets/pipeline/engine.py:3)"
        " -> evalrunner_assets.gateway",
    ]


def test_the_package_cycle_check_accepts_a_layered_tree():
    files = {
        "evalrunner_assets/pricing.py": "",
        "evalrunner_assets/gateway/_gateway.py": "from evalrunner_assets.pricing import P\n",
        "evalrunner_assets/pipeline/engine.py": "from evalrunner_assets.gateway import G\nfrom .series import s\n",
        "evalrunner_assets/pipeline/series.py": "def f():\n    from evalrunner_assets.pipeline import engine\n",
        "evalrunner_assets/cli.py": "def f():\n    from evalrunner_assets.pipeline import engine\n",
    }
    assert package_cycles(files) == []


def test_the_cycle_check_accepts_a_package_that_re_exports_its_submodules():
    files = {
        "evalrunner_assets/stats/__init__.py": "from ._decide import decide\nfrom . import _params\n",
        "evalrunner_assets/stats/_decide.py": "from evalrunner_assets.stats._params import P\nfrom ._params import Q\n",
        "evalrunner_assets/stats/_params.py": "P = Q = 1\n",
        "evalrunner_assets/report/a.py": "from evalrunner_assets.stats import decide\n",
    }
    assert import_cycles(files) == []


@pytest.mark.parametrize(
    "source",
    [
        "from evalrunner_assets.stats._decide import decide\n",
        "def f():\n    from evalrunner_assets.stats import _decide\n",
        "import evalrunner_assets.discovery._discover\n",
        "from evalrunner_assets.execution.kubernetes.backend import _checked_record\n",
        "from evalrunner_assets.stats import _private_helper\n",
        "from ..swe.runner import _run_one\n",
    ],
)
def test_the_private_check_reports_another_packages_private_modules_and_names(source):
    found = private_imports({"evalrunner_assets/pipeline/x.py": source})
    assert len(found) == 1 and "private to evalrunner_assets." in found[0], found


def test_the_private_check_accepts_siblings_and_public_names():
    allowed = {
        "evalrunner_assets/stats/__init__.py": "from ._decide import decide\nfrom . import _params\n",
        "evalrunner_assets/stats/_decide.py": "from evalrunner_assets.stats._params import _P\n",
        "evalrunner_assets/execution/x.py": "from .bubblewrap import _private\nfrom ._local import run\n",
        "evalrunner_assets/execution/kubernetes/x.py": "from .backend import _checked_record\nfrom .._local import run\n",
        "evalrunner_assets/pipeline/x.py": "from evalrunner_assets.stats import decide\nfrom __future__ import annotations\n",
    }
    assert private_imports(allowed) == []
