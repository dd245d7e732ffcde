"""An fsdp run prints no torch warning: the outputs a sharded unit returns are not views.

FSDP2 warns (once per worker process) about every view tensor a ``fully_shard`` unit returns:
an in-place op on it would skip the unit's gradient hooks. dpbench's own modules return new
tensors where they are units (the built-in models, ``HfTrainModule``'s 1-element loss), and the
Hugging Face model returns only the loss dpbench reads (BERT's logits are a view). A user's model
may return a view: the warning is then silenced in the workers, since every case's fingerprint
checks against single's what an in-place op on the view would have broken.

The workers write to the launching process's stderr, so the launches run in a fresh interpreter
whose stderr the test reads."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

BUILT_IN = ["mlp", "transformer"]
HF = [
    "hf:gpt2@n_layer=2,n_embd=32,n_head=2,vocab_size=128,n_positions=32,seq_len=16",
    "hf:bert@num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64,vocab_size=128,seq_len=16",
]

SCRIPT = """
import sys

import dpbench

if __name__ == "__main__":
    for spec in sys.argv[1:]:
        with dpbench.launch("fsdp", spec, world_size=2, global_batch=8, device="cpu", timeout=120.0) as run:
            run.step(2)
        print("ran", spec)
"""


def _run_fsdp(specs: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "fsdp_cases.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DPBENCH_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(script), *specs], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )


def _warnings(stderr: str) -> list[str]:
    # warnings.formatwarning's "FILE:LINE: CATEGORY: message"
    return [line for line in stderr.splitlines() if "Warning: " in line]


VIEW_MODEL = """
import torch
from torch import nn

import dpbench


class Squeezed(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 1)

    def forward(self, x):
        return self.body(x).squeeze(1)  # a view


def batch(step, global_batch, seed):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    x = torch.randn(global_batch, 8, generator=g)
    return x, x.sum(dim=1)


def squeezed():
    return dpbench.Workload(model=Squeezed, batch=batch, loss=lambda out, target: ((out - target) ** 2).mean())
"""


# One launch for every kind of model: each is a fresh pair of workers in the same interpreter, and
# FSDP2 warns once per worker process, so a warning from any of them shows in the one stderr.
def test_fsdp_prints_no_warning_on_built_in_hugging_face_and_a_users_view_returning_models(tmp_path):
    (tmp_path / "view_models.py").write_text(textwrap.dedent(VIEW_MODEL))
    have_hf = importlib.util.find_spec("transformers") is not None  # hf: specs need the [hf] extra
    specs = [*BUILT_IN, *(HF if have_hf else []), "view_models:squeezed"]
    proc = _run_fsdp(specs, tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.split("\n")[:-1] == [f"ran {spec}" for spec in specs]
    assert "returned a view tensor" not in proc.stderr, proc.stderr[-4000:]
    assert _warnings(proc.stderr) == [], proc.stderr[-4000:]
