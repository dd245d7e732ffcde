"""Every program of ``validation/`` runs end to end at its smallest size (pyperf's habit with its
examples): a simulation at 20 jobs, a validation on the smallest real run it accepts. Each asserts
its exit code and what it printed or wrote; the full-size numbers are on the validation pages.

The simulations whose tests live beside the code they check run there: simulate_gate
(tests/gate/test_family_simulation.py), simulate_ab_settle (tests/ab/test_ab_settle.py),
simulate_sequential and sequential_power_floor (tests/decision/).

``validation.ab_relu`` runs its A/B job alone on one case (``--select``, ``--jobs ab``): its target,
12 of the 14 mlp and lenet cases regressed, is the whole suite's, measured as the gate's validation
page records; here the program's own path runs — the scratch clone with the slowed relu, ``dpbench
ab`` on it, the verdicts read back.
"""

from __future__ import annotations

import importlib
import json
import re
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEP_RUN = ROOT / "tests" / "predict" / "data" / "step_run.json"  # scaling at 1 and 2 ranks, and comm


def _count(out: str, pattern: str) -> int:
    return sum(1 for line in out.splitlines() if re.fullmatch(pattern, line))


@pytest.mark.parametrize(
    "module, argv, expected",
    [
        pytest.param(
            "validation.simulate_disturbed_gate",
            ["--jobs", "20", "--benchmarks", "5"],
            {
                # the default run: tests/data/quick-run-disturbed-trial.json.gz
                r"16 measured disturbances \(control/step factors\): .*": 1,
                r"20 A/A jobs \(clean\), 5 benchmarks x 5 trials a side, .*": 1,
                r"  (raw|left_out|remeasured) +false alarms per job: \d+/20 = .*": 3,
            },
            marks=pytest.mark.slow,  # 20 jobs x 3 arms through the gate: ~2-4 s
            id="simulate_disturbed_gate",
        ),
        pytest.param(
            "validation.simulate_history",
            ["--series", "20", "--alpha", "0.001"],
            {
                r"\| alpha \| stationary: changes / 100 series \| 10% step at commit \+-1 \| .*": 1,
                r"\| 0\.001 \| [\d.]+ \| [\d.]+% \| [\d.]+ \| [\d.]+% \| [\d.]+% \| \d+ \|": 1,
            },
            id="simulate_history",
        ),
        pytest.param(
            "validation.simulate_ratio_estimators",
            ["--reps", "200"],
            {
                r"estimator  false claims  power at exp\(2sd\)  coverage  \| one wild pair: .*": 1,
                r"(GM \+ t|median\+sign) +[\d.]+%  +[\d.]+%  +[\d.]+%  \| +[\d.]+  +[\d.]+%": 2,
            },
            id="simulate_ratio_estimators",
        ),
    ],
)
def test_the_program_runs_at_its_smallest(module, argv, expected, capsys):
    assert importlib.import_module(module).main(argv) == 0
    out = capsys.readouterr().out
    for pattern, count in expected.items():
        assert _count(out, pattern) == count, f"{pattern!r} in:\n{out}"


def test_predict_step_predicts_each_strategy_of_a_saved_run_at_two_ranks(tmp_path, capsys):
    out_file = tmp_path / "predict.json"
    argv = [str(STEP_RUN), "--json", str(out_file)]
    assert importlib.import_module("validation.predict_step").main(argv) == 0
    out = capsys.readouterr().out
    found = json.loads(out_file.read_text())
    # the run's world-size-2 cases of the strategies the step model forecasts
    assert sorted(r["strategy"] for r in found["rows"]) == ["allreduce", "ddp", "fsdp", "zero"]
    assert found["summary"]["cases"] == 4 and set(found["summary"]["workloads"]) == {"mlp"}
    for row in found["rows"]:
        assert row["lo_s"] <= row["predicted_s"] <= row["hi_s"] and row["measured_s"] > 0
        assert row["error"] == pytest.approx(row["predicted_s"] / row["measured_s"] - 1)
    assert _count(out, r"\| mlp \| (allreduce|ddp|fsdp|zero) \| [\d.]+ ms \| .*") == 4
    assert "4 cases: median absolute percentage error " in out
    assert found["summary"]["check_of_model"] and found["summary"]["checked_cases"] == 4


