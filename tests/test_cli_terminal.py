"""What every subcommand shares on the terminal: an example in its help, "did you mean", JSON on
stdout with ``--json -``, ``dpbench runs``, and the results-directory errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from dpbench.cli import SUBCOMMANDS, build_parser, main  # noqa: E402
from validation import synthetic_runs
from validation.synthetic_runs import synthetic_run  # noqa: E402


def _subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return list(action.choices)


def test_every_subcommand_is_listed_and_has_an_example_in_its_help(capsys):
    names = _subcommands()
    assert len(names) == len(SUBCOMMANDS) and "runs" in names
    for name in names:
        assert main([name, "--help"]) == 0
        help_text = capsys.readouterr().out
        assert "example" in help_text and f"dpbench {name} " in help_text.split("example", 1)[1], name


def test_a_misspelt_subcommand_gets_did_you_mean(capsys):
    assert main(["lst"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "dpbench: error: COMMAND: expected one of report, compare, list, ab, history, runs, run, estimate, "
        "predict, found 'lst' (did you mean 'list'?)\n"
    )
    assert main(["xyzzy"]) == 2
    assert "did you mean" not in capsys.readouterr().err


@pytest.fixture
def results(tmp_path: Path) -> Path:
    where = tmp_path / "results"
    synthetic_runs.make_run(where, number=1, seed=1, timelines=False)
    synthetic_runs.make_run(where, number=2, seed=2, timelines=False)
    (where / "Linux-CPython-3.11-64bit" / "0003_broken.json").write_text("{not json")
    return where


def test_runs_lists_each_saved_run_and_says_why_one_is_unreadable(results, capsys):
    assert main(["runs", "--results", str(results)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Linux-CPython-3.11-64bit: 3 runs"
    assert lines[1].split() == ["run", "date", "commit", "profile", "benchmarks", "trials", "torch"]
    assert lines[2].split() == ["0001_synth", "2026-11-29", "08:01", "0000000000", "quick", "15", "6", "2.13.0"]
    assert lines[4].startswith("  0003_broken  unreadable: corrupt JSON (line 1, column 2")


def test_json_on_stdout_parses_for_runs_and_compare(results, capsys):
    assert main(["runs", "--results", str(results), "--json", "-"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in runs] == ["0001_synth", "0002_synth", "0003_broken"] and runs[2]["error"]
    assert main(["compare", "0001", "0002", "--results", str(results), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["exit_code"] == 0


@pytest.mark.slow  # list imports torch; history renders its page
def test_json_on_stdout_parses_for_list_and_history(capsys, tmp_path):
    assert main(["list", "--json", "-"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert "ddp" in [s["name"] for s in listed["strategies"]] and "mlp" in [w["name"] for w in listed["workloads"]]
    history_dir = tmp_path / "history"
    rng = random.Random(0)
    for i in range(4):
        doc = synthetic_run(commit=None, date=f"2026-01-0{i + 1}T00:00:00", levels={"test_a[x]": 0.01}, rng=rng)
        path = history_dir / "m" / f"{i + 1:04d}_h.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
    main(["history", str(history_dir), "-o", str(tmp_path / "h.html"), "--json", "-"])
    out = capsys.readouterr()
    assert isinstance(json.loads(out.out), dict) and "h.html" in out.err


@pytest.mark.parametrize("command", ["report", "runs"])
def test_results_that_is_a_file_is_named_a_file(results, capsys, command):
    run = results / "Linux-CPython-3.11-64bit" / "0001_synth.json"
    for argv in ([command, "--results", str(run)],):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"expected a directory of saved runs, found the file {run}" in err
        assert "does not exist" not in err
