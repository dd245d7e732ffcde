"""``python -m dpbench.cluster [pytest arguments]``, on every node under torchrun
(see :mod:`dpbench.cluster.runner`)."""

import sys

from dpbench.cluster.runner import main

sys.exit(main())
