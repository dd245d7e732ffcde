"""The batch reaches the device before a step's clock starts, pinned and non-blocking, and the
timed step copies nothing more (ddp's micro-batches were a blocking copy, a host sync, each). The
compile warm-up's step gets its batch the same way, and the worker beats while it compiles.

On CPU: a tensor subclass records the copies a strategy asks for (``pin_memory``, ``.to``) and
answers them without a device — a fake CUDA surface at the tensor boundary.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from _groups import one_rank_group  # noqa: F401 (the fixture)
from _toy_workloads import MLP

from dpbench.strategies import get_strategy, list_strategies
from dpbench.strategies._compile import COMPILE_TIMEOUT_S
from dpbench.strategies.base import RunSpec, stage


class Recorded(torch.Tensor):
    """Logs pin_memory() and .to(...) and returns itself, as if the copy had happened."""

    log: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.pin_memory:
            cls.log.append(("pin_memory",))
            return args[0]
        if func is torch.Tensor.to:
            cls.log.append(("to", tuple(str(a) for a in args[1:]), dict(kwargs)))
            return args[0]
        return super().__torch_function__(func, types, args, kwargs)


@pytest.fixture
def log():
    Recorded.log = []
    return Recorded.log


def test_stage_pins_then_copies_without_blocking(log):
    x, y = torch.randn(4, 3).as_subclass(Recorded), torch.arange(4).as_subclass(Recorded)
    staged = stage((x, {"y": y}), "cuda:1")
    assert staged[0] is x and staged[1]["y"] is y
    copy = ("to", ("cuda:1",), {"non_blocking": True})
    assert log == [("pin_memory",), copy, ("pin_memory",), copy]


def _spec(strategy: str, world_size: int, devices: tuple[str, ...], **options) -> RunSpec:
    cls = get_strategy(strategy)
    resolved = cls.parse_options(options, device="cpu", world_size=world_size, global_batch=12)
    return RunSpec(
        strategy=strategy,
        options=resolved,
        world_size=world_size,
        global_batch=12,
        per_replica_batch=tuple(cls.per_replica_batch(12, world_size, resolved)),
        device_type="cpu",
        devices=devices,
        backend="gloo" if cls.multiprocess else None,
        seed=0,
        lr=0.05,
        threads_per_worker=1,
    )


@pytest.mark.slow  # DistributedDataParallel's first construction imports a lot (~8 s on a busy machine)
def test_ddp_accumulation_copies_no_micro_batch_inside_the_step(log, one_rank_group):  # noqa: F811 (the fixture)
    spec = _spec("ddp", 1, ("cpu",), accumulation_steps=3)
    ctx = SimpleNamespace(
        rank=0, world_size=1, device=torch.device("cpu"), group=one_rank_group, at_close=lambda fn: None
    )
    trainer = get_strategy("ddp")(spec, MLP, ctx)
    trainer.setup()
    x, y = MLP.batch(0, 12, 0)
    loss = trainer.train_step(x.as_subclass(Recorded), y.as_subclass(Recorded))
    assert torch.isfinite(loss)
    assert [entry for entry in log if entry[0] == "to"] == []  # the three micro-batches are views


def test_run_steps_stages_on_the_first_device_before_the_clock(monkeypatch):
    """The order of events in the shared timed loop, with a fake CUDA device list."""
    events = []
    spec = _spec("dp", 2, ("cuda:0", "cuda:1"))
    cls = get_strategy("dp")
    trainer = cls.__new__(cls)  # the loop only: no model, no CUDA
    trainer.spec, trainer.rank, trainer._step, trainer.cuda_devices = spec, 0, 0, []
    trainer.timed_peak, trainer.workload = {}, MLP
    trainer.phases = SimpleNamespace(sync=lambda: events.append("sync"), clear=lambda: None, resolve=dict)
    trainer.precision = SimpleNamespace(skipped=0)  # the loss scaler's count of skipped updates
    monkeypatch.setattr("dpbench.strategies.base.stage", lambda obj, device: events.append(f"stage {device}") or obj)
    real_clock = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: events.append("clock") or real_clock())
    trainer.train_step = lambda inputs, target: events.append("step") or torch.tensor(0.0)
    trainer.run_steps(1)
    assert events == ["stage cuda:0", "stage cuda:0", "sync", "clock", "step", "sync", "clock"]


def test_cpu_batches_are_not_copied(log):
    spec = _spec("single", 1, ("cpu",))
    cls = get_strategy("single")
    trainer = cls.__new__(cls)
    trainer.spec, trainer.ctx = spec, SimpleNamespace(device=torch.device("cpu"))
    x = torch.randn(2, 3).as_subclass(Recorded)
    assert trainer.stage_batch(x, x) == (x, x) and log == []


COMPILING = [name for name in list_strategies() if "compile" in get_strategy(name).option_defaults]


def _compiling_trainer(strategy: str, monkeypatch, events: list, *, device_type: str = "cuda"):
    """``strategy`` with compile=True as its warm-up sees it, on a fake GPU: rank 1 of 2 on cuda:1
    (one replica on cuda:0 for single). ``stage`` tags what it moved; the step fails on an untagged
    target as a loss on CUDA does, and records what it was given."""
    cls = get_strategy(strategy)
    world = 2 if cls.multiprocess else 1
    devices = (f"{device_type}:0", f"{device_type}:1")[:world] if device_type == "cuda" else ("cpu",) * world
    trainer = cls.__new__(cls)  # the warm-up only: no model build, no process group, no CUDA
    trainer.spec = replace(_spec(strategy, world, devices), options=cls.options_type(compile=True))
    trainer.rank, trainer._step, trainer._wrap_s, trainer.workload = world - 1, 0, 0.0, MLP
    trainer.cuda_devices, trainer.timed_peak = [], {}  # the devices are fake: nothing to synchronise

    @contextlib.contextmanager
    def keep_alive(seconds):
        events.append(("keep_alive", seconds))
        yield
        events.append("beats stop")

    trainer.ctx = SimpleNamespace(device=torch.device(devices[-1]), group=None, keep_alive=keep_alive)
    model = torch.nn.Linear(3, 2)
    trainer.module, trainer.optimizer = (lambda: model), torch.optim.SGD(model.parameters(), lr=0.1)
    trainer.precision = SimpleNamespace(state_dict=lambda: None, load_state_dict=lambda state: None, skipped=0)
    trainer.phases = SimpleNamespace(sync=lambda: None, clear=lambda: None, resolve=dict)
    monkeypatch.setattr("dpbench.strategies.base.stage", lambda obj, device: ("staged", device, obj))

    def train_step(inputs, target):
        if target[0] != "staged":
            raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices")
        events.append(("step", inputs[1], target[1]))
        return torch.tensor(0.0)

    trainer.train_step = train_step
    return trainer


@pytest.mark.parametrize("strategy", COMPILING)
def test_the_compile_warm_up_trains_on_the_batch_a_timed_step_gets(strategy, monkeypatch):
    """ddp moves no target itself: on the host batch, its warm-up loss would meet a CUDA output."""
    events = []
    trainer = _compiling_trainer(strategy, monkeypatch, events)
    device = trainer.local_devices()[0]
    trainer.warm_up_compiled()
    assert ("step", device, device) in events and trainer.compile_time_s >= 0
    trainer.run_steps(1)
    assert [e for e in events if e[0] == "step"] == [("step", device, device)] * 2


@pytest.mark.parametrize("strategy", COMPILING)
def test_the_compile_warm_up_beats_for_a_cold_compile(strategy, monkeypatch):
    events = []
    _compiling_trainer(strategy, monkeypatch, events).warm_up_compiled()
    assert [e if isinstance(e, str) else e[0] for e in events] == ["keep_alive", "step", "beats stop"]
    assert events[0] == ("keep_alive", COMPILE_TIMEOUT_S) and COMPILE_TIMEOUT_S == 600.0


def test_the_process_group_waits_for_a_cold_compile_only_where_one_runs():
    ddp = get_strategy("ddp")
    assert ddp.collective_timeout(ddp.options_type(compile=True), timeout=60.0) == 660.0
    assert ddp.collective_timeout(ddp.options_type(), timeout=60.0) == 60.0
    assert get_strategy("zero").collective_timeout(get_strategy("zero").options_type(), timeout=60.0) == 60.0


def test_the_compiled_twin_of_the_case_metrics_beats_through_its_compile_and_the_barrier_after_it(monkeypatch):
    """A rank done compiling its compute-only twin first waits for the others in a barrier."""
    from dpbench.strategies.profiling import twin_step_times

    events = []
    trainer = _compiling_trainer("ddp", monkeypatch, events, device_type="cpu")

    def compiled(module):
        def forward(x):
            events.append("forward")
            return module(x)

        return forward

    trainer.maybe_compile = compiled  # torch.compile's first call is where it compiles
    monkeypatch.setattr("torch.distributed.barrier", lambda group=None: events.append("barrier"))
    assert len(twin_step_times(trainer, steps=2)) == 2
    assert events == [("keep_alive", COMPILE_TIMEOUT_S), "forward", "barrier", "beats stop", "forward", "forward"]
