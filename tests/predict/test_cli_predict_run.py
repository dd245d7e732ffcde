"""``dpbench predict RUN``: the JSON shape, the text, and bad input (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpbench.cli import main

DATA = Path(__file__).parent / "data"
RUN = str(DATA / "step_run.json")


def _json(capsys, *argv: str) -> dict:
    assert main(["predict", RUN, *argv, "--memory", "off", "--json", "-"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_json_has_one_record_per_configuration_and_world_size(capsys):
    doc = _json(capsys, "--world-sizes", "2,4", "--gpus-per-node", "8", "--from-world-size", "1")
    assert set(doc) == {
        "source",
        "scaling",
        "overlap_slowdown",
        "overlap_origin",
        "notes",
        "memory",
        "predictions",
        "picks",
    }
    assert doc["scaling"] == "weak" and doc["overlap_origin"].startswith("measured")
    records = doc["predictions"]
    assert [(r["label"], r["world_size"]) for r in records] == [
        (s, n) for s in ("allreduce", "ddp", "fsdp", "zero") for n in (2, 4)
    ]
    for r in records:
        assert r["lo_s"] <= r["step_time_s"] <= r["hi_s"]
        assert r["samples_per_s"] == pytest.approx(r["global_batch"] / r["step_time_s"])
        assert r["exposed_comm_s"] == pytest.approx(max(0.0, r["step_time_s"] - r["compute_s"]))
        assert r["memory_per_rank_bytes"] is None
    # the run measured world size 2: the measurement and the error stand beside the prediction
    two = [r for r in records if r["world_size"] == 2]
    assert all(r["measured_step_time_s"] for r in two)
    assert all(r["error"] == pytest.approx(r["step_time_s"] / r["measured_step_time_s"] - 1) for r in two)
    assert all(r["measured_step_time_s"] is None for r in records if r["world_size"] == 4)
    assert [(p["workload"], p["world_size"]) for p in doc["picks"]] == [("mlp", 2), ("mlp", 4)]
    for pick in doc["picks"]:
        assert pick["sure"] == (not pick["overlapping"])


def test_threads_per_rank_scale_the_compute_and_say_so(capsys):
    same = _json(capsys, "--world-sizes", "2", "--from-world-size", "1")
    fewer = _json(capsys, "--world-sizes", "2", "--from-world-size", "1", "--threads-per-rank", "1")
    assert "compute scaled from 2 thread(s) per rank as measured to 1, linearly" in fewer["notes"]
    for a, b in zip(same["predictions"], fewer["predictions"]):
        assert b["compute_s"] == pytest.approx(2 * a["compute_s"], rel=0.05)  # zero and fsdp halve their optimizer


def test_strong_scaling_keeps_the_global_batch(capsys):
    doc = _json(capsys, "--world-sizes", "2", "--scaling", "strong", "--from-world-size", "1")
    assert {(r["per_rank_batch"], r["global_batch"]) for r in doc["predictions"]} == {(16, 32)}


def test_the_text_names_the_sources_and_the_pick(capsys):
    assert main(["predict", RUN, "--world-sizes", "2", "--memory", "off", "--overlap-slowdown", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "overlap slowdown 0.50: stated: --overlap-slowdown" in out
    assert "note: all_gather and reduce_scatter not measured: taken from the all_reduce fit" in out
    assert "pick (the fastest predicted; sure when no other interval overlaps it):" in out
    assert "\n  w2 mlp: " in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["colectives", "--world-sizes", "2"], "TARGET: expected one of collectives, found 'colectives' (did you"),
        (["no_such_run", "--world-sizes", "2"], "TARGET: run 'no_such_run': expected a results file"),
        ([RUN, "--world-sizes", "0"], "--world-sizes: expected comma-separated integers >= 1, found '0'"),
        # names the options a run takes (--collectives, --link, --gpus-per-node), not --from
        (
            [RUN, "--world-sizes", "16"],
            "world size 16: spans 8 nodes of 2 GPUs (the most ranks on one node in the measurements' device "
            "lines), and no all_reduce measurement or stated link crosses nodes: expected logs across nodes in "
            "--collectives, the link between nodes stated (--link inter=25GB/s), or more GPUs per node "
            "(--gpus-per-node)",
        ),
        ([RUN, "--world-sizes", "2", "--overlap-slowdown", "2"], "--overlap-slowdown: expected a fraction in [0, 1]"),
        ([RUN, "--world-sizes", "2", "--from-world-size", "3"], "no ddp, fsdp, zero or allreduce training case at"),
        ([RUN, "--world-sizes", "2", "--from", RUN], "--from/--check/--min-bytes: only for TARGET collectives"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["predict", *argv, "--memory", "off"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_a_run_without_collectives_needs_a_link(capsys, tmp_path):
    doc = json.loads(Path(RUN).read_text())
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b["extra_info"]["kind"] == "training"]
    path = tmp_path / "training.json"
    path.write_text(json.dumps(doc))
    assert main(["predict", str(path), "--world-sizes", "2", "--memory", "off"]) == 2
    err = capsys.readouterr().err
    assert "has no comm-suite benchmarks: expected nccl-tests logs or a comm-suite run in --collectives" in err
    # a stated link stands in
    argv = [
        "predict",
        str(path),
        "--world-sizes",
        "2",
        "--memory",
        "off",
        "--link",
        "intra=1GB/s",
        "--gpus-per-node",
        "8",
    ]
    assert main(argv) == 0


def test_a_strategy_whose_collective_is_missing_says_which(capsys, tmp_path):
    doc = json.loads(Path(RUN).read_text())
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b["extra_info"].get("collective") != "broadcast"]
    path = tmp_path / "no_broadcast.json"
    path.write_text(json.dumps(doc))
    assert main(["predict", str(path), "--world-sizes", "2", "--memory", "off"]) == 2
    err = capsys.readouterr().err
    assert "zero needs broadcast: the collective model has no measurement of it (it has all_gather, all_reduce" in err
    assert "--link" in err


@pytest.mark.slow
def test_memory_per_rank_is_the_estimators(capsys):
    from dpbench.strategies.estimate import Estimator

    assert main(["predict", RUN, "--world-sizes", "4", "--gpus-per-node", "8", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["memory"].startswith("what a rank holds between steps")
    estimator = Estimator("mlp", activations=False)
    for r in doc["predictions"]:
        options = {"zero": {}, "ddp": {}, "fsdp": {}, "allreduce": {}}[r["strategy"]]
        expected = estimator.case(r["strategy"], world_size=4, global_batch=128, options=options).need_bytes()
        assert r["memory_per_rank_bytes"] == expected
    # sharded strategies hold less per rank than ddp at 4 ranks
    by = {r["strategy"]: r["memory_per_rank_bytes"] for r in doc["predictions"]}
    assert by["fsdp"] < by["ddp"] and by["zero"] <= by["ddp"]


def _saved(tmp_path, *, buffer_bytes: int, keep) -> str:
    doc = json.loads(Path(RUN).read_text())
    doc["benchmarks"] = [b for b in doc["benchmarks"] if keep(b["extra_info"])]
    for bench in doc["benchmarks"]:
        if bench["extra_info"]["kind"] == "training":
            bench["extra_info"]["buffer_bytes"] = buffer_bytes
    path = tmp_path / f"buffers-{buffer_bytes}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_ddp_needs_a_broadcast_measurement_only_where_it_sends_buffers(capsys, tmp_path):
    def keep(info):  # no broadcast measured, and no zero case (zero always broadcasts)
        return info.get("collective") != "broadcast" and info.get("strategy") != "zero"

    assert main(["predict", _saved(tmp_path, buffer_bytes=0, keep=keep), "--world-sizes", "2", "--memory", "off"]) == 0
    capsys.readouterr()
    path = _saved(tmp_path, buffer_bytes=4096, keep=keep)
    assert main(["predict", path, "--world-sizes", "2", "--memory", "off"]) == 2
    assert "ddp needs broadcast: the collective model has no measurement of it" in capsys.readouterr().err


def test_the_text_says_what_buffers_are_broadcast_or_that_none_were_recorded(capsys, tmp_path):
    assert main(["predict", RUN, "--world-sizes", "2", "--memory", "off"]) == 0
    out = capsys.readouterr().out
    assert "note: buffer broadcasts not modelled for ddp, zero: the run does not record the buffers' bytes" in out
    path = _saved(tmp_path, buffer_bytes=4096, keep=lambda info: True)
    assert main(["predict", path, "--world-sizes", "2", "--memory", "off"]) == 0
    out = capsys.readouterr().out
    assert "buffer broadcasts not modelled" not in out
    lines = [line for line in out.splitlines() if line.startswith("  from ")]
    lines = {line.split(": ")[1].split(" ")[0]: line for line in lines}  # "  from RUN: LABEL mlp w1: ..."
    assert [", buffers 4 KiB broadcast" in lines[label] for label in ("allreduce", "ddp", "fsdp", "zero")] == [
        False,
        True,
        False,
        True,
    ]


def test_a_long_label_is_never_cut(capsys, tmp_path):
    """The label column is as wide as its longest label: ``fsdp@replicate=1,reshard_after_forward=False``
    was cut to 27 characters (``fsdp@replicate=1,reshard_af``), the option's value lost."""
    run = json.loads(Path(RUN).read_text())
    for bench in run["benchmarks"]:
        if bench["extra_info"].get("strategy") == "fsdp":
            bench["extra_info"]["requested_options"] = {"reshard_after_forward": False, "replicate": 1}
    path = tmp_path / "0001_fsdp.json"
    path.write_text(json.dumps(run))
    assert main(["predict", str(path), "--world-sizes", "2", "--memory", "off"]) == 0
    table = capsys.readouterr().out.split("\nmlp\n")[1].split("\n\n")[0].splitlines()
    label = "fsdp@replicate=1,reshard_after_forward=False"
    assert [line.split()[0] for line in table] == ["strategy", "ddp", "allreduce", "zero", label]
    assert [line.index("ranks") + len("ranks") for line in table[:1]] == [len(label) + 1 + 6]
    assert {len(line) for line in table} == {len(label) + 1 + 101}


