"""Per rank and step, from a Kineto trace: compute, communication, overlap, exposed communication,
idle; per collective, the arrival skew across ranks and the straggler.

Definitions (HolisticTraceAnalysis's temporal breakdown, comm/comp overlap and straggler are the
reference; HTA reads CUDA kernels only, so on CPU the same definitions are applied to host ops):

* step span: one ``ProfilerStep#N`` annotation (the training step between two ``prof.step()``),
  less the ``dpbench:align`` barrier the capture issues once recording has started;
* communication: the union of the collective intervals in the step — on CPU the gloo/c10d
  collective ops the profiler recorded (on every thread, gloo's own included) and dpbench's own
  ``dpbench:communication`` label (allreduce's and manual's gradient sync); on CUDA the ``nccl*``
  kernels and that label as the device ran it (``gpu_user_annotation``); on CUDA without an nccl
  kernel (ranks sharing one GPU run gloo, which all-reduces on the host) the host's collective ops,
  as on CPU, and the device copies those ops launched (``comm_transport``: ``host``, else ``device``);
* compute: the union of every other op (CPU: ``cpu_op`` events not inside a communication interval
  of the same thread; CUDA: every other kernel, memcpy and memset on the device);
* overlap: compute ∩ communication. On CPU it is labelled *concurrent* (gloo's threads run beside
  compute but compete with it for the same cores), on CUDA *hidden* (kernels on other streams);
* exposed communication: communication − overlap; idle: step span − (compute ∪ communication),
  so compute + exposed + idle = step span;
* overlap fraction: overlap ÷ communication (HTA's comm/comp overlap);
* arrival at a collective: when the rank issued it (the start of its outermost ``c10d::*`` op on
  whichever thread called it: the main thread on CPU, the autograd engine's device thread for DDP's
  gradient hooks on CUDA — never one of gloo's own worker threads, which run the collective after
  it was issued; CUDA with nccl: the start of the nccl kernel, when the device reached it), on the trace's
  wall clock (``baseTimeNanoseconds`` + ``ts``), so ranks on one host compare directly;
  skew = latest − earliest arrival, the straggler = the rank that arrived last (HTA's definition).
  Collectives are matched across ranks by their ``Seq`` argument where the profiler recorded it,
  else by their order within the traced steps.

Pure Python (json, gzip): a trace that is truncated or not Kineto JSON becomes a
:class:`TraceProblem` naming the file, and the others are analysed.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpbench.traces.intervals import Interval, clip, intersection, length, subtract, union
from dpbench.traces.skew import collective_skew, skew_summary

__all__ = [
    "AGREEMENT_TOLERANCE",
    "ALIGN_LABEL",
    "COMM_LABEL",
    "LABEL_PREFIX",
    "TraceProblem",
    "analyse_case",
    "analyse_rank",
    "compare_two_pass",
    "describe",
    "read_trace",
]

# Our own record_function labels (strategies/_timing.py writes "dpbench:<phase>").
LABEL_PREFIX = "dpbench:"
COMM_LABEL = LABEL_PREFIX + "communication"
# The barrier capture issues once recording has started (strategies/tracing.py): not part of a step.
ALIGN_LABEL = LABEL_PREFIX + "align"
# Collective ops as torch's profiler names them on the host (gloo's worker-thread ops
# "gloo:all_reduce", the dispatcher's "c10d::allreduce_", "record_param_comms", nccl:*).
_COMM_NAME = re.compile(
    r"gloo|nccl|c10d::|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|"
    r"broadcast|all_?to_?all|barrier",
    re.IGNORECASE,
)
# The dispatcher's collective ops (c10d::allreduce_, c10d::broadcast_, ...): issued by the caller.
_C10D_PREFIX = "c10d::"
# What a gloo worker thread records around the collective it runs (gloo:all_reduce, ...).
_GLOO_WORK_PREFIX = "gloo:"
# What torch names gloo's worker threads (Kineto's thread_name metadata: "thread 123 (pt_gloo_runloop)").
_GLOO_THREAD_NAME = "pt_gloo_runloop"
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
# Where the two-pass estimate (step − compute-only) and the trace's exposed communication may
# differ, as a fraction of the step, before the report calls them in disagreement: 2 sd of
# trace − two-pass between fresh trials where the two-pass figure is stable, rounded up. A case whose
# two-pass figure itself swings between trials is beyond any tolerance, and the report says so
# (measurements: docs/calibration.md#trace-agreement-tolerance).
AGREEMENT_TOLERANCE = 0.15


@dataclass(kw_only=True, frozen=True)
class TraceProblem:
    """A trace file that could not be analysed, and why (one line)."""

    file: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.reason}"


def read_trace(path: str | Path) -> dict[str, Any]:
    """The Kineto JSON of ``path`` (gzipped or plain); ValueError naming the file otherwise."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        data = json.loads(text)
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path.name}: not readable Kineto JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"{path.name}: not a Kineto trace (expected a JSON object with a 'traceEvents' list)")
    return data


