"""measure: how a benchmark number is obtained — cases measured in interleaved fresh-process
trials, the profiles that size a run, and the documented ``extra_info`` written from the trials.

Owns: :mod:`~dpbench.measure.cases` (a training or collective case and how one trial of it runs),
:mod:`~dpbench.measure.trials` (the interleaved session and the worker clock pytest-benchmark
reads), :mod:`~dpbench.measure.settle` (trials until the answer is settled, within a budget: what
the session asks the decision model after each pass), :mod:`~dpbench.measure.remeasure`
(disturbed trials found and measured again in one extra pass), :mod:`~dpbench.measure.settings`
(the session's settings, parsed once from options, config and ``DPBENCH_*``, handed to pytest as
one JSON value; the trials/budget parsers), :mod:`~dpbench.measure.profiles` (``quick``/``full``
sized for this machine from the settings),
:mod:`~dpbench.measure.extra_info` (schema 2 results), :mod:`~dpbench.measure.collectives` (the
collective micro-benchmark's worker side), :mod:`~dpbench.measure.derive` (MFU, tokens/s and
exposed communication from a step time) and :mod:`~dpbench.measure.plugin` (the pytest plugin
that runs the suites: measuring, saving, signals).

May import: the launcher, the cluster runner (its session's world), the workers, the sampler,
strategies, workloads, traces, the decision model (``dpbench.decision``: is a question settled?),
``dpbench.schema`` and ``dpbench.stats``. Only the plugin imports pytest; never the gate or the
report. Nothing outside the plugin's session imports torch at
module level.
"""

from __future__ import annotations

from dpbench.measure.cases import CollectiveCase, TrainingCase, steps_for_round, steps_for_trial
from dpbench.measure.extra_info import (
    collective_extra_info,
    measure_collective,
    measure_training,
    publish,
    reference_result,
    relative_to,
    training_extra_info,
    trials_info,
)
from dpbench.measure.profiles import ProfileConfig, resolve_profile, strategy_cases
from dpbench.measure.trials import CaseResult, TrialResult, TrialSession, advance_worker_clock, worker_clock

__all__ = [
    "CaseResult",
    "CollectiveCase",
    "ProfileConfig",
    "TrainingCase",
    "TrialResult",
    "TrialSession",
    "advance_worker_clock",
    "collective_extra_info",
    "measure_collective",
    "measure_training",
    "publish",
    "reference_result",
    "relative_to",
    "resolve_profile",
    "steps_for_round",
    "steps_for_trial",
    "strategy_cases",
    "training_extra_info",
    "trials_info",
    "worker_clock",
]
