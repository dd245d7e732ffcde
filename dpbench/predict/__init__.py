"""predict: what dpbench measured here, carried to a world size it did not measure. It owns the
collective cost model — per collective (all_reduce, all_gather, reduce_scatter, broadcast) and link
tier (inside a node, across nodes), an alpha–beta time with the latency of the hops NCCL's ring or
tree takes (a hop across the network costing its own) and nccl-tests' bus factor, fitted by least
squares on log time; the measurement itself where one was made at that size and world size — and
its inputs:

- :mod:`~dpbench.predict.measurements`: nccl-tests text output and saved comm-suite runs →
  :class:`Measurement` records.
- :mod:`~dpbench.predict.model`: the model's form, one tier's fit (:class:`TierFit`) and the
  stated links (:class:`Link`, ``--link``).
- :mod:`~dpbench.predict.collectives`: the public API — :func:`fit_collectives` →
  :class:`CollectiveModel` (``time_us``, ``predict``) → :class:`CollectivePrediction`, whose
  :class:`Basis` says what it rests on (measured, interpolated, fitted, from all_reduce, a stated link).
- :mod:`~dpbench.predict.text`: what ``dpbench predict collectives`` prints and its JSON.

And the step model built on it:

- :mod:`~dpbench.predict.profile`: a :class:`StepProfile` (compute per phase, gradient buckets or
  sharded units, the buffers broadcast, the trial spread) read from a saved run, or built by hand.
- :mod:`~dpbench.predict.compute`: how a rank's forward + backward grow with its batch
  (:class:`ComputeFloor`: a floor plus a cost per sample, measured from a run's cases at two
  per-rank batches, else linear and stated).
- :mod:`~dpbench.predict.schedule`: a step replayed on a compute and a communication stream.
- :mod:`~dpbench.predict.step`: the schedule a strategy declares
  (:func:`dpbench.strategies.step_schedule`) → :func:`predict_step` → :class:`StepPrediction`;
  no strategy's name is known here.
- :mod:`~dpbench.predict.forecast`: a saved run → :func:`step_predictions` → :class:`StepForecast`
  (every configuration × world size, and the pick at each), with :func:`run_collective_model` (the
  collective model from ``--collectives``/``--link`` or the run's own comm-suite benchmarks); what
  the report's forecast section renders.
- :mod:`~dpbench.predict.text`: what ``dpbench predict RUN`` prints and its JSON, and the
  cells the report's table shares with it.

It sits beside the gate: above ``dpbench.results`` (it reads saved runs), below the report and
the command line, which show its predictions.

May import: ``dpbench.results`` (reading saved runs, console helpers, units), ``dpbench.errors``,
``dpbench.stats``, ``dpbench.strategies`` (the registry and each strategy's step schedule: its class
side, torch-free); numpy and scipy. Never torch, never the gate, the report or the command line.
"""

from __future__ import annotations

from dpbench._lazy import lazy_attributes

__all__ = [
    "Basis",
    "CollectiveModel",
    "CollectivePrediction",
    "ComputeFloor",
    "GradientGroup",
    "Link",
    "Measurement",
    "OverlapSlowdown",
    "StepForecast",
    "StepPrediction",
    "StepProfile",
    "StrategyPick",
    "TierFit",
    "fit_collectives",
    "format_collectives",
    "format_steps",
    "json_document",
    "parse_link",
    "predict_collectives",
    "predict_step",
    "profiles_from_run",
    "read_comm_run",
    "read_measurements",
    "read_nccl_tests",
    "run_collective_model",
    "step_predictions",
    "steps_document",
]

_LAZY = {
    "Basis": "dpbench.predict.collectives",
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
    "ComputeFloor": "dpbench.predict.compute",
    "GradientGroup": "dpbench.predict.profile",
    "StepProfile": "dpbench.predict.profile",
    "profiles_from_run": "dpbench.predict.profile",
    "OverlapSlowdown": "dpbench.predict.step",
    "StepPrediction": "dpbench.predict.step",
    "predict_step": "dpbench.predict.step",
    "StepForecast": "dpbench.predict.forecast",
    "StrategyPick": "dpbench.predict.forecast",
    "step_predictions": "dpbench.predict.forecast",
    "run_collective_model": "dpbench.predict.basis",
    "format_steps": "dpbench.predict.text",
    "steps_document": "dpbench.predict.text",
}

__getattr__, __dir__ = lazy_attributes("dpbench.predict", _LAZY, __all__, globals())