NCCL_8 = str(DATA / "nccl_8.log")


def test_a_stated_link_wins_over_the_runs_own_collectives_and_says_so(capsys):
    argv = ("--world-sizes", "2", "--from-world-size", "1", "--strategies", "ddp")
    own = _json(capsys, *argv)
    slow = _json(capsys, *argv, "--link", "intra=0.01GB/s")
    assert slow["predictions"][0]["step_time_s"] > 10 * own["predictions"][0]["step_time_s"]
    assert (
        "intra tier: the stated --link intra=0.01GB/s wins over the run's own 12 measurements of it "
        "(gloo, on the machine the run measured)" in slow["notes"]
    )
    assert "all_reduce intra: stated: --link intra=0.01GB/s (no interval)" in slow["notes"]
    assert any(n.startswith("compute measured on cpu (ddp): the predictions are CPU compute") for n in slow["notes"])


def test_no_pick_where_the_model_missed_a_measurement_beyond_its_interval(capsys):
    doc = _json(
        capsys, "--world-sizes", "2,4", "--from-world-size", "1", "--link", "intra=1GB/s", "--gpus-per-node", "8"
    )
    ddp = next(p for p in doc["predictions"] if p["label"] == "ddp" and p["world_size"] == 2)
    assert not ddp["lo_s"] <= ddp["measured_step_time_s"] <= ddp["hi_s"]
    assert [(p["world_size"], p["label"]) for p in doc["picks"]] == [(2, None), (4, None)]
    assert all(
        p["why"]
        == "the model did not hold where it can be checked (allreduce at w2 predicted -13.1% off its measurement, "
        "outside its interval; ddp at w2 predicted -17.3% off its measurement, outside its interval; fsdp at w2 "
        "predicted -40.1% off its measurement, outside its interval)"
        for p in doc["picks"]
    )


