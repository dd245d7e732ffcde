"""Workloads by name: what every strategy trains (model factory, batch factory, loss).

``get_workload(name)`` returns a registered ``Workload``; ``list_workloads()`` the names;
``register_workload(workload)`` adds a user's own (picklable) workload under ``workload.name``;
``resolve_workload(spec)`` builds the workload any spec names — a registered name, ``MODULE:ATTR``,
``path/to/file.py:ATTR`` or ``hf:MODEL_TYPE`` with ``@key=value`` overrides (:mod:`.specs`).
The registered defaults are sized for a small CPU; build other sizes with the factories
(``mlp_workload(hidden=2048, layers=4)``, ``resnet18_workload(widths=(8, 16, 32, 64))``, …),
whose names spell out the sizes that differ from the defaults (``mlp-hidden2048-layers4``) and
whose ``params`` record every size.

May import: torch, ``transformers`` (optional, for ``hf:`` specs) and
``dpbench.schema`` (``main_module`` checks that a launching script's
factories are importable by the workers). Never strategies, the launcher or anything above.
"""

from __future__ import annotations

from dpbench.workloads.base import Workload, check_first_batch, check_picklable
from dpbench.workloads.dict_model import dict_model_workload
from dpbench.workloads.fashion_mnist import fashion_mnist_workload, load_fashion_mnist, read_idx
from dpbench.workloads.lenet import lenet_workload
from dpbench.workloads.mlp import mlp_workload
from dpbench.workloads.registry import (
    UnknownWorkloadError,
    builtin_factory,
    check_workload_names,
    get_workload,
    list_workloads,
    register_workload,
    unregister_workload,
)
from dpbench.workloads.resnet import resnet18_workload
from dpbench.workloads.spec_syntax import SpecError, WorkloadSpec, parse_spec, split_specs
from dpbench.workloads.specs import (
    check_model_builds,
    check_workload_specs,
    meta_model,
    meta_sizes,
    parameter_count,
    resolve_workload,
    resolve_workload_specs,
)
from dpbench.workloads.transformer import transformer_workload

__all__ = [
    "Workload",
    "UnknownWorkloadError",
    "SpecError",
    "WorkloadSpec",
    "builtin_factory",
    "check_model_builds",
    "check_workload_specs",
    "meta_model",
    "meta_sizes",
    "parameter_count",
    "parse_spec",
    "resolve_workload",
    "resolve_workload_specs",
    "split_specs",
    "check_first_batch",
    "check_picklable",
    "check_workload_names",
    "get_workload",
    "list_workloads",
    "register_workload",
    "unregister_workload",
    "mlp_workload",
    "lenet_workload",
    "resnet18_workload",
    "transformer_workload",
    "dict_model_workload",
    "fashion_mnist_workload",
    "load_fashion_mnist",
    "read_idx",
]
