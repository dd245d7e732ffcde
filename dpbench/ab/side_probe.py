"""Run by ``dpbench ab`` as a script *in one side's interpreter*: can it run the suites, and what does it hold?

Prints one JSON object on its last line: ``{"error": "cannot import torch (ModuleNotFoundError: …)"}``
(exit 3) or the side's facts — :func:`dpbench.workers.machine.software_facts` (torch and its build,
CUDA, cuDNN, NCCL, Python, every installed package's version) plus the machine as this interpreter
sees it (host, CPUs it may use, CPU model, GPUs, driver) and the ``sitecustomize`` it loaded.
It never imports the dpbench that runs ``ab``: the environment may hold another one (or none but
the revision's source on ``PYTHONPATH``), so ``machine.py`` is loaded by its path (``argv[1]``),
and it imports only the standard library and torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import platform
import sys

# What one trial needs from the environment, as (what the error names, the module imported): torch,
# the revision's dpbench and what its workers import at run time (psutil, by the CPU sampler; dpbench
# itself imports lazily), pytest and its benchmark plugin.
REQUIRED = (
    ("torch", "torch"),
    ("dpbench", "dpbench"),
    ("dpbench", "dpbench.sampler.cpu"),
    ("pytest", "pytest"),
    ("pytest-benchmark", "pytest_benchmark"),
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count()


def main(argv: list[str]) -> int:
    for name, module in REQUIRED:
        try:
            importlib.import_module(module)
        except BaseException as exc:  # noqa: BLE001 - any failure to import is the answer
            print(json.dumps({"error": f"cannot import {name} ({_first_line(exc)})"}))
            return 3
    spec = importlib.util.spec_from_file_location("_dpbench_ab_machine", argv[1])
    machine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(machine)
    facts = machine.software_facts()
    inventory = machine.gpu_inventory()
    dpbench = sys.modules["dpbench"]
    site = sys.modules.get("sitecustomize")
    facts.update(
        executable=sys.executable,
        node=platform.node(),
        cpu_count=_cpus(),
        cpu_model=_cpu_model(),
        gpus=[g.get("name") for g in inventory.get("gpus", [])],
        gpu_count=inventory.get("gpu_count", 0),
        driver=inventory.get("driver"),
        dpbench=getattr(dpbench, "__version__", None),
        dpbench_path=os.path.dirname(getattr(dpbench, "__file__", "") or ""),
        sitecustomize=getattr(site, "__file__", None) if site is not None else None,
    )
    print(json.dumps(facts, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
