"""Every program of ``validation/`` runs end to end at its smallest size (pyperf's habit with its
examples): a simulation at 20 jobs, a validation on the smallest real run it accepts. Each asserts
its exit code and what it printed or wrote; the full-size numbers are on the validation pages.

The A/A programs (``aa_check``, ``decision_aa``) read stored real runs (``--reuse``, ``--decisions``):
what they add to ``pytest suites/`` and ``dpbench run`` is the counting, checked here on runs whose
counts are known; their own runs are checked for the commands they start.

The simulations whose tests live beside the code they check run there: simulate_gate
(tests/gate/test_family_simulation.py), simulate_ab_settle (tests/ab/test_ab_settle.py),
simulate_sequential and sequential_power_floor (tests/decision/).

``validation.ab_relu``: its scratch clone slows ``F.relu`` on the head side only (checked in two
interpreters), and the job it starts and the verdicts it reads are checked with ``dpbench ab``
stood in for (``dpbench ab`` runs end to end in tests/ab/test_ab.py); its target, 12 of the 14 mlp
and lenet cases regressed, is the whole suite's, measured as the gate's validation page records.
"""

from __future__ import annotations

import gzip
import importlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GATE_DATA = ROOT / "tests" / "gate" / "data"
DISTURBED_RUN = ROOT / "tests" / "data" / "quick-run-disturbed-trial.json.gz"
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
            "validation.simulate_contention",
            ["--jobs", "5", "--rates", "0.5", "--unsampled", "0,1", "--configs", "2", "--gaps", "0"],
            {
                r"model quick-runs \(.*\); 5 jobs a cell; 56 measured contended trials \(step factor median .*\)": 1,
                r"\| 50% \| (0|100)% \| A/A \| 2 \| [\d.]+% / [\d.]+% \| [\d.]+% / [\d.]+% \| [\d.]+% / [\d.]+% \| "
                r"\d+% / \d+% \|": 2,
            },
            id="simulate_contention",
        ),
        pytest.param(
            "validation.simulate_job_level",
            ["--jobs", "5", "--configs", "4", "--gaps", "0,0.2", "--looks", "5,8", "--rates", "0,1", "--wild", "0.5"],
            {
                r"model quick-runs \(.*\); 5 jobs a cell; level 90% per job; one trial 10-90x slower in 50% of jobs": 1,
                r"\| (0|100)% \| 4 \| 6 \| A/A \| [\d.]+% / — \| [\d.]+% / — \| [\d.]+% / — \|": 2,
                r"\| (0|100)% \| 4 \| 6 \| 20% \| [\d.]+% / [\d.]+% \| [\d.]+% / [\d.]+% \| [\d.]+% / [\d.]+% \|": 2,
            },
            id="simulate_job_level",
        ),
        pytest.param(
            "validation.simulate_job_level",
            ["--jobs", "5", "--configs", "4", "--gaps", "0", "--trials", "8", "--margin", "0.05"],
            {
                r"model quick-runs \(.*\); 5 jobs a cell; level 90% per job; level claims within ±5%": 1,
                r"\| 0% \| 4 \| 6 \| A/A \| [\d.]+% / — / [\d.]+% \|": 1,
            },
            id="simulate_job_level-margin",
        ),
        pytest.param(
            "validation.simulate_job_level",
            ["--jobs", "5", "--configs", "4", "--gaps", "0.2", "--trials", "5", "--rule", "median"],
            {
                r"model quick-runs \(.*\); 5 jobs a cell; level 90% per job; the median's interval \(MAD\)": 1,
                r"\| 0% \| 4 \| 6 \| 20% \| [\d.]+% / [\d.]+% \|": 1,
            },
            id="simulate_job_level-median",
        ),
        pytest.param(
            "validation.simulate_job_level",
            ["--jobs", "5", "--configs", "4", "--gaps", "0.2", "--trials", "5", "--rule", "hull"],
            {
                r"model quick-runs \(.*\); 5 jobs a cell; level 90% per job; the t-interval holding the median": 1,
                r"\| 0% \| 4 \| 6 \| 20% \| [\d.]+% / [\d.]+% \|": 1,
            },
            id="simulate_job_level-hull",
        ),
        pytest.param(
            "validation.interval_rules",
            [str(GATE_DATA / "quick-throughput.json.gz")],
            # The stored quick run: 3 questions, 63 pairs; the hull claims what the t does, never widened.
            {r"\| quick-throughput\.json\.gz \| 3 \| 63 \| 10 / 10 / 3 \| 0 \|": 1},
            id="interval_rules",
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


AA_RUNS = [GATE_DATA / "aa-contended-base.json.gz", GATE_DATA / "aa-contended-same.json.gz"]  # a real A/A pair


def _stored_aa(storage: Path, i: int) -> Path:
    path = storage / "machine" / f"{i:04d}_aa{i}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.decompress(AA_RUNS[i - 1].read_bytes()))
    return path


def test_aa_check_compares_two_real_runs_and_fits_their_noise(tmp_path, capsys):
    storage = tmp_path / "aa"
    for i in (1, 2):
        _stored_aa(storage, i)
    argv = ["--runs", "2", "--storage", str(storage), "--reuse"]
    assert importlib.import_module("validation.aa_check").main(argv) == 0
    out = capsys.readouterr().out
    assert _count(out, r"1-2 +0  inconclusive 7") == 1  # the one pair, exit 0: a contended A/A, nothing named
    jumps = _count(out, r" +[\d.]+  test_throughput\[[a-z]+-mlp-w[12]\]")
    assert jumps == 7 and "   6.889  test_throughput[single-mlp-w1]" in out  # each case's between-run jump
    model = json.loads((storage / "noise_model.json").read_text())
    assert model["source"] == f"aa_check, 2 runs in {storage.resolve()}"
    assert model["trial_sd"] == pytest.approx(0.47904, abs=1e-5) and model["jumpy_fraction"] == 0.0
    assert out.rstrip().endswith("all pairs exit 0")


def test_aa_check_runs_the_suites_per_run_into_its_storage(tmp_path, monkeypatch, capsys):
    # The runs themselves are pytest sessions of the suites (tested on their own); here: the commands.
    module = importlib.import_module("validation.aa_check")
    storage = tmp_path / "aa"
    commands = []

    def fake_run(cmd, **kwargs):
        commands.append(cmd)
        _stored_aa(storage, len(commands))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(module.subprocess, "run", fake_run)
    assert module.main(["--runs", "2", "--storage", str(storage), "--", "-k", "mlp"]) == 0
    assert [c[1:] for c in commands] == [
        ["-m", "pytest", "suites/", "-q", "-p", "no:cacheprovider", f"--benchmark-save=aa{i}"]
        + [f"--benchmark-storage=file://{storage.resolve()}", "--benchmark-save-data", "-k", "mlp"]
        for i in (1, 2)
    ]
    assert _count(capsys.readouterr().out, r"1-2 +0  inconclusive 7") == 1


@pytest.mark.slow  # dpbench run: two configurations of mlp, one trial each, a busy loop beside one
def test_busy_leaves_the_question_unsettled_naming_the_busy_configuration(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its work directory: under tmp_path
    monkeypatch.setenv("DPBENCH_MEMORY_ESTIMATE", "state")  # the fit check's traced peak: ~2 s, not what is checked
    assert importlib.import_module("validation.busy").main(["--trials", "1", "--busy", "single"]) == 0
    out = capsys.readouterr().out
    (decision,) = tmp_path.glob("dpbench-busy-*/decision.json")
    (question,) = json.loads(decision.read_text())["questions"]
    assert question["workload"] == "mlp" and question["outcome"] == "unsettled"
    assert any(r.startswith("other processes used ") and "single w1's trials" in r for r in question["reasons"])
    assert {c["configuration"] for c in question["configurations"]} == {"single w1", "ddp w2"}
    assert _count(out, r"exit 0; busy loop beside single's trials for \d+ s; files in .*") == 1
    assert _count(out, r"    single w1: other processes' CPU share \d+%") == 1


@pytest.fixture(scope="module")
def stored_decisions(tmp_path_factory):
    """The decisions of two stored real runs (``dpbench report RUN --json``), and the first with its
    first claim turned round: a contradiction of it, made on purpose."""
    from dpbench.cli import main

    where = tmp_path_factory.mktemp("decisions")
    paths = []
    for name, stored in (("quick", GATE_DATA / "quick-throughput.json.gz"), ("disturbed", DISTURBED_RUN)):
        run = where / f"{name}.json"
        run.write_bytes(gzip.decompress(stored.read_bytes()))
        out = where / f"{name}-decision.json"
        assert main(["report", str(run), "-o", str(where / f"{name}.html"), "--json", str(out)]) == 0
        paths.append(out)
    decision = json.loads(paths[0].read_text())
    claim = next(
        c[side] for q in decision["questions"] for c in q["configurations"] for side in ("vs_single", "vs_leader")
        if c[side] and c[side]["claim"] in ("faster", "slower")
    )  # fmt: skip
    claim["claim"] = {"faster": "slower", "slower": "faster"}[claim["claim"]]
    paths.append(where / "turned-decision.json")
    paths[-1].write_text(json.dumps(decision))
    return paths


@pytest.mark.slow  # two reports rendered
def test_decision_aa_counts_claims_and_contradictions_of_written_decisions(stored_decisions, capsys):
    argv = ["--decisions", *map(str, stored_decisions)]
    assert importlib.import_module("validation.decision_aa").main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "run 1: 10 of 36 comparisons settled (28%); 6 claims",
        "run 2: 14 of 70 comparisons settled (20%); 10 claims",
        # the turned claim (dp w2 slower than single w1) and, still, the same relation against the leader
        "run 3: 10 of 36 comparisons settled (28%); 7 claims",
        "runs 1 and 2: 0 contradictions",
        "runs 1 and 3: 1 contradictions",
        "  mlp optimizer=sgd, precision=fp32, global_batch=64: single w1 > dp w2, then <",
        # run 2 leaves dp w2 against single w1 unsettled: nothing for the turned claim to contradict
        "runs 2 and 3: 0 contradictions",
        "contradictions over 3 pairs of runs: 1",
    ]


@pytest.mark.slow  # two reports rendered
def test_decision_aa_runs_dpbench_run_per_run_and_reads_each_json(stored_decisions, tmp_path, monkeypatch, capsys):
    # The runs themselves are `dpbench run` (tested on its own); here: the commands, and the files read.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    module = importlib.import_module("validation.decision_aa")
    commands = []

    def fake_run(cmd):
        commands.append(cmd)
        Path(cmd[cmd.index("--json") + 1]).write_bytes(stored_decisions[len(commands) - 1].read_bytes())
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(module.subprocess, "run", fake_run)
    argv = ["--runs", "2", "--workloads", "mlp,lenet", "--", "--strategies", "single,ddp"]
    assert module.main(argv) == 0
    (work,) = tmp_path.glob("dpbench-aa-*")
    assert [c[c.index("run") :] for c in commands] == [
        ["run", "--device", "cpu", "--results", str(work / "results"), "--workload", "mlp", "--workload", "lenet"]
        + ["--save", f"aa{i}", "--report", str(work / f"report{i}.html"), "--json", str(work / f"decision{i}.json")]
        + ["--strategies", "single,ddp"]
        for i in (1, 2)
    ]
    assert "runs 1 and 2: 0 contradictions" in capsys.readouterr().out


def test_decision_aa_refuses_a_missing_decision_in_one_line(tmp_path, capsys):
    missing = str(tmp_path / "none.json")
    with pytest.raises(SystemExit) as exc:
        importlib.import_module("validation.decision_aa").main(["--decisions", missing, missing])
    assert exc.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.endswith(f"--decisions: expected decision JSON files, found no file at {missing}, {missing}")


@pytest.mark.slow  # a git clone, and an interpreter importing torch twice
def test_ab_relus_scratch_clone_slows_relu_on_the_head_only(tmp_path):
    clone = importlib.import_module("validation.ab_relu").scratch_clone(tmp_path)
    probe = "import dpbench.workloads, torch.nn.functional as F; print(hasattr(F.relu, '__wrapped__'))"
    wrapped = {}
    for tag in ("relu-base", "relu-head"):
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", tag], check=True, timeout=60)
        env = {**os.environ, "PYTHONPATH": str(clone)}
        out = subprocess.run([sys.executable, "-P", "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        wrapped[tag] = out.stdout.strip()
    assert wrapped == {"relu-base": "False", "relu-head": "True"}


def test_ab_relu_runs_dpbench_ab_in_the_clone_and_reads_its_verdicts(tmp_path, monkeypatch, capsys):
    # `dpbench ab` itself runs end to end in tests/ab/test_ab.py; here: the job it starts, and how its
    # verdicts become the program's lines and exit code (12 of 14 needed; the transformer must not move).
    module = importlib.import_module("validation.ab_relu")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(module, "scratch_clone", lambda root: root)
    started = []
    names = [f"test_throughput[{s}-{w}-w1]" for s in ("single", "ddp") for w in ("mlp", "lenet")]
    compare = {"benchmarks": [{"name": n, "verdict": "regressed"} for n in names[:3]]}
    compare["benchmarks"] += [{"name": names[3], "verdict": "inconclusive"}]
    compare["benchmarks"] += [{"name": "test_throughput[single-transformer-w1]", "verdict": "unchanged"}]

    class Job:
        def __init__(self, cmd, cwd, env, stdout, text):
            started.append((cmd, cwd, env))
            Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps(compare))
            self.stdout = iter(["until settled: 4 pairs of trials, 9 of 10 cases settled\n"])

        def wait(self):
            return 1

    monkeypatch.setattr(module.subprocess, "Popen", Job)
    assert module.main(["--jobs", "ab", "--trials", "2"]) == 1  # 3 of 4 named: the target needs 4 of 4
    ((cmd, cwd, env),) = started
    assert cmd[4:9] == ["ab", "relu-base", "relu-head", "--python", sys.executable]
    assert cmd[cmd.index("--trials") + 1] == "2" and cmd[cmd.index("--max-trials") + 1] == "6"
    assert cmd[-3:] == ["--", "-k", "test_throughput"] and env["DPBENCH_PROFILE"] == "quick"
    out = capsys.readouterr().out
    assert "exit 1 (target 1); 3 of 4 mlp/lenet cases regressed (target ≥ 12 of 4)" in out
    assert "transformer cases regressed: none" in out and "until settled: 4 pairs of trials" in out
    assert out.rstrip().endswith("target NOT met") and "== A/A" not in out


def test_the_job_level_t_rule_claims_where_the_interval_excludes_no_difference():
    from validation.simulate_job_level import claims_difference

    assert claims_difference([2.0, 2.2, 1.9], [1.0, 1.0, 1.0], 0.05)  # about 2x, tight: faster
    assert claims_difference([1.0, 1.0, 1.0], [2.0, 2.2, 1.9], 0.05)  # the other way: slower
    assert not claims_difference([1.1, 0.9, 1.0], [1.0, 1.0, 1.0], 0.05)  # around 1: no claim
    # One pair: no interval. A strict enough level leaves even a clear gap unclaimed.
    assert not claims_difference([2.0], [1.0], 0.05)
    assert not claims_difference([2.0, 2.6, 1.6], [1.0, 1.0, 1.0], 1e-6)


def test_the_job_level_judge_keeps_a_pairs_first_claim_and_none_on_contended_trials():
    from validation.simulate_job_level import _judge

    wobble = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0]
    times = [[0.5 * w for w in wobble], [1.0 * w for w in reversed(wobble)]]  # the first twice as fast
    quiet = [[0.0] * 8, [0.0] * 8]
    assert _judge([2.0, 1.0], times, quiet, [5, 8], 0.05) == (False, True, 0.0)  # the gap, claimed
    assert _judge([1.0, 1.0], times, quiet, [5, 8], 0.05) == (True, False, 0.0)  # tied in truth: a false claim
    busy = [[0.9] * 8, [0.0] * 8]  # other processes took 90% of the cores through the first's trials
    assert _judge([2.0, 1.0], times, busy, [5, 8], 0.05) == (False, False, 0.0)
    unsampled = [[float("nan")] * 8, [0.0] * 8]  # not sampled: its spread decides, and it is quiet
    assert _judge([2.0, 1.0], times, unsampled, [5, 8], 0.05) == (False, True, 0.0)


def test_the_job_level_judge_claims_level_within_the_margin_and_counts_it_false_beyond():
    from validation.simulate_job_level import _judge, claims_level

    a = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01]  # within ±2% of b, pair by pair
    b = [1.0] * 8
    assert claims_level(a, b, 0.05, 0.05) and not claims_level(a, b, 0.05, 0.005)
    assert not claims_level(a[:1], b[:1], 0.05, 0.05)  # one pair: no interval
    times = [[1 / x for x in a], [1 / x for x in b], [0.5 / x for x in a]]  # the third twice as fast
    quiet = [[0.0] * 8] * 3
    # Tied in truth: the level claim is right; the twice-as-fast pairs are claimed faster.
    assert _judge([1.0, 1.0, 2.0], times, quiet, [8], 0.05, margin=0.05) == (False, True, 1.0)
    # 10% apart in truth, as close in the trials: the level claim is false.
    assert _judge([1.1, 1.0, 2.0], times, quiet, [8], 0.05, margin=0.05) == (True, True, 0.0)
    # Without a margin no level is claimed, and nothing is false.
    assert _judge([1.1, 1.0, 2.0], times, quiet, [8], 0.05) == (False, True, 0.0)


