"""``dpbench run``'s bad input: one line, exit 2, before any process starts, nothing saved."""

from __future__ import annotations

import subprocess

import pytest
from _user_models import SOURCE

from dpbench.cli import main


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    import sys

    sys.modules.pop("my_models", None)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workload", "no_such_mod:net"], "cannot import 'no_such_mod': No module named 'no_such_mod'"),
        (["--workload", "my_models:tiny"], "has no attribute 'tiny'; its Workload attributes: fixed, tiny_net"),
        (["--workload", "my_models:not_a_workload"], "not_a_workload is a int, expected a dpbench.Workload"),
        (["--workload", "my_models:tiny_net@hiden=2"], "override 'hiden' is no argument of tiny_net"),
        (
            ["--workload", "my_models:tiny_net@hidden=abc"],
            "workload: workload spec 'my_models:tiny_net@hidden=abc': its model cannot be built with hidden='abc': "
            "TypeError: empty(): argument 'size' (position 1) must be tuple of ints",
        ),
        (["--workload", "hf:openai/gpt2"], "a hub id is refused: pass a directory holding its config.json"),
        (["--workload", "mlp", "--world-sizes", "1,x"], "--world-sizes: expected comma-separated ints >= 1"),
        (["--workload", "mlp", "--suites", "throughput,speed"], "suites: expected names from throughput"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2_with_nothing_started_or_saved(user_dir, capsys, monkeypatch, argv, message):
    started = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: started.append(a))
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpbench run: error: ") and message in err and err.count("\n") == 1
    assert not started and not (user_dir / "results").exists() and not (user_dir / "report.html").exists()
