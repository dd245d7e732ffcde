"""Workloads named by spec train the same steps under every strategy as under ``single``: a user's
module (two input tensors, its own loss, lambdas the workers find by importing it again) and
Hugging Face models built from their configs — a tiny GPT-2, ViT, BERT, LLaMA and T5 — at world size 2,
fp32, with SGD and AdamW (the same habit as test_sharded_equivalence.py).

A Hugging Face head averages its loss over the tokens or images of its slice; every row holds as
many, so the slices' losses weighted by their rows add up to the global mean, even split or not
(the uneven case: 8 rows over 3 replicas, 3, 3, 2).
"""

from __future__ import annotations

import sys

import pytest
import torch

import dpbench
from dpbench.workloads import resolve_workload

pytestmark = pytest.mark.usefixtures("hf_preloaded_helper")  # conftest.py says why

K = 3
GLOBAL_BATCH = 8
LR = 0.05
ATOL = 2e-5
# AdamW steps each element by its gradient over that gradient's own running magnitude, so an
# element whose true gradient is zero — an attention key bias (softmax ignores a shift shared by
# all keys) — steps by its rounding noise, ±lr whatever its size, and that noise differs with the
# order of the reduction. Under AdamW the elements compared are those SGD moves (gradient not
# zero), to ADAMW_ATOL; most elements must be compared.
ADAMW_ATOL = 1e-4
ZERO_GRADIENT = 1e-6  # |SGD's change over K steps| below this: a zero gradient

GPT2 = "hf:gpt2@n_layer=2,n_embd=32,n_head=2,vocab_size=128,n_positions=32,seq_len=16"
VIT = "hf:vit@num_hidden_layers=2,hidden_size=32,num_attention_heads=2,intermediate_size=64,image_size=16,patch_size=8"
BERT = (
    "hf:bert@num_hidden_layers=2,hidden_size=32,num_attention_heads=2,intermediate_size=64,vocab_size=128,"
    "max_position_embeddings=32,seq_len=16"
)
LLAMA = (
    "hf:llama@num_hidden_layers=3,hidden_size=32,intermediate_size=64,num_attention_heads=2,num_key_value_heads=1,"
    "vocab_size=128,seq_len=16"
)
# An encoder-decoder: source and target batches, its own seq2seq loss; FSDP per T5Block.
T5 = (
    "hf:t5@num_layers=2,num_decoder_layers=2,d_model=32,d_ff=64,num_heads=2,d_kv=16,vocab_size=128,"
    "seq_len=16,target_len=8"
)
USER = "my_models:tiny_net@hidden=8,depth=2"
# (spec, strategy, options, optimizer): the user's module under every multi-process strategy and
# DataParallel with both optimizers; GPT-2 under DDP, FSDP and ZeRO with SGD and AdamW (the strategies
# whose optimizer state is sharded get AdamW) and the others; ViT and BERT under DDP (SGD) and FSDP
# per block (AdamW); LLaMA under FSDP per decoder layer, its units named and kept after forward.
CASES = [
    *[(USER, s, o, opt) for s, o in [("ddp", {}), ("fsdp", {}), ("zero", {}), ("allreduce", {}), ("dp", {})]
      for opt in ("sgd", "adamw")],
    *[(GPT2, s, {}, opt) for s, opt in [("ddp", "sgd"), ("fsdp", "sgd"), ("fsdp", "adamw"), ("zero", "adamw")]],
    *[(hf, s, {}, opt) for hf in (VIT, BERT) for s, opt in [("ddp", "sgd"), ("fsdp", "adamw")]],
    (GPT2, "allreduce", {"mode": "bucketed"}, "sgd"),
    (GPT2, "dp", {}, "sgd"),
    # FSDP's units: per decoder layer (the default, from _no_split_modules), named, kept after forward (1).
    (LLAMA, "fsdp", {}, "sgd"),
    (LLAMA, "fsdp", {"units": "LlamaDecoderLayer", "reshard_after_forward": 1}, "adamw"),
    (T5, "ddp", {}, "sgd"),
    (T5, "fsdp", {}, "adamw"),
]  # fmt: skip
NAMES = {USER: "user", GPT2: "gpt2", VIT: "vit", BERT: "bert", LLAMA: "llama", T5: "t5"}


@pytest.fixture(scope="module")
def user_module(tmp_path_factory):
    from _user_models import SOURCE

    where = tmp_path_factory.mktemp("user")
    (where / "my_models.py").write_text(SOURCE)
    with pytest.MonkeyPatch.context() as patch:  # the user's folder on the path, as their script has it
        patch.syspath_prepend(str(where))
        yield where
    sys.modules.pop("my_models", None)


def train(spec: str, strategy: str, world_size: int, **options):
    with dpbench.launch(
        strategy, spec, world_size=world_size, global_batch=GLOBAL_BATCH, seed=3, lr=LR, timeout=120.0, **options
    ) as run:
        stats = run.step(K)
        return run.parameters(), stats.losses


@pytest.fixture(scope="module")
def singles():
    cache: dict[tuple, tuple] = {}

    def get(spec: str, optimizer: str):
        if (spec, optimizer) not in cache:
            torch.manual_seed(3)
            initial = {n: p.detach().clone() for n, p in resolve_workload(spec).model().named_parameters()}
            cache[spec, optimizer] = (*train(spec, "single", 1, optimizer=optimizer), initial)
        return cache[spec, optimizer]

    return get


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec, strategy, options, optimizer", CASES, ids=[f"{NAMES[c[0]]}-{c[1]}-{c[3]}" for c in CASES]
)
def test_spec_workloads_match_single(spec, strategy, options, optimizer, singles, user_module):
    ref_params, ref_losses, initial = singles(spec, optimizer)
    params, losses = train(spec, strategy, 2, optimizer=optimizer, **options)
    assert set(params) == set(ref_params)
    moved = 0
    adamw = optimizer == "adamw" and spec != USER
    if adamw:
        sgd_params, _, _ = singles(spec, "sgd")
        masked = {n: (sgd_params[n] - initial[n]).abs() > ZERO_GRADIENT for n in ref_params}
        left_out = sum(int((~m).sum()) for m in masked.values())
        # Unseen token ids and unused positions have zero gradient too (exactly: AdamW leaves them alike).
        assert left_out < 0.5 * sum(m.numel() for m in masked.values()), f"{left_out} elements with zero gradient"
    for name, expected in ref_params.items():
        moved += not torch.allclose(expected, initial[name])
        got = params[name]
        if adamw:
            got, expected = got[masked[name]], expected[masked[name]]
        atol = ADAMW_ATOL if adamw else ATOL
        torch.testing.assert_close(got, expected, atol=atol, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    # The steps moved the weights (a few may not: e.g. position embeddings past the sequence length).
    assert moved > len(ref_params) // 2
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=ATOL * 10, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["dp", "manual"])
def test_an_uneven_split_of_an_hf_model_matches_single(strategy, singles):
    # The in-process strategies: dp gathers one row-weighted loss per replica, manual weights each slice.
    ref_params, ref_losses, _ = singles(GPT2, "sgd")
    params, losses = train(GPT2, strategy, 3, optimizer="sgd")
    for name, expected in ref_params.items():
        torch.testing.assert_close(params[name], expected, atol=ATOL, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=ATOL * 10, rtol=1e-4)
