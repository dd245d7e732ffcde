"""Short demo: train a small MLP under dpbench.parallel.DataParallel with two CPU replicas and
under the plain module, from the same weights and batches, and show they agree.

Run with ``python -m dpbench.demo [--steps N] [--batch N]``.
"""

from __future__ import annotations

import argparse
import copy
import sys

import torch
from torch import nn

from dpbench.parallel import DataParallel

__all__ = ["main"]


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))


def _batch(step: int, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 10_000 + step)
    return torch.randn(batch, 20, generator=g), torch.randint(0, 4, (batch,), generator=g)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dpbench.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="SGD steps (default 8)")
    parser.add_argument("--batch", type=int, default=32, help="global batch, split over the 2 replicas (default 32)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 2:
        parser.error(f"--steps must be >= 1 and --batch >= 2 (two replicas), got {args.steps} and {args.batch}")

    plain = _model(args.seed)
    wrapped = copy.deepcopy(plain)  # same initial weights
    loss_fn = nn.CrossEntropyLoss()
    opt_plain = torch.optim.SGD(plain.parameters(), lr=0.1)
    opt_dp = torch.optim.SGD(wrapped.parameters(), lr=0.1)

    print(
        f"Training a {sum(p.numel() for p in plain.parameters())}-parameter MLP for {args.steps} SGD steps, "
        f"global batch {args.batch}: plain module vs dpbench DataParallel(device_ids=['cpu', 'cpu'])"
    )
    print(f"{'step':>4}  {'loss (plain)':>14}  {'loss (DataParallel)':>20}  {'difference':>11}")
    with DataParallel(wrapped, device_ids=["cpu", "cpu"], record_phases=True) as dp:
        for step in range(args.steps):
            x, y = _batch(step, args.batch, args.seed)
            losses = []
            for model, opt in ((plain, opt_plain), (dp, opt_dp)):
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            print(f"{step:>4}  {losses[0]:>14.7f}  {losses[1]:>20.7f}  {abs(losses[0] - losses[1]):>11.2e}")
        phases = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in dp.phase_times.items())

    max_diff = max((p - q).abs().max().item() for p, q in zip(plain.parameters(), wrapped.parameters()))
    print(f"last DataParallel forward: {phases}")
    print(f"max |parameter difference| after {args.steps} steps: {max_diff:.2e}")
    # Float sums in a different order differ in the last bits; anything beyond that is a bug.
    if max_diff > 1e-4:
        print("error: DataParallel diverged from the plain module", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
