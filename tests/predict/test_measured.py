"""A step measured anywhere (:mod:`dpbench.predict.measured`): the fields, what is assumed where
they say nothing, the refusals (one line per field, exit 2, nothing written), and the own
collectives taken out of a multi-rank step."""

from __future__ import annotations

import dataclasses

import pytest

from dpbench.cli import main
from dpbench.errors import UsageError
from dpbench.predict import fit_collectives, parse_link, predict_step
from dpbench.predict.measured import MeasuredStep, measured_forecast, measured_profile, read_step_file
from dpbench.predict.profile import buckets_from_sizes
from dpbench.predict.step import stated_overlap
from dpbench.strategies.layout import ParameterLayout

MiB = 1 << 20
LAYOUT = ParameterLayout(sizes=(3 * MiB, 2 * MiB, 1 * MiB), buffer_bytes=1024, unit_sizes=(4 * MiB, 2 * MiB))


def _step(**kw) -> MeasuredStep:
    fields = dict(workload="mlp", strategy="ddp", world_size=1, per_rank_batch=8, step_time_s=0.3, device="cuda")
    return MeasuredStep(**{**fields, **kw})


def test_unknown_phases_are_stated_as_backward_twice_forward_and_no_optimizer():
    p = measured_profile(_step(), layout=LAYOUT)
    assert (p.forward_s, p.backward_s, p.optimizer_s) == pytest.approx((0.1, 0.2, 0.0))
    assert p.stated == ("optimizer = 0 (assumed: not measured apart)", "backward = 2 × forward (assumed)")
    # ready order is the reverse of definition: the last-defined 1 MiB first (DDP's 1 MiB first bucket)
    assert [b.bytes for b in p.buckets] == [1 * MiB, 5 * MiB]
    assert p.param_bytes == 6 * MiB and p.buffer_bytes == 1024 and p.device_type == "cuda"


def test_a_known_split_is_kept_and_scaled_to_the_step():
    p = measured_profile(_step(forward_s=0.05, backward_s=0.1, optimizer_s=0.0), layout=LAYOUT)
    assert (p.forward_s, p.backward_s, p.optimizer_s) == pytest.approx((0.1, 0.2, 0.0))
    assert p.stated == ()
    q = measured_profile(_step(forward_s=0.1, backward_s=0.15), layout=LAYOUT)
    assert q.optimizer_s == pytest.approx(0.05)
    assert q.stated == ("optimizer = compute − forward − backward (derived)",)


def test_fsdp_units_and_a_parameter_count_without_a_layout():
    p = measured_profile(_step(strategy="fsdp"), layout=LAYOUT)
    assert [u.bytes for u in p.units] == [4 * MiB, 2 * MiB] and p.buckets == ()
    q = measured_profile(_step(workload=None, parameter_count=1000))
    assert q.param_bytes == 4000 and q.workload == "1,000 parameters"


def test_accumulation_beside_the_strategy_is_its_option():
    p = measured_profile(_step(accumulation_steps=4), layout=LAYOUT)
    assert p.accumulation_steps == 4 and p.label == "ddp@accumulation_steps=4"


