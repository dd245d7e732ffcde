"""validation: the evidence behind dpbench's statistical claims, importable and each run by a test.

- The noise models fitted to real runs (:mod:`validation.noise`; a busy neighbour's term:
  :mod:`validation.contention`) and the synthetic runs drawn from them
  (:mod:`validation.synthetic_runs`, :mod:`validation.synthetic_benchmarks`).
- Simulations through the real gate, decision and history code (``simulate_*``,
  :mod:`validation.sequential_power_floor`): false-claim rates per job, power, trials used.
- Validations on real runs of this checkout (:mod:`validation.aa_check`,
  :mod:`validation.ab_relu`, :mod:`validation.busy`, :mod:`validation.busy_aa`, :mod:`validation.decision_aa`,
  :mod:`validation.predict_step`, :mod:`validation.session_offset`).

Each entry point has a ``main(argv)`` and runs as ``python -m validation.NAME [ARGS]`` from the
checkout's root; the documentation's validation pages name the command beside each table.

May import: ``dpbench`` (any layer). Nothing in ``dpbench`` imports it.
"""
