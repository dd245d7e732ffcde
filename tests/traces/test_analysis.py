"""The breakdown of hand-built traces whose answers were worked out by hand (tests/traces/_kineto.py)."""

from __future__ import annotations

import gzip
import json

import pytest
from _kineto import AUTOGRAD, GLOO, cpu_rank, cuda_rank, op, step, write

from dpbench.traces.analysis import analyse_case, analyse_rank, compare_two_pass, describe, read_trace

US = 1e-6


def _close(value):
    return pytest.approx(value, rel=1e-9, abs=1e-12)


def test_a_cpu_step_splits_into_compute_exposed_communication_and_idle():
    steps = analyse_rank(cpu_rank(70))["steps"]
    assert len(steps) == 1
    s = steps[0]
    assert s["span_s"] == _close(100 * US)
    assert s["compute_s"] == _close(68 * US)
    assert s["comm_s"] == _close(25 * US)
    assert s["overlap_s"] == _close(18 * US)
    assert s["exposed_comm_s"] == _close(7 * US)
    assert s["idle_s"] == _close(25 * US)
    assert s["compute_s"] + s["exposed_comm_s"] + s["idle_s"] == _close(s["span_s"])


def test_cuda_counts_kernels_and_labels_overlap_hidden(tmp_path):
    case = analyse_case([write(tmp_path / "rank0.json.gz", cuda_rank())])
    assert case["device_kind"] == "cuda" and case["overlap_label"] == "hidden"
    r = case["ranks"][0]
    assert (r["compute_s"], r["comm_s"], r["overlap_s"], r["exposed_comm_s"], r["idle_s"]) == (
        _close(35 * US),
        _close(30 * US),
        _close(10 * US),
        _close(20 * US),
        _close(45 * US),
    )
    assert r["overlap_fraction"] == _close(10 / 30)
    assert r["steps"] == 1 and r["memory_peak_bytes"] == {"forward": 5000}  # the CUDA allocator's


def test_on_cuda_our_communication_label_as_the_device_ran_it_is_communication(tmp_path):
    trace = cuda_rank()
    trace["traceEvents"].append(op("dpbench:communication", 58, 10, tid=7, cat="gpu_user_annotation"))
    r = analyse_case([write(tmp_path / "rank0.json.gz", trace)])["ranks"][0]
    # The memcpy [60,65] inside it moves to communication: compute 30, comm [30,68] = 38, overlap 10.
    assert (r["compute_s"], r["comm_s"], r["overlap_s"], r["idle_s"]) == (
        _close(30 * US),
        _close(38 * US),
        _close(10 * US),
        _close(42 * US),
    )


def test_skew_and_straggler_across_ranks_on_one_wall_clock(tmp_path):
    # Rank 1 issues the all-reduce at 75 instead of 70; its trace has another base time, shifted
    # back by the same amount, so only the 5 µs of the call remain.
    files = [
        write(tmp_path / "rank0.json.gz", cpu_rank(70)),
        write(tmp_path / "rank1.json.gz", cpu_rank(75, base_ns=10**18 + 3000, shift_us=-3.0, rank=1)),
    ]
    case = analyse_case(files, names=["traces/x/rank0.json.gz", "traces/x/rank1.json.gz"])
    assert case["overlap_label"] == "concurrent" and case["problems"] == []
    (collective,) = case["collectives"]
    assert collective["name"] == "c10d::allreduce_"
    assert collective["skew_s"] == pytest.approx(5 * US, abs=1e-9)
    assert collective["straggler"] == 1
    assert case["skew"]["straggler"] == 1 and case["skew"]["straggler_share"] == 1.0


def test_collectives_pair_up_by_their_seq_argument_when_recorded():
    def rank(seqs, rank_id):
        events = [step(1, 0, 100)]
        for i, seq in enumerate(seqs):
            events.append(op("c10d::allreduce_", 10 + 20 * i + rank_id, 2))
            events.append(op("record_param_comms", 10 + 20 * i + rank_id, 1, Seq=seq))
        return analyse_rank({"traceEvents": events}, rank=rank_id)

    from dpbench.traces.skew import collective_skew

    pairs = collective_skew([{**rank([4, 5], 0), "clock_offset_ns": 0}, {**rank([5], 1), "clock_offset_ns": 0}])
    # Rank 1's only collective is seq 5 (issued at 11), rank 0's seq 5 at 30: rank 0 is late.
    assert [(p["seq"], p["straggler"]) for p in pairs] == [(5, 0)]
    assert pairs[0]["skew_s"] == pytest.approx(19 * US, abs=1e-9)


def test_memory_peak_per_phase_from_the_allocator_events():
    assert analyse_rank(cpu_rank(70))["memory_peak_bytes"] == {"forward": 4000}


