"""predict: what dpbench measured here, carried to a world size it did not measure. It owns the
collective cost model — per collective (all_reduce, all_gather, reduce_scatter, broadcast) and link
tier (inside a node, across nodes), an alpha–beta time with a ring's latency and nccl-tests' bus
factor, fitted by least squares on log time — and its inputs:

- :mod:`~dpbench.predict.measurements`: nccl-tests text output and saved comm-suite runs →
  :class:`Measurement` records.
- :mod:`~dpbench.predict.model`: the model's form, one tier's fit (:class:`TierFit`) and the
  stated links (:class:`Link`, ``--link``).
- :mod:`~dpbench.predict.collectives`: the public API — :func:`fit_collectives` →
  :class:`CollectiveModel` (``time_us``, ``predict``) → :class:`CollectivePrediction`.
- :mod:`~dpbench.predict.text`: what ``dpbench predict collectives`` prints and its JSON.

It sits beside the gate: above ``dpbench.results`` (it reads saved runs), below the report and
the command line, which show its predictions.

May import: ``dpbench.results`` (reading saved runs, console helpers), ``dpbench.errors``,
``dpbench.stats``; numpy and scipy. Never torch, never the gate, the report or the command line.
"""

from __future__ import annotations

from dpbench._lazy import lazy_attributes

__all__ = [
    "CollectiveModel",
    "CollectivePrediction",
    "Link",
    "Measurement",
    "TierFit",
    "fit_collectives",
    "format_collectives",
    "json_document",
    "parse_link",
    "predict_collectives",
    "read_comm_run",
    "read_measurements",
    "read_nccl_tests",
]

_LAZY = {
    "CollectiveModel": "dpbench.predict.collectives",
    "CollectivePrediction": "dpbench.predict.collectives",
    "fit_collectives": "dpbench.predict.collectives",
    "predict_collectives": "dpbench.predict.collectives",
    "Link": "dpbench.predict.model",
    "TierFit": "dpbench.predict.model",
    "parse_link": "dpbench.predict.model",
    "Measurement": "dpbench.predict.measurements",
    "read_comm_run": "dpbench.predict.measurements",
    "read_measurements": "dpbench.predict.measurements",
    "read_nccl_tests": "dpbench.predict.measurements",
    "format_collectives": "dpbench.predict.text",
    "json_document": "dpbench.predict.text",
}

__getattr__, __dir__ = lazy_attributes("dpbench.predict", _LAZY, __all__, globals())