# ---------------------------------------------------------------- one rank
def _complete(events: Iterable[Any]) -> list[dict[str, Any]]:
    out = []
    for e in events:
        if (
            isinstance(e, dict)
            and e.get("ph") == "X"
            and isinstance(e.get("ts"), (int, float))
            and isinstance(e.get("dur"), (int, float))
        ):
            out.append(e)
    return out


def _span(e: dict[str, Any]) -> Interval:
    start = float(e["ts"]) / 1e6
    return start, start + float(e["dur"]) / 1e6


def _is_comm_name(e: dict[str, Any]) -> bool:
    name = str(e.get("name", ""))
    return name == COMM_LABEL or (not name.startswith(LABEL_PREFIX) and _COMM_NAME.search(name) is not None)


def _after_alignment(lo: float, hi: float, aligns: list[Interval]) -> float:
    """A step starts once the alignment barrier inside it (if any) is over."""
    for a, b in aligns:
        if lo <= a < hi:
            lo = max(lo, min(b, hi))
    return lo


def _is_device(e: dict[str, Any]) -> bool:
    return e.get("cat") in _DEVICE_CATS


def _on_host(e: dict[str, Any]) -> bool:
    """Not a device activity: Kineto mirrors annotations onto the GPU timeline as gpu_user_annotation."""
    return not _is_device(e) and not str(e.get("cat", "")).startswith("gpu_")


def _thread(e: dict[str, Any]) -> tuple[Any, Any]:
    return e.get("pid"), e.get("tid")


def _per_thread_compute(ops: list[tuple[Any, Interval]], comm_by_thread: dict[Any, list[Interval]]) -> list[Interval]:
    """Each thread's ops minus that thread's communication: an op running inside a collective
    (gloo's copies) is communication, and an op enclosing one (the autograd node whose hook
    launched DDP's all-reduce) computes only outside it."""
    by_thread: dict[Any, list[Interval]] = {}
    for thread, span in ops:
        by_thread.setdefault(thread, []).append(span)
    out: list[Interval] = []
    for thread, spans in by_thread.items():
        out += subtract(spans, comm_by_thread.get(thread, ()))
    return out


def _device_kind(events: list[dict[str, Any]]) -> str:
    return "cuda" if any(_is_device(e) for e in events) else "cpu"


def _transport(comm_events: list[dict[str, Any]], kind: str) -> str | None:
    """Where the collectives ran: ``device`` (nccl kernels), ``host`` (CPU; gloo on a GPU), None: none ran."""
    if kind == "cuda" and any(_is_device(e) and str(e.get("name", "")).lower().startswith("nccl") for e in comm_events):
        return "device"
    if any(_on_host(e) and e.get("name") != COMM_LABEL for e in comm_events):
        return "host"
    return None


def _launched_inside(events: list[dict[str, Any]], comm_by_thread: dict[Any, list[Interval]]) -> list[dict[str, Any]]:
    """Device events whose launch (the runtime call with the same ``correlation``) lies inside a
    collective of the launching thread: gloo's copies of a CUDA tensor to the host and back."""
    launched = set()
    for e in events:
        if e.get("cat") == "cuda_runtime" and isinstance(e.get("args"), dict) and "correlation" in e["args"]:
            t0, t1 = _span(e)
            if any(a <= t0 and t1 <= b for a, b in comm_by_thread.get(_thread(e), ())):
                launched.add(e["args"]["correlation"])
    return [
        e
        for e in events
        if _is_device(e) and isinstance(e.get("args"), dict) and e["args"].get("correlation") in launched
    ]


