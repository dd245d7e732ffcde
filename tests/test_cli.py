"""The dpbench console script: subcommand wiring, exit codes, and clean errors on bad input."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

import dpbench.cli as cli
from dpbench.cli import main

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a fresh process, as `dpbench ...` would run (the package from this checkout)."""
    return subprocess.run(
        [sys.executable, "-m", "dpbench.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def minimal_run(path: Path, *, name: str = "test_a", schema: int | None = 2, median: float = 0.01) -> Path:
    """The smallest pytest-benchmark file dpbench accepts (what pytest-benchmark itself writes, trimmed):
    schema 2 with four trials, or a plain pytest-benchmark benchmark (``schema=None``)."""
    extra = {} if schema is None else {"schema": schema, "kind": "training", "strategy": "single"}
    trials = [median * f for f in (0.99, 1.0, 1.01, 1.005)]
    if schema is not None:
        extra.update(step_time_s=median, trials={"count": 4, "step_time_s": trials, "control_s": [0.004] * 4})
    data = [median * f for f in (0.99, 1.0, 1.01, 1.0, 0.995, 1.005)]
    doc = {
        "machine_info": {"node": "n"},
        "commit_info": {},
        "datetime": "2026-01-01T00:00:00",
        "version": "5.3.1",
        "benchmarks": [
            {
                "group": None,
                "name": name,
                "fullname": f"t.py::{name}",
                "params": None,
                "param": None,
                "extra_info": extra,
                "stats": {"median": median, "rounds": 6, "iqr": median * 0.01, "data": data},
            }
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_help_lists_the_subcommands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "report" in out and "compare" in out


def test_missing_subcommand_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "required" in capsys.readouterr().err


def test_a_subcommand_can_be_registered(monkeypatch, capsys):
    def register_hello(subparsers: argparse._SubParsersAction) -> None:
        p = subparsers.add_parser("hello")
        p.add_argument("--name", default="world")
        p.set_defaults(handler=lambda args: print(f"hello {args.name}") or 7)

    monkeypatch.setattr(cli, "SUBCOMMANDS", [*cli.SUBCOMMANDS, register_hello])
    assert main(["hello", "--name", "dp"]) == 7
    assert capsys.readouterr().out == "hello dp\n"


@pytest.mark.slow
def test_report_default_is_the_newest_run_per_machine(tmp_path: Path):
    minimal_run(tmp_path / "results" / "m1" / "0001_old.json", name="test_old")
    minimal_run(tmp_path / "results" / "m1" / "0002_new.json", name="test_new")
    proc = run_cli("report", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = Path(proc.stdout.strip())
    assert out == (tmp_path / "report.html").resolve() and out.is_file()
    text = out.read_text()
    assert "0002_new" in text and "0001_old" not in text


def _setup(kind: str, d: Path) -> list[str]:
    good = minimal_run(d / "results" / "m" / "0001_good.json")
    if kind == "missing path":
        return ["report", str(d / "nope.json")]
    if kind == "empty directory":
        (d / "empty").mkdir()
        return ["report", str(d / "empty")]
    if kind == "no results dir":
        return ["report", "--results", str(d / "none")]
    if kind == "corrupt json":
        (d / "c.json").write_text('{"benchmarks": [')
        return ["compare", str(good), str(d / "c.json")]
    if kind == "another tool's json":
        (d / "o.json").write_text(json.dumps({"compilerOptions": {"strict": True}}))
        return ["report", str(d / "o.json")]
    if kind == "newer schema":
        return ["report", str(minimal_run(d / "n.json", schema=99))]
    if kind == "older schema":
        return ["compare", str(good), str(minimal_run(d / "o.json", schema=0))]
    if kind == "disjoint runs":
        return ["compare", str(good), str(minimal_run(d / "x.json", name="test_other"))]
    if kind == "bad threshold":
        return ["compare", str(good), str(good), "--threshold", "five"]
    if kind == "unwritable output":
        return ["report", str(good), "-o", str(d / "no" / "such" / "dir" / "r.html")]
    if kind == "output is a directory":
        return ["report", str(good), "-o", str(d)]
    if kind == "unknown run id":
        return ["compare", "0009", "--results", str(d / "results")]
    if kind == "one run for compare":
        return ["compare", str(good)]
    if kind == "mixed machines in a side":
        other = minimal_run(d / "results" / "m2" / "0001_other.json")
        doc = json.loads(other.read_text())
        doc["machine_info"]["torch"] = "2.14.0"
        other.write_text(json.dumps(doc))
        return ["compare", "--baseline", str(good), str(other), "--candidate", str(good)]
    raise AssertionError(kind)


BAD_INPUTS = [
    "missing path",
    "empty directory",
    "no results dir",
    "corrupt json",
    "another tool's json",
    "newer schema",
    "older schema",
    "disjoint runs",
    "bad threshold",
    "unwritable output",
    "output is a directory",
    "unknown run id",
    "one run for compare",
    "mixed machines in a side",
]


@pytest.mark.parametrize("kind", BAD_INPUTS)
def test_bad_input_is_one_clear_line(kind: str, tmp_path: Path, capsys):
    assert main(_setup(kind, tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dpbench ") and ": error: " in err, err
    assert not (tmp_path / "report.html").exists()


def test_the_errors_say_what_is_wrong(tmp_path: Path, capsys):
    main(_setup("output is a directory", tmp_path))
    assert f"found a directory: {tmp_path}" in capsys.readouterr().err
    main(_setup("unknown run id", tmp_path))
    assert "run '0009'" in (err := capsys.readouterr().err) and "saved runs under" in err and "m/0001_good" in err


@pytest.mark.slow
def test_bad_input_in_a_real_process_has_no_traceback(tmp_path: Path):
    proc = run_cli(*_setup("disjoint runs", tmp_path), cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.slow
def test_compare_exit_codes_in_a_real_process(tmp_path: Path):
    base = minimal_run(tmp_path / "a.json", median=0.010)
    same = minimal_run(tmp_path / "b.json", median=0.0101)
    slow = minimal_run(tmp_path / "c.json", median=0.013)
    assert main(["compare", str(base), str(same)]) == 0  # in-process; the exit code of a real process:
    proc = run_cli("compare", str(base), str(slow), cwd=tmp_path)
    assert proc.returncode == 1 and "REGRESSED" in proc.stdout and "test_a" in proc.stdout


def test_compare_pools_several_runs_a_side(tmp_path: Path, capsys):
    runs = [
        minimal_run(tmp_path / f"{n}.json", median=m)
        for n, m in (("a", 0.010), ("b", 0.0101), ("c", 0.013), ("d", 0.0131))
    ]
    assert main(["compare", "--baseline", str(runs[0]), str(runs[1]), "--candidate", str(runs[2]), str(runs[3])]) == 1
    out = capsys.readouterr().out
    assert "baseline:  2 runs: " in out and "8 vs 8" in out


@pytest.mark.slow
def test_report_and_cli_never_import_torch(tmp_path: Path):
    code = (
        "import sys, dpbench.cli, dpbench.report.html, dpbench.gate.compare, dpbench.report.plots;"
        "sys.exit('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 0, "the report imported torch"


def test_list_names_every_strategy_and_workload(capsys):
    import dpbench

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in dpbench.list_strategies():
        assert f"  {name}" in lines, name
    for name in dpbench.list_workloads():
        assert any(line.startswith(f"  {name} ") for line in lines), name


def test_list_shows_each_option_with_its_default_and_doc(capsys):
    from dpbench.strategies import describe_options, get_strategy

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    strategy_lines = lines[lines.index("  allreduce") + 1 :]
    mode = next(o for o in describe_options(get_strategy("allreduce").options_type) if o.name == "mode")
    assert mode.doc  # read from the field's docstring
    assert strategy_lines[0].split() == ["mode='bucketed'", *mode.doc.split()]
    assert any(line.split()[0] == "optimizer='sgd'" for line in lines)  # the shared options, once
    assert lines[lines.index("  manual") + 1] == "    (no options of its own)"
