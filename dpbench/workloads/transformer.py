"""``transformer``: a small GPT-style decoder language model on a seeded Markov-chain corpus.

Pre-LayerNorm blocks of causal multi-head self-attention and a 4× GELU MLP, learned position
embeddings, an untied output head. No dropout anywhere, so forward is deterministic and the
strategies can be compared exactly. ``forward(tokens [B, T]) -> logits [B, T, vocab]``; the
loss is the cross-entropy over every position (target ``[B, T]``, the next tokens).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from dpbench.workloads._checks import positive_int
from dpbench.workloads._variants import variant
from dpbench.workloads.base import Workload
from dpbench.workloads.data import token_batch

__all__ = ["CausalSelfAttention", "DecoderBlock", "GPT", "sequence_cross_entropy", "transformer_workload"]


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model must be divisible by heads, got d_model={d_model}, heads={heads}")
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        # [B, T, C] -> [B, heads, T, C/heads]
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class DecoderBlock(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(
        self, *, vocab: int = 512, context: int = 64, layers: int = 2, heads: int = 4, d_model: int = 64
    ) -> None:
        super().__init__()
        self.vocab = positive_int("vocab", vocab)
        self.context = positive_int("context", context)
        layers = positive_int("layers", layers)
        heads = positive_int("heads", heads)
        d_model = positive_int("d_model", d_model)
        self.token_embedding = nn.Embedding(self.vocab, d_model)
        self.position_embedding = nn.Embedding(self.context, d_model)
        self.blocks = nn.Sequential(*(DecoderBlock(d_model, heads) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, self.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2 or tokens.shape[1] > self.context:
            raise ValueError(
                f"tokens must have shape [batch, length] with length <= context={self.context}, "
                f"got {tuple(tokens.shape)}"
            )
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        return self.head(self.ln_f(self.blocks(x)))


def sequence_cross_entropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every position: ``output [B, T, V]``, ``target [B, T]``."""
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


def transformer_workload(
    *, vocab: int = 512, context: int = 64, layers: int = 2, heads: int = 4, d_model: int = 64, branching: int = 4
) -> Workload:
    """A GPT-style decoder on next-token prediction over a seeded Markov chain (``data.token_batch``).

    ``d_model`` defaults to 64, not 128: at 128 one fwd+bwd step of batch 64 (4096 tokens) took
    ~310 ms on one CPU thread, at 64 ~90 ms, which keeps the quick profile quick on small CPUs.
    """
    vocab, context = positive_int("vocab", vocab), positive_int("context", context)
    layers, heads, d_model = (
        positive_int("layers", layers),
        positive_int("heads", heads),
        positive_int("d_model", d_model),
    )
    if d_model % heads:
        raise ValueError(f"d_model must be divisible by heads, got d_model={d_model}, heads={heads}")
    branching = positive_int("branching", branching)
    name, params = variant(
        "transformer",
        transformer_workload,
        vocab=vocab,
        context=context,
        layers=layers,
        heads=heads,
        d_model=d_model,
        branching=branching,
    )
    return Workload(
        model=partial(GPT, vocab=vocab, context=context, layers=layers, heads=heads, d_model=d_model),
        batch=partial(token_batch, vocab=vocab, context=context, branching=branching),
        loss=sequence_cross_entropy,
        name=name,
        params=params,
        description=(
            f"GPT-style decoder: {layers} layers, {heads} heads, d_model {d_model}, vocab {vocab}, "
            f"context {context}, no dropout; next-token loss on a seeded Markov chain"
        ),
        tags=("tokens", "language-model", "attention"),
    )
