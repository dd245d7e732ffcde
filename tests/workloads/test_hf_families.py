"""``hf:`` model types beyond a fixed list: every type ``transformers`` maps to a causal-LM,
masked-LM, seq2seq-LM or image-classification head through its auto classes, each trained on its
own kind of batch with its own loss; config properties (``num_labels``) as overrides.

Reference: each loss is recomputed here from the logits of the same model built by
``transformers`` directly (same seed, same config), with the shift or mask its task implies."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from dpbench.workloads import SpecError, resolve_workload

transformers = pytest.importorskip("transformers", reason="hf: specs need the [hf] extra (transformers)")
modeling_auto = pytest.importorskip("transformers.models.auto.modeling_auto")

from dpbench.workloads.hf import supported_types  # noqa: E402 - after the importorskip

VOCAB = 128
TEXT = f"num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64,vocab_size={VOCAB},seq_len=8"
T5 = (
    f"hf:t5@num_layers=1,num_decoder_layers=1,d_model=32,d_ff=64,num_heads=2,d_kv=16,vocab_size={VOCAB},"
    "seq_len=8,target_len=6"
)
BART = (
    "hf:bart@encoder_layers=1,decoder_layers=1,d_model=32,encoder_ffn_dim=64,decoder_ffn_dim=64,"
    f"encoder_attention_heads=2,decoder_attention_heads=2,vocab_size={VOCAB},max_position_embeddings=32,seq_len=8"
)
# Token ids a tiny vocabulary holds: the defaults (phi3's 32000, olmo2's 100277) lie outside it.
GEMMA2 = f"hf:gemma2@{TEXT},num_key_value_heads=1,head_dim=16"
PHI3 = f"hf:phi3@{TEXT},num_key_value_heads=1,pad_token_id=0,bos_token_id=1,eos_token_id=1"
OLMO2 = f"hf:olmo2@{TEXT},num_key_value_heads=1,pad_token_id=0,eos_token_id=1"
DEBERTA = f"hf:deberta-v2@{TEXT}"
CONVNEXT = "hf:convnext@hidden_sizes=8x16,depths=1x1,num_stages=2,image_size=32,num_labels=5"
VIT = "hf:vit@num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64,image_size=16,patch_size=8"
FAMILIES = {
    T5: ("T5ForConditionalGeneration", "seq2seq-lm"),
    BART: ("BartForConditionalGeneration", "seq2seq-lm"),
    GEMMA2: ("Gemma2ForCausalLM", "causal-lm"),
    PHI3: ("Phi3ForCausalLM", "causal-lm"),
    OLMO2: ("Olmo2ForCausalLM", "causal-lm"),
    DEBERTA: ("DebertaV2ForMaskedLM", "masked-lm"),
    CONVNEXT: ("ConvNextForImageClassification", "image-classification"),
}
# The eight types dpbench trained from a fixed table before it read the auto classes: the same heads.
BEFORE = {
    "gpt2": ("GPT2LMHeadModel", "causal-lm"),
    "llama": ("LlamaForCausalLM", "causal-lm"),
    "mistral": ("MistralForCausalLM", "causal-lm"),
    "qwen2": ("Qwen2ForCausalLM", "causal-lm"),
    "qwen3": ("Qwen3ForCausalLM", "causal-lm"),
    "bert": ("BertForMaskedLM", "masked-lm"),
    "vit": ("ViTForImageClassification", "image-classification"),
    "resnet": ("ResNetForImageClassification", "image-classification"),
}


def _available(spec):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    model_type = spec[3:].partition("@")[0]
    if model_type not in CONFIG_MAPPING_NAMES:
        pytest.skip(f"transformers {transformers.__version__} has no {model_type} model type")


def _reference_loss(reference, task, inputs, target):
    """The task's loss from the logits of ``reference`` (a plain transformers model)."""
    if task == "image-classification":
        return F.cross_entropy(reference(pixel_values=inputs[0]).logits, target)
    if task == "seq2seq-lm":
        # The decoder reads the target shifted right, starting from the config's start token.
        start = torch.full_like(target[:, :1], reference.config.decoder_start_token_id)
        logits = reference(input_ids=inputs[0], decoder_input_ids=torch.cat([start, target[:, :-1]], dim=1)).logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    logits = reference(input_ids=inputs[0]).logits
    if task == "causal-lm":
        logits, target = logits[:, :-1], target[:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)


@pytest.mark.parametrize("spec", list(FAMILIES), ids=lambda s: s[3:].partition("@")[0])
def test_a_tiny_model_of_each_family_trains_a_step_with_its_own_loss(spec):
    _available(spec)
    workload = resolve_workload(spec)
    class_name, task = FAMILIES[spec]
    assert (workload.params["class"], workload.params["task"]) == (class_name, task)
    assert not workload.stateful
    inputs, target = workload.batch(0, 4, 0)
    torch.manual_seed(0)
    model = workload.model()
    torch.manual_seed(0)
    reference = type(model.model)(model.model.config).train()
    loss = workload.loss(model(*inputs), target)
    torch.testing.assert_close(loss, _reference_loss(reference, task, inputs, target))
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert sum(g is not None and bool(g.abs().sum() > 0) for g in grads) > len(grads) // 2
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= 0.1 * p.grad
    assert workload.loss(model(*inputs), target) < loss  # one SGD step lowers the loss on its own batch


