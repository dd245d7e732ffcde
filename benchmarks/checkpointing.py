"""Activation checkpointing per block: what it saves and what it costs, measured.

Memory: the peak of one forward + backward with and without ``checkpoint``, estimated without
memory (``fake_step_peak``) and measured on real CPU tensors with the same live-storage counter in a
fresh spawned process (``real_step_peak``). Time: ``single`` with and without it, fresh-process
trials interleaved (plain, checkpointed, plain, …), each trial's median step; the paired ratio
checkpointed ÷ plain with its interval (``dpbench.stats.paired_ratio``, the gate's estimator).

    .venv/bin/python -m benchmarks.checkpointing [--trials 6] [--steps 20] [--workloads transformer,hf:gpt2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
from concurrent.futures import ProcessPoolExecutor

from dpbench.errors import UsageError, check_names

HF_GPT2 = "hf:gpt2@n_layer=4,n_embd=64,n_head=2,vocab_size=1000,n_positions=64,seq_len=64"
CASES = [("transformer", 64), (HF_GPT2, 16)]
NAMES = list(dict.fromkeys(spec.split("@")[0] for spec, _ in CASES))  # what --workloads selects by


def _real(spec: str, batch: int, checkpoint: bool) -> int:
    from dpbench.strategies.activations import real_step_peak
    from dpbench.workloads import resolve_workload

    return real_step_peak(resolve_workload(spec), batch, checkpoint=checkpoint)


def _step_time(spec: str, batch: int, checkpoint: bool, steps: int) -> float:
    import dpbench

    with dpbench.launch("single", spec, world_size=1, global_batch=batch, seed=0, checkpoint=checkpoint) as run:
        run.step(3)  # untimed: allocator warm-up
        return statistics.median(run.step(steps).step_times)


def main(argv: list[str] | None = None) -> int:
    from dpbench.stats import paired_ratio
    from dpbench.strategies.activations import fake_step_peak
    from dpbench.workloads import resolve_workload

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workloads", default="", help=f"comma-separated, of {', '.join(NAMES)} (default: all)")
    args = parser.parse_args(argv)
    try:
        chosen = check_names("--workloads", args.workloads, NAMES) if args.workloads else NAMES
    except UsageError as e:
        parser.error(str(e))
    cases = [(spec, batch) for spec, batch in CASES if spec.split("@")[0] in chosen]
    jobs = [(spec, batch, ckpt) for spec, batch in cases for ckpt in (False, True)]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        real = dict(zip(jobs, pool.map(_real, *zip(*jobs))))
    print("| workload | batch | checkpoint | estimated peak (bytes) | measured peak (bytes) | error |")
    print("|---|---|---|---|---|---|")
    for spec, batch, ckpt in jobs:
        estimate = fake_step_peak(resolve_workload(spec), batch, checkpoint=ckpt)
        measured = real[(spec, batch, ckpt)]
        print(
            f"| `{spec}` | {batch} | {ckpt} | {estimate:,} | {measured:,} | {(estimate - measured) / measured:+.2%} |"
        )
    for spec, batch in cases:
        saved_est = fake_step_peak(resolve_workload(spec), batch) - fake_step_peak(
            resolve_workload(spec), batch, checkpoint=True
        )
        saved = real[(spec, batch, False)] - real[(spec, batch, True)]
        print(f"\n`{spec}` at batch {batch}: checkpointing saves {saved:,} bytes measured, {saved_est:,} estimated")
        plain, checkpointed = [], []
        for _ in range(args.trials):  # interleaved: a drift of the machine moves both alike
            plain.append(_step_time(spec, batch, False, args.steps))
            checkpointed.append(_step_time(spec, batch, True, args.steps))
        ratio = paired_ratio(checkpointed, plain)
        print(
            f"step time checkpointed ÷ plain: {ratio.ratio:.3f} ({ratio.confidence:.1%} interval "
            f"{ratio.lo:.3f}–{ratio.hi:.3f}, {args.trials} interleaved pairs; plain median "
            f"{statistics.median(plain) * 1e3:.1f} ms)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
