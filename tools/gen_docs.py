#!/usr/bin/env python3
"""Write the documentation's generated tables and facts from the code: `python -m tools.gen_docs`
rewrites them, `python -m tools.gen_docs --check` exits 1 when a page differs from what the code says
(what tests/docs/test_docs_generated.py runs; `--fast` leaves out the tables that start a pytest).

A generated table sits between `<!-- generated:NAME -->` and `<!-- end:generated:NAME -->`, each
marker on a line of its own, in its page. A generated fact (:func:`facts`: a claim level, a default)
sits between the same markers inside one line, anywhere in the README or a page of docs/, as often as
the text needs it: `at most <!-- generated:max-trials -->12<!-- end:generated:max-trials --> a case`.
A fact written as code (`` `12` ``) stays code. Everything else on a page is written by hand.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def options_table() -> str:
    """Every strategy option with its default and its field docstring, as the dataclasses declare them."""
    from dpbench.strategies import CommonOptions, describe_options, get_strategy, list_strategies
    from dpbench.strategies._options import CompileOptions

    rows = ["| strategy | option | default | what it does |", "|---|---|---|---|"]
    shared = describe_options(CommonOptions)
    shared_names = {option.name for option in shared}
    for option in shared:
        rows.append(f"| every strategy | `{option.name}` | `{option.default!r}` | {_cell(option.doc)} |")
    compiling = [n for n in list_strategies() if issubclass(get_strategy(n).options_type, CompileOptions)]
    compile_names = {o.name for o in describe_options(CompileOptions)} - shared_names
    for option in describe_options(CompileOptions):
        if option.name in compile_names:
            names = ", ".join(f"`{n}`" for n in compiling)
            rows.append(f"| {names} | `{option.name}` | `{option.default!r}` | {_cell(option.doc)} |")
    for name in list_strategies():
        own = [
            o for o in describe_options(get_strategy(name).options_type) if o.name not in shared_names | compile_names
        ]
        if not own:
            rows.append(f"| `{name}` | — | | no options of its own |")
        for option in own:
            rows.append(f"| `{name}` | `{option.name}` | `{option.default!r}` | {_cell(option.doc)} |")
    return "\n".join(rows)


# Loaded into the collecting pytest (-p): each collected item, its skip mark and its case, as JSON lines.
_CASES_PLUGIN = """
import json


def pytest_collection_finish(session):
    for item in session.items:
        mark = item.get_closest_marker("skip")
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        row = {"suite": item.path.name, "skip": mark and (mark.kwargs.get("reason") or "skipped")}
        if hasattr(case, "strategy") and hasattr(case, "options"):
            row.update(strategy=case.strategy, options=case.options, world_size=case.world_size,
                       global_batch=case.global_batch)
        print("CASE " + json.dumps(row))
