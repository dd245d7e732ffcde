"""``hf:`` workloads: a Hugging Face ``transformers`` model built from its config, never downloaded.

``hf:MODEL_TYPE`` builds the library's default config of that type (``hf:gpt2``), ``hf:PATH`` reads
a local directory's ``config.json``; ``@key=value`` overrides set config fields
(``hf:gpt2@n_layer=2,n_embd=64``) and dpbench's own keys (``seq_len``, and ``image_size`` where
the config has none). The weights are random, drawn from the RNG the strategies seed, so every
rank and strategy starts from the same model; the batches come from dpbench's seeded generator
in the model's own input format (token ids of the config's vocabulary, images of its size and
channels); the loss is the one the model's head computes from the ``labels`` it is given.

Dropout is off (every field named ``*dropout*`` or ``*_pdrop`` is set to 0.0) so every strategy
computes the same step; an override of such a field keeps its value, and the workload is then
``stateful``. The Hugging Face libraries are set offline before ``transformers`` is imported.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dpbench.workloads.base import Workload
from dpbench.workloads.data import check_batch_args, step_generator
from dpbench.workloads.spec_syntax import SpecError, close_names, parse_int_tuple

__all__ = ["HfRecipe", "HfTrainModule", "SUPPORTED", "hf_batch", "hf_loss", "hf_model", "hf_workload"]

# dpbench is not on PyPI (the `dpbench` there is another project): the extra comes from a checkout.
INSTALL = "install the hf extra: pip install -e '.[hf]' in a dpbench checkout"
CAUSAL, MASKED, IMAGE = "causal-lm", "masked-lm", "image-classification"
# model_type -> (transformers class, task)
SUPPORTED: dict[str, tuple[str, str]] = {
    "gpt2": ("GPT2LMHeadModel", CAUSAL),
    "llama": ("LlamaForCausalLM", CAUSAL),
    "mistral": ("MistralForCausalLM", CAUSAL),
    "qwen2": ("Qwen2ForCausalLM", CAUSAL),
    "qwen3": ("Qwen3ForCausalLM", CAUSAL),
    "bert": ("BertForMaskedLM", MASKED),
    "vit": ("ViTForImageClassification", IMAGE),
    "resnet": ("ResNetForImageClassification", IMAGE),
}
DEFAULT_SEQ_LEN = 64
DEFAULT_IMAGE_SIZE = 64
MASK_FRACTION = 0.15
_OWN_KEYS = ("seq_len", "image_size")


def _error(message: str) -> ValueError:
    return SpecError(message)


def _transformers(spec: str) -> Any:
    # Nothing is ever downloaded: set before transformers (and huggingface_hub) read them.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        import transformers
    except ImportError as exc:
        raise _error(f"workload spec {spec!r}: hf: specs need transformers ({exc}): {INSTALL}") from None
    return transformers


@dataclass(kw_only=True, frozen=True, eq=False)
class HfRecipe:
    """What a worker needs to build the model and its batches again (picklable, JSON config)."""

    model_type: str
    class_name: str
    task: str
    config: dict[str, Any] = field(hash=False)
    seq_len: int
    image_size: int


def _base_config(target: str, spec: str) -> tuple[str, dict[str, Any]]:
    """``(model_type, config fields)``: a directory's config.json, or nothing beyond the type's defaults."""
    if os.path.isdir(target):
        path = os.path.join(target, "config.json")
        if not os.path.isfile(path):
            raise _error(
                f"workload spec {spec!r}: hf:PATH: expected a directory holding config.json, found none in {target}"
            )
        try:
            with open(path, encoding="utf-8") as handle:
                raw = json.load(handle)
        except (OSError, ValueError) as exc:
            raise _error(f"workload spec {spec!r}: {path}: expected a JSON config, found {exc}") from None
        model_type = raw.get("model_type") if isinstance(raw, dict) else None
        if model_type not in SUPPORTED:
            raise _error(
                f"workload spec {spec!r}: {path}: model_type {model_type!r} is not supported; "
                f"supported: {', '.join(SUPPORTED)}"
            )
        return model_type, {k: v for k, v in raw.items() if k != "model_type"}
    if "/" in target or os.sep in target:
        raise _error(
            f"workload spec {spec!r}: {target!r} is no local directory; dpbench downloads nothing, so a hub id is "
            f"refused: pass a directory holding its config.json (hf:path/to/dir)"
        )
    if target not in SUPPORTED:
        raise _error(
            f"workload spec {spec!r}: unknown hf model type {target!r}; "
            f"{close_names(target, list(SUPPORTED), what='model types')} (or hf:PATH to a config directory)"
        )
    return target, {}


def _dropout_fields(config: dict[str, Any]) -> list[str]:
    return sorted(
        k
        for k, v in config.items()
        if isinstance(v, float) and not isinstance(v, bool) and ("dropout" in k or k.endswith("_pdrop"))
    )


def hf_workload(target: str, overrides: dict[str, Any], *, spec: str) -> Workload:
    """The ``Workload`` of ``hf:<target>`` with ``overrides`` (config fields and dpbench's own keys)."""
    model_type, fields = _base_config(target, spec)  # before the import: a wrong target costs no seconds
    transformers = _transformers(spec)
    class_name, task = SUPPORTED[model_type]
    values = transformers.AutoConfig.for_model(model_type, **fields).to_dict()
    own = {k: overrides.pop(k) for k in list(overrides) if k in _OWN_KEYS and k not in values}
    for key, value in list(overrides.items()):
        if key not in values:
            raise _error(
                f"workload spec {spec!r}: override {key!r} is no field of the {model_type} config; "
                f"{close_names(key, [*values, *_OWN_KEYS], what='fields')}"
            )
        default = values[key]
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            overrides[key] = float(value)
        if isinstance(default, (list, tuple)) and isinstance(value, (int, str)):
            overrides[key] = list(parse_int_tuple(spec, key, value))
    off = [k for k in _dropout_fields(values) if k not in overrides]
    kept = {k: overrides[k] for k in _dropout_fields(values) if k in overrides}
    try:
        # Built anew from the overrides, so the fields a config derives from others follow them.
        config = transformers.AutoConfig.for_model(model_type, **{**fields, **overrides, **dict.fromkeys(off, 0.0)})
    except Exception as exc:  # transformers validates its configs' fields
        raise _error(
            f"workload spec {spec!r}: the {model_type} config refused the overrides: {_first_line(exc)}"
        ) from None
    positions = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    seq_len = _positive(spec, "seq_len", own.get("seq_len", min(DEFAULT_SEQ_LEN, positions or DEFAULT_SEQ_LEN)))
    if task != IMAGE and positions and seq_len > positions:
        raise _error(
            f"workload spec {spec!r}: seq_len: expected at most the config's {positions} positions, found {seq_len}"
        )
    image_size = _positive(spec, "image_size", own.get("image_size", getattr(config, "image_size", DEFAULT_IMAGE_SIZE)))
    recipe = HfRecipe(
        model_type=model_type,
        class_name=class_name,
        task=task,
        # None fields would be read back as set (and warned about: loss_type)
        config={k: v for k, v in config.to_dict().items() if v is not None},
        seq_len=seq_len,
        image_size=image_size,
    )
    try:
        with torch.device("meta"):
            hf_model(recipe)  # a config its class refuses fails here, in one line, not in a worker
    except Exception as exc:
        raise _error(f"workload spec {spec!r}: {class_name} refused the config: {_first_line(exc)}") from None
    shape = f"sequence length {seq_len}" if task != IMAGE else f"{image_size}×{image_size} images"
    params = {
        "model_type": model_type,
        "class": class_name,
        "task": task,
        "overrides": {k: v for k, v in overrides.items()},
        "dropout_off": off,
        "transformers": transformers.__version__,
    }
    params["seq_len" if task != IMAGE else "image_size"] = seq_len if task != IMAGE else image_size
    return Workload(
        model=functools.partial(hf_model, recipe),
        batch=functools.partial(hf_batch, recipe),
        loss=hf_loss,
        name=spec,
        description=f"transformers {class_name} from its config (random weights), {shape}, its own loss",
        stateful=bool(kept) or model_type == "resnet",  # dropout kept; ResNet's BatchNorm statistics
        tags=("hf", task),
        params=params,
    )


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {' '.join(lines[:2])}"


def _positive(spec: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _error(f"workload spec {spec!r}: {key}: expected an int >= 1, found {value!r}")
    return value


def _loss_only(module: nn.Module, args: Any, output: Any) -> Any:
    """The model's output with its loss and nothing else (a forward hook).

    Only the loss is read. The other outputs can be views (BERT's logits come out of a linear layer
    as a view of its 2-D product), and FSDP warns about every view a sharded unit returns, because
    an in-place op on one would skip its gradient hooks; dropping them leaves nothing to warn about.
    """
    return type(output)(loss=output.loss)


class HfTrainModule(nn.Module):
    """The model and the names of its inputs: ``forward(*tensors)`` returns its own loss as a
    1-element tensor, so DataParallel's gather stacks one loss per replica (``hf_loss`` averages).

    The model returns its loss alone (the other outputs are dropped where it returns them), and the
    1-element loss is a new tensor, not a view: each is what a strategy's wrapper hands on (FSDP
    shards the model and this module as units, see :func:`_loss_only`)."""

    def __init__(self, model: nn.Module, input_names: tuple[str, ...]) -> None:
        super().__init__()
        model.register_forward_hook(_loss_only)
        self.model = model
        self.input_names = input_names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return torch.stack((self.model(**dict(zip(self.input_names, inputs))).loss,))


@functools.lru_cache(maxsize=8)
def _config_class(model_type: str) -> Any:
    transformers = _transformers(f"hf:{model_type}")
    return type(transformers.AutoConfig.for_model(model_type))


def hf_model(recipe: HfRecipe) -> nn.Module:
    """A fresh model of ``recipe`` with random weights from the (seeded) global RNG, in train mode."""
    transformers = _transformers(f"hf:{recipe.model_type}")
    config = _config_class(recipe.model_type).from_dict(dict(recipe.config))
    model = getattr(transformers, recipe.class_name)(config)
    if recipe.task == CAUSAL and getattr(model, "loss_type", None) is None:
        model.loss_type = "ForCausalLM"  # what transformers falls back to, named so it does not warn
    model.train()
    names = ("pixel_values", "labels") if recipe.task == IMAGE else ("input_ids", "labels")
    return HfTrainModule(model, names)


def hf_batch(
    recipe: HfRecipe, step: int, global_batch: int, seed: int
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Step ``step``'s global batch: ``((inputs, labels), labels)`` from dpbench's seeded generator."""
    step, global_batch, seed = check_batch_args(step, global_batch, seed)
    generator = step_generator(seed, step)
    config = recipe.config
    if recipe.task == IMAGE:
        channels = config.get("num_channels", 3)
        size = recipe.image_size
        pixels = torch.randn(global_batch, channels, size, size, generator=generator)
        labels = torch.randint(len(config.get("id2label") or {0: 0, 1: 1}), (global_batch,), generator=generator)
        return (pixels, labels), labels
    vocab = config["vocab_size"]
    tokens = torch.randint(vocab, (global_batch, recipe.seq_len), generator=generator)
    if recipe.task == CAUSAL:
        return (tokens, tokens), tokens
    # Masked LM: the same number of masked positions in every row, so every slice of the batch
    # averages its loss over as many tokens as any other and the ranks' mean is the global one.
    masked = max(1, round(MASK_FRACTION * recipe.seq_len))
    order = torch.rand(global_batch, recipe.seq_len, generator=generator).argsort(dim=1)[:, :masked]
    labels = torch.full_like(tokens, -100)
    labels.scatter_(1, order, tokens.gather(1, order))
    mask_id = config.get("mask_token_id") or min(103, vocab - 1)  # BERT's [MASK] id where the vocabulary has it
    inputs = tokens.scatter(1, order, mask_id)
    return (inputs, labels), labels


def hf_loss(output: torch.Tensor, target: Any) -> torch.Tensor:
    """The model head's own loss: the mean of the per-replica losses ``HfTrainModule`` returns."""
    return output.mean()
