"""The training weights into TRL's vLLM engine, where TRL's own sync does not hold.

TRL's `VLLMGeneration` pushes `model.named_parameters()` to vLLM after stripping wrapper prefixes. Two cases fail:

* **A text-only policy from a multimodal checkpoint** (Qwen3.5: fic loads `AutoModelForCausalLM`, parameters
  `model.layers.*`). vLLM builds the checkpoint's own architecture (`Qwen3_5ForConditionalGeneration`) from
  `model.name_or_path`, which reads the checkpoint's names, `model.language_model.*`; the first sync raises on
  `model.layers.0...` (TRL issue 5269). `served_name` adds the prefix when the served config has a `text_config`
  and the trained one does not.
* **vLLM's CPU backend** prepacks every linear weight and drops the original Parameter, so TRL's in-place
  `model.load_weights` fails (`'Parameter' object has no attribute 'weight_loader'`). There the sync goes through
  vLLM's `reload_weights` (layer by layer back to checkpoint format, loaded, processed again); tied output
  embeddings are pushed under their own name too, since that path reloads `lm_head` as a layer of its own.

`fit_vllm_sync(trainer)` installs both on a trainer's `vllm_generation` (GRPO's and VASD's); a trainer without
vLLM is left alone. On GPU, TRL's per-parameter `load_weights` stays the path, with the names fixed.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Iterator

import torch

logger = logging.getLogger(__name__)

LANGUAGE_MODEL_PREFIX = "model.language_model."


def needs_language_model_prefix(trained_config, served_config) -> bool:
    """Whether vLLM serves a multimodal wrapper (`text_config` in its config) of a text-only trained model."""
    served_text = getattr(served_config, "text_config", None)
    return served_text is not None and served_text is not served_config and not hasattr(trained_config, "text_config")


def served_name(name: str, add_prefix: bool) -> str:
    """A trained parameter's name as the served checkpoint spells it (`model.x` -> `model.language_model.x`)."""
    if add_prefix and name.startswith("model.") and not name.startswith(LANGUAGE_MODEL_PREFIX):
        return LANGUAGE_MODEL_PREFIX + name.removeprefix("model.")
    return name


def with_tied_output(named: Iterator[tuple[str, torch.Tensor]], tied: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """`named` plus `lm_head.weight` right after the input embedding when the two are tied (while it is gathered)."""
    for name, tensor in named:
        yield name, tensor
        if tied and name.endswith("embed_tokens.weight"):
            yield "lm_head.weight", tensor


def model_runner(llm):
    """The colocated engine's model runner (vLLM's in-process executor; TRL reaches the same object)."""
    worker = llm.llm_engine.model_executor.driver_worker
    return getattr(worker, "worker", worker).model_runner


def _served_config(generation, model):
    llm = getattr(generation, "llm", None)
    if llm is not None:
        return llm.llm_engine.model_config.hf_config
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model.name_or_path)
    except (OSError, ValueError) as err:  # server mode, checkpoint not readable here: names as TRL sends them
        logger.warning("vLLM sync: cannot read the served config of %r (%s); names sent unchanged", model.name_or_path,
                       err)  # fmt: skip
        return None


def fit_vllm_sync(trainer) -> None:
    """Fix the names (and, on a CPU engine, the load) of `trainer.vllm_generation`'s weight sync; no-op without vLLM."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None:
        return
    model = generation.model
    config = getattr(model, "config", None)
    if config is None and hasattr(model, "get_base_model"):
        config = model.get_base_model().config
    add_prefix = needs_language_model_prefix(config, _served_config(generation, model))
    if add_prefix:
        logger.info(
            "vLLM sync: text-only parameters sent as %s* (the served checkpoint's names)", LANGUAGE_MODEL_PREFIX
        )
    fix_name = generation._fix_param_name_to_vllm

    def fixed_name(self, name, extra_prefixes=None):
        return served_name(fix_name(name, extra_prefixes), add_prefix)

    generation._fix_param_name_to_vllm = types.MethodType(fixed_name, generation)
    llm = getattr(generation, "llm", None)
    if (
        generation.mode == "colocate"
        and llm is not None
        and llm.llm_engine.vllm_config.device_config.device_type == "cpu"
    ):
        tied = bool(getattr(config, "tie_word_embeddings", False))
        generation.sync_weights = types.MethodType(lambda self: _reload_sync(self, tied), generation)


def _reload_sync(generation, tied: bool) -> None:
    """`VLLMGeneration.sync_weights` for a colocated CPU engine: every parameter through vLLM's `reload_weights`."""
    named = with_tied_output(generation._iter_named_params(), tied)
    model_runner(generation.llm).reload_weights(weights_iterator=named, is_checkpoint_format=True)
    generation.llm.reset_prefix_cache()
