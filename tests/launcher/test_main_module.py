"""Launch scripts and the main module: the workers import it, so mistakes there are named up front.

Every test runs a real script in a fresh interpreter, as a user would, and checks the one-line
error and that no process of that script is left behind (found by a marker in its environment).
"""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
GUARD_HINT = 'if __name__ == "__main__":'


def _run_script(
    tmp_path: Path, source: str, *, name: str = "script.py", args: list[str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    marker = uuid.uuid4().hex
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=str(ROOT), DPBENCH_TEST_MARKER=marker)
    command = [sys.executable, *(args if args is not None else [str(script)])]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    _assert_no_process_left(marker)
    return proc


def _assert_no_process_left(marker: str, grace: float = 10.0) -> None:
    # The forkserver helper notices its parent's exit on its own; give it a moment.
    deadline = time.monotonic() + grace
    while True:
        left = [p for p in psutil.process_iter(["pid"]) if _has_marker(p, marker)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"processes of the script are still running: {[p.pid for p in left]}"


def _has_marker(proc: psutil.Process, marker: str) -> bool:
    try:
        return proc.environ().get("DPBENCH_TEST_MARKER") == marker
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else ""


UNGUARDED = """
    import dpbench

    with dpbench.launch("ddp", "mlp", world_size=2, global_batch=8) as run:
        print(run.step(1).samples_per_s)
"""


@pytest.mark.slow
def test_unguarded_launch_is_refused_in_one_line_before_any_process(tmp_path):
    proc = _run_script(tmp_path, UNGUARDED)
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = _last_line(proc)
    assert line.startswith("RuntimeError: dpbench.launch() was called from module-level code of the main module"), line
    assert "script.py, line 4" in line and "import the main module" in line and GUARD_HINT in line, line
    # Refused in the parent: no worker started, so no worker traceback either.
    assert "died with exit code" not in proc.stderr and "--- rank" not in proc.stderr


@pytest.mark.slow
def test_unguarded_call_through_a_function_is_refused(tmp_path):
    proc = _run_script(
        tmp_path,
        """
        import dpbench

        def main():
            with dpbench.launch("single", "mlp", global_batch=8) as run:
                run.step(1)

        main()
    """,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "script.py, line 8" in _last_line(proc) and GUARD_HINT in _last_line(proc)


@pytest.mark.slow
def test_unguarded_script_run_with_dash_m_is_refused(tmp_path):
    (tmp_path / "benchpkg").mkdir()
    (tmp_path / "benchpkg" / "__init__.py").write_text("")
    proc = _run_script(tmp_path, UNGUARDED, name="benchpkg/bench.py", args=["-m", "benchpkg.bench"])
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "bench.py, line 4" in _last_line(proc) and GUARD_HINT in _last_line(proc)


@pytest.mark.slow
def test_code_that_the_workers_do_not_reimport_may_launch_unguarded(tmp_path):
    # `python -c` has no main file: the workers do not run it again, so no guard is needed.
    code = (
        "from dpbench.workloads.main_module import refuse_unguarded_launch\nrefuse_unguarded_launch()\nprint('allowed')"
    )
    proc = _run_script(tmp_path, "", args=["-c", code])
    assert proc.returncode == 0 and proc.stdout.strip() == "allowed", proc.stderr[-3000:]


@pytest.mark.slow
def test_workers_name_the_missing_guard_when_the_parent_cannot_read_the_source(tmp_path):
    # Only the compiled file is left, so the parent cannot tell a guard from its absence and
    # starts the workers; each worker then stops at the same message instead of
    # multiprocessing's generic "bootstrapping phase" text.
    source = tmp_path / "compiled.py"
    source.write_text(textwrap.dedent(UNGUARDED))
    compiled = tmp_path / "compiled.pyc"
    py_compile.compile(str(source), cfile=str(compiled), doraise=True)
    source.unlink()
    proc = _run_script(tmp_path, "", name="unused.py", args=[str(compiled)])
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "RuntimeError: dpbench.launch() was called while a worker process imported the main module" in proc.stderr
    assert GUARD_HINT in proc.stderr
    assert "bootstrapping phase" not in proc.stderr


GUARDED_FACTORY = """
    import torch
    from torch import nn
    import dpbench

    if __name__ == "__main__":
        def local_model():
            return nn.Linear(784, 10)

        workload = dpbench.Workload(name="guarded", model=local_model, batch=dpbench.get_workload("mlp").batch)
        with dpbench.launch("ddp", workload, world_size=2, global_batch=8) as run:
            run.step(1)
"""


@pytest.mark.slow
def test_factory_defined_under_the_main_guard_is_refused_before_any_process(tmp_path):
    proc = _run_script(tmp_path, GUARDED_FACTORY)
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = _last_line(proc)
    assert line.startswith("TypeError: Workload.model of workload 'guarded' refers to local_model"), line
    assert GUARD_HINT in line and "define local_model at module level" in line, line
    assert "Can't get attribute" not in proc.stderr and "died with exit code" not in proc.stderr


@pytest.mark.slow
def test_factory_nested_in_a_partial_under_the_guard_is_refused(tmp_path):
    proc = _run_script(
        tmp_path,
        """
        import functools
        import dpbench
        from dpbench.workloads.base import check_picklable
        from dpbench.workloads.mlp import MLP

        def make(activation):
            return MLP(hidden=8, layers=1)

        if __name__ == "__main__":
            def relu():
                pass

            mlp = dpbench.get_workload("mlp")
            check_picklable(dpbench.Workload(name="inner", model=functools.partial(make, relu), batch=mlp.batch))
    """,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert _last_line(proc).startswith("TypeError: Workload.model of workload 'inner' refers to relu"), proc.stderr


@pytest.mark.slow
def test_module_level_factories_of_a_guarded_script_are_accepted(tmp_path):
    proc = _run_script(
        tmp_path,
        """
        from torch import nn
        import dpbench
        from dpbench.workloads.base import check_picklable

        def make_model():
            return nn.Linear(784, 10)

        class Model(nn.Linear):
            def __init__(self):
                super().__init__(784, 10)

        if __name__ == "__main__":
            batch = dpbench.get_workload("mlp").batch
            check_picklable(dpbench.Workload(name="ok", model=make_model, batch=batch))
            check_picklable(dpbench.Workload(name="ok-class", model=Model, batch=batch))
            print("accepted")
    """,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "accepted"


@pytest.mark.slow
def test_factory_from_a_main_that_the_workers_do_not_import_is_refused(tmp_path):
    code = textwrap.dedent("""
        from torch import nn
        import dpbench
        from dpbench.workloads.base import check_picklable

        def make_model():
            return nn.Linear(784, 10)

        check_picklable(dpbench.Workload(name="c", model=make_model, batch=dpbench.get_workload("mlp").batch))
    """)
    proc = _run_script(tmp_path, "", args=["-c", code])
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = _last_line(proc)
    assert line.startswith("TypeError: Workload.model of workload 'c' refers to make_model, defined in __main__"), line
    assert "the worker processes cannot import it" in line and "move make_model into a module" in line, line


@pytest.mark.parametrize(
    "guard", ['__name__ == "__main__"', "'__main__' == __name__", '__name__ == "__main__" and True']
)
def test_guard_spellings_are_recognised(tmp_path, guard):
    from dpbench.workloads.main_module import line_is_guarded

    script = tmp_path / "g.py"
    script.write_text(f"import os\nif {guard}:\n    x = 1\n    for i in range(2):\n        y = i\ny = 2\n")
    assert [line_is_guarded(str(script), n) for n in (1, 3, 5, 6)] == [False, True, True, False]
