"""cluster: the suites across several nodes under torchrun — ``python -m dpbench.cluster
[pytest arguments]`` on every node (:mod:`~dpbench.cluster.main`). Global rank 0 is the head
(:mod:`~dpbench.cluster.head`) and runs the one pytest session; every rank is an agent
(:mod:`~dpbench.cluster.agent`) that starts the case's workers on its node; the head's
:class:`~dpbench.cluster.remote.RemotePool` drives them, installed as the launcher's pool
provider (:mod:`dpbench.workers.provider`) while the session runs. Start-up check-in, heartbeats
and the exit-barrier watch make a lost node stop the run within seconds.

May import: workers, strategies (a placement's rule), ``dpbench.schema`` and ``dpbench.stats``.
Never the launcher (it plugs into the workers' seam instead), the measuring engine or above.
The runner reaches its check-in before torch: nothing here imports torch at module level.
"""

from dpbench._lazy import lazy_attributes

__all__ = [
    "ClusterError",
    "ClusterInfo",
    "RemotePool",
    "active_session",
    "cluster_facts",
    "cluster_world_sizes",
    "main",
]

_LAZY = {
    "ClusterError": "dpbench.cluster.node",
    "ClusterInfo": "dpbench.cluster.node",
    "cluster_world_sizes": "dpbench.cluster.node",
    "RemotePool": "dpbench.cluster.remote",
    "active_session": "dpbench.cluster.remote",
    "cluster_facts": "dpbench.cluster.head",
    "main": "dpbench.cluster.main",
}

__getattr__, __dir__ = lazy_attributes("dpbench.cluster", _LAZY, __all__, globals())
