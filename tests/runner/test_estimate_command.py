"""``dpbench estimate``: the table, the JSON (integer bytes), bad input as one line and exit 2."""

from __future__ import annotations

import json

import pytest

from dpbench.cli import main
from dpbench.strategies.estimate import Estimator

TINY_LLAMA = (
    "hf:llama@num_hidden_layers=2,hidden_size=64,intermediate_size=128,num_attention_heads=4,"
    "num_key_value_heads=2,vocab_size=500,seq_len=16"
)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["estimate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("activations", [pytest.param(True, marks=pytest.mark.slow), False])
def test_json_has_a_case_per_strategy_and_world_size_with_integer_bytes(capsys, activations):
    code, out, err = run(
        capsys, "--workload", "mlp", "--strategies", "ddp,fsdp,single", "--world-sizes", "1,2",
        "--optimizer", "adamw", "--global-batch", "8", "--device-memory", "1 GiB", "--json", "-",
        *([] if activations else ["--no-activations"]),
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["device_memory_bytes"] == 2**30 and doc["global_batch"] == 8
    cases = {(c["strategy"], c["world_size"]): c for c in doc["cases"]}
    assert cases[("single", 2)]["refused"] == "strategy 'single' runs one replica: world_size must be 1, got 2"
    estimator = Estimator("mlp", activations=activations)
    expected = estimator.case("fsdp", world_size=2, global_batch=8, options={"optimizer": "adamw"})
    assert cases[("fsdp", 2)]["ranks"] == expected.to_dict()["ranks"]
    keys = ["params_bytes", "grads_bytes", "optimizer_state_bytes", "comm_buffer_bytes"]
    for key in keys + (["activation_bytes", "peak_bytes"] if activations else []):
        assert all(type(r[key]) is int for r in cases[("ddp", 2)]["ranks"])
    assert cases[("ddp", 1)]["fits"] is True


def test_the_table_says_what_fits(capsys):
    # mlp with SGD: 11.1 MiB of parameters and as much of gradients; DDP adds its buckets.
    code, out, _ = run(
        capsys, "--workload", "mlp", "--strategies", "ddp,manual", "--world-sizes", "1,8",
        "--device-memory", "40MB", "--no-activations",
    )  # fmt: skip
    assert code == 0
    rows = {tuple(line.split()[:2]): line.split()[-1] for line in out.splitlines()[2:]}
    assert rows == {("ddp", "1"): "yes", ("ddp", "8"): "yes", ("manual", "1"): "yes", ("manual", "8"): "no"}


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--device-memory", "lots"], "--device-memory: expected a positive size such as 80GB, 80 GiB or 8e10"),
        (["--precision", "fp8"], "--precision: expected one of fp32, bf16, fp16, found 'fp8'"),
        (["--optimizer", "lion"], "--optimizer: expected one of sgd, adamw, found 'lion'\n"),
        (["--optimizer", "adam"], "--optimizer: expected one of sgd, adamw, found 'adam' (did you mean 'adamw'?)"),
        (["--precision", "fp61"], "--precision: expected one of fp32, bf16, fp16, found 'fp61' (did you mean 'fp16'?)"),
        (["--strategies", "ddpp"], "--strategies: expected names from single, dp, torch-dp, ddp, manual, allreduce, "
         "fsdp, zero, found 'ddpp' (did you mean 'ddp'?)"),
        (["--world-sizes", "0"], "--world-sizes: expected comma-separated ints >= 1, found '0'"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, "--workload", "mlp", *argv)
    assert code == 2 and out == ""
    assert err.startswith(f"dpbench estimate: error: {message}") and err.count("\n") == 1


def transformers_count(**config) -> int:
    import torch
    import transformers

    with torch.device("meta"):
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).num_parameters()


@pytest.mark.slow  # importing transformers takes seconds
def test_parameter_count_is_what_transformers_reports(capsys):
    code, out, _ = run(
        capsys, "--workload", TINY_LLAMA, "--strategies", "fsdp", "--world-sizes", "2", "--json", "-",
        "--no-activations",
    )  # fmt: skip
    assert json.loads(out)["parameter_count"] == transformers_count(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=500,
    )  # fmt: skip


TINY_T5 = "hf:t5@num_layers=2,num_decoder_layers=2,d_model=32,d_ff=64,num_heads=2,d_kv=16,vocab_size=128,seq_len=8"


@pytest.mark.slow  # importing transformers takes seconds
def test_an_encoder_decoder_is_estimated_with_its_activations_on_the_meta_device(capsys):
    import torch
    import transformers

    code, out, err = run(
        capsys, "--workload", TINY_T5, "--strategies", "ddp,fsdp", "--world-sizes", "2", "--global-batch", "8",
        "--json", "-",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    config = transformers.T5Config(num_layers=2, num_decoder_layers=2, d_model=32, d_ff=64, num_heads=2, d_kv=16)
    config.vocab_size = 128
    with torch.device("meta"):
        assert doc["parameter_count"] == transformers.T5ForConditionalGeneration(config).num_parameters()
    ranks = {c["strategy"]: c["ranks"][0] for c in doc["cases"]}
    assert all(r["activation_bytes"] > 0 for r in ranks.values())
    assert ranks["fsdp"]["params_bytes"] < ranks["ddp"]["params_bytes"]


@pytest.mark.slow  # importing transformers takes seconds
def test_a_model_whose_init_reads_values_is_estimated_from_its_meta_build(capsys):
    # ViT's __init__ reads values (its trunc_normal_ initialisation): no fake tensor can give them.
    spec = (
        "hf:vit@num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64,"
        "image_size=16,patch_size=8"
    )
    code, out, err = run(capsys, "--workload", spec, "--strategies", "ddp", "--world-sizes", "2", "--json", "-")
    assert code == 0, err
    (case,) = json.loads(out)["cases"]
    assert "refused" not in case and case["ranks"][0]["activation_bytes"] > 0


@pytest.mark.slow
def test_a_billion_parameter_llama_is_estimated_for_every_strategy_and_world_size(capsys):
    config = dict(
        num_hidden_layers=22, hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
        num_key_value_heads=4, vocab_size=32000,
    )  # fmt: skip
    spec = "hf:llama@" + ",".join(f"{k}={v}" for k, v in config.items())
    code, out, err = run(capsys, "--workload", spec, "--optimizer", "adamw", "--json", "-")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["parameter_count"] == transformers_count(**config) == 1_100_048_384
    cases = [c for c in doc["cases"] if "refused" not in c]
    assert len(cases) == 8 * 4 - 3  # every strategy at 1, 2, 4, 8; single only at 1
    assert all(r["peak_bytes"] > 0 for c in cases for r in c["ranks"])


BROKEN = """
import torch
from torch import nn
from dpbench.workloads import get_workload


def model():
    if torch.empty(0).device.type == "meta":
        raise RuntimeError("weights are read from disk at build time")
    return nn.Linear(4, 2)


mlp = get_workload("mlp")
broken = type(mlp)(model=model, batch=mlp.batch, loss=mlp.loss, name="broken")
"""


def test_a_model_the_meta_device_cannot_build_is_one_line_with_the_spec(capsys, tmp_path):
    path = tmp_path / "broken_model.py"
    path.write_text(BROKEN)
    code, out, err = run(capsys, "--workload", f"{path}:broken")
    assert code == 2 and out == ""
    assert err == (
        f"dpbench estimate: error: workload '{path}:broken': the model cannot be built on the meta device: "
        "RuntimeError: weights are read from disk at build time\n"
    )


def test_configurations_are_estimated_as_dpbench_run_names_them(capsys):
    code, out, err = run(
        capsys, "--workload", "transformer", "--strategies", "fsdp,fsdp@checkpoint=true,reshard_after_forward=false",
        "--world-sizes", "2", "--global-batch", "8", "--json", "-",
    )  # fmt: skip
    assert code == 0, err
    cases = {c["strategy"]: c for c in json.loads(out)["cases"]}
    estimator = Estimator("transformer")
    for spec, options in (
        ("fsdp", {}),
        ("fsdp@checkpoint=true,reshard_after_forward=false", {"checkpoint": True, "reshard_after_forward": False}),
    ):
        expected = estimator.case("fsdp", world_size=2, global_batch=8, options=options)
        assert cases[spec]["ranks"] == expected.to_dict()["ranks"], spec
    assert cases["fsdp@checkpoint=true,reshard_after_forward=false"]["ranks"] != cases["fsdp"]["ranks"]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--strategies", "fsdp@precision=bf16", "--precision", "fp32"],
         "precision: expected it in 'fsdp@precision=bf16' or in --precision, found it in both (bf16 and 'fp32')"),
        (["--strategies", "fsdp@nosuch=1"], "--strategies: 'fsdp@nosuch=1': fsdp has no option 'nosuch'"),
        (["--strategies", "fsdp@replicate=3", "--world-sizes", "2,4"],
         "--strategies: 'fsdp@replicate=3': fsdp option replicate: expected a number of replica groups that divides"),
    ],
)  # fmt: skip
def test_a_bad_configuration_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, "--workload", "mlp", *argv)
    assert code == 2 and out == ""
    assert err.startswith(f"dpbench estimate: error: {message}") and err.count("\n") == 1, err