def _gloo_worker_threads(trace: dict[str, Any], events: list[dict[str, Any]], step_threads: set[Any]) -> set[Any]:
    """The threads gloo runs its collectives on, never one holding a training step: each holds the
    worker's ``gloo:<collective>`` op (ProcessGroupGloo's profiling title, begun when a worker
    thread picks the work up), or Kineto's ``thread_name`` for it names gloo's run loop
    (``pt_gloo_runloop``)."""
    working = {_thread(e) for e in events if _on_host(e) and str(e.get("name", "")).startswith(_GLOO_WORK_PREFIX)}
    named = {
        _thread(e)
        for e in trace["traceEvents"]
        if isinstance(e, dict)
        and e.get("ph") == "M"
        and e.get("name") == "thread_name"
        and isinstance(e.get("args"), dict)
        and _GLOO_THREAD_NAME in str(e["args"].get("name", ""))
    }
    return (working | named) - step_threads


def _outermost(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ops of one thread that no other op of the list encloses."""
    ops = sorted(ops, key=lambda e: (float(e["ts"]), -float(e["dur"])))
    chosen, end = [], -math.inf
    for e in ops:
        if float(e["ts"]) >= end:
            chosen.append(e)
            end = float(e["ts"]) + float(e["dur"])
    return chosen


def _arrivals(comm_events: list[dict[str, Any]], kind: str, gloo_threads: set[Any]) -> list[dict[str, Any]]:
    """One entry per collective this rank issued, in issue order: seq, name, arrival time."""
    if kind == "cuda":
        chosen = [e for e in comm_events if _is_device(e) and str(e.get("name", "")).lower().startswith("nccl")]
    else:
        # The caller's dispatcher op, from any thread that issues collectives: on CUDA DDP's hooks
        # fire on the autograd engine's device thread, not on the thread that holds the step.
        by_thread: dict[Any, list[dict[str, Any]]] = {}
        for e in comm_events:
            if _on_host(e) and str(e.get("name", "")).startswith(_C10D_PREFIX) and _thread(e) not in gloo_threads:
                by_thread.setdefault(_thread(e), []).append(e)
        chosen = [e for ops in by_thread.values() for e in _outermost(ops)]
    out = []
    for e in sorted(chosen, key=lambda e: float(e["ts"])):
        seq = _seq_of(e, comm_events)
        out.append({"seq": seq, "name": str(e.get("name")), "arrival_s": _span(e)[0]})
    return out


def _seq_of(e: dict[str, Any], comm_events: list[dict[str, Any]]) -> int | None:
    """The collective's sequence number: its own ``Seq`` arg or that of an op inside it."""
    args = e.get("args") if isinstance(e.get("args"), dict) else {}
    if isinstance(args.get("Seq"), int):
        return args["Seq"]
    t0, t1 = float(e["ts"]), float(e["ts"]) + float(e["dur"])
    for inner in comm_events:
        inner_args = inner.get("args") if isinstance(inner.get("args"), dict) else {}
        if isinstance(inner_args.get("Seq"), int) and _thread(inner) == _thread(e) and t0 <= float(inner["ts"]) <= t1:
            return inner_args["Seq"]
    return None


def _memory_peaks(trace: dict[str, Any], phases: list[tuple[str, Interval]], kind: str) -> dict[str, int]:
    """Peak allocated bytes per phase from the profiler's ``[memory]`` events (profile_memory=True):
    the host allocator's on CPU, the CUDA caching allocator's on CUDA (Device Type 0 / 1)."""
    device_type = 1 if kind == "cuda" else 0
    samples = []
    for e in trace["traceEvents"]:
        if isinstance(e, dict) and e.get("name") == "[memory]" and isinstance(e.get("ts"), (int, float)):
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            total = args.get("Total Allocated")
            if isinstance(total, (int, float)) and args.get("Device Type", 0) == device_type:
                samples.append((float(e["ts"]) / 1e6, int(total)))
    peaks: dict[str, int] = {}
    for name, (a, b) in phases:
        inside = [total for t, total in samples if a <= t <= b]
        if inside:
            peaks[name] = max(peaks.get(name, 0), max(inside))
    return peaks


def analyse_rank(trace: dict[str, Any], *, rank: int | None = None) -> dict[str, Any]:
    """Compute / communication / overlap / exposed / idle seconds of every traced step of one rank."""
    events = _complete(trace["traceEvents"])
    info = trace.get("distributedInfo") if isinstance(trace.get("distributedInfo"), dict) else {}
    if rank is None:
        rank = info.get("rank") if isinstance(info.get("rank"), int) else 0
    # Kineto's ts are microseconds on the host's clock; baseTimeNanoseconds turns them into wall
    # time. Kept apart so the spans keep their sub-microsecond precision.
    clock_offset_ns = int(trace.get("baseTimeNanoseconds") or 0)
    kind = _device_kind(events)
    steps = sorted(
        (
            (int(m.group(1)), _span(e), _thread(e))
            for e in events
            if _on_host(e) and (m := _STEP.match(str(e.get("name", ""))))
        ),
        key=lambda s: s[0],
    )
    if not steps:
        raise ValueError("no ProfilerStep#N annotation: the trace holds no profiled training step")
    gloo_threads = _gloo_worker_threads(trace, events, {thread for _, _, thread in steps})
    comm_events = [e for e in events if _is_comm_name(e)]
    comm_by_thread: dict[Any, list[Interval]] = {}
    for e in comm_events:
        comm_by_thread.setdefault(_thread(e), []).append(_span(e))
    transport = _transport(comm_events, kind)
    if kind == "cuda":
        # Our communication label as the device ran it (manual's copies between GPUs, allreduce's
        # packing around its nccl calls) is communication too.
        device_label = [
            _span(e) for e in events if e.get("name") == COMM_LABEL and e.get("cat") == "gpu_user_annotation"
        ]
        comm_all = [_span(e) for e in comm_events if _is_device(e)] + device_label
        device_comm = [e for e in events if _is_device(e) and _is_comm_name(e)]
        if transport == "host":
            # gloo on a GPU: the collective runs on the host (its copies to and from the device are
            # communication, the rest of the device's work is compute).
            comm_all = [s for spans in comm_by_thread.values() for s in spans] + device_label
            device_comm = _launched_inside(events, comm_by_thread)
            comm_all += [_span(e) for e in device_comm]
        moved = {id(e) for e in device_comm}
        compute_all = subtract([_span(e) for e in events if _is_device(e) and id(e) not in moved], device_label)
    else:
        comm_all = [s for spans in comm_by_thread.values() for s in spans]
        ops = [(_thread(e), _span(e)) for e in events if e.get("cat") == "cpu_op" and not _is_comm_name(e)]
        compute_all = _per_thread_compute(ops, comm_by_thread)
    phases = [
        (str(e["name"])[len(LABEL_PREFIX) :], _span(e))
        for e in events
        if str(e.get("name", "")).startswith(LABEL_PREFIX) and e.get("name") != ALIGN_LABEL and _on_host(e)
    ]
    aligns = [_span(e) for e in events if e.get("name") == ALIGN_LABEL and _on_host(e)]
    steps = [(n, (_after_alignment(lo, hi, aligns), hi), t) for n, (lo, hi), t in steps]
    per_step = []
    for number, (lo, hi), _ in steps:
        compute = union(clip(compute_all, lo, hi))
        comm = union(clip(comm_all, lo, hi))
        overlap = length(intersection(compute, comm))
        comm_s = length(comm)
        busy = length(compute + comm)
        per_step.append(
            {
                "step": number,
                "span_s": hi - lo,
                "compute_s": length(compute),
                "comm_s": comm_s,
                "overlap_s": overlap,
                "exposed_comm_s": comm_s - overlap,
                "idle_s": (hi - lo) - busy,
            }
        )
    lo_all, hi_all = steps[0][1][0], steps[-1][1][1]
    arrivals = [
        a
        for a in _arrivals(comm_events, "cpu" if transport == "host" else kind, gloo_threads)
        if lo_all <= a["arrival_s"] <= hi_all and not any(x <= a["arrival_s"] <= y for x, y in aligns)
    ]
    return {
        "rank": rank,
        "device_kind": kind,
        "comm_transport": transport,
        "steps": per_step,
        "collectives": arrivals,
        "memory_peak_bytes": _memory_peaks(trace, [p for p in phases if lo_all <= p[1][0] <= hi_all], kind),
        "clock_offset_ns": clock_offset_ns,
    }


# ---------------------------------------------------------------- the case
_SUMMED = ("span_s", "compute_s", "comm_s", "overlap_s", "exposed_comm_s", "idle_s")


def _rank_summary(rank: dict[str, Any]) -> dict[str, Any]:
    steps = rank["steps"]
    out: dict[str, Any] = {"rank": rank["rank"], "steps": len(steps)}
    for key in _SUMMED:
        out[key] = statistics.fmean(s[key] for s in steps)
    out["overlap_fraction"] = out["overlap_s"] / out["comm_s"] if out["comm_s"] > 0 else None
    out["memory_peak_bytes"] = rank["memory_peak_bytes"]
    return out


def analyse_case(files: Sequence[str | Path], *, names: Sequence[str] | None = None) -> dict[str, Any]:
    """The ``trace_breakdown`` of one case from its per-rank trace files (JSON-safe).

    ``names``: how each file is named in the result (the path relative to the machine
    directory); the files themselves by default. A file that cannot be read or holds no
    profiled step is listed in ``problems`` and the others are analysed.
    """
    names = list(names) if names is not None else [str(f) for f in files]
    ranks, problems = [], []
    for index, (path, name) in enumerate(zip(files, names)):
        try:
            trace = read_trace(path)
            ranks.append(analyse_rank(trace, rank=_rank_from_name(path, default=index)))
        except ValueError as exc:
            problems.append(str(TraceProblem(file=name, reason=str(exc).removeprefix(f"{Path(path).name}: "))))
    ranks.sort(key=lambda r: r["rank"])
    collectives = collective_skew(ranks)
    kind = ranks[0]["device_kind"] if ranks else None
    return {
        "device_kind": kind,
        "comm_transport": ranks[0]["comm_transport"] if ranks else None,
        "overlap_label": {"cpu": "concurrent", "cuda": "hidden"}.get(kind or "", None),
        "files": names,
        "problems": problems,
        "ranks": [_rank_summary(r) for r in ranks],
        "per_step": {str(r["rank"]): r["steps"] for r in ranks},
        "collectives": collectives,
        "skew": skew_summary(collectives),
    }


def _rank_from_name(path: str | Path, *, default: int) -> int:
    match = re.search(r"rank(\d+)", Path(path).name)
    return int(match.group(1)) if match else default


# ---------------------------------------------------------------- judgement in words
def compare_two_pass(
    breakdown: dict[str, Any], *, exposed_comm_s: Any, overlap_fraction: Any, tolerance: float = AGREEMENT_TOLERANCE
) -> dict[str, Any] | None:
    """The two-pass estimate beside the trace's, and whether they disagree by more than ``tolerance``
    (of the mean traced step span). None when either side is missing."""
    ranks = breakdown.get("ranks") or []
    if not ranks or not isinstance(exposed_comm_s, (int, float)) or isinstance(exposed_comm_s, bool):
        return None
    span = statistics.fmean(r["span_s"] for r in ranks)
    traced = statistics.fmean(r["exposed_comm_s"] for r in ranks)
    difference = abs(traced - float(exposed_comm_s)) / span if span > 0 else math.inf
    return {
        "two_pass_exposed_comm_s": float(exposed_comm_s),
        "two_pass_overlap_fraction": overlap_fraction,
        "trace_exposed_comm_s": traced,
        "difference_of_step": difference,
        "tolerance": tolerance,
        "disagree": difference > tolerance,
    }


def describe(label: str, breakdown: dict[str, Any]) -> str:
    """One sentence: what dominates the traced step, and the straggler when there is one."""
    ranks = breakdown.get("ranks") or []
    if not ranks:
        return f"{label}: no trace could be analysed."
    span = statistics.fmean(r["span_s"] for r in ranks)
    shares = {
        name: statistics.fmean(r[key] for r in ranks) / span if span > 0 else 0.0
        for name, key in (("compute", "compute_s"), ("exposed communication", "exposed_comm_s"), ("idle", "idle_s"))
    }
    top = max(shares, key=shares.get)
    text = f"{label}: {shares[top]:.0%} of the step is {top}"
    others = [f"{shares[n]:.0%} {n}" for n in shares if n != top]
    text += f" ({', '.join(others)})"
    skew = breakdown.get("skew")
    # A straggler worth naming: late at most collectives by more than 5% of the step.
    if skew and skew["straggler_share"] >= 0.5 and span > 0 and skew["median_skew_s"] > 0.05 * span:
        text += (
            f"; rank {skew['straggler']} arrives {skew['median_skew_s'] * 1e3:.3g} ms late (median) at "
            f"{round(skew['straggler_share'] * skew['collectives'])} of {skew['collectives']} collectives"
        )
    return text + "."
