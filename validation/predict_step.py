"""Validate the step model on saved runs: predict world size 2 from each run's cases at world size
1 (and its comm suite's collectives at 2 ranks), and compare with the same run's measured world-size-2
cases — per workload the error of each configuration (a strategy, or one with options:
``ddp@accumulation_steps=2``), Kendall's tau of their order, whether the fastest matches — then the
median and mean absolute percentage error over everything.

Beside each error, the naive baseline **unchanged**: the 1-rank step taken as the 2-rank prediction
(its error: 1-rank step ÷ measured 2-rank step − 1). Each run's summary says whether the model's
median absolute error beats the baseline's ("beats unchanged" / "does not beat unchanged"). Given
several runs, an aggregate follows: per workload and configuration the error in each run, the median
and the worst absolute error over the runs (the baseline's beside them); then over the configured
cases (a label with options) and over every case, the median and worst of the absolute errors of
every run pooled, the baseline's, and whether the model beats it.

The prediction sees only world size 1, the collectives, and one harness setting known before a run:
the threads each rank gets at 2 ranks (the suites give a rank all the cores at world size 1 and
half of them at 2: ``threads_per_worker``), by which the compute is scaled (``--threads-per-rank``).
The overlap slowdown is the stated one for the run's device (the run's own ddp cases at 2 ranks
would measure it, and are the answer). Beside it: the prediction with the threads as measured at 1
rank, and one with the compute-only step the run measured at 2 ranks (``compute_only_step_s``,
against the same twin step at 1 rank) — what sharing the host really cost the compute — to say how
much of the error the compute explains.

    python -m validation.predict_step results/<machine>/0001_validate-predict.json [--json out.json]
    python -m validation.predict_step RUN1.json RUN2.json RUN3.json --json out.json

Two ranks on one GPU time-slice it (no MPS): a world-size-2 case whose ranks shared a GPU (the
run's sampler records ``rank_devices``) measured neither the model's two GPUs nor one GPU's compute
per rank, so it is shown beside the prediction as what sharing gave and no check of the model: no
error (nor the baseline's), and the summary says so (``check_of_model``).

Make a run with ``dpbench run --workload mlp --workload transformer --workload
'hf:gpt2@n_layer=2,n_embd=64,n_head=2,vocab_size=512' --strategies single,ddp,fsdp,zero,allreduce
--world-sizes 1,2 --suites scaling,comm``; for accumulation, each of several runs with ``dpbench run
--workload mlp --workload transformer --workload lenet --strategies
single,ddp,ddp@accumulation_steps=2,ddp@accumulation_steps=4 --world-sizes 1,2 --suites scaling,comm
--trials 3``. A path that is no saved run, or a run without training cases at world sizes 1 and 2,
is refused in one line (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

STRATEGIES = ("ddp", "fsdp", "zero", "allreduce")
BASELINE = "unchanged"


def _label(info: dict[str, Any]) -> str:
    from dpbench.predict.profile import case_label

    return case_label(str(info.get("strategy")), info.get("requested_options") or {})


def _case(run: Any, workload: str, label: str, world: int) -> dict[str, Any] | None:
    """The scaling suite's case of ``label`` (``ddp``, ``ddp@accumulation_steps=2``) at ``world`` ranks."""
    for bench in run.benchmarks:
        info = bench.get("extra_info") or {}
        if (
            info.get("kind") == "training"
            and info.get("suite") == "scaling"
            and str(info.get("workload_spec") or info.get("workload")) == workload
            and int(info.get("world_size") or 1) == world
            and _label(info) == label
        ):
            return info
    return None


def _threads_at_two(run: Any) -> int | None:
    """The threads per rank the run's 2-rank training cases were given (a harness setting)."""
    for bench in run.benchmarks:
        info = bench.get("extra_info") or {}
        if info.get("kind") == "training" and int(info.get("world_size") or 1) == 2 and info.get("threads_per_worker"):
            return int(info["threads_per_worker"])
    return None


def _contention(run: Any, workload: str, label: str) -> float | None:
    """Compute-only step at 2 ranks ÷ at 1 rank (the same twin step): what sharing the host cost."""
    for name in (label, "ddp"):  # allreduce records no compute-only step: ddp's on the same workload
        one, two = _case(run, workload, name, 1), _case(run, workload, name, 2)
        if one and two and one.get("compute_only_step_s") and two.get("compute_only_step_s"):
            return two["compute_only_step_s"] / one["compute_only_step_s"]
    return None


