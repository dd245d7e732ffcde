"""dpbench history: series from saved runs, git order, accepted changes, bad input, JSON,
Markdown and the command's exit status."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
import scipy.stats  # noqa: F401  imported at collection, so no test pays for it

from dpbench.cli import main
from dpbench.errors import UsageError
from dpbench.history.accepted import read_accepted
from dpbench.history.formats import history_json, history_markdown
from dpbench.history.series import accepted_baseline, load_history, run_files
from validation.synthetic_runs import synthetic_run

SLOW = "test_throughput[ddp-lenet-w2]"
STEADY = "test_throughput[ddp-mlp-w2]"
STEP_AT = 6  # the commit (0-based) from which SLOW is 30% slower


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """A git repository with 12 commits (oldest first) and an origin URL."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _git(root, "remote", "add", "origin", "git@github.com:example/dpbench.git")
    commits = []
    for i in range(12):
        _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", f"c{i}")
        commits.append(_git(root, "rev-parse", "HEAD"))
    return root, commits


def _write(results: Path, commits: list[str | None], *, seed: int = 0, dates=None, machine=None) -> list[Path]:
    rng = random.Random(seed)
    paths = []
    for i, commit in enumerate(commits):
        levels = {STEADY: 0.01, SLOW: 0.02 * (1.3 if i >= STEP_AT else 1.0)}
        date = dates[i] if dates else f"2026-01-{1 + i:02d}T00:00:00"
        doc = synthetic_run(commit=commit, date=date, levels=levels, rng=rng, machine=machine)
        path = results / "Linux-CPython-3.11-64bit" / f"{i + 1:04d}_c{i}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        paths.append(path)
    return paths


def test_git_order_beats_the_dates_and_the_slow_commit_is_named(repo, tmp_path):
    root, commits = repo
    # Dates run backwards: ordering by date would put the step at the wrong end.
    _write(tmp_path / "results", commits, dates=[f"2026-01-{28 - i:02d}T00:00:00" for i in range(12)])
    history = load_history(run_files([tmp_path / "results"]), cwd=root)
    assert history.order == "git" and history.commits == commits
    ((series, change),) = history.changes()
    assert series.name == SLOW and change.commit == commits[STEP_AT]
    assert change.commit_range == (commits[STEP_AT - 1], commits[STEP_AT])
    assert change.change.ratio == pytest.approx(1.3, rel=0.06) and change.direction == "regression"
    assert [len(s.points) for s in history.series] == [12, 12]


def test_without_commit_info_the_runs_are_ordered_by_date(tmp_path):
    _write(tmp_path / "results", [None] * 12, dates=[f"2026-01-{1 + i:02d}T00:00:00" for i in range(12)])
    history = load_history(run_files([tmp_path / "results"]), cwd=tmp_path)
    assert history.order == "date" and "12 of 12 runs have no commit info" in history.order_note
    ((series, change),) = history.changes()
    assert series.name == SLOW and change.change.first == STEP_AT


def test_runs_of_one_commit_are_pooled_and_machines_never_mixed(tmp_path):
    commits = [f"{i + 1:040x}" for i in range(6)]
    _write(tmp_path / "a", commits + commits[:2], seed=1)  # two more runs of the first two commits
    _write(tmp_path / "b", commits, seed=2, machine={"node": "other-host"})
    history = load_history(run_files([tmp_path / "a", tmp_path / "b"]), cwd=Path("/"))
    by = {(s.machine, s.name): s for s in history.series}
    assert set(by) == {("runner-1", SLOW), ("runner-1", STEADY), ("other-host", SLOW), ("other-host", STEADY)}
    assert [len(p.trials) for p in by[("runner-1", SLOW)].points] == [10, 10, 5, 5, 5, 5]
    assert [len(p.trials) for p in by[("other-host", SLOW)].points] == [5] * 6


def test_a_short_series_is_shown_without_a_claim(tmp_path):
    _write(tmp_path / "results", [f"{i + 1:040x}" for i in range(3)])
    history = load_history(run_files([tmp_path / "results"]), cwd=Path("/"))
    assert all(not s.found.claimed and not s.changes for s in history.series)


def test_accepted_changes_are_shown_not_flagged_and_give_the_gate_a_baseline(repo, tmp_path):
    root, commits = repo
    _write(tmp_path / "results", commits)
    accepted = tmp_path / "accepted.toml"
    accepted.write_text(
        f'[[accepted]]\nbenchmark = "test_throughput[*lenet*]"\ncommit = "{commits[STEP_AT][:9]}"\n'
        'reason = "LeNet does more work on purpose"\n'
    )
    history = load_history(run_files([tmp_path / "results"]), cwd=root, accepted=read_accepted(accepted))
    ((series, change),) = history.changes()
    assert change.accepted is not None and change.accepted.reason == "LeNet does more work on purpose"
    assert history.new_regressions(12) == []
    baseline = accepted_baseline(history, SLOW)
    assert baseline == list(change.change.after.trials) and len(baseline) == 5 * (12 - STEP_AT)
    assert accepted_baseline(history, STEADY) is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ('[[accepted]]\nbenchmark = "x"\ncommit = "zz"\nreason = "r"\n', "expected 7 to 40 hex digits"),
        ('[[accepted]]\nbenchmark = "x"\ncommit = "abcdef1"\n', "'reason': expected a non-empty string"),
        ('[[accepted]]\nbenchmark = "x"\ncommit = "abcdef1"\nreason = "r"\nwhy = 1\n', "unknown keys why"),
        ("accepted = [", "not valid TOML"),
    ],
)
def test_a_bad_accepted_file_says_what_is_wrong(tmp_path, text, expected):
    from dpbench.results.load import ResultsError

    path = tmp_path / "accepted.toml"
    path.write_text(text)
    with pytest.raises(ResultsError, match=expected):
        read_accepted(path)