def test_predict_step_on_ranks_sharing_one_gpu_is_no_check_of_the_model(tmp_path, capsys):
    # the same run as if on one GPU: two ranks time-slicing cuda:0 at world size 2
    doc = json.loads(STEP_RUN.read_text())
    for bench in doc["benchmarks"]:
        info = bench["extra_info"]
        if info["kind"] == "training":
            info["device_type"] = "cuda"
            info["sampler"] = {"rank_devices": {"cuda:0": list(range(info["world_size"]))}}
    run = tmp_path / "one_gpu.json"
    run.write_text(json.dumps(doc))
    out_file = tmp_path / "predict.json"
    assert importlib.import_module("validation.predict_step").main([str(run), "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    found = json.loads(out_file.read_text())
    assert len(found["rows"]) == 4
    for row in found["rows"]:
        assert row["error"] is None and row["ranks_per_device"] == 2
        assert row["against_shared_device"] == pytest.approx(row["predicted_s"] / row["measured_s"] - 1)
    summary = found["summary"]
    assert not summary["check_of_model"] and summary["checked_cases"] == 0
    assert summary["median_abs_pct_error"] is None
    assert (
        "ranks share a GPU at 2 ranks (2 on one, time-sliced: no MPS): the measured world-size-2 steps are not two "
        "GPUs' worth and no check of the model; their error reads 'not a check'"
    ) in out
    assert (
        _count(out, r"\| mlp \| (allreduce|ddp|fsdp|zero) \| .* \| not a check \([+-][\d.]+% against a shared GPU\) .*")
        == 4
    )
    assert "4 cases, none a check of the model: every world-size-2 case ran its ranks on a shared GPU" in out
    assert "median absolute percentage error" not in out


@pytest.mark.slow  # two pytest sessions of the suites, three small collectives each
def test_aa_check_compares_two_clean_runs_and_fits_their_noise(tmp_path, monkeypatch, capsys):
    # Two trials of three collectives (4 KiB, 64 KiB, 1 MiB): the fewest cases the noise model's
    # spreads across cases can be fitted from. The workloads narrowed so the sessions collect little.
    monkeypatch.setenv("DPBENCH_TRIALS", "2")
    monkeypatch.setenv("DPBENCH_WORKLOADS", "mlp")
    storage = tmp_path / "aa"
    select = "test_collective and all_reduce and (4KiB or 1MiB) and not bucket"
    argv = ["--runs", "2", "--storage", str(storage), "--", "-k", select]
    assert importlib.import_module("validation.aa_check").main(argv) == 0
    out = capsys.readouterr().out
    assert len(sorted(storage.glob("*/[0-9][0-9][0-9][0-9]_aa[12].json"))) == 2
    assert _count(out, r"1-2 +0  .*") == 1  # the one pair, exit 0
    jumps = r" +[\d.]+  test_collective\[(4KiB|64KiB|1MiB)-all_reduce\]"
    assert _count(out, jumps) == 3  # each case's between-run jump
    model = json.loads((storage / "noise_model.json").read_text())
    assert model["source"].startswith("aa_check, 2 runs in ") and model["trial_sd"] >= 0
    assert out.rstrip().endswith("all pairs exit 0")


@pytest.mark.slow  # dpbench run: two configurations of mlp, two trials each, with a busy loop beside one
def test_busy_leaves_the_question_unsettled_naming_the_busy_configuration(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its work directory: under tmp_path
    assert importlib.import_module("validation.busy").main(["--trials", "2", "--busy", "single"]) == 0
    out = capsys.readouterr().out
    (decision,) = tmp_path.glob("dpbench-busy-*/decision.json")
    (question,) = json.loads(decision.read_text())["questions"]
    assert question["workload"] == "mlp" and question["outcome"] == "unsettled"
    assert any(r.startswith("other processes used ") and "single w1's trials" in r for r in question["reasons"])
    assert {c["configuration"] for c in question["configurations"]} == {"single w1", "ddp w2"}
    assert _count(out, r"exit 0; busy loop beside single's trials for \d+ s; files in .*") == 1
    assert _count(out, r"    single w1: other processes' CPU share \d+%") == 1


@pytest.mark.slow  # dpbench run twice: two configurations of mlp, two trials each
def test_decision_aa_counts_the_comparisons_of_two_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its work directory: under tmp_path
    argv = ["--runs", "2", "--workloads", "mlp", "--", "--strategies", "single,ddp", "--world-sizes", "1"]
    assert importlib.import_module("validation.decision_aa").main([*argv, "--trials", "2"]) == 0
    out = capsys.readouterr().out
    (work,) = tmp_path.glob("dpbench-aa-*")
    assert sorted(p.name for p in work.glob("decision*.json")) == ["decision1.json", "decision2.json"]
    # ddp w1 against single and against the leader; two pairs of trials can settle neither (the
    # sign test's interval claims from five pairs): nothing claimed, nothing contradicted.
    assert _count(out, r"run [12]: 0 of 2 comparisons settled \(0%\); 0 claims") == 2
    assert _count(out, r"runs 1 and 2: 0 contradictions") == 1
    assert "contradictions over 1 pairs of runs: 0" in out


@pytest.mark.slow  # dpbench ab on one case, two pairs: four pytest sessions
def test_ab_relu_runs_its_ab_job_on_a_scratch_clone_and_reads_the_verdicts(capsys):
    argv = ["--select", "single-mlp-w1", "--jobs", "ab", "--trials", "2", "--max-trials", "2"]
    code = importlib.import_module("validation.ab_relu").main(argv)
    out = capsys.readouterr().out
    # One case, read back from compare's JSON: whatever two pairs can say about it, it was judged.
    (line,) = [x for x in out.splitlines() if x.startswith("exit ") and "mlp/lenet cases regressed" in x]
    assert re.fullmatch(r"exit [01] \(target 1\); [01] of 1 mlp/lenet cases regressed \(target ≥ 1 of 1\)", line)
    assert "transformer cases regressed: none" in out and "== A/A" not in out
    assert code == (0 if out.rstrip().endswith("target met") else 1)
