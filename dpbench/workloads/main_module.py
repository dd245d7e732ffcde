"""What the worker processes see of the main module, read from its source before any of them starts.

dpbench starts workers with forkserver or spawn. Each worker runs the main script again (as
``__mp_main__``, so ``if __name__ == "__main__":`` blocks are skipped) before it unpickles
anything, and finds functions of ``__main__`` there by name. Two mistakes follow, both seen
only as a dead worker otherwise: launching from unguarded module-level code (every worker
launches again) and a factory defined inside the guard (the workers never define it).
Both are read off the script's syntax tree; where the source cannot be read the answer is
"unknown" and nothing is refused.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
from functools import lru_cache
from types import FrameType

__all__ = [
    "GUARD",
    "main_is_reimported",
    "line_is_guarded",
    "unguarded_main_line",
    "importing_main_in_worker",
    "definition_is_guarded",
    "refuse_unguarded_launch",
]

GUARD = 'if __name__ == "__main__":'


def main_is_reimported() -> bool:
    """Whether spawned workers run the main module again (multiprocessing.spawn's own rule)."""
    main = sys.modules.get("__main__")
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name is not None:
        # `python -m pkg` runs pkg/__main__.py, which the workers skip.
        return spec_name != "__main__" and not spec_name.endswith(".__main__")
    path = getattr(main, "__file__", None)
    # No file: `python -c`, stdin, a REPL. IPython's launcher is skipped by name.
    return path is not None and os.path.splitext(os.path.basename(path))[0] != "ipython"


def line_is_guarded(filename: str, lineno: int) -> bool | None:
    """Whether module-level line ``lineno`` of ``filename`` lies inside an ``if`` on ``__name__``.

    None when the source cannot be read or parsed.
    """
    guards = _guarded_statements(filename)
    if guards is None:
        return None
    return any(start <= lineno <= end for start, end in guards)


def unguarded_main_line() -> tuple[str, int] | None:
    """``(file, line)`` of the main module's module-level code on the call stack, if unguarded there.

    None when the main module is not on the stack (pytest, notebooks), the workers do not
    import it, the line is guarded, or the source is unreadable.
    """
    if not main_is_reimported():
        return None
    frame = _main_module_frame("__main__")
    if frame is None:
        return None
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    return (filename, lineno) if line_is_guarded(filename, lineno) is False else None


def importing_main_in_worker() -> bool:
    """Whether this process is a worker running the main module again (``__mp_main__``) right now."""
    return _main_module_frame("__mp_main__") is not None


def definition_is_guarded(name: str) -> bool | None:
    """Whether every module-level binding of ``name`` in the main script is inside an ``if __name__`` block.

    False when one binding is not (the workers define the name), None when unknown (no
    readable source, or no binding found: defined in a way the syntax tree does not show).
    """
    main = sys.modules.get("__main__")
    filename = getattr(main, "__file__", None)
    if filename is None:
        return None
    bindings = _module_bindings(filename)
    if bindings is None or name not in bindings:
        return None
    return all(line_is_guarded(filename, line) for line in bindings[name])


def _main_module_frame(module_name: str) -> FrameType | None:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == module_name:
            return frame
        frame = frame.f_back
    return None


@lru_cache(maxsize=16)
def _tree(filename: str) -> ast.Module | None:
    lines = linecache.getlines(filename)
    if not lines:
        return None
    try:
        return ast.parse("".join(lines), filename=filename)
    except (SyntaxError, ValueError):
        return None


def _module_level(body: list[ast.stmt], guarded: bool = False):
    """Every statement that runs at module level, with whether an ``if`` on ``__name__`` encloses it."""
    for stmt in body:
        yield stmt, guarded
        inner = guarded or (isinstance(stmt, ast.If) and _mentions_name(stmt.test))
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # their bodies do not run at import
        for field in ("body", "orelse", "finalbody"):
            yield from _module_level(getattr(stmt, field, []), inner)
        for handler in getattr(stmt, "handlers", []):
            yield from _module_level(handler.body, inner)
        for case in getattr(stmt, "cases", []):
            yield from _module_level(case.body, inner)


def _mentions_name(test: ast.expr) -> bool:
    # Any test on __name__ counts: a false "guarded" only leaves the old behaviour, while a
    # false "unguarded" would refuse a script that works.
    return any(isinstance(node, ast.Name) and node.id == "__name__" for node in ast.walk(test))


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", [])
    return min([stmt.lineno] + [d.lineno for d in decorators])


def _guarded_statements(filename: str) -> list[tuple[int, int]] | None:
    tree = _tree(filename)
    if tree is None:
        return None
    return [
        (_first_line(stmt), stmt.end_lineno or stmt.lineno) for stmt, guarded in _module_level(tree.body) if guarded
    ]


def _module_bindings(filename: str) -> dict[str, list[int]] | None:
    """Names bound by module-level ``def``, ``class``, import and assignment, with their lines."""
    tree = _tree(filename)
    if tree is None:
        return None
    bindings: dict[str, list[int]] = {}
    for stmt, _ in _module_level(tree.body):
        names: list[str] = []
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [stmt.name]
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names = [(alias.asname or alias.name).split(".")[0] for alias in stmt.names]
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = [node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)]
        for name in names:
            bindings.setdefault(name, []).append(stmt.lineno)
    return bindings


def refuse_unguarded_launch(what: str = "dpbench.launch()") -> None:
    """Raise ``RuntimeError`` in one line when ``what`` runs where the workers would run it again.

    In the caller: module-level code of a main script that the workers import, outside the
    guard. In a worker: while it imports the main module (where starting processes fails).
    """
    site = unguarded_main_line()
    if site is not None:
        raise RuntimeError(
            f"{what} was called from module-level code of the main module ({site[0]}, line {site[1]}) without "
            f"`{GUARD}`: the worker processes import the main module, so each would run it again; "
            f"put the code that launches under `{GUARD}`"
        )
    if importing_main_in_worker():
        raise RuntimeError(
            f"{what} was called while a worker process imported the main module: the code that launches "
            f"must be under `{GUARD}`, which the workers skip"
        )
