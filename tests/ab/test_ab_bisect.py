"""``dpbench ab --bisect-python``: the first regressed environment of an ordered list, each step an A/B
against the first environment (the jobs faked: what is checked is the search and its answer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpbench.ab.bisect import bisect_environments
from dpbench.cli import main

REPO = Path(__file__).resolve().parents[2]
PYTHONS = [Path(f"/envs/nightly-{i}/bin/python") for i in range(8)]


def _jobs(first_bad: int | None, *, fail_at: int | None = None):
    """A fake A/B job: regression (1) for environments from ``first_bad`` on, 4 at ``fail_at``; records its calls."""
    calls: list[tuple[Path, Path]] = []

    def run(base, head) -> int:
        calls.append((base.python, head.python))
        index = PYTHONS.index(head.python)
        if index == fail_at:
            return 4
        return 1 if first_bad is not None and index >= first_bad else 0

    return run, calls


@pytest.mark.parametrize("first_bad", [1, 2, 5, 7])
def test_bisect_finds_the_first_regressed_environment_in_log_steps(first_bad):
    run, calls = _jobs(first_bad)
    assert bisect_environments(PYTHONS, run) == (1, first_bad)
    assert all(base == PYTHONS[0] for base, _ in calls), "every step is against the first environment"
    # The last first, then halvings of the 7 candidates in between: at most ceil(log2(7)) = 3 of them.
    assert calls[0][1] == PYTHONS[-1] and 1 + 2 <= len(calls) <= 1 + 3, calls


def test_no_regression_at_the_end_is_one_job():
    run, calls = _jobs(None)
    assert bisect_environments(PYTHONS, run) == (0, None)
    assert calls == [(PYTHONS[0], PYTHONS[-1])]


def test_a_step_that_fails_stops_with_its_code():
    run, calls = _jobs(5, fail_at=3)
    assert bisect_environments(PYTHONS, run) == (4, None)
    assert [head for _, head in calls] == [PYTHONS[7], PYTHONS[3]]


def test_the_command_line_says_the_answer(monkeypatch, capsys, tmp_path):
    run, calls = _jobs(2)
    monkeypatch.setattr("dpbench.commands.ab.run_ab", lambda *, base, head, **kwargs: run(base, head))
    argv = ["ab", *[a for p in PYTHONS[:4] for a in ("--bisect-python", str(p))], "--", "-k", "mlp"]
    assert main(argv) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"bisect: first regressed environment: 2 ({PYTHONS[2]}); the one before it, 1 ({PYTHONS[1]}), "
        f"did not regress against environment 0 ({PYTHONS[0]})"
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "--bisect-python: expected at least two environments in order, found 1"),
        (["--bisect-python", "/b", "--head-python", "/h"], "--head-python: expected no sides with --bisect-python"),
        (["--bisect-python", "/b", "main", "HEAD"], "BASE_REV HEAD_REV: expected no sides with --bisect-python"),
    ],
)
def test_bisect_with_sides_or_one_environment_is_refused(extra, message, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(REPO)
    assert main(["ab", "--bisect-python", "/a", *extra, "--workdir", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"dpbench ab: error: {message}"), line
    assert list(tmp_path.iterdir()) == []
