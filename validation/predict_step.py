"""Validate the step model on one saved run: predict world size 2 from the run's cases at world size
1 (and its comm suite's collectives at 2 ranks), and compare with the same run's measured world-size-2
cases — per workload the error of each strategy, Kendall's tau of the strategies' order, whether the
fastest matches — then the median and mean absolute percentage error over everything.

The prediction sees only world size 1, the collectives, and one harness setting known before a run:
the threads each rank gets at 2 ranks (the suites give a rank all the cores at world size 1 and
half of them at 2: ``threads_per_worker``), by which the compute is scaled (``--threads-per-rank``).
The overlap slowdown is the stated one for the run's device (the run's own ddp cases at 2 ranks
would measure it, and are the answer). Beside it: the prediction with the threads as measured at 1
rank, and one with the compute-only step the run measured at 2 ranks (``compute_only_step_s``,
against the same twin step at 1 rank) — what sharing the host really cost the compute — to say how
much of the error the compute explains.

    python -m validation.predict_step results/<machine>/0001_validate-predict.json [--json out.json]

Two ranks on one GPU time-slice it (no MPS): a world-size-2 case whose ranks shared a GPU (the
run's sampler records ``rank_devices``) measured neither the model's two GPUs nor one GPU's compute
per rank, so it is shown beside the prediction as what sharing gave and no check of the model: no
error, and the summary says so (``check_of_model``).

Make the run with ``dpbench run --workload mlp --workload transformer --workload
'hf:gpt2@n_layer=2,n_embd=64,n_head=2,vocab_size=512' --strategies single,ddp,fsdp,zero,allreduce
--world-sizes 1,2 --suites scaling,comm``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from typing import Any

STRATEGIES = ("ddp", "fsdp", "zero", "allreduce")


def _case(run: Any, workload: str, strategy: str, world: int) -> dict[str, Any] | None:
    for bench in run.benchmarks:
        info = bench.get("extra_info") or {}
        if (
            info.get("kind") == "training"
            and info.get("suite") == "scaling"
            and info.get("strategy") == strategy
            and str(info.get("workload_spec") or info.get("workload")) == workload
            and int(info.get("world_size") or 1) == world
            and not info.get("requested_options")
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


def _contention(run: Any, workload: str, strategy: str) -> float | None:
    """Compute-only step at 2 ranks ÷ at 1 rank (the same twin step): what sharing the host cost."""
    pairs = []
    for name in (strategy, "ddp"):  # allreduce records no compute-only step: ddp's on the same workload
        one, two = _case(run, workload, name, 1), _case(run, workload, name, 2)
        if one and two and one.get("compute_only_step_s") and two.get("compute_only_step_s"):
            pairs.append(two["compute_only_step_s"] / one["compute_only_step_s"])
            break
    return pairs[0] if pairs else None


def main(argv: list[str] | None = None) -> int:
    from scipy.stats import kendalltau

    from dpbench.predict import fit_collectives, predict_step, read_comm_run, step_predictions
    from dpbench.predict.forecast import measure_overlap
    from dpbench.predict.step import stated_overlap
    from dpbench.results.load import read_run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a saved run with the scaling suite at 1 and 2 ranks and the comm suite")
    parser.add_argument("--json", help="write every record as JSON here")
    args = parser.parse_args(argv)
    run = read_run(args.run)
    model = fit_collectives(read_comm_run(args.run))
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
        if p.strategy not in STRATEGIES or p.label != p.strategy or p.measured_step_time_s is None:
            continue
        profile = next(q for q in forecast.profiles if q.workload == p.workload and q.label == p.label)
        ratio = _contention(run, p.workload, p.strategy)
        shared = None
        if ratio is not None:
            slowed = dataclasses.replace(
                profile,
                forward_s=profile.forward_s * ratio,
                backward_s=profile.backward_s * ratio,
                optimizer_s=profile.optimizer_s * ratio,
            )
            shared = predict_step(
                slowed,
                forecast_model(model),
                2,
                overlap=overlap,
                measured_step_time_s=p.measured_step_time_s,
            )
        rows.append(
            {
                "workload": p.workload,
                "strategy": p.strategy,
                "one_rank_s": profile.step_time_s,
                "predicted_s": p.step_time_s,
                "lo_s": p.lo_s,
                "hi_s": p.hi_s,
                "measured_s": p.measured_step_time_s,
                "ranks_per_device": p.measured_ranks_per_device,
                "error": p.error,
                # where the ranks shared a GPU: predicted ÷ measured − 1, what sharing cost, not an error
                "against_shared_device": p.step_time_s / p.measured_step_time_s - 1
                if p.measured_on_shared_device
                else None,
                "threads_per_rank": threads,
                "predicted_threads_as_measured_s": same[p.workload, p.label].step_time_s,
                "error_threads_as_measured": same[p.workload, p.label].error,
                "contention": ratio,
                "predicted_with_contention_s": shared.step_time_s if shared else None,
                "error_with_contention": shared.error if shared else None,
            }
        )
    print(f"run: {args.run}")
    print(f"overlap slowdown used: {overlap.value:.2f} ({overlap.origin})")
    measured = measure_overlap(run)
    if measured is not None:
        print(f"overlap slowdown the run's own 2-rank ddp cases measure (not used): {measured.value:.2f}")
    for note in forecast.notes:
        print(f"note: {note}")
    print()
    if device == "cpu":
        print(f"threads per rank at 2 ranks (the run's harness setting): {threads}")
    else:
        print(f"device {device}: the compute taken as measured at 1 rank (no CPU thread scaling)")
    shared = sorted({r["ranks_per_device"] for r in rows if r["against_shared_device"] is not None})
    for ranks in shared:
        print(
            f"ranks share a GPU at 2 ranks ({ranks} on one, time-sliced: no MPS): the measured world-size-2 steps "
            "are not two GPUs' worth and no check of the model; their error reads 'not a check'"
        )
    print()
    print(
        "| workload | strategy | 1 rank | predicted w2 [95%] | measured w2 | error | threads as at 1 rank | error "
        "| compute 2 ranks ÷ 1 | predicted with it | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        with_it = r["predicted_with_contention_s"]
        print(
            f"| {r['workload']} | {r['strategy']} | {r['one_rank_s'] * 1e3:.2f} ms "
            f"| {r['predicted_s'] * 1e3:.2f} ms [{r['lo_s'] * 1e3:.1f}, {r['hi_s'] * 1e3:.1f}] "
            f"| {r['measured_s'] * 1e3:.2f} ms | {_error_text(r['error'], r['against_shared_device'])} "
            f"| {r['predicted_threads_as_measured_s'] * 1e3:.2f} ms "
            f"| {_error_text(r['error_threads_as_measured'], None)} "
            f"| {'–' if r['contention'] is None else format(r['contention'], '.2f')} "
            f"| {'–' if with_it is None else format(with_it * 1e3, '.2f') + ' ms'} "
            f"| {'–' if r['error_with_contention'] is None else format(r['error_with_contention'], '+.1%')} |"
        )
    print()
    summary: dict[str, Any] = {"workloads": {}}
    print("| workload | Kendall's tau (predicted vs measured order) | fastest predicted | fastest measured | match |")
    print("|---|---|---|---|---|")
    for workload in sorted({r["workload"] for r in rows}):
        mine = [r for r in rows if r["workload"] == workload]
        tau = kendalltau([r["predicted_s"] for r in mine], [r["measured_s"] for r in mine]).statistic
        fast_p = min(mine, key=lambda r: r["predicted_s"])["strategy"]
        fast_m = min(mine, key=lambda r: r["measured_s"])["strategy"]
        summary["workloads"][workload] = {"kendall_tau": tau, "fastest_predicted": fast_p, "fastest_measured": fast_m}
        print(f"| {workload} | {tau:.2f} | {fast_p} | {fast_m} | {'yes' if fast_p == fast_m else 'no'} |")
    checked = [r for r in rows if r["error"] is not None]
    errors = [abs(r["error"]) for r in checked]
    as_is = [abs(r["error_threads_as_measured"]) for r in checked]
    with_it = [abs(r["error_with_contention"]) for r in rows if r["error_with_contention"] is not None]
    summary.update(
        {
            "cases": len(rows),
            "checked_cases": len(checked),
            "check_of_model": bool(checked),
            "median_abs_pct_error": statistics.median(errors) if errors else None,
            "mean_abs_pct_error": statistics.fmean(errors) if errors else None,
            "median_abs_pct_error_threads_as_measured": statistics.median(as_is) if as_is else None,
            "mean_abs_pct_error_threads_as_measured": statistics.fmean(as_is) if as_is else None,
            "median_abs_pct_error_with_contention": statistics.median(with_it) if with_it else None,
            "mean_abs_pct_error_with_contention": statistics.fmean(with_it) if with_it else None,
        }
    )
    print()
    if not checked:
        print(
            f"{len(rows)} cases, none a check of the model: every world-size-2 case ran its ranks on a shared GPU "
            "(the order and the fastest above compare time-sliced steps)"
        )
    else:
        print(
            f"{len(checked)} cases: median absolute percentage error {summary['median_abs_pct_error']:.1%}, "
            f"mean {summary['mean_abs_pct_error']:.1%}"
            + (f" ({len(rows) - len(checked)} on a shared GPU left out)" if len(checked) < len(rows) else "")
        )
        print(
            f"with the threads as at 1 rank: median {summary['median_abs_pct_error_threads_as_measured']:.1%}, "
            f"mean {summary['mean_abs_pct_error_threads_as_measured']:.1%}"
        )
    if with_it:
        print(
            f"with the measured 2-rank compute: median {summary['median_abs_pct_error_with_contention']:.1%}, "
            f"mean {summary['mean_abs_pct_error_with_contention']:.1%} ({len(with_it)} cases)"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "summary": summary, "overlap": dataclasses.asdict(overlap)}, f, indent=1)
    return 0


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
