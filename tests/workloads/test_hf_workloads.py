"""``hf:`` workloads: Hugging Face models built from their configs, offline, seeded, in their own
input format, with their own loss; and what is refused."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from dpbench.workloads import SpecError, parameter_count, resolve_workload

transformers = pytest.importorskip("transformers", reason="hf: specs need the [hf] extra (transformers)")

GPT2 = "hf:gpt2@n_layer=2,n_embd=32,n_head=2,vocab_size=128,n_positions=32,seq_len=16"
BERT = "hf:bert@num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64,vocab_size=128,seq_len=20"
VIT = "hf:vit@num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64,image_size=16,patch_size=8"
LLAMA = (
    "hf:llama@num_hidden_layers=1,hidden_size=32,num_attention_heads=4,num_key_value_heads=2,"
    "intermediate_size=64,vocab_size=100,seq_len=8"
)
RESNET = "hf:resnet@embedding_size=8,hidden_sizes=8x16,depths=1x1,image_size=32"


@pytest.fixture(scope="module", autouse=True)
def imported():
    """transformers imports its modeling code on first use (seconds): once, outside the tests' calls."""
    for spec in (GPT2, BERT, VIT, LLAMA, RESNET):
        resolve_workload(spec).model()


def _params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_the_hugging_face_libraries_are_offline_once_an_hf_spec_resolves():
    resolve_workload(GPT2)
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"


def test_a_causal_lm_trains_on_token_ids_of_its_vocabulary_with_its_own_loss():
    workload = resolve_workload(GPT2)
    assert workload.params["class"] == "GPT2LMHeadModel" and workload.params["seq_len"] == 16
    assert workload.params["dropout_off"] == ["attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout"]
    assert not workload.stateful
    (tokens, labels), target = workload.batch(2, 6, 0)
    assert tokens.shape == (6, 16) and tokens.dtype == torch.long and int(tokens.max()) < 128
    assert torch.equal(labels, tokens) and torch.equal(target, tokens)
    torch.manual_seed(0)
    model = workload.model()
    loss = workload.loss(model(tokens, labels), target)
    # The head's own loss: the shifted next-token cross-entropy transformers computes.
    # The model returns its loss alone (HfTrainModule): the logits from its own two halves.
    logits = model.model.lm_head(model.model.transformer(input_ids=tokens).last_hidden_state)
    expected = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 128), tokens[:, 1:].reshape(-1))
    torch.testing.assert_close(loss, expected)
    assert parameter_count(workload) == sum(p.numel() for p in model.parameters())


def test_weights_are_drawn_from_the_seeded_rng_and_batches_from_the_seed():
    workload = resolve_workload(LLAMA)
    torch.manual_seed(5)
    first = _params(workload.model())
    torch.manual_seed(5)
    second = _params(workload.model())
    torch.manual_seed(6)
    other = _params(workload.model())
    assert all(torch.equal(first[n], second[n]) for n in first)
    assert not all(torch.equal(first[n], other[n]) for n in first)
    assert torch.equal(workload.batch(3, 4, 1)[1], workload.batch(3, 4, 1)[1])
    assert not torch.equal(workload.batch(3, 4, 1)[1], workload.batch(4, 4, 1)[1])


def test_a_masked_lm_masks_as_many_positions_in_every_row():
    workload = resolve_workload(BERT)
    (inputs, labels), _ = workload.batch(0, 5, 0)
    masked = labels != -100
    assert masked.sum(dim=1).tolist() == [3] * 5  # round(0.15 × 20) in every row
    assert (inputs[masked] == 103).all()
    torch.manual_seed(0)
    assert workload.loss(workload.model()(inputs, labels), labels).item() > 0


@pytest.mark.parametrize("spec, channels, size, stateful", [(VIT, 3, 16, False), (RESNET, 3, 32, True)])
def test_image_classifiers_train_on_images_of_their_size_and_channels(spec, channels, size, stateful):
    workload = resolve_workload(spec)
    (pixels, labels), target = workload.batch(0, 4, 0)
    assert pixels.shape == (4, channels, size, size) and labels.shape == (4,)
    assert workload.stateful is stateful  # ResNet's BatchNorm keeps per-replica statistics
    torch.manual_seed(0)
    assert workload.loss(workload.model()(pixels, labels), target).dim() == 0


