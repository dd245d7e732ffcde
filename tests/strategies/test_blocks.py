"""FSDP's units where people put them (dpbench/strategies/blocks.py, fsdp's ``shard="block"``): the
blocks found per model, the options that name or refuse them, and the memory estimate that follows
the units. Reference: the models' own module trees, counted here independently."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dpbench
from dpbench.strategies import get_strategy
from dpbench.strategies.blocks import find_blocks, parse_units
from dpbench.strategies.estimate import Estimator

LLAMA = (
    "hf:llama@num_hidden_layers=4,hidden_size=32,intermediate_size=64,num_attention_heads=2,"
    "num_key_value_heads=1,vocab_size=257,seq_len=16"
)


def meta(spec):
    with torch.device("meta"):
        return dpbench.resolve_workload(spec).model()


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.c = nn.Linear(4, 4)


def test_a_transformer_shards_by_its_decoder_blocks():
    model = meta("transformer")
    blocks, found_by = find_blocks(model)
    assert found_by == "repeated" and blocks == list(model.blocks)
    assert [type(b).__name__ for b in blocks] == ["DecoderBlock"] * dpbench.get_workload("transformer").params["layers"]


def test_a_hugging_face_model_shards_by_the_classes_it_declares_not_to_split():
    model = meta(LLAMA)
    blocks, found_by = find_blocks(model)
    assert found_by == "no_split_modules"
    assert blocks == list(model.model.model.layers) and len(blocks) == 4


TINY = "hidden_size=32,num_attention_heads=2,intermediate_size=64,vocab_size=128"


@pytest.mark.parametrize(
    "spec, classes",
    [
        ("hf:t5@num_layers=2,num_decoder_layers=1,d_model=32,d_ff=64,num_heads=2,d_kv=16,vocab_size=128",
         ["T5Block"] * 3),
        ("hf:bart@encoder_layers=2,decoder_layers=1,d_model=32,encoder_ffn_dim=64,decoder_ffn_dim=64,"
         "encoder_attention_heads=2,decoder_attention_heads=2,vocab_size=128",
         ["BartEncoderLayer"] * 2 + ["BartDecoderLayer"]),
        (f"hf:gemma2@num_hidden_layers=2,{TINY},num_key_value_heads=1,head_dim=16", ["Gemma2DecoderLayer"] * 2),
    ],
    ids=["t5", "bart", "gemma2"],
)  # fmt: skip
def test_encoder_decoders_and_new_decoders_shard_by_their_layers(spec, classes):
    pytest.importorskip("transformers")
    blocks, found_by = find_blocks(meta(spec))
    assert found_by == "no_split_modules" and [type(b).__name__ for b in blocks] == classes


def test_a_resnet_shards_by_its_residual_blocks_and_an_mlp_has_none():
    blocks, found_by = find_blocks(meta("resnet18"))
    assert found_by == "repeated" and [type(b).__name__ for b in blocks] == ["Residual"] * 8
    assert find_blocks(meta("mlp")) == ([], "")  # repeated Linear layers are no blocks


def test_a_block_holding_a_tied_parameter_stays_with_the_root():
    """BERT ties its word embeddings to the masked-LM head: FSDP must group a tied parameter once."""
    model = meta("hf:bert@num_hidden_layers=2,hidden_size=32,num_attention_heads=2,intermediate_size=64,vocab_size=128")
    blocks, found_by = find_blocks(model)
    assert found_by == "no_split_modules" and blocks == list(model.model.bert.encoder.layer)  # no BertEmbeddings


def test_named_classes_win_and_a_block_inside_a_block_is_part_of_it():
    model = nn.Sequential(Outer(), Outer(), nn.Linear(4, 2))
    blocks, found_by = find_blocks(model, ("Outer", "Inner"))
    assert found_by == "named" and blocks == [model[0], model[1]]
    assert find_blocks(model, ("Inner",))[0] == [model[0].inner, model[1].inner]


def test_units_naming_no_class_of_the_model_list_its_repeated_classes():
    with pytest.raises(ValueError) as info:
        find_blocks(nn.Sequential(Outer(), Outer()), ("Outr",))
    assert str(info.value) == (
        "units: no module of class 'Outr' in the model; its repeated module classes: Linear (6), Outer (2), Inner (2)"
    )
    with pytest.raises(ValueError, match=r"fsdp option units: expected module class names separated by commas"):
        parse_units("Block, 2x")
    assert parse_units("A,B") == ("A", "B") and parse_units(None) == ()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"reshard_after_forward": 3}, "reshard_after_forward: expected True, False or a number of ranks that divides"),
        ({"reshard_after_forward": 0}, "found 0"),
        ({"reshard_after_forward": "yes"}, "found 'yes'"),
        (
            {"units": "Block", "shard": "layer"},
            "fsdp option units names the blocks of shard='block', found shard='layer'",
        ),
        ({"shard": "blocks"}, "fsdp option shard must be one of block, layer, model, got 'blocks'"),
        ({"replicate": 3}, "fsdp option replicate: expected a number of replica groups that divides the world size 4"),
        (
            {"replicate": 2, "reshard_after_forward": 4},
            "reshard_after_forward: expected True, False or a number of ranks that divides the 2 ranks a replica",
        ),
    ],
)
def test_fsdp_refuses_bad_unit_options_in_one_line(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_strategy("fsdp").parse_options(options, device="cpu", world_size=4, global_batch=8)
    for reshard in (True, False, 1, 2, 4):
        get_strategy("fsdp").parse_options(
            {"reshard_after_forward": reshard}, device="cpu", world_size=4, global_batch=8
        )


def test_the_peak_estimate_gathers_the_root_and_two_blocks_not_the_whole_model():
    """LLaMA at world size 2: per block, the gathered parameters are the root's own (embeddings,
    final norm, head) and the two largest blocks; per top-level child, the whole model."""
    estimator = Estimator(LLAMA)
    model = meta(LLAMA)
    nbytes = [sum(p.numel() * 4 for p in layer.parameters()) for layer in model.model.model.layers]
    total = sum(p.numel() * 4 for p in model.parameters())
    root = total - sum(nbytes)
    blocks = sorted(nbytes)
    by_block = estimator.case("fsdp", world_size=2, global_batch=8).ranks[0].peak_bytes
    by_layer = estimator.case("fsdp", world_size=2, global_batch=8, options={"shard": "layer"}).ranks[0].peak_bytes
    # Per top-level child the one unit is the whole model: gathered whole, and its gradients whole.
    # Per block: the root and two blocks gathered, the largest unit's gradients (the root's here).
    assert by_layer - by_block == (total + total) - (root + sum(blocks[-2:]) + max(root, blocks[-1]))
    kept = estimator.case("fsdp", world_size=2, global_batch=8, options={"reshard_after_forward": False}).ranks[0]
    assert kept.peak_bytes - by_block == sum(blocks[:-2])  # no resharding: every block stays gathered
    named = estimator.case("fsdp", world_size=2, global_batch=8, options={"units": "LlamaDecoderLayer"}).ranks[0]
    assert named.peak_bytes == by_block
    with pytest.raises(ValueError, match=r"^fsdp option units: no module of class 'Block' in the model; its repeated"):
        estimator.case("fsdp", world_size=2, global_batch=8, options={"units": "Block"})


def test_a_workloads_blocks_must_be_class_names():
    mlp = dpbench.get_workload("mlp")
    assert dpbench.Workload(model=mlp.model, batch=mlp.batch, blocks="Block").blocks == ("Block",)
    with pytest.raises(TypeError, match=r"Workload.blocks must be module class names"):
        dpbench.Workload(model=mlp.model, batch=mlp.batch, blocks=("my block",))
