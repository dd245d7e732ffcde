"""``hf:`` workloads: a Hugging Face ``transformers`` model built from its config, never downloaded.

``hf:MODEL_TYPE`` builds the library's default config of that type (``hf:gpt2``), ``hf:PATH`` reads
a local directory's ``config.json``; ``@key=value`` overrides set config fields and the properties
a config lets users set (``hf:gpt2@n_layer=2,n_embd=64``, ``hf:vit@num_labels=10``) and dpbench's
own keys (``seq_len``; ``target_len`` for an encoder-decoder; ``image_size`` where the config has
none). Every model type the installed ``transformers`` maps to a head through its auto classes is
supported, its task read from the mapping (:func:`supported_types`): a causal LM, a masked LM, an
encoder-decoder (seq2seq) LM or an image classifier. The weights are random, drawn from the RNG the
strategies seed, so every rank and strategy starts from the same model; the batches come from
dpbench's seeded generator in the model's own input format (token ids of the config's vocabulary,
source and target token ids for an encoder-decoder, images of its size and channels); the loss is
the one the model's head computes from the ``labels`` it is given.

Dropout is off (every field named ``*dropout*``, ``*_pdrop``, ``*layerdrop*`` or ``*drop_path*`` is
set to 0.0) so every strategy computes the same step; an override of such a field keeps its value,
and the workload is then ``stateful``, as is a model with running statistics (BatchNorm). The
Hugging Face libraries are set offline before ``transformers`` is imported.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dpbench.errors import did_you_mean
from dpbench.workloads.base import Workload
from dpbench.workloads.data import check_batch_args, step_generator
from dpbench.workloads.spec_syntax import SpecError, close_names, parse_int_tuple

__all__ = ["HfRecipe", "HfTrainModule", "hf_batch", "hf_loss", "hf_model", "hf_workload", "supported_types"]

# dpbench is not on PyPI (the `dpbench` there is another project): the extra comes from a checkout.
INSTALL = "install the hf extra: pip install -e '.[hf]' in a dpbench checkout"
CAUSAL, MASKED, SEQ2SEQ, IMAGE = "causal-lm", "masked-lm", "seq2seq-lm", "image-classification"
# The auto-class mappings (transformers.models.auto.modeling_auto) a model type's head and task are
# read from, in the order that decides a type several of them name: an encoder-decoder trains its
# seq2seq head (bart is in all three text mappings), an encoder its masked-LM head (bert has a
# causal one too), then causal LMs, then image classifiers.
_MAPPINGS = (
    (SEQ2SEQ, "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    (MASKED, "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    (CAUSAL, "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    (IMAGE, "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
)
DEFAULT_SEQ_LEN = 64
DEFAULT_IMAGE_SIZE = 64
MASK_FRACTION = 0.15
# dpbench's own keys, used where the config has no field of that name; an encoder-decoder's
# target sequence has its own length.
_OWN_KEYS = ("seq_len", "image_size")
_SEQ2SEQ_KEYS = ("target_len",)


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


@functools.cache
def supported_types() -> dict[str, tuple[str, str]]:
    """``model_type -> (transformers class, task)`` for every type the installed ``transformers``
    maps to a causal-LM, masked-LM, seq2seq-LM or image-classification head (``_MAPPINGS``)."""
    _transformers("hf:")
    from transformers.models.auto import modeling_auto

    table: dict[str, tuple[str, str]] = {}
    for task, mapping in _MAPPINGS:
        for model_type, classes in getattr(modeling_auto, mapping, {}).items():
            # A type with several heads for one task (DeiT with and without its teacher) takes the first.
            table.setdefault(model_type, (classes if isinstance(classes, str) else classes[0], task))
    return table


def _unsupported(model_type: Any, supported: dict[str, tuple[str, str]]) -> str:
    """``" (did you mean 'gpt2'?); N model types are supported …"`` — the list is too long to print
    whole, so up to four close names are offered."""
    return (
        f"{did_you_mean(str(model_type), supported, most=4)}; {len(supported)} model types are supported, "
        "those transformers maps to a causal-LM, masked-LM, seq2seq-LM or image-classification head"
    )


@dataclass(kw_only=True, frozen=True, eq=False)
class HfRecipe:
    """What a worker needs to build the model and its batches again (picklable, JSON config)."""

    model_type: str
    """The config's ``model_type``."""
    class_name: str
    """The ``transformers`` class with the task's head (``LlamaForCausalLM``)."""
    task: str
    """``causal-lm``, ``masked-lm``, ``seq2seq-lm`` or ``image-classification``: the batch it trains on."""
    config: dict[str, Any] = field(hash=False)
    """The config's fields, overrides applied (``to_dict()``, without the ``None`` ones)."""
    seq_len: int
    """Tokens per row of a text batch (an encoder-decoder's source)."""
    image_size: int
    """Height and width of an image batch."""
    target_len: int = 0
    """Tokens per row of an encoder-decoder's target (its labels); 0 for the other tasks."""
    vocab_size: int = 0
    """The token ids a text batch draws from: the vocabulary of the config's text part (a multimodal
    config nests it in ``text_config``); 0 for an image classifier."""


