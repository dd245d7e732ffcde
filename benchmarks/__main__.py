"""``python -m benchmarks NAME [ARGS]``: run the benchmark ``benchmarks/NAME.py`` with ARGS
(``--help`` for its own options); with no NAME, list the benchmarks with their first line."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def available() -> dict[str, str]:
    """Every benchmark (a module of this package with a ``main``) → its docstring's first line,
    read without importing it (most import torch)."""
    out = {}
    for path in sorted(HERE.glob("*.py")):
        if path.name.startswith("_"):
            continue
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            out[path.stem] = (ast.get_docstring(tree) or "").split("\n")[0]
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    names = available()
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m benchmarks NAME [ARGS]   (python -m benchmarks NAME --help: its options)\n")
        width = max(map(len, names))
        for name, line in names.items():
            print(f"  {name:<{width}}  {line}")
        return 0
    name, rest = args[0], args[1:]
    if name not in names:
        print(f"benchmarks: NAME: expected one of {', '.join(names)}, found {name!r}", file=sys.stderr)
        return 2
    sys.argv[0] = f"python -m benchmarks {name}"  # the name argparse gives in its usage and errors
    return importlib.import_module(f"benchmarks.{name}").main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