def test_a_truncated_or_foreign_file_is_named_and_the_others_still_count(tmp_path):
    good = write(tmp_path / "rank0.json.gz", cpu_rank(70))
    truncated = tmp_path / "rank1.json.gz"
    truncated.write_bytes(gzip.compress(json.dumps(cpu_rank(70)).encode())[:200])
    foreign = tmp_path / "rank2.json.gz"
    foreign.write_bytes(gzip.compress(b"[1, 2, 3]"))
    empty = write(tmp_path / "rank3.json.gz", {"traceEvents": [op("aten::mm", 0, 5)]})
    case = analyse_case([good, truncated, foreign, empty])
    assert [r["rank"] for r in case["ranks"]] == [0]
    assert len(case["problems"]) == 3
    assert case["problems"][0].startswith(f"{truncated}: not readable Kineto JSON")
    assert case["problems"][1] == f"{foreign}: not a Kineto trace (expected a JSON object with a 'traceEvents' list)"
    assert "no ProfilerStep#N" in case["problems"][2]
    with pytest.raises(ValueError, match="rank1.json.gz: not readable"):
        read_trace(truncated)


def test_two_pass_and_trace_are_compared_against_the_tolerance(tmp_path):
    case = analyse_case([write(tmp_path / "rank0.json.gz", cpu_rank(70))])  # exposed 7 of 100 µs
    near = compare_two_pass(case, exposed_comm_s=17 * US, overlap_fraction=0.5, tolerance=0.15)
    far = compare_two_pass(case, exposed_comm_s=30 * US, overlap_fraction=0.5, tolerance=0.15)
    assert near["difference_of_step"] == _close(0.10) and not near["disagree"]
    assert far["difference_of_step"] == _close(0.23) and far["disagree"]
    assert compare_two_pass(case, exposed_comm_s=None, overlap_fraction=None) is None


def test_the_sentence_names_what_dominates_and_the_straggler(tmp_path):
    files = [write(tmp_path / "rank0.json.gz", cpu_rank(70)), write(tmp_path / "rank1.json.gz", cpu_rank(80, rank=1))]
    text = describe("ddp w2", analyse_case(files))
    assert text.startswith("ddp w2: 68% of the step is compute (")
    assert text.endswith("; rank 1 arrives 0.01 ms late (median) at 1 of 1 collectives.")  # 10 of 100 µs
    rank1_on_time = analyse_case([files[0], write(tmp_path / "rank1.json.gz", cpu_rank(72, rank=1))])
    assert "arrives" not in describe("ddp w2", rank1_on_time)  # 2 µs: under 5% of the step, not named


def test_the_alignment_barrier_is_not_part_of_the_step_and_not_a_collective():
    trace = cpu_rank(70)
    trace["traceEvents"] += [
        op("dpbench:align", 0, 8, cat="user_annotation"),
        op("c10d::barrier", 1, 6),
        op("gloo:barrier", 2, 5, tid=2, cat="user_annotation"),
    ]
    rank = analyse_rank(trace)
    s = rank["steps"][0]
    assert s["span_s"] == _close(92 * US) and s["idle_s"] == _close(17 * US) and s["comm_s"] == _close(25 * US)
    assert [c["name"] for c in rank["collectives"]] == ["c10d::allreduce_"]


def test_collectives_issued_from_another_thread_than_the_step_still_arrive(tmp_path):
    # On CUDA the autograd engine's device thread runs the backward pass and DDP's hooks: the
    # collectives arrive from there, and the breakdown is the one of the main-thread trace.
    on_main, on_autograd = analyse_rank(cpu_rank(70)), analyse_rank(cpu_rank(70, caller=AUTOGRAD))
    assert on_autograd["steps"] == on_main["steps"]
    assert on_autograd["collectives"] == on_main["collectives"]
    assert [c["name"] for c in on_autograd["collectives"]] == ["c10d::allreduce_"]
    files = [
        write(tmp_path / "rank0.json.gz", cpu_rank(70, caller=AUTOGRAD)),
        write(tmp_path / "rank1.json.gz", cpu_rank(75, rank=1, caller=AUTOGRAD)),
    ]
    case = analyse_case(files)
    assert case["skew"]["collectives"] == 1 and case["skew"]["straggler"] == 1
    assert case["collectives"][0]["skew_s"] == pytest.approx(5 * US, abs=1e-9)


def test_a_collective_gloos_own_thread_issues_is_not_an_arrival():
    # A callback gloo's worker runs when a collective completes may issue the next one; the
    # rank issued only the collective its caller dispatched.
    trace = cpu_rank(70)
    trace["traceEvents"].append(op("c10d::allreduce_", 90, 2, tid=GLOO))
    arrivals = analyse_rank(trace)["collectives"]
    assert [(c["name"], c["arrival_s"]) for c in arrivals] == [("c10d::allreduce_", _close(70 * US))]


def test_a_thread_kineto_names_gloos_run_loop_issues_no_arrival():
    # Within the traced steps gloo's thread may run no gloo: op of its own, only a callback; its
    # name (Kineto's thread_name metadata, as torch sets it) still says whose thread it is.
    trace = cpu_rank(70)
    loop = 4
    trace["traceEvents"] += [
        op("c10d::allreduce_", 92, 2, tid=loop),
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": loop, "args": {"name": "thread 4 (pt_gloo_runloop)"}},
    ]
    assert [c["arrival_s"] for c in analyse_rank(trace)["collectives"]] == [_close(70 * US)]
