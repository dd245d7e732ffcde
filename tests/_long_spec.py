"""A real run whose workload is a long Hugging Face spec: how the report and the terminal name it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

LONG_SPEC = "hf:gpt2@" + ",".join(f"n_extra_{i}={i}" for i in range(100))  # ~1,500 characters, as users write
QUICK_RUN = Path(__file__).resolve().parent / "data" / "quick-run-disturbed-trial.json.gz"


def long_spec_run(tmp_path: Path) -> Path:
    """The real quick run, its mlp cases renamed to a Hugging Face spec of ~1,500 characters."""
    data = json.loads(gzip.decompress(QUICK_RUN.read_bytes()))
    for bench in data["benchmarks"]:
        if bench["extra_info"].get("workload") == "mlp":
            bench["extra_info"]["workload"] = LONG_SPEC
    path = tmp_path / "results" / "m" / "0001_quick.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    return path
