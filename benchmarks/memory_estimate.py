"""The activation-peak estimate against the same forward + backward measured, and the 1B estimate's time.

Prints a Markdown table: per workload, batch and precision, the peak of one forward + backward
estimated without memory (``fake_step_peak``) and measured on real CPU tensors with the same
counter in a fresh spawned process (``real_step_peak``), and the relative error.

    .venv/bin/python -m benchmarks.memory_estimate [--workloads mlp,hf:gpt2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

from dpbench.errors import UsageError, check_names

HF_GPT2 = "hf:gpt2@n_layer=2,n_embd=64,n_head=2,vocab_size=1000,n_positions=64,seq_len=32"
CASES = [("mlp", 64), ("lenet", 64), ("transformer", 8), ("resnet18", 32), (HF_GPT2, 8)]
NAMES = list(dict.fromkeys(spec.split("@")[0] for spec, _ in CASES))  # what --workloads selects by


def _real(spec: str, batch: int, precision: str) -> int:
    from dpbench.strategies.activations import real_step_peak
    from dpbench.workloads import resolve_workload

    return real_step_peak(resolve_workload(spec), batch, precision=precision)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="", help=f"comma-separated, of {', '.join(NAMES)} (default: all)")
    args = parser.parse_args(argv)
    try:
        chosen = check_names("--workloads", args.workloads, NAMES) if args.workloads else NAMES
    except UsageError as e:
        parser.error(str(e))
    from dpbench.strategies.activations import fake_step_peak
    from dpbench.workloads import resolve_workload

    cases = [(spec, batch) for spec, batch in CASES if spec.split("@")[0] in chosen]
    jobs = [(spec, batch, precision) for spec, batch in cases for precision in ("fp32", "bf16")]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        real = list(pool.map(_real, *zip(*jobs)))
    print("| workload | batch | precision | estimated (bytes) | measured (bytes) | error | estimate time (s) |")
    print("|---|---|---|---|---|---|---|")
    for (spec, batch, precision), measured in zip(jobs, real):
        start = time.perf_counter()
        estimate = fake_step_peak(resolve_workload(spec), batch, precision=precision)
        seconds = time.perf_counter() - start
        error = (estimate - measured) / measured
        print(f"| `{spec}` | {batch} | {precision} | {estimate:,} | {measured:,} | {error:+.2%} | {seconds:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
