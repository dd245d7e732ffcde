"""``dpbench compare`` on the terminal: the verdict line, only what changed, the next step of an
inconclusive case, the options that pick and order the rows, colour, JSON on stdout, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import pytest
from _compare_helpers import OTHER, SLOW
from test_cli import minimal_run

from dpbench.cli import main
from validation import synthetic_runs


@pytest.fixture(scope="module")
def noisy(tmp_path_factory) -> tuple[Path, Path]:
    """3 trials a side, 8% between trials, 1% between runs; +25% on SLOW and +50% on OTHER."""
    where = tmp_path_factory.mktemp("noisy")
    kw = dict(trials=3, trial_cv=0.08, noise=0.01, timelines=False)
    base = synthetic_runs.make_run(where, number=1, seed=1, **kw)
    cand = synthetic_runs.make_run(where, number=2, seed=2, slowdown={SLOW: 1.25, OTHER: 1.5}, **kw)
    return base, cand


def _run(capsys, *argv) -> tuple[int, list[str], str]:
    rc = main(["compare", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err


def test_the_summary_line_and_an_inconclusive_rows_next_step(noisy, capsys, tmp_path):
    rc, lines, _ = _run(capsys, *noisy, "--json", tmp_path / "c.json")
    assert rc == 0
    assert lines[0] == (
        "PASS: 0 regressed, 0 improved, 12 unchanged; 3 inconclusive: not enough evidence either way; "
        "false-alarm rate ≤ 1% per job (Holm over 15 cases and the broad tests); exit 0: no regression"
    )
    doc = json.loads((tmp_path / "c.json").read_text())
    other = next(b for b in doc["benchmarks"] if b["name"].endswith(OTHER))
    assert other["verdict"] == "inconclusive"
    # The reference: trials a side at which the recorded variances show the change at α/15 with 80% power.
    z = NormalDist().inv_cdf(1 - 0.01 / 15) + NormalDist().inv_cdf(0.8)
    budget = (math.log(other["excess"]) / z) ** 2
    n = max(math.ceil(2 * other["trial_var"] / (budget - other["fixed_var"])), 4)
    row = next(line for line in lines if line.startswith(OTHER))
    assert row.endswith(f"inconclusive  {n} trials a side")
    assert other["next_step"] == (
        f"{n} trials a side ({n - 3} more; pytest --dpbench-trials {n}) would show a "
        f"{(other['excess'] - 1) * 100:+.1f}% change at α/15 with 80% power"
    )
    assert any(
        line.startswith("next: N trials a side: rerun both sides with pytest --dpbench-trials N") for line in lines
    )
    assert "not shown: 12 unchanged (--all lists them)" in lines


def test_fail_on_inconclusive_exits_1(noisy, capsys):
    rc, lines, _ = _run(capsys, *noisy, "--fail-on-inconclusive")
    assert rc == 1
    assert lines[0].startswith("FAIL: ") and lines[0].endswith(
        "exit 1: inconclusive cases, with --fail-on-inconclusive"
    )


def test_all_sort_k_and_columns(noisy, capsys):
    rc, lines, _ = _run(capsys, *noisy, "--all", "--sort", "name", "--columns", "benchmark,change,verdict")
    rows = lines[4 : 4 + 15]
    assert lines[3].split() == ["benchmark", "change", "verdict", "next"]
    assert [r.split()[0] for r in rows] == sorted(r.split()[0] for r in rows)
    _, lines, _ = _run(capsys, *noisy, "--all", "-k", "throughput and not convnet")
    assert lines[3].startswith("test_throughput[…] ")  # every row selected is of that test: named once
    names = [line.split()[0] for line in lines[4:] if line and not line.startswith(("next:", "not shown", "test:"))]
    assert names and all("convnet" not in n for n in names)
    assert any(line.startswith("not shown: ") and "not selected by -k" in line for line in lines)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--sort", "chnage"],
            "--sort: expected one of verdict, change, name, p, found 'chnage' (did you mean 'change'?)",
        ),
        (["--columns", "benchmark,verdit"], "found 'verdit' (did you mean 'verdict'?)"),
        (["-k", "ddp and"], "-k: expected an expression like 'ddp and not w1', found 'ddp and' (it ends too early)"),
        (["-k", "(ddp"], "a '(' is not closed"),
    ],
)
def test_bad_options_are_one_line_exit_2(noisy, capsys, argv, message):
    rc, _, err = _run(capsys, *noisy, *argv)
    assert rc == 2 and err.count("\n") == 1 and message in err


def test_a_regressed_row_comes_within_the_first_five_lines(tmp_path, capsys):
    base = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False)
    cand = synthetic_runs.make_run(tmp_path, number=2, seed=2, slowdown={SLOW: 1.4}, timelines=False)
    rc, lines, _ = _run(capsys, base, cand)
    assert rc == 1 and any(line.startswith("ddp-mlp-w2 ") and "REGRESSED" in line for line in lines[:5])
    other = synthetic_runs.make_run(tmp_path, number=3, seed=3, timelines=False)
    rc, lines, _ = _run(capsys, base, other)  # two runs of one code: nothing changed
    assert rc == 0 and len(lines) <= 15 and lines[3] == "not shown: 15 unchanged (--all lists them)"
    same, lines, err = _run(capsys, base, base)
    assert same == 0 and len(lines) <= 15
    assert err.startswith("warning: the baseline and the candidate share ") and "compared with themselves" in err


class _Tty:
    """stdout as a terminal: isatty() true, the text kept."""

    def __init__(self):
        self.text = ""

    def write(self, s):
        self.text += s

    def flush(self):
        pass

    def isatty(self):
        return True


def test_colour_on_a_terminal_only_and_never_with_no_color(noisy, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    tty = _Tty()
    monkeypatch.setattr("sys.stdout", tty)
    main(["compare", *map(str, noisy)])
    assert "\x1b[" in tty.text
    for env, flag in (("1", []), ("", ["--no-color"]), ("", None)):
        tty = _Tty()
        monkeypatch.setattr("sys.stdout", tty)
        monkeypatch.setenv("NO_COLOR", env)
        argv = ["compare", *map(str, noisy)] if flag is not None else ["--no-color", "compare", *map(str, noisy)]
        main(argv + (flag or []))
        assert "\x1b[" not in tty.text, (env, flag)


def test_json_on_stdout_parses_and_the_text_goes_to_stderr(noisy, capsys):
    assert main(["compare", *map(str, noisy), "--json", "-"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["counts"]["inconclusive"] == 3 and out.err.startswith("PASS: ")


def test_a_plain_pytest_benchmark_run_is_refused_in_one_line(tmp_path, capsys):
    plain = minimal_run(tmp_path / "plain.json", schema=None)
    ours = minimal_run(tmp_path / "ours.json")
    rc, _, err = _run(capsys, ours, plain)
    assert rc == 2 and err.count("\n") == 1
    assert "plain.json: expected dpbench's extra_info (its schema and fresh-process trials), found a plain" in err
