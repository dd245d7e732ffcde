#!/usr/bin/env python
"""The spread of a recipe's final test accuracy across seeds, and each strategy's gap to ``single``
at the same seed: what the convergence suite's parity tolerance is derived from.

    .venv/bin/python -m benchmarks.parity_spread [--recipe digits-mlp] [--seeds 8] [--device cpu]
        [--strategies ddp,dp] [--json out.json]

Trains the recipe at its own epochs and hyper-parameters under ``single`` for seeds 0..N-1, and
under each strategy named (world size 2) for the same seeds; prints the final accuracies, their
standard deviation in test images and :func:`dpbench.workloads.recipes.spread_tolerance` of them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def final_accuracy(recipe_name: str, strategy: str, world_size: int, *, seed: int, device: str) -> float:
    import dpbench
    from dpbench.workloads.recipes import get_recipe
    from dpbench.workloads.splits import steps_per_epoch

    recipe = get_recipe(recipe_name)
    workload, test = recipe.build()
    _, global_batch, lr = next(h for h in recipe.hyper if h[0] == world_size)
    per_epoch = steps_per_epoch(workload.params["train_samples"], global_batch)
    with dpbench.launch(
        strategy, workload, world_size=world_size, global_batch=global_batch, device=device, seed=seed, lr=lr,
        timeout=300.0, **recipe.options,
    ) as run:  # fmt: skip
        run.step(per_epoch * recipe.epochs)
        return run.evaluate(test)["accuracy"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="digits-mlp")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--strategies", default="ddp")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from dpbench.workloads.recipes import get_recipe, spread_tolerance

    images = get_recipe(args.recipe).build()[0].params["test_samples"]
    out: dict = {"recipe": args.recipe, "device": args.device, "test_images": images, "single": [], "gaps": {}}
    for seed in range(args.seeds):
        out["single"].append(final_accuracy(args.recipe, "single", 1, seed=seed, device=args.device))
        print(f"single seed {seed}: {out['single'][-1]:.4f}", flush=True)
    for strategy in [s for s in args.strategies.split(",") if s]:
        gaps = out["gaps"].setdefault(strategy, [])
        for seed in range(args.seeds):
            gaps.append(final_accuracy(args.recipe, strategy, 2, seed=seed, device=args.device) - out["single"][seed])
            print(f"{strategy} w2 seed {seed}: gap {gaps[-1] * images:+.0f} images", flush=True)
    sd = statistics.stdev(out["single"])
    out["sd_images"] = sd * images
    out["tolerance"] = spread_tolerance(out["single"], test_images=images)
    print(f"sd across {args.seeds} seeds: {sd * images:.2f} images; tolerance {out['tolerance']:.4f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