def test_an_encoder_decoder_trains_on_seeded_source_and_target_batches():
    workload = resolve_workload(T5)
    assert workload.params["seq_len"] == 8 and workload.params["target_len"] == 6
    (source, labels), target = workload.batch(2, 4, 1)
    assert source.shape == (4, 8) and labels.shape == (4, 6) and torch.equal(labels, target)
    assert int(source.max()) < VOCAB and int(labels.max()) < VOCAB
    again = workload.batch(2, 4, 1)
    assert torch.equal(again[0][0], source) and torch.equal(again[1], target)
    assert not torch.equal(workload.batch(3, 4, 1)[1], target)
    # T5's config names no decoder start token: it starts from the pad token, as its released configs do.
    assert workload.model.args[0].config["decoder_start_token_id"] == 0
    assert resolve_workload(BART).params["target_len"] == 8  # the source's length unless given


def test_layer_drop_and_stochastic_depth_are_switched_off_with_dropout():
    assert {"encoder_layerdrop", "decoder_layerdrop", "dropout"} <= set(resolve_workload(BART).params["dropout_off"])
    assert "drop_path_rate" in resolve_workload(CONVNEXT).params["dropout_off"]


def test_the_types_are_the_auto_class_mappings_and_the_eight_keep_their_heads():
    supported = supported_types()
    for mapping in (
        "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
        "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
        "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
        "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    ):
        assert set(getattr(modeling_auto, mapping)) <= set(supported), mapping
    assert {t: supported[t] for t in BEFORE} == BEFORE
    # A type several mappings name: an encoder-decoder's seq2seq head, an encoder's masked-LM head.
    assert supported["bart"][1] == "seq2seq-lm" and supported["bert"][1] == "masked-lm"


def test_a_config_property_is_an_override():
    workload = resolve_workload(VIT + ",num_labels=10")
    assert workload.params["overrides"]["num_labels"] == 10
    torch.manual_seed(0)
    model = workload.model().model
    assert model.config.num_labels == 10 and model.classifier.out_features == 10
    labels = torch.cat([workload.batch(step, 64, 0)[1] for step in range(4)])
    assert int(labels.max()) == 9  # labels of all ten classes


def test_a_typo_of_a_config_property_names_it():
    with pytest.raises(SpecError, match=r"no field of the vit config \(did you mean 'num_labels'"):
        resolve_workload(VIT + ",num_label=10")


def test_an_unknown_type_names_close_ones_and_how_many_are_supported():
    with pytest.raises(SpecError) as info:
        resolve_workload("hf:gemma2x")
    message = str(info.value)
    assert "unknown hf model type 'gemma2x' (did you mean 'gemma2'" in message
    assert f"{len(supported_types())} model types are supported" in message and "\n" not in message
    assert "qwen3" not in message  # the long list is not printed


def test_a_config_directory_of_a_new_type_is_read(tmp_path):
    import json

    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "t5", "num_layers": 1, "d_model": 16, "d_ff": 32, "num_heads": 2, "d_kv": 8})
    )
    workload = resolve_workload(f"hf:{tmp_path}@vocab_size=64,seq_len=4")
    assert workload.params["task"] == "seq2seq-lm" and workload.params["target_len"] == 4


def test_a_config_directory_of_an_unsupported_type_is_refused_with_close_names(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "lama"}')
    with pytest.raises(SpecError, match=r"model_type 'lama' is not supported \(did you mean 'llama'"):
        resolve_workload(f"hf:{tmp_path}")


def test_the_hf_specs_the_docs_run_resolve():
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    specs = {s for page in docs.rglob("*.md") for s in re.findall(r"--workload (hf:\S+)", page.read_text())}
    assert any(s.startswith("hf:t5@") for s in specs) and any("num_labels=" in s for s in specs)
    for spec in sorted(specs):
        resolve_workload(spec)


def test_a_multimodal_config_draws_token_ids_from_its_text_config():
    from transformers import AutoConfig

    text = AutoConfig.for_model("fuyu").get_text_config()
    assert "vocab_size" not in AutoConfig.for_model("fuyu").to_dict()  # nested in text_config only
    workload = resolve_workload("hf:fuyu@seq_len=8")
    assert workload.params["task"] == "causal-lm" and workload.model.args[0].vocab_size == text.vocab_size
    (tokens, labels), _ = workload.batch(0, 64, 0)
    assert tokens.shape == (64, 8) and int(tokens.max()) > 30_000  # beyond any tiny default: the text vocabulary


def test_a_config_json_its_class_refuses_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": 30, "num_attention_heads": 4}')
    with pytest.raises(SpecError, match=r"the llama config cannot be built: \w+") as info:
        resolve_workload(f"hf:{tmp_path}")
    assert "\n" not in str(info.value)


def test_a_smaller_vocabulary_moves_the_special_ids_inside_it_without_a_warning(caplog):
    import logging

    from dpbench.workloads import resolve_workload

    with caplog.at_level(logging.WARNING):
        workload = resolve_workload("hf:gpt2@n_layer=1,n_embd=32,n_head=2,vocab_size=512")
    model = workload.model()
    config = getattr(model, "config", None) or next(m.config for m in model.modules() if hasattr(m, "config"))
    assert config.bos_token_id == config.eos_token_id == 511 and config.vocab_size == 512
    assert not [r for r in caplog.records if "token_id" in r.getMessage()]
