"""tools: programs that work on dpbench rather than measure it — the GPU session and check
(``tools/gpu-session``, ``tools/gpu-check`` and the modules they run), the fault soak, the
generated documentation tables and the sweep of ``hf:`` model types. Each Python entry point has a
``main(argv)`` and runs as ``python -m tools.NAME [ARGS]`` from the checkout's root.

May import: ``dpbench`` (any layer), ``validation`` and the tests' cluster helpers (the soak starts
torchrun "nodes" as the cluster tests do). Nothing in ``dpbench`` imports it.
"""
