"""dpbench's benchmark suites: ``pytest suites/`` in a checkout, ``pytest --pyargs dpbench.suites``
from an installed package. The measuring plugin (:mod:`dpbench.measure.plugin`) provides their
fixtures and saves their runs; nothing here is imported by dpbench itself."""