def test_the_shipped_example_file_parses():
    assert read_accepted(Path(__file__).resolve().parents[2] / "results" / "accepted.toml") == []


def test_json_and_markdown_carry_the_verdicts(repo, tmp_path):
    root, commits = repo
    _write(tmp_path / "results", commits)
    history = load_history(run_files([tmp_path / "results"]), cwd=root)
    doc = json.loads(json.dumps(history_json(history)))
    (change,) = doc["changes"]
    assert {k: change[k] for k in ("benchmark", "commit", "commit_range", "direction", "accepted")} == {
        "benchmark": SLOW,
        "commit": commits[STEP_AT],
        "commit_range": [commits[STEP_AT - 1], commits[STEP_AT]],
        "direction": "regression",
        "accepted": False,
    }
    assert change["after_s"] / change["before_s"] == pytest.approx(change["ratio"])
    assert change["p"] < 1e-4 and len(doc["series"]) == 2 and len(doc["series"][0]["points"]) == 12
    text = history_markdown(history, newest=12)
    assert f"`{SLOW}`" in text and "**new**" in text and commits[STEP_AT][:10] in text


def test_the_command_names_a_corrupt_file_and_fails_on_a_new_regression(repo, tmp_path, monkeypatch, capsys):
    root, commits = repo
    paths = _write(tmp_path / "results", commits)
    (paths[0].parent / "0099_broken.json").write_text("{not json")
    before = {p: p.read_bytes() for p in (tmp_path / "results").rglob("*.json")}
    monkeypatch.chdir(root)
    out = tmp_path / "h.html"
    args = [
        "history",
        str(tmp_path / "results"),
        "-o",
        str(out),
        "--json",
        str(tmp_path / "h.json"),
        "--markdown",
        str(tmp_path / "h.md"),
    ]
    assert main(args) == 2  # a file was skipped: named, and the exit status says so
    err = capsys.readouterr().err
    assert "skipped" in err and "0099_broken.json" in err and "corrupt JSON" in err
    assert "ordered by git" in err and err.count("ordered by") == 1
    assert main(args + ["--fail-on-new", str(12 - STEP_AT)]) == 1  # the step is within the newest 6 commits
    assert main(args + ["--fail-on-new", str(12 - STEP_AT - 1)]) == 2  # not within the newest 5
    page = out.read_text()
    assert "github.com/example/dpbench/compare/" in page and "0099_broken.json" in page
    assert {p: p.read_bytes() for p in (tmp_path / "results").rglob("*.json")} == before  # nothing rewritten


def test_since_keeps_only_later_commits(repo, tmp_path):
    root, commits = repo
    _write(tmp_path / "results", commits)
    history = load_history(run_files([tmp_path / "results"]), cwd=root, since=commits[3])
    assert history.commits == commits[4:]

    with pytest.raises(UsageError, match="--since: expected a revision"):
        load_history(run_files([tmp_path / "results"]), cwd=root, since="no-such-rev")


# ---------------------------------------------------------------- the gate's baseline (compare --history)
def _accepted_file(tmp_path: Path, commit: str) -> Path:
    path = tmp_path / "accepted.toml"
    path.write_text(
        f'[[accepted]]\nbenchmark = "test_throughput[*lenet*]"\ncommit = "{commit[:9]}"\n'
        'reason = "LeNet does more work on purpose"\n'
    )
    return path


# The gate judges a family: SLOW among five steady cases, SLOW accepted at +60% from STEP_AT on.
FAMILY = [STEADY] + [f"test_throughput[{s}-mlp-w2]" for s in ("fsdp", "zero", "dp", "manual")]
ACCEPTED_STEP = 1.6


def _levels(slow: bool) -> dict[str, float]:
    return {**{name: 0.01 for name in FAMILY}, SLOW: 0.02 * (ACCEPTED_STEP if slow else 1.0)}


def _write_family(results: Path, commits: list[str]) -> list[Path]:
    rng = random.Random(3)
    paths = []
    for i, commit in enumerate(commits):
        doc = synthetic_run(commit=commit, date=f"2026-01-{1 + i:02d}T00:00:00", levels=_levels(i >= STEP_AT), rng=rng)
        path = results / "Linux-CPython-3.11-64bit" / f"{i + 1:04d}_c{i}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        paths.append(path)
    return paths