def test_dropout_kept_by_an_override_is_recorded_and_makes_the_workload_stateful():
    workload = resolve_workload(GPT2 + ",resid_pdrop=0.1")
    assert "resid_pdrop" not in workload.params["dropout_off"] and workload.stateful
    assert workload.params["overrides"]["resid_pdrop"] == 0.1


def test_a_config_directory_is_read_and_overridden(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}))
    workload = resolve_workload(f"hf:{tmp_path}@vocab_size=64,seq_len=8")
    torch.manual_seed(0)
    model = workload.model().model
    assert (model.config.n_layer, model.config.n_embd, model.config.vocab_size) == (1, 16, 64)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("hf:gpt3", r"unknown hf model type 'gpt3' \(did you mean .*'gpt2'.*\?\); \d+ model types are supported"),
        ("hf:openai-community/gpt2", r"is no local directory; dpbench downloads nothing, so a hub id is refused"),
        ("hf:gpt2@n_layr=2", r"'n_layr' is no field of the gpt2 config \(did you mean 'n_layer'\?\); known fields"),
        ("hf:gpt2@n_embd=30,n_head=4", r"refused"),
        ("hf:gpt2@seq_len=2048", r"seq_len: expected at most the config's 1024 positions, found 2048"),
    ],
)
def test_bad_hf_specs_are_refused_in_one_line(spec, message):
    with pytest.raises(SpecError, match=message) as info:
        resolve_workload(spec)
    assert "\n" not in str(info.value)


def test_a_directory_without_config_json_is_refused(tmp_path):
    with pytest.raises(SpecError, match="expected a directory holding config.json, found none"):
        resolve_workload(f"hf:{tmp_path}")


def test_without_transformers_hf_specs_name_the_install_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    with pytest.raises(
        SpecError,
        match=r"hf: specs need transformers .*: install the hf extra: pip install -e '\.\[hf\]' in a dpbench checkout",
    ):
        resolve_workload("hf:gpt2")


GPT2_ONE_LAYER = "hf:gpt2@n_layer=1,n_embd=32,n_head=2,vocab_size=128,n_positions=32,seq_len=16"


def _two_sgd_steps(workload, forward, params):
    optimizer = torch.optim.SGD(params, lr=0.05)
    for step in range(2):
        optimizer.zero_grad()
        inputs, target = workload.batch(step, 8, 3)
        workload.loss(forward(*inputs), target).backward()
        optimizer.step()


def test_an_uneven_in_process_split_takes_the_step_single_takes():
    # DataParallel (dp; torch-dp gathers the same way) at 8 rows over 3 replicas (3, 3, 2): the
    # gathered losses are weighted by their rows, so the step is single's, not the mean of the means.
    from dpbench.parallel import DataParallel

    workload = resolve_workload(GPT2_ONE_LAYER)
    torch.manual_seed(3)
    single = workload.model()
    initial = _params(single)
    replicated = workload.model()
    replicated.load_state_dict(single.state_dict())
    _two_sgd_steps(workload, single, single.parameters())
    with DataParallel(replicated, ["cpu"] * 3, chunk_sizes=[3, 3, 2]) as dp:
        _two_sgd_steps(workload, dp, replicated.parameters())
    expected, got = _params(single), _params(replicated)
    moved = torch.cat([(expected[n] - initial[n]).flatten() for n in expected]).norm()
    error = torch.cat([(got[n] - expected[n]).flatten() for n in expected]).norm()
    assert float(error / moved) < 5e-6, f"the parameters differ from single's by {float(error / moved):.2e} of the step"


def test_a_slices_loss_is_its_own_mean_and_the_slices_weighted_by_rows_add_up_to_the_batchs():
    # manual and the multi-process strategies call the loss on each slice, then weight it by its rows.
    workload = resolve_workload(GPT2_ONE_LAYER)
    torch.manual_seed(3)
    model = workload.model()
    (tokens, labels), target = workload.batch(0, 8, 3)
    whole = workload.loss(model(tokens, labels), target)
    parts = [workload.loss(model(tokens[a:b], labels[a:b]), target[a:b]) for a, b in ((0, 3), (3, 6), (6, 8))]
    torch.testing.assert_close(sum(p * n / 8 for p, n in zip(parts, (3, 3, 2))), whole)
    with torch.no_grad():
        logits = model.model.lm_head(model.model.transformer(input_ids=tokens[6:]).last_hidden_state)
    expected = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 128), tokens[6:, 1:].reshape(-1))
    torch.testing.assert_close(parts[2], expected)