def test_for_a_gpu_the_workspaces_are_a_column_and_fits_leaves_the_headroom(capsys):
    argv = ["--workload", "mlp", "--strategies", "ddp,dp", "--world-sizes", "2", "--device-memory", "1.5GiB"]
    argv += ["--no-activations", "--cuda-capability", "9.0"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    lines = out.splitlines()
    assert lines[1] == (
        "for a GPU of capability 9.0: CUDA workspaces 66 MiB per device (2 handles x (cuBLAS 32 MiB + cuBLASLt "
        "1 MiB)); fits leaves headroom: CUDA context 512 MiB, NCCL buffers 1 GiB (several processes), "
        "fragmentation 10% of the peak"
    )
    # the forward + backward's peak beyond the gradients (not the activations alone): "beyond grads"
    assert lines[2] == "strategy  world    params     grads  optim   buffers    wksp.  beyond grads      peak  fits"
    # ddp: 33.3 MiB of state + 66 MiB + 0.5 GiB context + 1 GiB NCCL > 1.5 GiB; dp (one process, no NCCL) fits.
    assert {line.split()[0]: line.split()[-1] for line in lines[3:]} == {"ddp": "no", "dp": "yes"}
    code, out, _ = run(capsys, *argv, "--json", "-")
    cases = {c["strategy"]: c for c in json.loads(out)["cases"]}
    per_device = 2 * (32 + 1) * 2**20
    assert cases["ddp"]["ranks"][0]["workspace_bytes"] == per_device
    assert cases["dp"]["ranks"][0]["workspace_bytes"] == 2 * per_device  # one process computing on two GPUs
    need = cases["ddp"]["need_bytes"]
    assert cases["ddp"]["headroom_bytes"] == 2**29 + 2**30 + int(0.1 * need)
    code, _, err = run(capsys, "--workload", "mlp", "--cuda-capability", "sm90")
    assert code == 2 and "--cuda-capability: expected MAJOR.MINOR such as 9.0 or 8.6, found 'sm90'" in err
