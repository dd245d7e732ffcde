"""Every entry point of ``benchmarks/``, ``validation/`` and ``tools/`` is run by a test (pyperf's
habit with its examples): a benchmark or a validation nobody runs rots silently, and the numbers on
the validation pages could then no longer be reproduced with the command beside them.

An entry point is a module of those homes with a top-level ``main``. A test runs it when it calls
that ``main`` (on a module it imported or bound by name: ``sim = importlib.import_module("X")``,
``from validation import X``), starts ``python -m X`` (a list holding ``"-m", "X"``), or names it
first in a case of a ``parametrize`` whose test calls ``importlib.import_module(module).main``. Read
with ``ast``, so a name in a comment or a docstring does not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOMES = ("benchmarks", "validation", "tools")


def entry_points(root: Path = ROOT) -> set[str]:
    """``home.module`` for every module of the homes with a top-level ``def main``."""
    out = set()
    for home in HOMES:
        for path in sorted((root / home).glob("*.py")):
            tree = ast.parse(path.read_text())
            if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
                out.add(home if path.stem == "__main__" else f"{home}.{path.stem}")
    return out


def _bindings(tree: ast.AST, known: set[str]) -> dict[str, str]:
    """Local names bound to an entry point's module: imports, and ``name = f("home.module")``."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in known:
                    bound[alias.asname or alias.name] = full
                elif node.module in known and alias.name == "main":
                    bound[alias.asname or "main"] = node.module + ":main"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and alias.asname:
                    bound[alias.asname] = alias.name
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            args = node.value.args
            if args and isinstance(args[0], ast.Constant) and args[0].value in known:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        bound[target.id] = args[0].value
    return bound


def _parametrized(tree: ast.AST, known: set[str]) -> set[str]:
    """Entry points named first in the cases of a ``parametrize`` on a test that calls
    ``importlib.import_module(<its argument>).main``."""
    out = set()
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        calls_main = any(
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "main"
            and isinstance(node.func.value, ast.Call)
            and isinstance(node.func.value.func, ast.Attribute)
            and node.func.value.func.attr == "import_module"
            for node in ast.walk(func)
        )
        if not calls_main:
            continue
        for deco in func.decorator_list:
            if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.func.attr == "parametrize":
                for case in ast.walk(deco):
                    first = None
                    if isinstance(case, ast.Tuple) and case.elts:
                        first = case.elts[0]
                    elif isinstance(case, ast.Call) and getattr(case.func, "attr", "") == "param" and case.args:
                        first = case.args[0]
                    if isinstance(first, ast.Constant) and first.value in known:
                        out.add(first.value)
    return out


def runs_in(source: str, known: set[str]) -> set[str]:
    """The entry points this test source runs."""
    tree = ast.parse(source)
    bound = _bindings(tree, known)
    out = _parametrized(tree, known)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "main":
                value = func.value
                if isinstance(value, ast.Name) and value.id in bound:
                    out.add(bound[value.id])
                elif isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Constant):
                    if value.args[0].value in known:  # importlib.import_module("X").main([...])
                        out.add(value.args[0].value)
            elif isinstance(func, ast.Name) and bound.get(func.id, "").endswith(":main"):
                out.add(bound[func.id].removesuffix(":main"))
        elif isinstance(node, (ast.List, ast.Tuple)):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            out.update(b for a, b in zip(items, items[1:]) if a == "-m" and b in known)
    return {name for name in out if ":" not in name}


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_every_entry_point_is_run_by_a_test():
    known = entry_points()
    assert len(known) > 25  # the homes were found
    run = set()
    for path in (ROOT / "tests").rglob("*.py"):
        run |= runs_in(path.read_text(), known)
    assert sorted(known - run) == []


def test_the_scan_finds_each_way_of_running_and_ignores_a_mention():
    known = {"validation.simulate_gate", "benchmarks.sharding", "tools.gen_docs", "validation.busy"}
    source = '''
import importlib
import subprocess, sys
from validation import simulate_gate

def test_a():
    simulate_gate.main(["--jobs", "1"])

def test_b():
    bench = importlib.import_module("benchmarks.sharding")
    bench.main([])

def test_c():
    subprocess.run([sys.executable, "-m", "tools.gen_docs", "--check"])

def test_d():
    """validation.busy is only named here."""
    importlib.import_module("validation.busy")
'''
    assert runs_in(source, known) == {"validation.simulate_gate", "benchmarks.sharding", "tools.gen_docs"}
    parametrized = """
import importlib, pytest

@pytest.mark.parametrize("module, argv", [("validation.busy", ["--trials", "1"]), pytest.param("tools.gen_docs", [])])
def test_runs(module, argv):
    assert importlib.import_module(module).main(argv) == 0

@pytest.mark.parametrize("module", [("benchmarks.sharding",)])
def test_only_imports(module):
    importlib.import_module(module)
"""
    assert runs_in(parametrized, known) == {"validation.busy", "tools.gen_docs"}
