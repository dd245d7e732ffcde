"""``dpbench run`` from an installed wheel, outside any checkout, on a user's module in the working
directory (two input tensors, its own loss) and a small GPT-2: the run is saved with its
resolved configuration, the report written, the decision printed; and with the same installed
package, every strategy trains the user's module to the same parameters as ``single``.

The wheel and its fresh environment are test_installed_package.py's (the same fixture)."""

from __future__ import annotations

import json
import re

import pytest
from _user_models import SOURCE
from test_installed_package import _run, built, installed  # noqa: F401 (the fixtures)

pytestmark = pytest.mark.slow

GPT2 = "hf:gpt2@n_layer=1,n_embd=32,n_head=2,vocab_size=128,n_positions=32,seq_len=16"
# Two workloads, a user's module and a Hugging Face one (transformers imported in every worker from
# the wheel's environment): the other Hugging Face families train alike from the checkout
# (test_spec_equivalence.py), the same code the wheel installs.
SPECS = ("my_models:tiny_net", GPT2)

EQUAL = """
import sys, torch, dpbench
spec = sys.argv[1]
def train(strategy, world):
    with dpbench.launch(strategy, spec, world_size=world, global_batch=8, seed=3, lr=0.05, timeout=120) as run:
        run.step(3)
        return run.parameters()
if __name__ == "__main__":
    ref = train("single", 1)
    for strategy in ("ddp", "fsdp", "zero"):
        got = train(strategy, 2)
        for name, expected in ref.items():
            torch.testing.assert_close(got[name], expected, atol=2e-5, rtol=1e-4)
        print(strategy, "equals single", flush=True)
"""


@pytest.fixture
def user_dir(tmp_path):
    (tmp_path / "my_models.py").write_text(SOURCE)
    return tmp_path


# Two strategies, one of each kind (a process group; sharded state), are enough to show `dpbench run`
# from the wheel saving, reporting and deciding per workload: that every strategy runs from the wheel,
# and trains like single, is the equality test below.
RUN_STRATEGIES = ("single", "fsdp")


@pytest.mark.timeout(1500)  # 2 workloads × single, fsdp at 1 and 2, one trial; transformers in each worker
def test_dpbench_run_from_the_wheel_saves_reports_and_decides(installed, user_dir):  # noqa: F811
    args = ["-c", "import sys; from dpbench.cli import main; sys.exit(main())", "run"]
    for spec in SPECS:
        args += ["--workload", spec]
    args += [
        "--strategies",
        ",".join(RUN_STRATEGIES),
        "--world-sizes",
        "1,2",
        "--trials",
        "1",  # what the wheel can get wrong is in one pass: the saving, the report, the decision
        "--suites",
        "throughput",
    ]
    proc = _run(installed, args, user_dir, 1400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    (saved,) = (user_dir / "results").glob("*/0001_run.json")
    run = json.loads(saved.read_text())
    assert run["machine_info"]["dpbench"]["run_config"]["workloads"] == list(SPECS)
    infos = [b["extra_info"] for b in run["benchmarks"]]
    assert {(i["workload"], i["strategy"]) for i in infos} == {
        (spec, strategy) for spec in SPECS for strategy in RUN_STRATEGIES
    }
    assert all(i["parameter_count"] > 0 and i["workload_spec"] == i["workload"] for i in infos)
    assert (user_dir / "report.html").is_file() and "my_models:tiny_net" in (user_dir / "report.html").read_text()
    assert "decision (per question" in proc.stdout
    # The decision once, one headline per question (dpbench.decision.text), then the report's path last.
    decision = proc.stdout[proc.stdout.index("decision (per question") :]
    assert decision.rstrip().splitlines()[-1].startswith("report: ")
    decision = decision.replace("\n    ", " ")  # a headline wraps at 100 columns
    assert proc.stdout.count("decision (per question") == 1
    for spec in SPECS:
        (headline,) = re.findall(rf"^{re.escape(spec)} \(.*$", decision, flags=re.M)
        assert re.search(r": (the fastest is|no single fastest|not settled|only)", headline), headline


# Every multi-process strategy from the wheel, on the user's module that its workers import again
# from the working directory: what only an installed package can get wrong. That the Hugging Face
# models train alike under each strategy is test_spec_equivalence.py's (the same code, from the
# checkout); that they run from the wheel is the `dpbench run` test above.
@pytest.mark.timeout(900)
def test_every_strategy_equals_single_with_the_installed_package(installed, user_dir):  # noqa: F811
    (user_dir / "equal.py").write_text(EQUAL)
    proc = _run(installed, ["equal.py", SPECS[0]], user_dir, 600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert proc.stdout.split("\n")[:3] == [f"{s} equals single" for s in ("ddp", "fsdp", "zero")]


def test_bad_input_from_the_wheel_is_one_line_and_exit_2(installed, user_dir):  # noqa: F811
    args = ["-c", "import sys; from dpbench.cli import main; sys.exit(main())", "run", "--workload", "my_models:nope"]
    proc = _run(installed, args, user_dir, 120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "its Workload attributes: fixed, tiny_net" in proc.stderr
    assert not (user_dir / "results").exists()