"""
# The machine the quick-profile table describes: a CPU with two cores (world sizes 1 and 2).
QUICK_CPU_ENV = {"DPBENCH_PROFILE": "quick", "DPBENCH_DEVICE": "cpu", "DPBENCH_WORLD_SIZES": "1,2"}


def collected_quick_cases() -> list[dict]:
    """What ``pytest suites/ --collect-only`` collects with the quick profile on a 2-core CPU: per
    test its suite file, its skip mark's reason and its training case (strategy, options, sizes)."""
    import json
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as plugin_dir:
        Path(plugin_dir, "_dpbench_collected_cases.py").write_text(_CASES_PLUGIN)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DPBENCH_", "PYTEST_"))}
        env.update(QUICK_CPU_ENV, CUDA_VISIBLE_DEVICES="")
        env["PYTHONPATH"] = os.pathsep.join([plugin_dir, str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "suites/", "--collect-only", "-q", "-p", "no:cacheprovider"]
            + ["-p", "_dpbench_collected_cases"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    if proc.returncode != 0:
        raise SystemExit(f"gen_docs: pytest suites/ --collect-only failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return [json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("CASE ")]


def _skip_reason_on_cpu(row: dict) -> str | None:
    """Why the test of ``row`` is skipped on the CPU machine: its mark, or the strategy's refusal
    of its options or its placement there (what ``dpbench.launch`` checks before it starts a worker)."""
    if row["skip"]:
        return row["skip"]
    if "strategy" not in row:
        return None
    from dpbench.strategies import StrategyUnavailable, get_strategy

    strategy = get_strategy(row["strategy"])
    sizes = {"world_size": row["world_size"], "global_batch": row["global_batch"]}
    try:
        options = strategy.parse_options(row["options"], device="cpu", **sizes)
        strategy.placement(world_size=row["world_size"], device="cpu", options=options)
    except StrategyUnavailable as exc:
        return str(getattr(exc, "reason", exc))
    return None


def quick_profile_table() -> str:
    """Per suite: the tests ``pytest suites/`` collects with the quick profile on a 2-core CPU, and
    those skipped there, with their reasons' first words."""
    rows = collected_quick_cases()
    suites: dict[str, list[str | None]] = {}
    for row in rows:
        suites.setdefault(row["suite"], []).append(_skip_reason_on_cpu(row))
    lines = ["| suite file | tests | skipped on a CPU | why |", "|---|---|---|---|"]
    for suite, reasons in sorted(suites.items()):
        why: dict[str, int] = {}
        for reason in filter(None, reasons):
            short = reason.split(":")[0].split(" (")[0]
            why[short] = why.get(short, 0) + 1
        said = "; ".join(f"{text} (×{n})" if n > 1 else text for text, n in why.items())
        lines.append(f"| `{suite}` | {len(reasons)} | {sum(why.values())} | {_cell(said)} |")
    skipped = sum(1 for reasons in suites.values() for reason in reasons if reason)
    lines.append(f"| **all** | **{len(rows)}** | **{skipped}** | |")
    return "\n".join(lines)


# page (relative to docs/) -> {table name: generator}
def _summary(package: str) -> str:
    """The first sentence of a package's docstring, without its name and Sphinx roles."""
    import ast

    doc = ast.get_docstring(ast.parse((ROOT / "dpbench" / package / "__init__.py").read_text())) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    text = re.sub(rf"^(dpbench\.)?{package}:\s*", "", text)
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
    end = re.search(r"(?<=[a-z)`])\.(\s|$)", text)
    return (text[: end.start()] if end else text).rstrip(".") + "."


def packages_table() -> str:
    """The package map in layer order, from the layout test's layers and each package's docstring:
    the page cannot drift from the house rules the tests enforce."""
    from tests.test_layout import FOUNDATION, LAYERS

    rows = ["| layer | package | what it owns |", "|---|---|---|"]
    rows += [f"| {i} | `dpbench/{name}/` | {_cell(_summary(name))} |" for i, name in enumerate(LAYERS, 1)]
    foundation = ", ".join(f"`{name.removeprefix('dpbench.')}`" for name in sorted(FOUNDATION))
    rows += [
        "",
        f"Layers, lowest first: {' < '.join(f'`{name}`' for name in LAYERS)} (< `cli`). A package imports "
        f"only the layers below it and the root helpers ({foundation}).",
    ]
    return "\n".join(rows)


def _design():
    """The sequential design ``dpbench run`` uses by default (trials until settled, the default maximum)."""
    from dpbench.decision.sequential import DEFAULT_MAX_TRIALS, plan_looks

    return plan_looks(DEFAULT_MAX_TRIALS)


def _default_budget() -> str:
    from dpbench.measure.settings import duration_text, parse_budget
    from dpbench.runner.run import DEFAULT_BUDGET

    return duration_text(parse_budget("budget", DEFAULT_BUDGET))


def _default_profile(*, cuda: bool) -> str:
    from dpbench.measure.profiles import resolve_profile

    return resolve_profile(cuda_count=int(cuda), cpu_count=2, environ={}).name.value


def _suites(names) -> str:
    return ", ".join(f"`{name}`" for name in names)


def plan_line_sample() -> str:
    """The plan line ``dpbench run`` prints after its second pass, for 24 cases of ~5 minutes a pass
    at the default maximum and budget."""
    from dpbench.measure.settings import parse_budget
    from dpbench.measure.settle import Settling
    from dpbench.runner.run import DEFAULT_BUDGET

    design = Settling.design(budget_s=parse_budget("budget", DEFAULT_BUDGET))
    line = design.plan_line(cases=24, pass_s=300.0, elapsed_s=540.0)
    return f"```\ndpbench: {line}\n```"


def facts() -> dict[str, Callable[[], str]]:
    """Facts a sentence states inline (claim levels, defaults), each from the constant the code uses."""
    from dpbench.decision.claims import CLAIM_LEVEL
    from dpbench.decision.sequential import DEFAULT_MAX_TRIALS
    from dpbench.decision.text import LABEL_WIDTH, and_joined
    from dpbench.report.text import TERMINAL_LINES
    from dpbench.runner.config import SUITES, WORKLOAD_SUITES
    from dpbench.runner.run import DEFAULT_BUDGET
    from dpbench.stats import MIN_PAIRS, SHOWN_CONFIDENCE

    return {
        # the level of every question's claims, the chance of a false one it leaves, and the looks of
        # trials until settled it is split over
        "claim-level": lambda: f"{CLAIM_LEVEL:.0%}",
        "claim-error": lambda: f"{1 - CLAIM_LEVEL:.0%}",
        "shown-level": lambda: f"{SHOWN_CONFIDENCE:.0%}",
        "fewest-trials": lambda: str(MIN_PAIRS),
        "first-look": lambda: str(_design().min_trials),
        "looks": lambda: and_joined([str(n) for n in _design().looks]),
        "look-count": lambda: str(len(_design().looks)),
        # the defaults of dpbench run
        "max-trials": lambda: str(DEFAULT_MAX_TRIALS),
        "budget": _default_budget,
        "budget-option": lambda: DEFAULT_BUDGET,
        "workload-suites": lambda: _suites(WORKLOAD_SUITES),
        "suites-not-run": lambda: _suites(s for s in SUITES if s not in WORKLOAD_SUITES),
        "suites": lambda: _suites(SUITES),
        # how a line names a workload spec too long to read in it
        "label-width": lambda: str(LABEL_WIDTH),
        "terminal-lines": lambda: str(TERMINAL_LINES),
        "profile-with-cuda": lambda: _default_profile(cuda=True),
        "profile-without-cuda": lambda: _default_profile(cuda=False),
        "profile-trials": lambda: str(_profile_trials()),
    }


def _profile_trials() -> int:
    """The fixed design's trials per case: the profile's (the same in both)."""
    from dpbench.measure.profiles import resolve_profile

    trials = {resolve_profile(name, cuda_count=0, cpu_count=2, environ={}).trials for name in ("quick", "full")}
    if len(trials) != 1:
        raise SystemExit(f"gen_docs: the profiles' trials differ ({sorted(trials)}): name each in the docs")
    return trials.pop()


GENERATED: dict[str, dict[str, Callable[[], str]]] = {
    "docs/architecture.md": {"packages": packages_table},
    "docs/cli.md": {"plan-line": plan_line_sample},
    "docs/strategies.md": {"options": options_table},
    "docs/suites.md": {"quick-profile": quick_profile_table},
}
"""Page (relative to the repository) -> {table name: generator}."""
# Tables whose generator starts a pytest (seconds): `--fast` leaves them out.
SLOW_TABLES = ("quick-profile",)


_INLINE = re.compile(r"<!-- generated:([\w-]+) -->([^\n]*?)<!-- end:generated:\1 -->")


def render_facts(text: str, known: dict[str, Callable[[], str]] | None = None) -> str:
    """``text`` with each inline generated fact replaced by what the code says now (in backticks
    where it was); a name that is no fact is an error. ``known``: the facts (default :func:`facts`)."""
    known = facts() if known is None else known
    unknown = sorted({m.group(1) for m in _INLINE.finditer(text)} - set(known))
    if unknown:
        raise SystemExit(f"gen_docs: no fact named {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values: dict[str, str] = {}

    def fact(match: re.Match) -> str:
        name, old = match.group(1), match.group(2)
        value = values.setdefault(name, known[name]())
        if "\n" in value:
            raise SystemExit(f"gen_docs: the fact {name} is more than one line: {value!r}")
        code = len(old) > 1 and old.startswith("`") and old.endswith("`") and "`" not in value
        new = f"`{value}`" if code else value
        return f"<!-- generated:{name} -->{new}<!-- end:generated:{name} -->"

    return _INLINE.sub(fact, text)


def fact_pages() -> list[str]:
    """The pages that may state a fact inline: the README and every page of docs/ (relative to the repository)."""
    return ["README.md", *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").rglob("*.md")))]


def render(text: str, tables: dict[str, Callable[[], str]]) -> str:
    """``text`` with each generated table replaced by what its generator writes now."""
    for name, make in tables.items():
        pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- end:generated:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"gen_docs: no <!-- generated:{name} --> ... <!-- end:generated:{name} --> block")
        table = make()
        text = pattern.sub(lambda m, table=table: m.group(1) + table + "\n" + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a page is not what the code generates")
    parser.add_argument(
        "--fast", action="store_true", help=f"leave out the tables that start a pytest ({', '.join(SLOW_TABLES)})"
    )
    args = parser.parse_args(argv)
    stale = []
    for page in dict.fromkeys([*GENERATED, *fact_pages()]):
        tables = {n: make for n, make in GENERATED.get(page, {}).items() if not (args.fast and n in SLOW_TABLES)}
        path = ROOT / page
        old = path.read_text()
        new = render_facts(render(old, tables))
        if new != old:
            stale.append(page)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(
            f"gen_docs: out of date with the code: {', '.join(stale)} (run python -m tools.gen_docs)", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
