"""``python -m dpbench.cluster [pytest arguments]``, on every node under torchrun
(see :mod:`dpbench.cluster.main`)."""

import sys

from dpbench.cluster.main import main

sys.exit(main())
