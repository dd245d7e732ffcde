"""The terminal decision of ``dpbench run`` is the suite session's decision (one model), read from
the saved run: on a real quick run, a configuration whose 4 paired trials are each slower is not
called level (4 pairs cover 87.5% < 90%: unsettled), and nothing is crowned while one is open."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from dpbench.report.text import TERMINAL_LINES, decision_text
from dpbench.runner.text import print_decision

QUICK = Path(__file__).parents[1] / "gate" / "data" / "quick-throughput.json.gz"


def test_the_run_decision_is_the_sessions_decision(tmp_path):
    path = tmp_path / "0001_quick.json"
    path.write_bytes(gzip.decompress(QUICK.read_bytes()))
    out = io.StringIO()
    print_decision(path, out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "decision (per question: a workload at one recipe; the report has every number):"
    assert lines[1:] == decision_text([path], max_lines=TERMINAL_LINES).splitlines()
    assert len(lines) - 1 <= TERMINAL_LINES  # it fits the last screen (here: the headlines alone)
    full = decision_text([path]).splitlines()  # dpbench report: every row
    assert " ".join(" ".join(full[0:2]).split()) == (
        "claims at 90% per question (a 10% chance of any false claim, split over its comparisons), in this "
        "session; level = within ±5%; unsettled = more trials needed"
    )
    assert " ".join(" ".join(full[2:4]).split()) == (
        "mlp (sgd · fp32 · global batch 64): not settled: single w1 leads at 4,760 samples/s, but unsettled "
        "against it: manual w2 and allreduce w2; it settles at ~6 trials."
    )
    assert full[6].split() == ["manual", "w2", "0.61×", "(0.27–1.47,", "4", "pairs)", "unsettled", "(~6", "trials)"] + [
        "peak",
        "369",
        "MiB/rank",
    ]
    assert not [line for line in full if "the fastest" in line]  # nothing crowned while a comparison is open


def test_a_run_without_training_benchmarks_says_so(tmp_path):
    run = json.loads(gzip.decompress(QUICK.read_bytes()))
    run["benchmarks"] = run["benchmarks"][:1]
    run["benchmarks"][0]["extra_info"] = {**run["benchmarks"][0]["extra_info"], "kind": "collective"}
    path = tmp_path / "0001_collective.json"
    path.write_text(json.dumps(run))
    out = io.StringIO()
    print_decision(path, out=out)
    assert out.getvalue().splitlines()[1:] == ["no training benchmarks in this run"]


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_report_json_is_the_decision_the_terminal_words(tmp_path, capsys):
    from dpbench.cli import main
    from dpbench.decision.text import summary_lines
    from dpbench.report.text import decision_of

    path = tmp_path / "0001_quick.json"
    path.write_bytes(gzip.decompress(QUICK.read_bytes()))
    assert main(["report", str(path), "-o", str(tmp_path / "r.html"), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)  # stdout holds the JSON alone
    decision = decision_of([path])
    assert doc == json.loads(json.dumps(decision.to_dict()))
    assert [q["leader"] for q in doc["questions"]] == [a.leader for a in decision.answers]
    assert main(["report", str(path), "-o", str(tmp_path / "r.html"), "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:-1] == summary_lines(decision) and out[-1] == str((tmp_path / "r.html").resolve())
    assert json.loads((tmp_path / "d.json").read_text()) == doc


def test_a_configuration_whose_fingerprint_departs_is_left_out_of_every_view(tmp_path):
    """The quick run with fingerprints planted: mlp's ddp w2 trained something else than single (its
    loss at step 3 is 1% off): the decision never ranks it and says why, in the terminal and the JSON."""
    from dpbench.report.text import decision_of

    run = json.loads(gzip.decompress(QUICK.read_bytes()))
    losses = [2.3, 2.1, 1.9, 1.8]
    for bench in run["benchmarks"]:
        info = bench["extra_info"]
        if info.get("workload") == "mlp" and info.get("kind", "training") == "training":
            mine = list(losses)
            if bench["name"] == "test_throughput[ddp-mlp-w2]":
                mine[3] *= 1.01
            info["fingerprint"] = {
                "losses": mine,
                "step": 2,
                "param_sum": 10.0,
                "param_abs_sum": 100.0,
                "param_sq_sum": 50.0,
                "param_count": 1000,
                "precision": "fp32",
                "exempt": None,
                "rank_spread": 0.0,
            }
    path = tmp_path / "0001_quick.json"
    path.write_text(json.dumps(run))
    decision = decision_of([path])
    mlp = next(a for a in decision.answers if a.question.workload == "mlp" and a.question.global_batch == 64)
    ((name, why),) = mlp.excluded
    assert name == "ddp w2" and why.startswith("computes something else than single: ")
    assert "ddp w2" not in [s.name for s in mlp.standings]
    text = decision_text([path])
    assert "  left out: ddp w2: computes something else than single: " in text
    (q,) = [q for q in decision.to_dict()["questions"] if q["workload"] == "mlp" and q["recipe"]["global_batch"] == 64]
    assert q["excluded"][0]["configuration"] == "ddp w2"


def test_a_long_workload_spec_is_named_by_what_it_builds_and_a_hash_in_the_terminal(tmp_path):
    from _long_spec import LONG_SPEC, long_spec_run

    from dpbench.decision.text import WIDTH, workload_label

    out = io.StringIO()
    print_decision(long_spec_run(tmp_path), out=out)
    lines = out.getvalue().splitlines()
    label = workload_label(LONG_SPEC)
    assert label == "hf:gpt2@…#" + label[-6:] and len(label) == 16
    assert lines[3:5] == [  # below the heading and the level line's two lines
        f"{label} (sgd · fp32 · global batch 64): not settled: single w1 leads at 4,760 samples/s,",
        "    but unsettled against it: manual w2, dp w2, ddp w2, allreduce(mode=overlap) w2 and 6 more; it",
    ]
    assert max(len(line) for line in lines) <= WIDTH and LONG_SPEC not in out.getvalue()


def test_the_terminal_decision_draws_nothing(tmp_path):
    """Every suite session that saves a run ends with the decision: it reads the page's decision
    (dpbench.report.data) without importing matplotlib or the figures, about half a second of each
    session's end. In a fresh interpreter, the same text as here."""
    import subprocess
    import sys

    path = tmp_path / "0001_quick.json"
    path.write_bytes(gzip.decompress(QUICK.read_bytes()))
    code = (
        "import sys; from dpbench.report.text import decision_text; text = decision_text([sys.argv[1]]); "
        "sys.stdout.write(text); "
        "sys.exit(' '.join(m for m in ('matplotlib', 'seaborn', 'dpbench.report.figures') if m in sys.modules) or None)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\nmlp (sgd · fp32 · global batch 64): " in proc.stdout, proc.stdout[:300]
    assert proc.stdout == decision_text([path])
