"""Which ``hf:`` model types build and step: every type the installed ``transformers`` maps to a
causal-LM, masked-LM, seq2seq-LM or image-classification head, at its default config.

For each type: ``resolve_workload("hf:TYPE")`` (its config, its model built on the meta device, as
before any launch) and one forward + backward of that model on fake tensors at batch 2 in fp32 (the
activation estimate of ``dpbench estimate``; nothing is allocated, so a 100B-parameter default
config costs no memory). Prints one line per type and the counts per task; ``--json`` saves them.
A type that steps here is not proven to train: the step's values are never computed.

    .venv/bin/python -m tools.check_hf_types [--types t5,bart] [--timeout 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import signal
import warnings


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout()


def _one_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:200]


def check(model_type: str, timeout: int) -> dict[str, str]:
    """``{"resolve": "ok" | why not, "step": "ok" | why not | "-"}`` for ``hf:model_type``."""
    from dpbench.strategies.activations import fake_step_peak
    from dpbench.workloads import resolve_workload

    result = {"resolve": "-", "step": "-"}
    signal.alarm(timeout)  # a few types step for minutes on fake tensors (sequential scans)
    try:
        workload = resolve_workload(f"hf:{model_type}")
        result["resolve"] = "ok"
        fake_step_peak(workload, 2, precision="fp32")
        result["step"] = "ok"
    except _Timeout:
        result["resolve" if result["resolve"] == "-" else "step"] = f"over {timeout} s"
    except Exception as exc:  # noqa: BLE001 - every failure is the finding
        result["resolve" if result["resolve"] == "-" else "step"] = _one_line(exc)
    finally:
        signal.alarm(0)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", default="", help="comma-separated model types (default: every supported one)")
    parser.add_argument("--timeout", type=int, default=20, help="seconds per type")
    parser.add_argument("--json", default="", help="write the results here")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)  # transformers' warnings about default configs
    signal.signal(signal.SIGALRM, _alarm)
    from dpbench.workloads.hf import supported_types

    supported = supported_types()
    types = [t for t in args.types.split(",") if t] or sorted(supported)
    results = {}
    for model_type in types:
        class_name, task = supported.get(model_type, ("-", "-"))
        results[model_type] = {"class": class_name, "task": task, **check(model_type, args.timeout)}
        row = results[model_type]
        print(f"{model_type:<28} {task:<21} resolve: {row['resolve'][:60]:<20} step: {row['step'][:80]}", flush=True)
    counts = collections.Counter()
    for row in results.values():
        counts[row["task"], "types"] += 1
        counts[row["task"], "resolve"] += row["resolve"] == "ok"
        counts[row["task"], "step"] += row["step"] == "ok"
    for task in sorted({row["task"] for row in results.values()}):
        print(
            f"{task}: {counts[task, 'types']} types, {counts[task, 'resolve']} resolve, "
            f"{counts[task, 'step']} step on fake tensors"
        )
    total = [sum(counts[t, k] for t in {r["task"] for r in results.values()}) for k in ("types", "resolve", "step")]
    print(f"all: {total[0]} types, {total[1]} resolve, {total[2]} step on fake tensors")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
