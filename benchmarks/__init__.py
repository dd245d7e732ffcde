"""benchmarks: measurements of dpbench itself — what its harness, sampler, fingerprint, traces,
report and predictions cost, and what the strategies it runs cost against each other on this
machine. Each module is one benchmark with a ``main(argv)``; ``python -m benchmarks NAME [ARGS]``
runs any of them from the checkout's root, and ``python -m benchmarks`` lists them. The dated
numbers they printed are on the documentation's validation pages, with their command.

May import: ``dpbench`` (any layer: a benchmark measures the package from outside) and the
``validation`` package (synthetic runs). Nothing in ``dpbench`` imports it.
"""
