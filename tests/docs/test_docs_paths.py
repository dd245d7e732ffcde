"""Every file or directory of this repository that a page names (`dpbench/…`, `tests/…`, `scripts/…`,
`benchmarks/…`, `validation/…`, `tools/…`, `suites/…`, `docs/…`, `.github/…`) exists, and so does every
module a page runs (`python -m validation.simulate_gate`): a moved or renamed file fails here until
the pages follow."""

from __future__ import annotations

import re

import pytest
from _docs_pages import README, ROOT, pages

_PATH = re.compile(r"`((?:dpbench|tests|scripts|benchmarks|validation|tools|suites|docs|\.github|\.ci)/[\w./-]*)`")
# A placeholder (`python -m validation.NAME`) is not a module: names are lower case.
_MODULE = re.compile(r"python -m ((?:benchmarks|validation|tools)(?:\.[a-z_][a-z0-9_]*)?)(?![\w.])")


def named_paths(text: str) -> set[str]:
    return {p.rstrip("/") for p in _PATH.findall(text)}


# Files a page tells the user to make (docs/ci.md: the GPU workflow's committed baseline run).
MADE_BY_THE_USER = {"benchmarks/baseline.json"}


def _module_exists(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


def missing(texts) -> list[str]:
    paths = {p for text in texts for p in named_paths(text) if not (ROOT / p).exists()} - MADE_BY_THE_USER
    modules = {m for text in texts for m in _MODULE.findall(text) if not _module_exists(m)}
    return sorted(paths | modules)


def test_every_named_path_exists():
    assert missing([README.read_text(), *pages().values()]) == []


def test_a_missing_path_is_found():
    assert missing(["see `dpbench/cli.py` and `dpbench/no_such_module.py`"]) == ["dpbench/no_such_module.py"]
    text = "run `python -m validation.simulate_gate`, `python -m benchmarks` and `python -m tools.no_such_tool`"
    assert missing([text]) == ["tools.no_such_tool"]


_DOTTED = re.compile(r"`(dpbench(?:\.\w+)+)")


def unresolved(names) -> list[str]:
    """The dotted names (`dpbench.measure.derive.derive`) that name no module or attribute."""
    import importlib

    bad = []
    for name in sorted(set(names)):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                bad.append(name)
            break
        else:
            bad.append(name)
    return bad


@pytest.mark.slow
def test_every_dotted_name_resolves():
    names = [n for text in [README.read_text(), *pages().values()] for n in _DOTTED.findall(text)]
    assert len(names) > 20
    assert unresolved(names) == []


def test_a_dotted_name_that_moved_is_found():
    assert unresolved(["dpbench.schema", "dpbench.schema.no_such_name"]) == ["dpbench.schema.no_such_name"]
