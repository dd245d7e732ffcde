"""Which pool a launch gets: local worker processes, unless a pool provider is installed.

The seam between the launcher and anything that runs ranks elsewhere. The launcher asks
:func:`make_pool` and :func:`placement_for`; it never imports what provides the pools. The
torchrun runner (:mod:`dpbench.cluster`) installs its provider with :func:`providing` while its
pytest session runs, so its cases' ranks spread over the nodes; without one, every pool is a
local :class:`~dpbench.workers.pool.WorkerPool`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the options pass through to the strategy's placement; a worker never imports strategies
    from dpbench.strategies import CommonOptions

from dpbench.workers.base import Pool

__all__ = ["PoolProvider", "current_provider", "make_pool", "placement_for", "providing"]


class PoolProvider(Protocol):
    """What a provider of pools answers (see :class:`dpbench.cluster.remote.ClusterPools`)."""

    def make_pool(self, world_size: int, **kwargs: Any) -> Pool:
        """A pool of ``world_size`` ranks that form a process group (``WorkerPool``'s arguments)."""

    def placement_for(self, strategy_cls: Any, *, world_size: int, device: str, options: CommonOptions) -> Any:
        """The strategy's placement with its ranks where this provider runs them."""


_PROVIDERS: list[PoolProvider] = []


@contextlib.contextmanager
def providing(provider: PoolProvider) -> Iterator[PoolProvider]:
    """Make ``provider`` the one :func:`make_pool` and :func:`placement_for` ask within the block."""
    _PROVIDERS.append(provider)
    try:
        yield provider
    finally:
        _PROVIDERS.remove(provider)


def current_provider() -> PoolProvider | None:
    """The innermost installed provider (None: local pools only)."""
    return _PROVIDERS[-1] if _PROVIDERS else None


def make_pool(world_size: int, *, process_group: bool = True, **kwargs: Any) -> Pool:
    """The pool for ``world_size`` ranks: the installed provider's when the ranks form a process
    group, else (and with no provider) local worker processes."""
    provider = current_provider()
    if provider is not None and process_group:
        return provider.make_pool(world_size, **kwargs)
    from dpbench.workers.pool import WorkerPool

    return WorkerPool(world_size, process_group=process_group, **kwargs)


def placement_for(strategy_cls: Any, *, world_size: int, device: str, options: CommonOptions) -> Any:
    """``strategy_cls.placement(...)``, or the installed provider's version of it."""
    provider = current_provider()
    if provider is None:
        return strategy_cls.placement(world_size=world_size, device=device, options=options)
    return provider.placement_for(strategy_cls, world_size=world_size, device=device, options=options)
