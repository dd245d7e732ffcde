"""The convergence suite as a user runs it: the packaged digits under every CPU strategy (the parity
target), d2l's LeNet recipe on a synthetic Fashion-MNIST directory (the path a GPU user takes), the
saved extra_info and its report, and bad input refused in one line before any process starts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fashion_synth import write_fashion_dir

from dpbench.results.fingerprint import FingerprintStatus, compare_fingerprints

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
CPU_STRATEGIES = {"single", "dp", "ddp", "manual", "allreduce", "fsdp", "zero"}


def _suite(tmp_path, env: dict[str, str], *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    full = {**os.environ, "DPBENCH_PROFILE": "quick", "DPBENCH_TRIALS": "1", "PYTHONUNBUFFERED": "1", **env}
    for name in ("DPBENCH_EPOCHS", "DPBENCH_TARGET_ACCURACY", "DPBENCH_FASHION_MNIST"):
        if name not in env:
            full.pop(name, None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "suites/test_convergence.py",
            f"--benchmark-storage=file://{tmp_path / 'results'}",
            "-rs",
            *args,
        ],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _saved(tmp_path) -> list[dict]:
    (path,) = list((tmp_path / "results").glob("*/0001_conv.json"))
    return json.loads(path.read_text())["benchmarks"]


def _documented_fields() -> str:
    """The `convergence` field's table on docs/convergence.md."""
    text = (ROOT / "docs" / "convergence.md").read_text()
    return text[text.index("## The `convergence` field") :]


def test_every_cpu_strategy_trains_the_digits_to_singles_accuracy(tmp_path):
    proc = _suite(tmp_path, {"DPBENCH_CONVERGENCE": "digits-mlp"}, "--benchmark-save=conv", "-q")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"SKIPPED.*torch-dp needs CUDA", proc.stdout)
    benches = {b["extra_info"]["strategy"]: b["extra_info"] for b in _saved(tmp_path)}
    assert set(benches) == CPU_STRATEGIES
    single = benches["single"]["convergence"]
    for strategy, extra in benches.items():
        conv = extra["convergence"]
        assert extra["suite"] == "convergence" and extra["options"]["optimizer"] == "adamw"
        assert conv["epochs"] == 10 and len(conv["test_accuracy"]) == 10 and conv["steps_per_epoch"] == 22
        assert conv["final_test_accuracy"] >= conv["expected_accuracy"] == 0.95, strategy
        assert abs(conv["final_test_accuracy"] - single["final_test_accuracy"]) <= 0.005, strategy
        assert conv["sec_per_epoch"] > 0 and conv["time_to_target_s"] > 0 and conv["eval_device"] == "cpu"
        assert extra["world_size"] == (1 if strategy == "single" else 2)
        # Every run proves it trained single's model: the sums follow the probe's 2 steps, the final
        # accuracy is held to the recipe's parity tolerance.
        assert extra["fingerprint"]["step"] == 2 and len(extra["fingerprint"]["losses"]) == 8
        assert extra["fingerprint"]["final_test_accuracy"] == conv["final_test_accuracy"]
        assert extra["fingerprint"]["accuracy_tolerance"] == conv["parity_tolerance"]
        if strategy != "single":
            verdict = compare_fingerprints(extra["fingerprint"], benches["single"]["fingerprint"])
            assert verdict.status is FingerprintStatus.MATCHES, f"{strategy}: {verdict.reason}"
    documented = _documented_fields()
    undocumented = [key for key in single if f"`{key}`" not in documented]
    assert not undocumented, f"docs/convergence.md does not document {undocumented}"
    report = tmp_path / "report.html"
    from dpbench.cli import main  # in this process: a fresh interpreter would only import again (~2 s)

    assert main(["report", str(next((tmp_path / "results").glob("*/0001_conv.json"))), "-o", str(report)]) == 0
    html = report.read_text()
    assert "Time to accuracy" in html and re.search(r"ddp w2: test acc 0\.9\d, [\d.]+ sec/epoch", html)
    assert "within float noise" in html


def test_d2l_lenet_runs_end_to_end_on_fashion_mnist_idx_files(tmp_path):
    # One full batch of 256 per epoch, two epochs: the chapter's own batch and lr, the real file path.
    data = write_fashion_dir(tmp_path / "fashion", train=300, test=500)
    proc = _suite(
        tmp_path,
        {"DPBENCH_CONVERGENCE": "d2l-lenet", "DPBENCH_FASHION_MNIST": str(data), "DPBENCH_EPOCHS": "2"},
        "--benchmark-save=conv",
        "-q",
        "-k",
        "single or (w2 and (manual or ddp))",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    benches = {b["extra_info"]["strategy"]: b["extra_info"] for b in _saved(tmp_path)}
    assert set(benches) == {"single", "manual", "ddp"}
    for extra in benches.values():
        conv = extra["convergence"]
        assert (conv["dataset"], conv["train_samples"], conv["test_samples"]) == ("fashion-mnist", 300, 500)
        assert (extra["global_batch"], extra["lr"], conv["steps_per_epoch"]) == (256, 0.2, 1)
        assert len(conv["test_accuracy"]) == 2 and conv["deterministic"]


def test_bad_epochs_are_a_usage_error_in_one_line(tmp_path):
    # The other settings share the path (the conftest's usage error); their messages are unit-tested.
    proc = _suite(tmp_path, {"DPBENCH_CONVERGENCE": "digits-mlp", "DPBENCH_EPOCHS": "0"}, timeout=120)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip() == "ERROR: DPBENCH_EPOCHS must be an integer >= 1 (training epochs), got '0'"


def test_a_truncated_fashion_mnist_file_skips_every_case_naming_it(tmp_path):
    data = write_fashion_dir(tmp_path / "fashion", train=64, test=32)
    images = data / "t10k-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:-10])
    proc = _suite(tmp_path, {"DPBENCH_CONVERGENCE": "d2l-lenet", "DPBENCH_FASHION_MNIST": str(data)}, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert re.search(r"SKIPPED \[9\] .*t10k-images-idx3-ubyte: IDX payload size mismatch", proc.stdout)