def test_a_disturbed_trial_is_one_trial_of_one_configuration_made_slower_within_the_first_five():
    import random

    from validation.simulate_job_level import disturb

    times = [[1.0] * 8 for _ in range(4)]
    disturb(times, random.Random(3), (10.0, 90.0))
    slowed = [(c, t) for c, series in enumerate(times) for t, v in enumerate(series) if v != 1.0]
    assert len(slowed) == 1 and slowed[0][1] < 5 and 10.0 <= times[slowed[0][0]][slowed[0][1]] <= 90.0


def test_the_medians_interval_is_centred_on_the_median_and_one_wild_pair_barely_moves_it():
    from validation.simulate_job_level import median_interval, median_mad_quantile, t_interval

    base = [1.0] * 8
    clean = [1.10, 1.12, 1.08, 1.11, 1.09, 1.13, 1.07, 1.10]  # about 10% faster, pair by pair
    wild = [*clean[:-1], 50.0]  # one pair 50x: a disturbance no re-measurement replaced
    lo, hi = median_interval(clean, base, 0.05)
    assert lo < math.log(1.10) < hi and lo > 0  # the median log ratio, 10% excluded from 0: a claim
    wlo, whi = median_interval(wild, base, 0.05)
    assert abs((wlo + whi) / 2 - math.log(1.105)) < 0.01 and wlo > 0  # still about 10% faster, still a claim
    tlo, thi = t_interval(wild, base, 0.05)
    assert (tlo + thi) / 2 > math.log(1.5) and tlo < 0  # the mean moves past 1.5x and claims nothing
    assert median_interval(clean[:2], base[:2], 0.05) is None  # too few pairs for a MAD
    # Seeded, and wider at smaller errors and at fewer pairs.
    assert median_mad_quantile(5, 0.1) == median_mad_quantile(5, 0.1)
    assert median_mad_quantile(5, 0.01) > median_mad_quantile(5, 0.1) > median_mad_quantile(8, 0.1)


def test_the_hull_is_the_t_interval_widened_only_to_hold_the_median():
    from validation.simulate_job_level import hull_interval, t_interval

    base = [1.0] * 5
    even = [1.10, 1.12, 1.08, 1.11, 1.09]  # the median (1.10) inside the t-interval: nothing changes
    assert hull_interval(even, base, 0.1) == t_interval(even, base, 0.1)
    # Four pairs a little faster, one far faster: the mean log ratio, and the t-interval about it,
    # sit above the median log ratio (1.02), which the hull then reaches down to.
    skewed = [1.01, 1.02, 1.02, 1.03, 3.0]
    tlo, thi = t_interval(skewed, base, 0.5)
    assert tlo > math.log(1.02)  # the t-interval alone leaves out the ratio the decision shows
    assert hull_interval(skewed, base, 0.5) == (math.log(1.02), thi)
    assert hull_interval(even[:2], base[:2], 0.1) is None  # fewer than MIN_PAIRS (3) pairs
