"""The terminal decision of ``dpbench run``, from a saved run's JSON: the fastest configuration by
the paired trials' estimator, the others against it, what was inconclusive."""

from __future__ import annotations

import io
import json

from dpbench.runner.summary import decision_lines, print_decision


def _bench(strategy, world, times, *, suite="throughput", **extra):
    info = {
        "kind": "training",
        "suite": suite,
        "workload": "my_models:tiny_net",
        "strategy": strategy,
        "world_size": world,
        "global_batch": 64,
        "samples_per_s": 64 / sorted(times)[len(times) // 2],
        "trials": {"step_time_s": times},
        "peak_memory_bytes": {f"cpu:rank{r}": (100 + r) * 2**20 for r in range(world)},
        "parameter_count": 497,
        "requested_options": {},
        **extra,
    }
    return {"extra_info": info}


def test_the_fastest_is_named_and_the_others_judged_by_their_paired_trials():
    run = {
        "benchmarks": [
            _bench("single", 1, [0.010, 0.011, 0.012]),
            _bench("ddp", 2, [0.005, 0.0055, 0.006]),  # twice as fast, every trial
            _bench("fsdp", 2, [0.004, 0.011, 0.006]),  # neither clearly faster nor slower than ddp
            _bench("ddp", 2, [0.02, 0.02, 0.02], suite="scaling", scaling_efficiency=0.8),
        ]
    }
    lines = decision_lines(run)
    assert lines[0] == "my_models:tiny_net (497 parameters)"
    assert lines[1] == "  fastest: ddp w2, 1.164e+04 samples/s at batch 64, 101 MiB/rank"
    assert lines[2].startswith("  fsdp w2: no significant difference (step time 1.") and "3 paired trials" in lines[2]
    assert lines[3].startswith("  single w1: step time 2.00× the fastest's (CI 2.00–2.00, 3 paired trials)")
    assert lines[4] == "  scaling efficiency: ddp w2 0.80"
    assert lines[5] == "  inconclusive against ddp w2: fsdp w2 (more trials would tell)"


def test_a_run_without_training_benchmarks_says_so(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"benchmarks": [{"extra_info": {"kind": "collective"}}]}))
    out = io.StringIO()
    print_decision(path, out=out)
    assert out.getvalue().splitlines()[1] == "no training benchmarks in this run"
