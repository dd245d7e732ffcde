"""The error a strategy raises when it cannot run on this machine (kept apart so any module can raise it)."""

from __future__ import annotations

__all__ = ["StrategyUnavailable"]


class StrategyUnavailable(RuntimeError):
    """The strategy cannot run here (e.g. torch-dp without CUDA); ``reason`` says why.

    Suites turn this into ``pytest.skip(exc.reason)``.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
