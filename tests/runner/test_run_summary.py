"""The terminal decision of ``dpbench run`` is the suite session's decision (one model), read from
the saved run: on a real quick run, a configuration whose 4 paired trials are each slower is not
called level (4 pairs cover 87.5% < 90%: unsettled), and nothing is crowned while one is open."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

from dpbench.report.session_summary import TERMINAL_LINES, decision_text
from dpbench.runner.summary import print_decision

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
    assert full[0] == "claims at 90% intervals of paired trials; level = within ±5%; unsettled = more trials needed"
    assert " ".join(" ".join(full[1:3]).split()) == (
        "mlp (sgd · fp32 · global batch 64): not settled: single w1 leads at 4,760 samples/s, but unsettled "
        "against it: manual w2, allreduce w2 and fsdp w2; it settles at ~5 trials."
    )
    assert full[5].split() == ["manual", "w2", "0.61×", "(0.50–0.85,", "4", "pairs)", "unsettled", "(~5", "trials)"] + [
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


def test_report_json_is_the_decision_the_terminal_words(tmp_path, capsys):
    from dpbench.cli import main
    from dpbench.decision.words import summary_lines
    from dpbench.report.session_summary import decision_of

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
