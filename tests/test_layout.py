"""The house rules of dpbench's layout, checked on the source: no import cycles (between modules
or between packages), nothing imports a layer above it, the package root holds only the public
face, and every package says what it owns and may import.

Imports are read with ``ast`` from every module, including imports inside functions (a lazy
import is still a dependency) and the names a package loads lazily (``_LAZY`` maps).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "dpbench"

# Lowest first. A package may import only those before it (and the root helpers in FOUNDATION).
LAYERS = [
    "parallel",
    "workloads",
    "strategies",
    "sampler",
    "workers",
    "launcher",
    "cluster",
    "traces",
    "decision",
    "measure",
    "results",
    "history",
    "gate",
    "predict",
    "ab",
    "report",
    "runner",
    "commands",
]
FOUNDATION = {
    "dpbench.schema",
    "dpbench.stats",
    "dpbench.errors",
    "dpbench._lazy",
    "dpbench._atomic",
    "dpbench._children",
}
# The public face: what may sit directly in dpbench/ besides the packages.
ROOT_FILES = {
    "__init__.py",
    "cli.py",
    "schema.py",
    "demo.py",
    "stats.py",
    "errors.py",
    "_lazy.py",
    "_atomic.py",
    "_children.py",
}


def _modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(module: str, path: Path, node: ast.AST, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join(package + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    return names


def _lazy_targets(tree: ast.Module) -> list[str]:
    """The modules named as values of a module-level ``_LAZY = {...}`` dict."""
    out = []
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            out += [v.value for v in node.value.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the dpbench modules it imports (anywhere in its body)."""
    known = _modules(root)
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets = _lazy_targets(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets += _targets(module, path, node, known)
        for target in targets:
            while target and target not in known:  # `from dpbench.x import name` → dpbench.x
                target = target.rpartition(".")[0]
            if target and target != module:
                graph[module].add(target)
        graph.setdefault(module, set())
    return graph


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph.items():
        out.setdefault(package_of(source), set())
        for target in targets:
            if package_of(target) != package_of(source):
                out[package_of(source)].add(package_of(target))
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path ``[a, b, …, a]``, or None (iterative DFS with colours)."""
    colour: dict[str, int] = {}
    for start in sorted(graph):
        if colour.get(start):
            continue
        stack = [(start, iter(sorted(graph.get(start, ()))))]
        path = [start]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour.get(child) == 1:
                return path[path.index(child) :] + [child]
            elif not colour.get(child):
                colour[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_the_graph_sees_imports_inside_functions_relative_imports_and_lazy_maps(tmp_path: Path):
    pkg = tmp_path / "dpbench"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('_LAZY = {"launch": "dpbench.sub.b"}\n')
    (pkg / "sub" / "__init__.py").write_text("from . import a\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from dpbench.sub.b import g\n")
    (pkg / "sub" / "b.py").write_text("import dpbench\n")
    graph = import_graph(pkg)
    assert graph["dpbench"] == {"dpbench.sub.b"}
    assert graph["dpbench.sub"] == {"dpbench.sub.a"}
    assert graph["dpbench.sub.a"] == {"dpbench.sub.b"}
    assert find_cycle(graph) == ["dpbench", "dpbench.sub.b", "dpbench"]


def test_no_import_cycle_between_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_no_import_cycle_between_packages():
    cycle = find_cycle(package_graph(import_graph()))
    assert cycle is None, "import cycle between packages: " + " → ".join(cycle)


def test_nothing_imports_a_layer_above_it():
    rank = {f"dpbench.{name}": i for i, name in enumerate(LAYERS)}
    upward = []
    for source, targets in package_graph(import_graph()).items():
        if source not in rank:
            continue  # the public face (cli, demo, the root) sits above every layer
        for target in targets:
            allowed = target in FOUNDATION or rank.get(target, len(LAYERS)) < rank[source]
            if not allowed:
                upward.append(f"{source} imports {target}")
    assert not upward, "imports from a layer above: " + "; ".join(sorted(upward))


def test_the_foundation_imports_no_package():
    graph = import_graph()
    for module in FOUNDATION:
        assert graph[module] <= FOUNDATION, f"{module} imports {sorted(graph[module] - FOUNDATION)}"


def test_the_package_root_holds_only_the_public_face():
    files = {p.name for p in ROOT.glob("*.py")}
    assert files <= ROOT_FILES, f"unexpected modules in dpbench/: {sorted(files - ROOT_FILES)}"
    assert len(files) <= 9
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS), f"packages {sorted(packages)} vs the declared layers {LAYERS}"


@pytest.mark.parametrize("package", LAYERS)
def test_every_package_says_what_it_owns_and_may_import(package: str):
    doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text()))
    assert doc and "May import" in doc, f"dpbench/{package}/__init__.py needs a docstring with 'May import: …'"


def private_imports(root: Path = ROOT) -> list[str]:
    """``from dpbench.<a>… import _name`` (or a ``_private`` module) in a module of another package.

    The root's own helpers (``dpbench._lazy``, ``dpbench._atomic``: the FOUNDATION) are shared by
    every package by design; a package's private names are its own."""
    known = _modules(root)
    found = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                dotted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (node.module or "") if not node.level else _relative_base(module, path, node)
                dotted = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in dotted:
                owner = target
                while owner and owner not in known:
                    owner = owner.rpartition(".")[0]
                if not owner.startswith("dpbench.") or owner in FOUNDATION or package_of(owner) == package_of(module):
                    continue
                if any(part.startswith("_") and part != "__init__" for part in target.split(".")[1:]):
                    found.append(f"{module} imports {target}")
    return sorted(set(found))


def _relative_base(module: str, path: Path, node: ast.ImportFrom) -> str:
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = package[: len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def test_the_private_import_finder_finds_them(tmp_path: Path):
    pkg = tmp_path / "dpbench"
    for sub in ("a", "b"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "_hidden.py").write_text("X = 1\n")
    (pkg / "a" / "shown.py").write_text("_Y = 1\nZ = 2\n")
    (pkg / "a" / "inside.py").write_text("from dpbench.a._hidden import X\nfrom dpbench.a.shown import _Y\n")
    (pkg / "b" / "user.py").write_text(
        "from dpbench.a._hidden import X\ndef f():\n    from dpbench.a.shown import _Y, Z\n"
    )
    assert private_imports(pkg) == [
        "dpbench.b.user imports dpbench.a._hidden.X",
        "dpbench.b.user imports dpbench.a.shown._Y",
    ]


def test_no_package_imports_another_packages_private_name():
    found = private_imports()
    assert not found, "private names imported across packages: " + "; ".join(found)


# Size is a smell, not a cap: one concept, one module (GUIDE, habit 8). Past MAX_LINES a module holds a
# second concept; under MIN_LINES it must be a concept of its own, said here, or be merged into its
# neighbour. A package's face (``__init__.py``, ``__main__.py``), the suites and the scripts (one entry
# point a file) are exempt from the lower bound.
MAX_LINES = 600
MIN_LINES = 60
SMALL_CONCEPTS = {
    "dpbench/_lazy.py": "the lazy-attribute helper every package face uses",
    "dpbench/strategies/errors.py": "StrategyUnavailable, raised from anywhere a strategy cannot run",
    "dpbench/strategies/_cast.py": "CastInputs, FSDP mixed precision's compute-only twin",
    "dpbench/launcher/cluster.py": "the `python -m dpbench.launcher.cluster` alias of dpbench.cluster",
    "dpbench/runner/text.py": "the terminal decision dpbench run prints",
    "dpbench/workloads/_checks.py": "the workload factories' argument checks",
    "dpbench/workloads/_variants.py": "names of factory-built workloads (a saved identifier)",
    "dpbench/measure/plugin/selection.py": "which pytest sessions the plugin measures (light: every session asks)",
    "dpbench/measure/derive.py": "MFU, tokens/s, exposed communication from case metrics",
    "dpbench/cluster/parent_watch.py": "a rank's watch on its parent process",
    "dpbench/cluster/link.py": "the head-agent connection",
    "dpbench/traces/store.py": "where a session's trace files live until the run is saved",
    "dpbench/history/git.py": "commit order and links from git",
    "dpbench/sampler/errors.py": "the sampler's warnings and error log",
    "dpbench/parallel/timing.py": "phase marks that never stall the host",
    "dpbench/commands/runs.py": "the dpbench runs subcommand",
}


def _python_files() -> list[Path]:
    repo = ROOT.parent
    homes = ("dpbench", "suites", "benchmarks", "validation", "tools", "tests")
    return [p for d in homes for p in (repo / d).rglob("*.py")]


def test_no_python_file_is_over_600_lines():
    """A module past this holds a second concept: split it where the concepts part, not at a count."""
    repo = ROOT.parent
    files = _python_files()
    long = {str(p.relative_to(repo)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert len(files) > 100 and not long, f"over {MAX_LINES} lines: {long}"


def test_a_small_module_is_a_concept_of_its_own():
    """Under 60 lines a module is a concept of its own (named in SMALL_CONCEPTS) or a fragment to merge back."""
    repo = ROOT.parent
    small = {
        str(p.relative_to(repo))
        for p in ROOT.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py") and len(p.read_text().splitlines()) < MIN_LINES
    }
    assert small, "no small module at all: the check would not see one"
    unnamed = sorted(small - set(SMALL_CONCEPTS))
    assert not unnamed, f"under {MIN_LINES} lines and not named a concept in SMALL_CONCEPTS: {unnamed}"
    stale = sorted(set(SMALL_CONCEPTS) - small)
    assert not stale, f"SMALL_CONCEPTS names modules that are gone or no longer small: {stale}"


# A strategy's own logic lives in its file (GUIDE, habit 2): outside ``dpbench/strategies/`` no module
# branches on a strategy's name. Each exception is ``path: what`` (as the finder reports it, less the
# line) and says why it is one.
NAME_BRANCH_ALLOWED = {
    "dpbench/schema.py: StrategyName.SINGLE": "BASELINE_STRATEGY, the baseline role, defined beside the names",
    "dpbench/decision/model.py: dict key 'single'": "the decision's saved JSON field naming the baseline, no branch",
}


def strategy_name_branches(root: Path, names: set[str]) -> list[str]:
    """``path:line: what`` for each branch on a strategy's name in a module outside ``strategies/``:
    any ``StrategyName.<X>``, or a string literal equal to a name compared (``==``, ``!=``, ``in``,
    ``is``, ``match``) or used as a dict key."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root.parent).as_posix()
        if relative.startswith(f"{root.name}/strategies/"):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        uses = sorted((node.lineno, what) for node in ast.walk(tree) for what in _name_uses(node, names))
        found += [f"{relative}:{line}: {what}" for line, what in uses]
    return found


def _literal_names(node: ast.AST | None, names: set[str]) -> list[str]:
    """The strategy names ``node`` is, or holds as a tuple, list or set of literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for element in node.elts for n in _literal_names(element, names)]
    return []


def _name_uses(node: ast.AST, names: set[str]) -> list[str]:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "StrategyName":
        return [f"StrategyName.{node.attr}"]
    if isinstance(node, ast.Compare):
        return [f"compared with {n!r}" for side in (node.left, *node.comparators) for n in _literal_names(side, names)]
    if isinstance(node, ast.Dict):
        return [f"dict key {n!r}" for key in node.keys for n in _literal_names(key, names)]
    if isinstance(node, ast.MatchValue):
        return [f"matched with {n!r}" for n in _literal_names(node.value, names)]
    return []


def test_the_name_branch_finder_finds_them(tmp_path: Path):
    pkg = tmp_path / "dpbench"
    (pkg / "strategies").mkdir(parents=True)
    (pkg / "strategies" / "ddp.py").write_text('if strategy == "ddp":\n    pass\n')  # its own file: allowed
    (pkg / "a.py").write_text(
        "from dpbench.schema import StrategyName\n"
        "if s == StrategyName.FSDP.value:\n    pass\n"
        'if s in ("zero", "other"):\n    pass\n'
        'OVERLAP = {"allreduce": 1}\n'
        'NAMES = ("ddp", "zero")  # a tuple of names, no branch\n'
        'if "sharded" != s:\n    pass\n'
    )
    assert strategy_name_branches(pkg, {"ddp", "fsdp", "zero", "allreduce"}) == [
        "dpbench/a.py:2: StrategyName.FSDP",
        "dpbench/a.py:4: compared with 'zero'",
        "dpbench/a.py:6: dict key 'allreduce'",
    ]


def test_no_module_outside_strategies_branches_on_a_strategy_name():
    from dpbench.strategies import list_strategies

    found = {_without_line(f) for f in strategy_name_branches(ROOT, set(list_strategies()))}
    unexplained = sorted(found - set(NAME_BRANCH_ALLOWED))
    assert not unexplained, "strategy-name branches outside dpbench/strategies/: " + "; ".join(unexplained)
    stale = sorted(set(NAME_BRANCH_ALLOWED) - found)
    assert not stale, f"NAME_BRANCH_ALLOWED names what no module does any more: {stale}"


def _without_line(found: str) -> str:
    path, _, what = found.split(":", 2)
    return f"{path}:{what}"