def _check_world_sizes(run: Any) -> None:
    """A UsageError in one line unless the run has training cases at world sizes 1 and 2."""
    from dpbench.errors import UsageError

    found = sorted(
        {
            int(info.get("world_size") or 1)
            for info in (bench.get("extra_info") or {} for bench in run.benchmarks)
            if info.get("kind") == "training" and info.get("strategy") in STRATEGIES
        }
    )
    if 1 not in found or 2 not in found:
        raise UsageError(
            f"{run.path}: expected ddp, fsdp, zero or allreduce training cases at world sizes 1 and 2, "
            f"found them at {', '.join(map(str, found)) or 'none'}"
        )


@dataclasses.dataclass(kw_only=True, frozen=True)
class RunCheck:
    """One run's predictions at world size 2 beside its measurements, and what the text prints above them."""

    path: str
    """The saved run, as given."""
    overlap: Any
    """The overlap slowdown the predictions used (an ``OverlapSlowdown``)."""
    measured_overlap: float | None
    """The slowdown the run's own 2-rank ddp cases measure (not used), where they do."""
    notes: tuple[str, ...]
    """The forecast's notes."""
    device: str
    """The device type of the run's training cases."""
    threads: int | None
    """The threads per rank at 2 ranks the compute was scaled to (None on a GPU)."""
    rows: tuple[dict[str, Any], ...]
    """One record per configuration measured at 2 ranks."""
    summary: dict[str, Any]
    """Per workload the order and the fastest; over the rows the errors, the baseline's and the verdict."""

    def document(self) -> dict[str, Any]:
        return {
            "run": self.path,
            "rows": list(self.rows),
            "summary": self.summary,
            "overlap": dataclasses.asdict(self.overlap),
        }


def check_run(path: str) -> RunCheck:
    """``path``'s predictions at world size 2 from world size 1 beside its measurements; a
    ``ResultsError`` or ``UsageError`` in one line where it is no saved run the check can use."""
    from dpbench.predict import fit_collectives, read_comm_run, step_predictions
    from dpbench.predict.forecast import measure_overlap
    from dpbench.predict.step import stated_overlap
    from dpbench.results.load import read_run

    run = read_run(path)
    _check_world_sizes(run)
    model = fit_collectives(read_comm_run(path))
    device = next(
        b["extra_info"].get("device_type") for b in run.benchmarks if b["extra_info"].get("kind") == "training"
    )
    overlap = stated_overlap(device)
    # On a GPU the compute runs there, not on the rank's CPU threads: taken as measured (the column
    # "compute 2 ranks ÷ 1" says what two ranks sharing one GPU did to it).
    threads = _threads_at_two(run) if device == "cpu" else None
    forecast = step_predictions(run, model, [2], from_world_size=1, overlap=overlap, threads_per_rank=threads)
    as_measured = step_predictions(run, model, [2], from_world_size=1, overlap=overlap)
    same = {(p.workload, p.label): p for p in as_measured.predictions}
    rows = []
    for p in forecast.predictions:
        if p.strategy not in STRATEGIES or p.measured_step_time_s is None:
            continue
        profile = next(q for q in forecast.profiles if q.workload == p.workload and q.label == p.label)
        rows.append(_row(run, p, profile, same[p.workload, p.label], model, overlap, threads))
    measured = measure_overlap(run)
    return RunCheck(
        path=str(path),
        overlap=overlap,
        measured_overlap=None if measured is None else measured.value,
        notes=tuple(forecast.notes),
        device=str(device),
        threads=threads,
        rows=tuple(rows),
        summary=_summary(rows),
    )


