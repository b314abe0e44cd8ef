"""Qwen3.5's linear-attention layers need `flash-linear-attention` and `causal-conv1d` on CUDA (the `gpu` extra), or
transformers runs them as step-by-step torch loops: loading such a model on a CUDA machine without them warns in one
line. CUDA and the packages are monkeypatched here; the model is a tiny Qwen3.5 built locally."""

from __future__ import annotations

import importlib.util
import logging
import tomllib

import pytest
import torch
from conftest import ROOT

from fic import modeling


def tiny_qwen3_5(path):
    from transformers import AutoModelForCausalLM
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

    config = Qwen3_5TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
                               linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8)  # fmt: skip
    assert "linear_attention" in config.layer_types and "full_attention" in config.layer_types
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    return str(path)


@pytest.fixture
def kernels(monkeypatch):
    """`set(installed, cuda)`: pretend CUDA is (not) there and only the `installed` kernel modules are."""
    real = importlib.util.find_spec

    def set_(installed: set[str], cuda: bool = True) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        modules = set(modeling.LINEAR_ATTENTION_KERNELS.values()) | {"tilelang"}
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: (object() if name in installed else None) if name in modules
                            else real(name, *a))  # fmt: skip

    return set_


def test_loading_qwen3_5_on_cuda_without_the_kernels_warns_in_one_line(tmp_path, kernels, caplog):
    path = tiny_qwen3_5(tmp_path / "qwen3_5")
    kernels(installed={"fla"})
    with caplog.at_level(logging.WARNING, logger="fic.modeling"):
        modeling.load_model(path, dtype="float32")
    lines = [r.getMessage() for r in caplog.records if r.name == "fic.modeling"]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert "causal-conv1d not installed" in lines[0] and "flash-linear-attention" not in lines[0]
    assert "pip install -e '.[gpu]'" in lines[0]


def test_no_warning_without_cuda_with_the_kernels_or_without_linear_attention(tmp_path, kernels):
    from transformers import AutoConfig

    qwen = AutoConfig.from_pretrained(tiny_qwen3_5(tmp_path / "qwen3_5"))
    kernels(installed=set(), cuda=True)
    assert modeling.missing_kernels(qwen) == ["flash-linear-attention", "causal-conv1d"]
    kernels(installed=set(), cuda=False)
    assert modeling.missing_kernels(qwen) == []
    kernels(installed={"fla", "causal_conv1d"}, cuda=True)
    assert modeling.missing_kernels(qwen) == []
    kernels(installed=set(), cuda=True)
    from fic.tiny import tiny_model

    assert modeling.missing_kernels(AutoConfig.from_pretrained(tiny_model("chatml"))) == []  # no linear attention


def test_the_gpu_extra_names_the_kernels_the_warning_asks_for():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = {req.split(">")[0].split("=")[0].split("<")[0].strip() for req in extras["gpu"]}
    assert named == set(modeling.LINEAR_ATTENTION_KERNELS)


@pytest.mark.parametrize(
    ("capability", "triton", "tilelang", "refused"),
    [((9, 0), "3.6.0", False, True), ((9, 0), "3.7.1", False, False), ((9, 0), "3.6.0", True, False),
     ((8, 0), "3.6.0", False, False), ((9, 0), "3.3.1", False, False)],
)  # fmt: skip
def test_fla_backward_on_hopper_with_an_old_triton_is_named_at_load(tmp_path, kernels, monkeypatch, caplog,
                                                                     capability, triton, tilelang, refused):  # fmt: skip
    """fla 0.6.0 refuses Qwen3.5's backward on an H100 with Triton 3.6.0 (seen on a lent H100): say so at load."""
    import importlib.metadata

    path = tiny_qwen3_5(tmp_path / "qwen3_5")
    kernels(installed={"fla", "causal_conv1d"} | ({"tilelang"} if tilelang else set()))
    real_version = importlib.metadata.version
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: triton if name == "triton" else real_version(name))
    with caplog.at_level(logging.WARNING, logger="fic.modeling"):
        modeling.load_model(path, dtype="float32")
    lines = [r.getMessage() for r in caplog.records if r.name == "fic.modeling"]
    if refused:
        assert len(lines) == 1 and "tilelang" in lines[0] and f"Triton {triton}" in lines[0], lines
    else:
        assert lines == []
