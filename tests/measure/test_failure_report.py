"""How a failed case is reported (dpbench/measure/plugin/failures.py): the exception a worker's
traceback ends in, the innermost frame of the user's own code, the one line, the file."""

from __future__ import annotations

from pathlib import Path

from dpbench.measure.plugin.failures import Frame, failure_line, innermost_frame, library_roots, raised, write_traceback
from dpbench.workers.base import WorkerError

ROOTS = ("/venv/lib/python3.11", "/repo/dpbench")
TRACEBACK = """Traceback (most recent call last):
  File "/repo/dpbench/workers/worker.py", line 88, in serve
    result = fn(ctx, *args)
             ^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789, in _call_impl
    return forward_call(*args, **kwargs)
  File "/home/me/my_models.py", line 15, in forward
    h = self.block(x)
  File "/home/me/blocks.py", line 7, in block
    raise ValueError("shape mismatch: 3 != 4")
  File "/venv/lib/python3.11/site-packages/torch/functional.py", line 40, in check
    raise ValueError("shape mismatch: 3 != 4")
ValueError: shape mismatch: 3 != 4
"""


def test_the_innermost_frame_of_the_users_code_is_found_past_library_frames():
    frame, own = innermost_frame(TRACEBACK, ROOTS)
    assert own and frame == Frame(
        path="/home/me/blocks.py", line=7, function="block", source='raise ValueError("shape mismatch: 3 != 4")'
    )
    assert str(frame) == '/home/me/blocks.py:7 in block: raise ValueError("shape mismatch: 3 != 4")'


def test_without_a_frame_of_the_users_the_innermost_frame_is_named_as_not_theirs():
    library_only = "\n".join(
        line for line in TRACEBACK.splitlines() if "/home/me" not in line and "self.block" not in line
    )
    frame, own = innermost_frame(library_only, ROOTS)
    assert not own and (frame.path, frame.line) == ("/venv/lib/python3.11/site-packages/torch/functional.py", 40)
    assert innermost_frame("died with exit code -9", ROOTS) == (None, False)


def test_the_exception_is_the_tracebacks_last_line_or_how_the_rank_died():
    assert raised(TRACEBACK) == "ValueError: shape mismatch: 3 != 4"
    assert raised(TRACEBACK + "\n") == "ValueError: shape mismatch: 3 != 4"
    assert (
        raised("torch.distributed.DistBackendError: NCCL error\n") == "torch.distributed.DistBackendError: NCCL error"
    )
    assert raised("died with exit code -9 (SIGKILL: killed, perhaps for memory)") == (
        "died with exit code -9 (SIGKILL: killed, perhaps for memory)"
    )
    assert raised("") == "failed without a message"


def test_one_line_names_the_case_rank_exception_frame_and_file(tmp_path):
    error = WorkerError("worker rank 1 failed", rank=1, failures={1: TRACEBACK})
    line = failure_line(
        "ddp-mlp-w2 (batch 8)", error, traceback_file=Path("results/m/failures/r/ddp-mlp-w2.txt"), roots=ROOTS
    )
    assert line == (
        "ddp-mlp-w2 (batch 8): worker rank 1 failed: ValueError: shape mismatch: 3 != 4 — in your code at "
        '/home/me/blocks.py:7 in block: raise ValueError("shape mismatch: 3 != 4") '
        "(the full traceback: results/m/failures/r/ddp-mlp-w2.txt)"
    )
    died = WorkerError("worker rank 0 died", rank=0, failures={0: "died with exit code -9"})
    assert failure_line("single-mlp-w1", died, traceback_file=None, roots=ROOTS) == (
        "single-mlp-w1: worker rank 0 died: died with exit code -9"
    )
    on_a_node = WorkerError(
        "worker rank 1 (node 1, host b12) failed (world_size=2):\n--- rank 1 ---\nx", rank=1, failures={}
    )
    assert failure_line("ddp-mlp-w2", on_a_node, traceback_file=None, roots=ROOTS).startswith(
        "ddp-mlp-w2: worker rank 1 (node 1, host b12) failed (world_size=2): "
    )


def test_the_file_holds_every_ranks_traceback_and_the_notes(tmp_path):
    error = WorkerError(
        f"worker ranks 0, 1 failed:\n--- rank 0 ---\n{TRACEBACK}--- rank 1 ---\n{TRACEBACK}", rank=0, failures={}
    )
    error.add_note("(while training workload my_models:net)")
    path = write_traceback(tmp_path / "failures", "ddp-my_models:net-w2", "ddp-my_models:net-w2 (batch 8)", error)
    assert path == tmp_path / "failures" / "ddp-my_models_net-w2.txt"
    text = path.read_text()
    assert text.startswith("ddp-my_models:net-w2 (batch 8)\n\nworker ranks 0, 1 failed:")
    assert text.count("ValueError: shape mismatch") == 2 and text.endswith("(while training workload my_models:net)\n")


def test_dpbench_torch_and_the_standard_library_are_not_the_users():
    import json

    import torch

    import dpbench

    for module in (dpbench, torch, json):
        path = str(Path(module.__file__).resolve())
        assert any(path.startswith(root + "/") for root in library_roots()), (path, library_roots())


def test_the_file_starts_with_the_line_pytest_shows_for_dpbench_run_to_read_back(tmp_path):
    from dpbench.measure.plugin.failures import failure_files, first_failure_line, traceback_path

    error = WorkerError(f"worker rank 0 failed:\n{TRACEBACK}", rank=0, failures={0: TRACEBACK})
    where = tmp_path / "Linux-CPython-3.11-64bit" / "failures" / "0001"
    line = failure_line("ddp w2", error, traceback_file=traceback_path(where, "ddp-w2"), roots=ROOTS)
    path = write_traceback(where, "ddp-w2", "ddp w2", error, line=line)
    assert path.read_text().startswith(f"{line}\n\nddp w2\n\nworker rank 0 failed:")
    assert failure_files(tmp_path) == {path} and first_failure_line([path]) == line
    assert line == (
        "ddp w2: worker rank 0 failed: ValueError: shape mismatch: 3 != 4 — in your code at "
        f'/home/me/blocks.py:7 in block: raise ValueError("shape mismatch: 3 != 4") (the full traceback: {path})'
    )