def _refuse_hub_id(target: str, spec: str) -> None:
    if not os.path.isdir(target) and ("/" in target or os.sep in target):
        raise _error(
            f"workload spec {spec!r}: {target!r} is no local directory; dpbench downloads nothing, so a hub id is "
            f"refused: pass a directory holding its config.json (hf:path/to/dir)"
        )


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
        supported = supported_types()
        if model_type not in supported:
            raise _error(
                f"workload spec {spec!r}: {path}: model_type {model_type!r} is not supported"
                f"{_unsupported(model_type, supported)}"
            )
        return model_type, {k: v for k, v in raw.items() if k != "model_type"}
    supported = supported_types()
    if target not in supported:
        raise _error(
            f"workload spec {spec!r}: unknown hf model type {target!r}"
            f"{_unsupported(target, supported)} (or hf:PATH to a config directory)"
        )
    return target, {}


def _dropout_fields(config: dict[str, Any]) -> list[str]:
    """Fields that switch on randomness in training: dropout, dropped layers, stochastic depth."""
    return sorted(
        k
        for k, v in config.items()
        if isinstance(v, float)
        and not isinstance(v, bool)
        and ("dropout" in k or k.endswith("_pdrop") or "layerdrop" in k or "drop_path" in k)
    )


def _settable_properties(config_class: type) -> list[str]:
    """The public properties a config class lets users set (``num_labels``, which sets ``id2label``)."""
    return sorted(
        {
            name
            for klass in config_class.__mro__
            for name, value in vars(klass).items()
            if isinstance(value, property) and value.fset is not None and not name.startswith("_")
        }
    )


_SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "sep_token_id")


def _checked_overrides(
    overrides: dict[str, Any], values: dict[str, Any], settable: list[str], own_keys: tuple[str, ...], *, spec: str
) -> dict[str, Any]:
    """dpbench's own keys popped from ``overrides`` (the rest are checked against the config's
    fields and settable properties, and converted to the field's type)."""
    model_type = values.get("model_type", "")
    own = {k: overrides.pop(k) for k in list(overrides) if k in own_keys and k not in values}
    for key, value in list(overrides.items()):
        if key in settable and key not in values:
            continue  # a property: its setter checks the value
        if key not in values:
            raise _error(
                f"workload spec {spec!r}: override {key!r} is no field of the {model_type} config"
                f"{close_names(key, sorted({*values, *settable, *own_keys}), what='fields')}"
            )
        default = values[key]
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            overrides[key] = float(value)
        if isinstance(default, (list, tuple)) and isinstance(value, (int, str)):
            overrides[key] = list(parse_int_tuple(spec, key, value))
    return own


def _text_config(config: Any) -> Any:
    """The config of the model's text part: the config itself, or the ``text_config`` a multimodal one nests."""
    get = getattr(config, "get_text_config", None)
    try:
        return get() if callable(get) else config
    except ValueError:  # several text configs (MusicGen's): none is the one its token ids index
        return config