def _row(run: Any, p: Any, profile: Any, same: Any, model: Any, overlap: Any, threads: int | None) -> dict[str, Any]:
    """One configuration's record: the prediction, the measurement, the errors, the baseline's."""
    from dpbench.predict import predict_step

    ratio = _contention(run, p.workload, p.label)
    shared = None
    if ratio is not None:
        slowed = dataclasses.replace(
            profile,
            forward_s=profile.forward_s * ratio,
            backward_s=profile.backward_s * ratio,
            optimizer_s=profile.optimizer_s * ratio,
        )
        shared = predict_step(
            slowed, forecast_model(model), 2, overlap=overlap, measured_step_time_s=p.measured_step_time_s
        )
    return {
        "workload": p.workload,
        "strategy": p.strategy,
        "label": p.label,
        "one_rank_s": profile.step_time_s,
        "predicted_s": p.step_time_s,
        "lo_s": p.lo_s,
        "hi_s": p.hi_s,
        "measured_s": p.measured_step_time_s,
        "ranks_per_device": p.measured_ranks_per_device,
        "error": p.error,
        # the baseline: the 1-rank step as the 2-rank prediction, checked where the model is
        "unchanged_error": None if p.error is None else profile.step_time_s / p.measured_step_time_s - 1,
        # where the ranks shared a GPU: predicted ÷ measured − 1, what sharing cost, not an error
        "against_shared_device": p.step_time_s / p.measured_step_time_s - 1 if p.measured_on_shared_device else None,
        "threads_per_rank": threads,
        "predicted_threads_as_measured_s": same.step_time_s,
        "error_threads_as_measured": same.error,
        "contention": ratio,
        "predicted_with_contention_s": shared.step_time_s if shared else None,
        "error_with_contention": shared.error if shared else None,
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from scipy.stats import kendalltau

    summary: dict[str, Any] = {"workloads": {}}
    for workload in sorted({r["workload"] for r in rows}):
        mine = [r for r in rows if r["workload"] == workload]
        tau = kendalltau([r["predicted_s"] for r in mine], [r["measured_s"] for r in mine]).statistic
        summary["workloads"][workload] = {
            "kendall_tau": tau,
            "fastest_predicted": min(mine, key=lambda r: r["predicted_s"])["label"],
            "fastest_measured": min(mine, key=lambda r: r["measured_s"])["label"],
        }
    checked = [r for r in rows if r["error"] is not None]
    errors = [abs(r["error"]) for r in checked]
    as_is = [abs(r["error_threads_as_measured"]) for r in checked]
    with_it = [abs(r["error_with_contention"]) for r in rows if r["error_with_contention"] is not None]
    unchanged = [abs(r["unchanged_error"]) for r in checked]
    summary.update(
        {
            "cases": len(rows),
            "checked_cases": len(checked),
            "check_of_model": bool(checked),
            "median_abs_pct_error": _median(errors),
            "mean_abs_pct_error": statistics.fmean(errors) if errors else None,
            "median_abs_pct_error_threads_as_measured": _median(as_is),
            "mean_abs_pct_error_threads_as_measured": statistics.fmean(as_is) if as_is else None,
            "median_abs_pct_error_with_contention": _median(with_it),
            "mean_abs_pct_error_with_contention": statistics.fmean(with_it) if with_it else None,
            "median_abs_pct_error_unchanged": _median(unchanged),
            "mean_abs_pct_error_unchanged": statistics.fmean(unchanged) if unchanged else None,
            "beats_unchanged": _beats(_median(errors), _median(unchanged)),
        }
    )
    return summary


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _worst(values: Sequence[float]) -> float | None:
    return max(values) if values else None


def _beats(model: float | None, baseline: float | None) -> bool | None:
    """Whether the model's median absolute error is below the baseline's (None: nothing checked)."""
    return None if model is None or baseline is None else model < baseline


def _verdict(beats: bool) -> str:
    return f"beats {BASELINE}" if beats else f"does not beat {BASELINE}"


def aggregate(checks: Sequence[RunCheck]) -> dict[str, Any]:
    """Over the runs: per workload and configuration the error in each run (None where it was not
    measured or not checked), the median and worst absolute error, the baseline's; then the same over
    the configured cases (a label with options) and over every case, the absolute errors of every run
    pooled."""
    keys = sorted({(r["workload"], r["label"]): r["strategy"] for c in checks for r in c.rows}.items())
    cases = []
    for (workload, label), strategy in keys:
        found = [next((r for r in c.rows if (r["workload"], r["label"]) == (workload, label)), None) for c in checks]
        errors = [None if r is None else r["error"] for r in found]
        unchanged = [None if r is None else r["unchanged_error"] for r in found]
        cases.append(
            {
                "workload": workload,
                "label": label,
                "strategy": strategy,
                "configured": label != strategy,
                "errors": errors,
                "unchanged_errors": unchanged,
                **_pooled([e for e in errors if e is not None], [u for u in unchanged if u is not None]),
            }
        )
    return {
        "runs": [c.path for c in checks],
        "cases": cases,
        "configured": _group([c for c in cases if c["configured"]]),
        "all": _group(cases),
    }


def _pooled(errors: list[float], unchanged: list[float]) -> dict[str, Any]:
    """Median and worst absolute error of the model and of the baseline, and the verdict."""
    model = [abs(e) for e in errors]
    base = [abs(u) for u in unchanged]
    return {
        "checked": len(model),
        "median_abs_error": _median(model),
        "worst_abs_error": _worst(model),
        "median_abs_error_unchanged": _median(base),
        "worst_abs_error_unchanged": _worst(base),
        "beats_unchanged": _beats(_median(model), _median(base)),
    }


def _group(cases: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [e for c in cases for e in c["errors"] if e is not None]
    unchanged = [u for c in cases for u in c["unchanged_errors"] if u is not None]
    return {"cases": len(cases), **_pooled(errors, unchanged)}


def main(argv: list[str] | None = None) -> int:
    from dpbench.errors import UsageError
    from dpbench.results import ResultsError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "run", nargs="+", help="saved runs, each with the scaling suite at 1 and 2 ranks and the comm suite"
    )
    parser.add_argument("--json", help="write every record as JSON here")
    args = parser.parse_args(argv)
    try:
        checks = [check_run(path) for path in args.run]
    except (ResultsError, UsageError) as exc:
        print(f"validation.predict_step: error: {exc}", file=sys.stderr)
        return 2
    for i, check in enumerate(checks):
        if i:
            print()
        _print_run(check)
    overall = aggregate(checks)
    if len(checks) > 1:
        print()
        _print_aggregate(overall)
    if args.json:
        doc: dict[str, Any] = {"runs": [c.document() for c in checks], "aggregate": overall}
        if len(checks) == 1:  # one run: its record at the top too, as this file has always had it
            doc.update({k: v for k, v in checks[0].document().items() if k != "run"})
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    return 0


def _print_run(check: RunCheck) -> None:
    rows = check.rows
    print(f"run: {check.path}")
    print(f"overlap slowdown used: {check.overlap.value:.2f} ({check.overlap.origin})")
    if check.measured_overlap is not None:
        print(f"overlap slowdown the run's own 2-rank ddp cases measure (not used): {check.measured_overlap:.2f}")
    for note in check.notes:
        print(f"note: {note}")
    print()
    if check.device == "cpu":
        print(f"threads per rank at 2 ranks (the run's harness setting): {check.threads}")
    else:
        print(f"device {check.device}: the compute taken as measured at 1 rank (no CPU thread scaling)")
    shared = sorted({r["ranks_per_device"] for r in rows if r["against_shared_device"] is not None})
    for ranks in shared:
        print(
            f"ranks share a GPU at 2 ranks ({ranks} on one, time-sliced: no MPS): the measured world-size-2 steps "
            "are not two GPUs' worth and no check of the model; their error reads 'not a check'"
        )
    print()
    print(
        f"| workload | configuration | 1 rank | predicted w2 [95%] | measured w2 | error | {BASELINE}: error "
        "| threads as at 1 rank | error | compute 2 ranks ÷ 1 | predicted with it | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        with_it = r["predicted_with_contention_s"]
        print(
            f"| {r['workload']} | {r['label']} | {r['one_rank_s'] * 1e3:.2f} ms "
            f"| {r['predicted_s'] * 1e3:.2f} ms [{r['lo_s'] * 1e3:.1f}, {r['hi_s'] * 1e3:.1f}] "
            f"| {r['measured_s'] * 1e3:.2f} ms | {_error_text(r['error'], r['against_shared_device'])} "
            f"| {_error_text(r['unchanged_error'], None)} "
            f"| {r['predicted_threads_as_measured_s'] * 1e3:.2f} ms "
            f"| {_error_text(r['error_threads_as_measured'], None)} "
            f"| {'–' if r['contention'] is None else format(r['contention'], '.2f')} "
            f"| {'–' if with_it is None else format(with_it * 1e3, '.2f') + ' ms'} "
            f"| {'–' if r['error_with_contention'] is None else format(r['error_with_contention'], '+.1%')} |"
        )
    print()
    summary = check.summary
    print("| workload | Kendall's tau (predicted vs measured order) | fastest predicted | fastest measured | match |")
    print("|---|---|---|---|---|")
    for workload, w in summary["workloads"].items():
        fast_p, fast_m = w["fastest_predicted"], w["fastest_measured"]
        print(f"| {workload} | {w['kendall_tau']:.2f} | {fast_p} | {fast_m} | {'yes' if fast_p == fast_m else 'no'} |")
    print()
    checked = summary["checked_cases"]
    if not checked:
        print(
            f"{len(rows)} cases, none a check of the model: every world-size-2 case ran its ranks on a shared GPU "
            "(the order and the fastest above compare time-sliced steps)"
        )
    else:
        print(
            f"{checked} cases: median absolute percentage error {summary['median_abs_pct_error']:.1%}, "
            f"mean {summary['mean_abs_pct_error']:.1%}"
            + (f" ({len(rows) - checked} on a shared GPU left out)" if checked < len(rows) else "")
        )
        print(
            f"with the threads as at 1 rank: median {summary['median_abs_pct_error_threads_as_measured']:.1%}, "
            f"mean {summary['mean_abs_pct_error_threads_as_measured']:.1%}"
        )
    if summary["median_abs_pct_error_with_contention"] is not None:
        with_it = sum(1 for r in rows if r["error_with_contention"] is not None)
        print(
            f"with the measured 2-rank compute: median {summary['median_abs_pct_error_with_contention']:.1%}, "
            f"mean {summary['mean_abs_pct_error_with_contention']:.1%} ({with_it} cases)"
        )
    if checked:
        print(
            f"baseline {BASELINE} (the 1-rank step as the 2-rank prediction): median absolute percentage error "
            f"{summary['median_abs_pct_error_unchanged']:.1%}, mean {summary['mean_abs_pct_error_unchanged']:.1%}"
        )
        print(
            f"on this run the model {_verdict(summary['beats_unchanged'])}: median "
            f"{summary['median_abs_pct_error']:.1%} against {summary['median_abs_pct_error_unchanged']:.1%}"
        )


def _print_aggregate(overall: dict[str, Any]) -> None:
    runs = overall["runs"]
    print(f"over {len(runs)} runs: {', '.join(runs)}")
    print()
    heads = " | ".join(f"run {i + 1}" for i in range(len(runs)))
    print(
        f"| workload | configuration | {heads} | median \\|error\\| | worst \\|error\\| "
        f"| {BASELINE}: median \\|error\\| | {BASELINE}: worst \\|error\\| |"
    )
    print("|---|---|" + "---|" * (len(runs) + 4))
    for c in overall["cases"]:
        cells = " | ".join(_error_text(e, None) if e is not None else "–" for e in c["errors"])
        print(
            f"| {c['workload']} | {c['label']} | {cells} | {_abs_text(c['median_abs_error'])} "
            f"| {_abs_text(c['worst_abs_error'])} | {_abs_text(c['median_abs_error_unchanged'])} "
            f"| {_abs_text(c['worst_abs_error_unchanged'])} |"
        )
    print()
    for name, what in (("configured", "configured cases (a label with options)"), ("all", "every case")):
        group = overall[name]
        if not group["checked"]:
            print(f"{what}: none checked")
            continue
        print(
            f"{what}: {_count(group['checked'], 'error')} ({_count(group['cases'], 'case')} over {len(runs)} runs): "
            f"median absolute error {group['median_abs_error']:.1%}, worst {group['worst_abs_error']:.1%}; "
            f"{BASELINE}: median "
            f"{group['median_abs_error_unchanged']:.1%}, worst {group['worst_abs_error_unchanged']:.1%}: the model "
            f"{_verdict(group['beats_unchanged'])}"
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _abs_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _error_text(error: float | None, against_shared: float | None) -> str:
    """An error, or 'not a check' (with predicted ÷ measured − 1 where given) where the ranks shared a GPU."""
    if error is not None:
        return f"{error:+.1%}"
    return "not a check" + (f" ({against_shared:+.1%} against a shared GPU)" if against_shared is not None else "")


def forecast_model(model: Any) -> Any:
    """The collective model as the forecast used it (all_gather and reduce_scatter from all_reduce)."""
    from dpbench.predict.step import with_derived_collectives

    return with_derived_collectives(model)


if __name__ == "__main__":
    sys.exit(main())
