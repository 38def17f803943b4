"""`python -m bench [name ...] [--flags]`: run the named benchmarks (default: all), each as
`bench.<name>`; flags (e.g. `--quick`) are passed to every benchmark's `main`."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import bench


def main(argv: list[str]) -> int:
    flags = [a for a in argv if a.startswith("-")]
    names = [a for a in argv if not a.startswith("-")] or sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__) if not m.name.startswith("_")
    )
    for name in names:
        print(f"== bench.{name} ==", flush=True)
        module = importlib.import_module(f"bench.{name}")
        module.main(flags)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