def test_strategies_leave_the_others_out(capsys):
    doc = _json(capsys, "--world-sizes", "2", "--from-world-size", "1", "--strategies", "zero,ddp")
    assert sorted(p["label"] for p in doc["predictions"]) == ["ddp", "zero"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--collectives", NCCL_8, "--collective", "all_reduce", "--link", "intra=1GB/s"],
            "--link intra=1GB/s: 1 GB/s of bus bandwidth inside a node, under half the 230.9 GB/s "
            f"{NCCL_8} measured (all_reduce, 8 ranks, 1073741824 B): expected a link the log agrees with, "
            "or the log alone",
        ),
        (
            ["--collectives", NCCL_8, "--collective", "all_reduce", "--link", "inter=25GB/s"],
            "zero needs broadcast: the collective model has no measurement of it (it has all_gather, all_reduce, "
            "reduce_scatter; the stated --link inter=25GB/s stands in only for the collectives measured or where "
            "none is measured): expected broadcast measurements in --collectives; or leave zero out (--strategies)",
        ),
        (
            ["--strategies", "dp"],
            "--strategies: expected configurations in the run from allreduce, ddp, fsdp, zero, found 'dp' "
            "(did you mean 'ddp'?)",
        ),
    ],
)
def test_links_against_logs_and_the_advice_given(capsys, argv, message):
    assert main(["predict", RUN, "--world-sizes", "8", "--from-world-size", "1", "--memory", "off", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_a_busy_source_run_is_the_first_note():
    from dpbench.predict.basis import busy_line
    from dpbench.predict.forecast import run_collective_model, step_predictions
    from dpbench.results.load import read_run

    run = read_run(RUN)
    assert busy_line(run) is None
    for bench in run.benchmarks:  # 3 of every case's 5 trials disturbed, none measured again
        bench["extra_info"]["trials"]["disturbed"] = [{"why": "control", "replaced": False}] * 3 + [None, None]
    line = (
        "the machine was busy during 60% of the trials (63 of 105, 63 of them not measured again): "
        "results are unreliable"
    )
    assert busy_line(run) == line
    forecast = step_predictions(run, run_collective_model(run), [2], from_world_size=1)
    assert forecast.notes[0] == f"the source run {run.run_id} was flagged: {line}"
