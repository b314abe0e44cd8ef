"""The weight sync into TRL's vLLM (`fic.trainers.vllm_sync`) without a vLLM: names against real checkpoints, the
CPU reload path against a recording engine. The sync on a real engine is `tests/test_vllm.py`."""

from __future__ import annotations

import types

import pytest
import torch
from safetensors import safe_open

from fic.trainers.vllm_sync import fit_vllm_sync, needs_language_model_prefix, served_name, with_tied_output


@pytest.fixture(scope="module")
def tiny_qwen3_5(tmp_path_factory):
    """A tiny Qwen3.5 checkpoint as the hub ships Qwen3.5-2B: the multimodal `Qwen3_5ForConditionalGeneration`."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    text = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16, linear_key_head_dim=8, linear_value_head_dim=8,
                linear_num_key_heads=2, linear_num_value_heads=2, max_position_embeddings=128,
                layer_types=["linear_attention", "full_attention"])  # fmt: skip
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                  num_position_embeddings=16)  # fmt: skip
    config = Qwen3_5Config(text_config=text, vision_config=vision, image_token_id=250, video_token_id=251,
                           vision_start_token_id=252, vision_end_token_id=253)  # fmt: skip
    path = tmp_path_factory.mktemp("qwen3_5")
    torch.manual_seed(0)
    Qwen3_5ForConditionalGeneration(config).save_pretrained(path)
    return path


def checkpoint_names(path) -> set[str]:
    names = set()
    for shard in path.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            names |= set(f.keys())
    return names


def test_text_only_qwen3_5_names_are_the_served_checkpoints(tiny_qwen3_5):
    """fic trains Qwen3.5 text-only (`model.layers.*`); vLLM serves the hub checkpoint's architecture, which loads the
    checkpoint's names (`model.language_model.*`). Every synced name must be one of them, and every language-model
    weight of the checkpoint must be synced."""
    from transformers import AutoConfig, AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(tiny_qwen3_5)
    served = AutoConfig.from_pretrained(tiny_qwen3_5)
    assert type(trained).__name__ == "Qwen3_5ForCausalLM" and not hasattr(trained.config, "text_config")
    add = needs_language_model_prefix(trained.config, served)
    assert add
    synced = {served_name(name, add) for name, _ in trained.named_parameters()}
    names = checkpoint_names(tiny_qwen3_5)
    assert synced - names == set()
    language = {n for n in names if n.startswith("model.language_model.") or n.startswith("lm_head.")}
    assert language - synced == set()
    unchanged = {name for name, _ in trained.named_parameters()}
    assert unchanged - names  # TRL's names (no mapping) miss the checkpoint: the failure this fixes


def test_names_left_alone_where_the_served_model_is_the_trained_one(tiny_qwen3_5):
    from transformers import AutoConfig

    served = AutoConfig.from_pretrained(tiny_qwen3_5)
    assert not needs_language_model_prefix(served, served)  # the multimodal model trained as a whole
    assert not needs_language_model_prefix(served.text_config, served.text_config)  # a text-only checkpoint
    assert served_name("model.layers.0.mlp.up_proj.weight", False) == "model.layers.0.mlp.up_proj.weight"
    assert served_name("model.language_model.norm.weight", True) == "model.language_model.norm.weight"
    assert served_name("lm_head.weight", True) == "lm_head.weight"


def test_tied_output_follows_the_embedding():
    named = [("model.embed_tokens.weight", "E"), ("model.norm.weight", "N")]
    assert list(with_tied_output(iter(named), True)) == [named[0], ("lm_head.weight", "E"), named[1]]
    assert list(with_tied_output(iter(named), False)) == named


class RecordingRunner:
    def __init__(self):
        self.loaded = None

    def reload_weights(self, weights_iterator=None, is_checkpoint_format=True):
        self.loaded = [(name, tensor) for name, tensor in weights_iterator]


def fake_generation(device_type: str, model, served_config):
    """TRL's `VLLMGeneration` as far as the sync reads it, over an engine that records what it is given."""
    runner = RecordingRunner()
    engine = types.SimpleNamespace(
        model_config=types.SimpleNamespace(hf_config=served_config),
        vllm_config=types.SimpleNamespace(device_config=types.SimpleNamespace(device_type=device_type)),
        model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(model_runner=runner)),
    )
    llm = types.SimpleNamespace(llm_engine=engine, reset_prefix_cache=lambda: None)

    class Generation:
        mode = "colocate"

        def __init__(self):
            self.model, self.llm, self.runner = model, llm, runner

        def _fix_param_name_to_vllm(self, name, extra_prefixes=None):
            return name.replace("_checkpoint_wrapped_module.", "")

        def _iter_named_params(self):
            for name, param in self.model.named_parameters():
                yield self._fix_param_name_to_vllm(name), param.data

        def sync_weights(self):
            raise AttributeError("'Parameter' object has no attribute 'weight_loader'")  # TRL's path on vLLM's CPU

    return Generation()


def test_cpu_engine_syncs_every_weight_by_reload_with_served_names(tiny_qwen3_5):
    from transformers import AutoConfig, AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(tiny_qwen3_5)
    generation = fake_generation("cpu", trained, AutoConfig.from_pretrained(tiny_qwen3_5))
    fit_vllm_sync(types.SimpleNamespace(vllm_generation=generation))
    generation.sync_weights()
    loaded = dict(generation.runner.loaded)
    assert set(loaded) == {served_name(n, True) for n, _ in trained.named_parameters()}
    assert torch.equal(loaded["model.language_model.norm.weight"], trained.model.norm.weight)


def test_gpu_engine_keeps_trls_load_with_fixed_names(tiny_qwen3_5):
    from transformers import AutoConfig, AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(tiny_qwen3_5)
    generation = fake_generation("cuda", trained, AutoConfig.from_pretrained(tiny_qwen3_5))
    fit_vllm_sync(types.SimpleNamespace(vllm_generation=generation))
    with pytest.raises(AttributeError, match="weight_loader"):  # TRL's own sync stays in place on GPU
        generation.sync_weights()
    assert generation._fix_param_name_to_vllm("model._checkpoint_wrapped_module.layers.0.x") == (
        "model.language_model.layers.0.x"
    )
    fit_vllm_sync(types.SimpleNamespace())  # a trainer without vLLM is left alone