def test_buckets_close_before_the_parameter_that_passes_the_cap():
    groups = buckets_from_sizes([MiB // 2, MiB // 2, MiB // 2, 3 * MiB, MiB], first_bytes=MiB, cap_bytes=3 * MiB)
    assert [g.bytes for g in groups] == [MiB, MiB // 2, 3 * MiB, MiB]
    assert groups[-1].ready_fraction == 1.0


@pytest.mark.parametrize(
    ("kw", "lines"),
    [
        (
            dict(workload=None, world_size=None),
            [
                "step: workload: expected a workload spec (or parameter_count), found none",
                "step: world_size: expected the ranks it was measured at, found none",
            ],
        ),
        (
            dict(strategy="fsdp@replicate=3", world_size=8),
            [
                "step: strategy: 'fsdp@replicate=3': fsdp option replicate: expected a number of replica groups that "
                "divides the world size 8, found 3"
            ],
        ),
        (
            dict(strategy="ddp@accumulation_steps=2", accumulation_steps=4),
            [
                "step: accumulation_steps: expected it in 'ddp@accumulation_steps=2' or in step's fields, "
                "found it in both (2 and 4)"
            ],
        ),
        (
            dict(forward_s=0.2, backward_s=0.2),
            ["step: forward_s + backward_s = 0.4 s: expected at most the compute of 0.3 s"],
        ),
        (dict(device="tpu"), ["step: device: expected one of cuda, cpu, found 'tpu'"]),
        (
            dict(strategy="single"),
            ["step: strategy: expected one of ddp, allreduce, fsdp, zero (a step the model replays), found 'single'"],
        ),
    ],
)
def test_missing_or_contradictory_fields_are_one_line_each(kw, lines):
    with pytest.raises(UsageError) as exc:
        measured_profile(_step(**kw), layout=None if kw.get("workload", "") is None else LAYOUT)
    assert str(exc.value).split("\n") == lines


def test_a_multi_rank_step_has_its_own_collectives_taken_out_before_scaling():
    model = fit_collectives([], link=parse_link("intra=1GB/s"), gpus_per_node=8)
    p = measured_profile(_step(world_size=2, strategy="ddp@bucket_cap_mb=1"), layout=LAYOUT)
    assert p.stated[0] == "compute = the step at w2 less its own collectives, as the collective model times them"
    forecast = measured_forecast([p], model, [2, 4], source="test")
    at_two = forecast.predictions[0]
    assert at_two.step_time_s == pytest.approx(0.3, rel=1e-6)  # the replay at its own world size gives the step
    out = forecast.profiles[0]
    assert out.compute_s < 0.3 and not any(s.startswith("compute = the step at") for s in out.stated)
    # the same profile with that compute, replayed at 2 ranks, is what was measured
    again = predict_step(out, model, 2, overlap=stated_overlap("cuda"))
    assert again.step_time_s == pytest.approx(0.3, rel=1e-6)
    assert any(
        n.startswith("ddp@bucket_cap_mb=1 on mlp: compute = the step at w2 less its own") for n in forecast.notes
    )


def test_a_step_shorter_than_its_own_collectives_contradicts_the_links():
    model = fit_collectives([], link=parse_link("intra=0.001GB/s"), gpus_per_node=8)
    p = measured_profile(_step(world_size=2), layout=LAYOUT)
    with pytest.raises(UsageError, match="the links contradict it"):
        measured_forecast([p], model, [4])


def test_the_answer_says_what_it_rests_on():
    model = fit_collectives([], link=parse_link("intra=100GB/s,inter=25GB/s"), gpus_per_node=8)
    p = dataclasses.replace(measured_profile(_step(device=None), layout=LAYOUT))
    forecast = measured_forecast([p], model, [16])
    assert forecast.overlap.origin == (
        "stated for cuda (a step measured elsewhere measures none): perfect overlap (0); give --overlap-slowdown "
        "to state another"
    )
    notes = forecast.notes
    assert "compute measured on cuda (ddp)" in notes
    assert "ddp on mlp: device = cuda (assumed: the measurement did not say)" in notes
    assert "all_reduce intra: stated: --link intra=100GB/s,inter=25GB/s (no interval)" in notes
    cpu = measured_profile(_step(device="cpu"), layout=LAYOUT)
    line = next(n for n in measured_forecast([cpu], model, [2]).notes if n.startswith("compute measured on cpu"))
    assert "the predictions are CPU compute with these collectives, not a GPU's step" in line


def test_a_file_with_an_unknown_key_or_a_wrong_type(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('workload = "mlp"\nworld_sise = 2\nstep_time_s = "fast"\n')
    with pytest.raises(UsageError) as exc:
        read_step_file(str(path))
    assert str(exc.value).split("\n") == [
        f"{path}: world_sise: not a field (did you mean 'world_size'?)",
        f"{path}: step_time_s: expected the measured step, s, found 'fast'",
    ]


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "step.toml"
    path.write_text(text)
    return str(path)


def test_the_command_predicts_a_step_file(tmp_path, capsys):
    path = _write(
        tmp_path,
        'parameter_count = 1000000\nstrategy = "ddp"\nworld_size = 1\nper_rank_batch = 32\nstep_time_s = 0.1\n'
        'device = "cuda"\n',
    )
    assert (
        main(["predict", "--step", path, "--world-sizes", "1,8", "--link", "intra=100GB/s", "--gpus-per-node", "8"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith(f"step time predicted from {path} (weak scaling")
    assert "w8 1,000,000 parameters: ddp (sure)" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('strategy = "ddp"\nper_rank_batch = 32\nstep_time_s = 0.1\n', "{path}: workload: expected a workload spec"),
        (
            'parameter_count = 10\nstrategy = "fsdp@replicate=3"\nworld_size = 8\nper_rank_batch = 4\n'
            "step_time_s = 0.1\n",
            "fsdp option replicate: expected a number of replica groups that divides the world size 8, found 3",
        ),
    ],
)
def test_the_command_refuses_a_bad_file_and_writes_nothing(tmp_path, capsys, text, message):
    path = _write(tmp_path, text)
    out = tmp_path / "out.json"
    argv = ["predict", "--step", path, "--world-sizes", "2", "--link", "intra=10GB/s", "--json", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message.format(path=path) in err and not out.exists()


def test_the_command_scales_accumulation_with_the_micro_batch_fixed(tmp_path, capsys):
    import json

    path = _write(
        tmp_path,
        'parameter_count = 1000000\nstrategy = "ddp@accumulation_steps=4"\nworld_size = 1\nper_rank_batch = 32\n'
        'step_time_s = 0.1\ndevice = "cuda"\n',
    )
    argv = ["predict", "--step", path, "--link", "intra=100GB/s", "--gpus-per-node", "16", "--scaling", "strong"]
    assert main([*argv, "--world-sizes", "2,4", "--accumulation", "micro-batch", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # micro-batches of 8: 16 per rank at 2 ranks in two, 8 at 4 in one
    assert [(r["world_size"], r["per_rank_batch"], r["micro_batches"]) for r in doc["predictions"]] == [
        (2, 16, 2),
        (4, 8, 1),
    ]
    assert main([*argv, "--world-sizes", "16"]) == 2  # the count kept: 2 samples per rank cannot hold 4 micro-batches
    assert "--accumulation micro-batch keeps the micro-batch instead" in capsys.readouterr().err
    assert main([*argv, "--world-sizes", "8", "--accumulation", "micro-batch"]) == 2  # 4 per rank: no micro-batch of 8
    assert "cannot split into micro-batches of 8 on every one of 8 ranks" in capsys.readouterr().err


def test_a_log_of_another_collective_than_asked_is_refused(tmp_path, capsys):
    import shutil
    from pathlib import Path

    log = tmp_path / "all_gather_perf_8.log"
    shutil.copy(Path(__file__).parent / "data" / "nccl_8.log", log)
    path = _write(
        tmp_path,
        'parameter_count = 1000\nstrategy = "ddp"\nworld_size = 1\nper_rank_batch = 32\nstep_time_s = 0.1\n',
    )
    argv = ["predict", "--step", path, "--world-sizes", "2", "--collectives", str(log), "--collective", "all_reduce"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"dpbench predict: error: {log}: a log of all_gather (its file name), but --collective asks for "
        "all_reduce: expected --collective all_gather, or a log of all_reduce\n"
    )


def test_a_world_size_inside_a_node_without_an_intra_tier_names_the_options():
    from dpbench.predict.measurements import Measurement

    across = [
        Measurement(
            collective="all_reduce", bytes=b, world_size=16, nodes=2, ranks_per_node=8, time_us=10 + b / 1e4, source="x"
        )
        for b in (1 << 10, 1 << 16, 1 << 20, 1 << 24)
    ]
    model = fit_collectives(across, gpus_per_node=8)
    p = measured_profile(_step(strategy="ddp@broadcast_buffers=false"), layout=LAYOUT)
    with pytest.raises(UsageError) as exc:
        measured_forecast([p], model, [4])
    assert str(exc.value) == (
        "world size 4: inside one node of 8 GPUs (--gpus-per-node), "
        "and every all_reduce measurement crosses nodes: expected logs inside a node in --collectives, or the "
        "link inside a node stated (--link intra=450GB/s)"
    )
