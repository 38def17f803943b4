"""One exception root: every exception class the product defines subclasses ``EvalrunnerError``
(through a family when its exit code is not 1), and the one handler in ``cli.main`` maps the
families to exit codes 2 (input), 3 (outage), 130 (cancelled) and anything else to 1."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

from evalrunner_assets import errors
from evalrunner_assets.errors import Cancelled, EvalrunnerError, InputError, Outage, UserError, explain

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("evalrunner_assets", "lake", "resources", "sensors")


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        pkg = importlib.import_module(package)
        names.append(package)
        names += [
            m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}.") if not m.name.endswith("__main__")
        ]
    return names


def test_every_exception_class_the_product_defines_subclasses_the_root():
    found, outside = [], []
    for name in _modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != name or not issubclass(cls, BaseException):
                continue
            found.append(f"{name}.{cls.__qualname__}")
            if not issubclass(cls, EvalrunnerError):
                outside.append(f"{name}.{cls.__qualname__}")
    assert len(found) > 40, found  # the walk saw the product's classes
    assert outside == []


def test_the_source_defines_no_exception_class_the_import_walk_missed():
    """Read with ``ast`` too: a class nested in a function, or in a module the walk could not
    import, still names a base that is one of the product's classes or the root's families."""
    builtin_bases = {n for n in dir(__builtins__ if isinstance(__builtins__, dict) else __builtins__)}
    builtin_bases = {n for n in builtin_bases if n.endswith(("Error", "Exception", "Interrupt"))}
    bad = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ClassDef):
                    bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                    if bases and all(b in builtin_bases for b in bases):
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno} class {node.name}({', '.join(bases)})")
    assert bad == [], "subclass evalrunner_assets.errors' root or a family, with the built-in as a second base"


def test_classes_keep_the_built_in_they_subclassed():
    from evalrunner_assets.execution.repo import RepoError
    from evalrunner_assets.pipeline.engine import ComparisonCancelled, ComparisonStopped
    from lake.storage import LakeWriteError

    assert issubclass(RepoError, ValueError) and issubclass(RepoError, InputError)
    assert issubclass(LakeWriteError, RuntimeError) and issubclass(LakeWriteError, Outage)
    assert issubclass(ComparisonStopped, RuntimeError) and issubclass(ComparisonStopped, Outage)
    # A cancellation stays a KeyboardInterrupt and passes `except Exception`.
    assert issubclass(ComparisonCancelled, KeyboardInterrupt) and issubclass(ComparisonCancelled, Cancelled)
    assert not issubclass(ComparisonCancelled, Exception)


class _Input(InputError):
    hint = "fix it like so"


class _Down(Outage):
    pass


class _Stop(Cancelled):
    pass


class _Bug(EvalrunnerError, RuntimeError):
    pass


@pytest.mark.parametrize(
    ("exc", "code", "first"),
    [
        (_Input("bad --ref"), 2, "evalrunner compare: bad --ref"),
        (UserError("--set 'x' is not KEY=VALUE", command="candidates add"), 2, "evalrunner candidates add: --set"),
        (_Down("the lake is down"), 3, "evalrunner compare: the lake is down"),
        (_Stop(), 130, "evalrunner compare: cancelled"),
        (_Bug("oops"), 1, "evalrunner compare: unexpected _Bug: oops"),
        (ValueError("plain"), 1, "evalrunner compare: unexpected ValueError: plain"),
    ],
)
def test_each_family_has_its_exit_code(exc, code, first):
    explained = explain(exc, "compare")
    assert explained.exit_code == code
    assert explained.lines[0].startswith(first)


def test_the_handler_maps_a_raised_family_to_its_exit_code(monkeypatch, capsys):
    from evalrunner_assets import cli
    from evalrunner_assets.cli import lake

    for exc, code in ((_Input("bad"), 2), (_Down("down"), 3), (_Stop(), 130), (_Bug("bug"), 1)):

        def raising(args, exc=exc):
            raise exc

        monkeypatch.setattr(lake, "cmd_lake_verify", raising)
        monkeypatch.setattr(cli, "build_parser", _parser_with(lake))
        assert cli.main(["lake", "verify"]) == code
        assert capsys.readouterr().err.startswith("evalrunner lake: ")


def _parser_with(lake_module):
    import argparse

    def build() -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="evalrunner")
        parser.add_argument("--debug", action="store_true")
        sub = parser.add_subparsers(dest="command", required=True)
        p = sub.add_parser("lake")
        p.add_argument("lake_command")
        p.set_defaults(func=lambda args: lake_module.cmd_lake_verify(args))
        return parser

    return build


def test_errors_imports_nothing_of_the_other_packages():
    tree = ast.parse(Path(errors.__file__).read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    project = {m for m in imported if m and m.split(".")[0] in PACKAGES}
    # Leaves: where the home, the lake and the instance are, and the lake's variables.
    assert project <= {"evalrunner_assets.home"}


def test_serve_runs_the_code_location_pyproject_names():
    import tomllib

    from evalrunner_assets.cli import serve

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["dagster"]["module_name"] == serve.CODE_LOCATION_MODULE
    dg = pyproject["tool"]["dg"]
    assert dg["directory_type"] == "project"
    assert dg["project"]["code_location_target_module"] == serve.CODE_LOCATION_MODULE
    assert dg["project"]["code_location_name"] == pyproject["tool"]["dagster"]["code_location_name"]
    importlib.import_module(serve.CODE_LOCATION_MODULE).defs  # noqa: B018 - the attribute dagster loads