def _candidate(tmp_path: Path) -> Path:
    """A pull request's run: SLOW at its accepted (slower) level, the others unchanged."""
    doc = synthetic_run(commit=None, date="2026-02-01T00:00:00", levels=_levels(True), rng=random.Random(7))
    path = tmp_path / "pr" / "0001_pr.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    return path


def test_accepted_levels_replace_only_a_baseline_older_than_the_accepted_change(repo, tmp_path):
    from dpbench.history.series import accepted_levels
    from dpbench.results.frame import runs_frame
    from dpbench.results.load import read_run

    root, commits = repo
    paths = _write_family(tmp_path / "results", commits)
    history = load_history(
        run_files([tmp_path / "results"]), cwd=root, accepted=read_accepted(_accepted_file(tmp_path, commits[STEP_AT]))
    )
    ((series, change),) = history.changes()
    levels, said = accepted_levels(history, runs_frame([read_run(paths[2])]))
    (name,) = levels
    side, note = levels[name]
    assert name == series.fullname and series.name == SLOW
    # The level after the change, commit by commit: one run of the side per commit.
    assert side.runs == [p.trials for p in series.points[STEP_AT:]] and len(side.runs) == 12 - STEP_AT
    assert side.control_runs == [p.controls for p in series.points[STEP_AT:]]
    assert note == (
        f"baseline: the accepted level from {commits[STEP_AT][:10]} on (LeNet does more work on purpose): "
        f"{5 * (12 - STEP_AT)} trials over {12 - STEP_AT} commits, not the baseline's own"
    )
    assert said == [
        "--history: 1 benchmark(s) judged against the level after an accepted change newer than the "
        "baseline's commit (their notes say which)"
    ]
    # A baseline measured at or after the accepted change already has its level: left alone.
    assert accepted_levels(history, runs_frame([read_run(paths[STEP_AT])])) == ({}, [])
    assert accepted_levels(history, runs_frame([read_run(_candidate(tmp_path))]))[1] == [
        "--history: the baseline has no commit info (commit_info.id), so it cannot be placed in the history: "
        "accepted levels not used"
    ]


def test_compare_with_history_does_not_flag_an_accepted_slowdown_again(repo, tmp_path, monkeypatch, capsys):
    root, commits = repo
    paths = _write_family(tmp_path / "results", commits)
    accepted = _accepted_file(tmp_path, commits[STEP_AT])
    candidate = _candidate(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.json")}
    monkeypatch.chdir(root)
    json_out = tmp_path / "cmp.json"
    # Against the old baseline (commit 2) the accepted +60% is a regression ...
    assert main(["compare", str(paths[2]), str(candidate), "--json", str(json_out)]) == 1
    verdicts = {b["name"].split("::")[-1]: b for b in json.loads(json_out.read_text())["benchmarks"]}
    assert verdicts[SLOW]["verdict"] == "regressed"
    assert not any(verdicts[name]["verdict"] == "regressed" for name in FAMILY)
    capsys.readouterr()
    # ... and with the history and its accepted change it is judged against the level after it.
    args = [
        "compare",
        str(paths[2]),
        str(candidate),
        "--history",
        str(tmp_path / "results"),
        "--accepted",
        str(accepted),
        "--json",
        str(json_out),
    ]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "warning: --history: 1 benchmark(s) judged against the level after an accepted change" in err
    verdicts = {b["name"].split("::")[-1]: b for b in json.loads(json_out.read_text())["benchmarks"]}
    assert verdicts[SLOW]["verdict"] == "unchanged" and verdicts[SLOW]["baseline_trials"] == 5 * (12 - STEP_AT)
    assert f"baseline: the accepted level from {commits[STEP_AT][:10]} on" in verdicts[SLOW]["note"]
    # The others keep the baseline's own 5 trials (noise around no change: never regressed).
    assert all(verdicts[name]["verdict"] != "regressed" and verdicts[name]["baseline_trials"] == 5 for name in FAMILY)
    assert all("accepted level" not in verdicts[name]["note"] for name in FAMILY)
    # Without the accepted entry the history changes nothing: the slowdown is flagged again.
    empty = tmp_path / "none.toml"
    empty.write_text("")
    assert main(args[:-4] + ["--accepted", str(empty), "--json", str(json_out)]) == 1
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.json") if p != json_out} == before  # nothing rewritten


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--accepted", "ACCEPTED"], "--accepted: only with --history"),
        (["--history", "RESULTS", "--accepted", "MISSING"], "--accepted: MISSING is not a file"),
        (["--history", "RESULTS", "--accepted", "ACCEPTED", "--paired"], "--history with --paired"),
    ],
)
def test_compare_history_bad_input_is_one_line_and_exit_2(repo, tmp_path, monkeypatch, capsys, extra, expected):
    root, commits = repo
    paths = _write_family(tmp_path / "results", commits)
    accepted = _accepted_file(tmp_path, commits[STEP_AT])
    monkeypatch.chdir(root)
    names = {"ACCEPTED": str(accepted), "RESULTS": str(tmp_path / "results"), "MISSING": "MISSING"}
    assert main(["compare", str(paths[2]), str(paths[11]), *[names.get(a, a) for a in extra]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
