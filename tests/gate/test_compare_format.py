"""The regression gate's warnings, output files and arguments: the machine and runtime-settings
warnings, the Markdown / JSON / github-action-benchmark outputs, --threshold and --alpha."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _compare_helpers import SLOW, frame, frames

from dpbench.cli import main
from dpbench.errors import UsageError
from dpbench.gate.compare import compare_frames, parse_threshold
from validation import synthetic_runs


# ---------------------------------------------------------------- warnings, outputs, thresholds
def test_machine_mismatch_is_printed_first(tmp_path: Path, capsys):
    base = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False)
    machine = synthetic_runs.default_machine(driver="560.1", gpus=[{"name": "NVIDIA A100-SXM4-40GB"}] * 4)
    cand = synthetic_runs.make_run(tmp_path, number=2, seed=2, machine=machine, timelines=False)
    md = tmp_path / "summary.md"
    assert main(["compare", str(base), str(cand), "--markdown", str(md)]) == 0
    warnings = capsys.readouterr().err.splitlines()
    assert (
        warnings[0] == "warning: machines differ: gpu: baseline NVIDIA H100 80GB HBM3, candidate NVIDIA A100-SXM4-40GB"
    )
    assert warnings[1] == "warning: machines differ: driver: baseline 550.54, candidate 560.1"
    text = md.read_text()
    assert text.index("machines differ") < text.index("| benchmark |")


def test_a_machine_warning_carries_its_kind_and_field_beside_its_sentence(tmp_path: Path):
    from dpbench.gate.verdicts import WarningKind
    from dpbench.results import load_runs

    base = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False)
    machine = synthetic_runs.default_machine(driver="560.1", gpus=[{"name": "NVIDIA A100-SXM4-40GB"}] * 4)
    cand = synthetic_runs.make_run(tmp_path, number=2, seed=2, machine=machine, timelines=False)
    cmp = compare_frames(load_runs([base]), load_runs([cand]))
    machines = [w for w in cmp.warnings if w.kind is WarningKind.MACHINES]
    assert [(w.field, w) for w in machines] == [
        ("gpu", "machines differ: gpu: baseline NVIDIA H100 80GB HBM3, candidate NVIDIA A100-SXM4-40GB"),
        ("driver", "machines differ: driver: baseline 550.54, candidate 560.1"),
    ]
    assert all(w.kind is not WarningKind.MACHINES for w in cmp.warnings if w not in machines)


def test_output_files(tmp_path: Path):
    base = synthetic_runs.make_run(tmp_path / "results", number=1, seed=1, timelines=False)
    synthetic_runs.make_run(tmp_path / "results", number=2, seed=2, slowdown={SLOW: 1.4}, timelines=False)
    md, js, gab = tmp_path / "s.md", tmp_path / "s.json", tmp_path / "gab.json"
    # ids resolve against --results; BASELINE given as a file
    rc = main(
        [
            "compare",
            str(base),
            "0002",
            "--results",
            str(tmp_path / "results"),
            "--threshold",
            "15%",
            "--markdown",
            str(md),
            "--json",
            str(js),
            "--github-action-benchmark",
            str(gab),
        ]
    )
    assert rc == 1
    data = json.loads(js.read_text())
    assert data["exit_code"] == 1 and data["threshold"] == 0.15
    assert data["counts"] == {
        "regressed": 1,
        "improved": 0,
        "unchanged": 14,
        "inconclusive": 0,
        "incomparable": 0,
        "missing": 0,
        "new": 0,
    }
    assert [n.rsplit("::", 1)[-1] for n in data["regressions"]] == [SLOW]
    slow = data["benchmarks"][0]
    assert slow["verdict"] == "regressed" and slow["test"] == "moderated test on log trials + between-run"
    assert (slow["baseline_trials"], slow["candidate_trials"]) == (6, 6)
    assert 0 <= slow["p_value"] <= slow["p_adjusted"] < 0.05 and slow["control_ratio"] == pytest.approx(1.0, abs=0.02)
    assert data["family"]["size"] == 15 and data["family"]["method"] == "trials" and data["paired"] is False
    assert slow["note"].startswith(
        f"slower by {(slow['excess'] - 1) * 100:+.1f}% beyond the machine (the other benchmarks moved "
    )
    assert data["family"]["shift_basis"] == "benchmarks" and data["family"]["broad_change"] > 0
    assert slow["unit"] == "s/step"
    summary = md.read_text()
    assert "❌" in summary and r"test\_throughput\[ddp-mlp-w2\]" in summary  # Markdown-escaped
    entries = json.loads(gab.read_text())
    assert len(entries) == 15
    for e in entries:  # github-action-benchmark's customSmallerIsBetter: name, unit, value
        assert isinstance(e["name"], str) and e["unit"] in ("s/step", "s/call") and isinstance(e["value"], float)
    assert next(e for e in entries if e["name"].endswith(SLOW))["value"] == pytest.approx(slow["candidate_s"])


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125), ("0.999", 0.999)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "fast", "-3%", "nan", "0", "0%", "1", "100%", "1.5"])
def test_parse_threshold_rejects(text):
    with pytest.raises(UsageError, match="--threshold: expected a percentage like 10%"):
        parse_threshold(text)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--alpha", "0"], "--alpha: expected a probability in (0, 0.5], found 0.0"),
        (["--alpha", "0.6"], "--alpha: expected a probability in (0, 0.5], found 0.6"),
        (["--alpha", "x"], "--alpha: expected a probability in (0, 0.5], found 'x'"),
        (["--threshold", "0%"], "--threshold: expected a percentage like 10%"),
        (["--threshold", "1"], "--threshold: expected a percentage like 10%"),
    ],
)
def test_bad_alpha_or_threshold_is_one_line_exit_2(tmp_path: Path, capsys, argv, message):
    a = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False)
    assert main(["compare", str(a), str(a), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_bad_alpha_is_named():
    with pytest.raises(UsageError, match=r"--alpha: expected a probability in \(0, 0.5\], found 1.5"):
        compare_frames(frame(seed=1), frame(seed=2), alpha=1.5)


def _with_runtime_env(doc: dict, env: dict | None) -> dict:
    for bench in doc["benchmarks"]:
        if env is not None and bench["extra_info"].get("kind") == "training":
            bench["extra_info"]["harness_settings"] = {"user_runtime_env": dict(env)}
    return doc


def test_runtime_settings_on_one_side_only_are_warned_about():
    said = (
        "runtime settings differ: MALLOC_TRIM_THRESHOLD_: baseline unset, candidate 1000000000 (the workers' "
        "runtimes read it: a change may be that setting)"
    )
    base = _with_runtime_env(synthetic_runs.make_doc(seed=1), {"OMP_NUM_THREADS": "2"})
    cand = _with_runtime_env(
        synthetic_runs.make_doc(seed=2), {"OMP_NUM_THREADS": "2", "MALLOC_TRIM_THRESHOLD_": "1000000000"}
    )
    assert [w for w in compare_frames(frames(base), frames(cand)).warnings if w.startswith("runtime")] == [said]
    # The same settings on both sides, or a side that recorded none (older runs): nothing to say.
    same = _with_runtime_env(synthetic_runs.make_doc(seed=3), {"OMP_NUM_THREADS": "2"})
    old = _with_runtime_env(synthetic_runs.make_doc(seed=4), None)
    for a, b in ((base, same), (old, cand)):
        assert not [w for w in compare_frames(frames(a), frames(b)).warnings if w.startswith("runtime")]
    # Pooled runs that disagree among themselves show every value a side ran with.
    mixed = compare_frames(frames(base, cand), frames(same)).warnings
    assert [w for w in mixed if w.startswith("runtime")] == [
        "runtime settings differ: MALLOC_TRIM_THRESHOLD_: baseline unset / 1000000000, candidate unset (the "
        "workers' runtimes read it: a change may be that setting)"
    ]


def test_differ_in_silences_the_fields_the_sides_are_meant_to_differ_in(tmp_path: Path, capsys):
    base = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False)
    machine = synthetic_runs.default_machine(driver="560.1", gpus=[{"name": "NVIDIA A100-SXM4-40GB"}] * 4)
    cand = synthetic_runs.make_run(tmp_path, number=2, seed=2, machine=machine, timelines=False)
    md = tmp_path / "summary.md"
    assert main(["compare", str(base), str(cand), "--differ-in", "driver,torch", "--markdown", str(md)]) == 0
    warnings = [w for w in capsys.readouterr().err.splitlines() if "machines differ" in w]
    # The driver is what the sides were meant to differ in; the GPU is still warned about.
    assert warnings == [
        "warning: machines differ: gpu: baseline NVIDIA H100 80GB HBM3, candidate NVIDIA A100-SXM4-40GB"
    ]
    assert "driver" not in md.read_text().split("| benchmark |")[0]
    assert main(["compare", str(base), str(cand), "--differ-in", "kernel"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .endswith("--differ-in: expected fields of gpu, gpu_count, driver, cuda, torch, cpu, found 'kernel'")
    )
    assert main(["compare", str(base), str(cand), "--differ-in", "torc"]) == 2
    assert capsys.readouterr().err.endswith("found 'torc' (did you mean 'torch'?)\n")