def _lengths(config: Any, task: str, own: dict[str, Any], *, spec: str) -> tuple[int, int, int]:
    """``(seq_len, target_len, image_size)``: dpbench's keys, else defaults the config allows."""
    text = _text_config(config)
    positions = getattr(text, "n_positions", None) or getattr(text, "max_position_embeddings", None)
    default = min(DEFAULT_SEQ_LEN, positions or DEFAULT_SEQ_LEN)
    seq_len = _positive(spec, "seq_len", own.get("seq_len", default))
    target_len = _positive(spec, "target_len", own.get("target_len", seq_len)) if task == SEQ2SEQ else 0
    for key, length in (("seq_len", seq_len), ("target_len", target_len)):
        if task != IMAGE and positions and length > positions:
            raise _error(
                f"workload spec {spec!r}: {key}: expected at most the config's {positions} positions, found {length}"
            )
    image_size = _positive(spec, "image_size", own.get("image_size", getattr(config, "image_size", DEFAULT_IMAGE_SIZE)))
    return seq_len, target_len, image_size


def hf_workload(target: str, overrides: dict[str, Any], *, spec: str) -> Workload:
    """The ``Workload`` of ``hf:<target>`` with ``overrides`` (config fields and properties, dpbench's own keys)."""
    _refuse_hub_id(target, spec)  # before the import: a hub id costs no seconds
    transformers = _transformers(spec)
    model_type, fields = _base_config(target, spec)
    class_name, task = supported_types()[model_type]
    try:
        default = transformers.AutoConfig.for_model(model_type, **fields)
    except Exception as exc:  # a default config its own validators refuse, a config.json's bad field
        raise _error(f"workload spec {spec!r}: the {model_type} config cannot be built: {_first_line(exc)}") from None
    values = default.to_dict()
    own_keys = _OWN_KEYS + (_SEQ2SEQ_KEYS if task == SEQ2SEQ else ())
    own = _checked_overrides(overrides, values, _settable_properties(type(default)), own_keys, spec=spec)
    off = [k for k in _dropout_fields(values) if k not in overrides]
    kept = {k: overrides[k] for k in _dropout_fields(values) if k in overrides}
    derived = {}
    if task == SEQ2SEQ and values.get("decoder_start_token_id") is None and "decoder_start_token_id" not in overrides:
        # The model shifts its labels right from this token; T5's released configs start from the pad token.
        derived["decoder_start_token_id"] = values.get("pad_token_id") or 0
    vocab = overrides.get("vocab_size")
    if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
        # A smaller vocabulary (sized for a CPU) leaves the special ids past its end, which transformers
        # warns about on every build; they only mark tokens at generation, never in a training batch.
        for key in _SPECIAL_IDS:
            if key not in overrides and isinstance(values.get(key), int) and values[key] >= vocab:
                derived[key] = vocab - 1
    try:
        # Built anew from the overrides, so the fields a config derives from others follow them.
        config = transformers.AutoConfig.for_model(
            model_type, **{**fields, **derived, **overrides, **dict.fromkeys(off, 0.0)}
        )
    except Exception as exc:  # transformers validates its configs' fields
        raise _error(
            f"workload spec {spec!r}: the {model_type} config refused the overrides: {_first_line(exc)}"
        ) from None
    seq_len, target_len, image_size = _lengths(config, task, own, spec=spec)
    vocab_size = getattr(_text_config(config), "vocab_size", None) if task != IMAGE else 0
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        raise _error(f"workload spec {spec!r}: the {model_type} config names no vocab_size for its token ids")
    recipe = HfRecipe(
        model_type=model_type,
        class_name=class_name,
        task=task,
        # None fields would be read back as set (and warned about: loss_type)
        config={k: v for k, v in config.to_dict().items() if v is not None},
        seq_len=seq_len,
        image_size=image_size,
        target_len=target_len,
        vocab_size=vocab_size,
    )
    try:
        with torch.device("meta"):
            model = hf_model(recipe)  # a config its class refuses fails here, in one line, not in a worker
    except Exception as exc:
        raise _error(f"workload spec {spec!r}: {class_name} refused the config: {_first_line(exc)}") from None
    # BatchNorm keeps statistics per replica: strategies are not expected to match single exactly.
    running_stats = any(getattr(m, "track_running_stats", False) for m in model.modules())
    params = {
        "model_type": model_type,
        "class": class_name,
        "task": task,
        "overrides": {k: v for k, v in overrides.items()},
        "dropout_off": off,
        "transformers": transformers.__version__,
    }
    if task == IMAGE:
        params["image_size"], shape = image_size, f"{image_size}×{image_size} images"
    else:
        params["seq_len"], shape = seq_len, f"sequence length {seq_len}"
    if task == SEQ2SEQ:
        params["target_len"], shape = target_len, f"source length {seq_len}, target length {target_len}"
    return Workload(
        model=functools.partial(hf_model, recipe),
        batch=functools.partial(hf_batch, recipe),
        loss=hf_loss,
        name=spec,
        description=f"transformers {class_name} from its config (random weights), {shape}, its own loss",
        stateful=bool(kept) or running_stats,
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
    """The model and the names of its inputs: ``forward(*tensors)`` returns its own loss times the
    rows it was given, as a 1-element tensor, so DataParallel's gather stacks one such sum per
    replica and ``hf_loss`` divides their total by the batch's rows.

    The head averages over its slice's tokens or images, and every row of a batch holds as many
    (:func:`hf_batch`): weighting each slice's mean by its rows makes an uneven split (8 rows over 3
    replicas: 3, 3, 2) add up to the mean ``single`` computes, where a mean of the means would not.
    The model returns its loss alone (the other outputs are dropped where it returns them), and the
    1-element loss is a new tensor, not a view: each is what a strategy's wrapper hands on (FSDP
    shards the model and this module as units, see :func:`_loss_only`)."""

    def __init__(self, model: nn.Module, input_names: tuple[str, ...]) -> None:
        super().__init__()
        model.register_forward_hook(_loss_only)
        self.model = model
        self.input_names = input_names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        loss = self.model(**dict(zip(self.input_names, inputs))).loss
        return torch.stack((loss * inputs[0].shape[0],))


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
    """Step ``step``'s global batch: ``((inputs, labels), labels)`` from dpbench's seeded generator
    (an encoder-decoder's inputs are its source token ids, its labels the target's)."""
    step, global_batch, seed = check_batch_args(step, global_batch, seed)
    generator = step_generator(seed, step)
    config = recipe.config
    if recipe.task == IMAGE:
        channels = config.get("num_channels", 3)
        size = recipe.image_size
        pixels = torch.randn(global_batch, channels, size, size, generator=generator)
        labels = torch.randint(len(config.get("id2label") or {0: 0, 1: 1}), (global_batch,), generator=generator)
        return (pixels, labels), labels
    vocab = recipe.vocab_size
    tokens = torch.randint(vocab, (global_batch, recipe.seq_len), generator=generator)
    if recipe.task == CAUSAL:
        return (tokens, tokens), tokens
    if recipe.task == SEQ2SEQ:
        # The source and its target: the model shifts the target right into its decoder's inputs,
        # and every row has as many target tokens, so the ranks' mean loss is the global one.
        target = torch.randint(vocab, (global_batch, recipe.target_len), generator=generator)
        return (tokens, target), target
    # Masked LM: the same number of masked positions in every row, so every slice of the batch
    # averages its loss over as many tokens as any other and the ranks' mean is the global one.
    masked = max(1, round(MASK_FRACTION * recipe.seq_len))
    order = torch.rand(global_batch, recipe.seq_len, generator=generator).argsort(dim=1)[:, :masked]
    labels = torch.full_like(tokens, -100)
    labels.scatter_(1, order, tokens.gather(1, order))
    mask_id = config.get("mask_token_id") or min(103, vocab - 1)  # BERT's [MASK] id where the vocabulary has it
    inputs = tokens.scatter(1, order, mask_id)
    return (inputs, labels), labels


def hf_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The model head's own loss over ``target``'s rows: the row-weighted losses ``HfTrainModule``
    returns (one per replica that computed a slice of them) added up and divided by the rows."""
    return output.sum() / target.shape[0]
