"""`get_backend(name, model, **kw)`: the one place that knows every generation backend (each imports only
`fic.generation.base`, so the backends and their contract form no circle)."""

from __future__ import annotations

from fic.generation.base import BACKEND_NAMES, Backend
from fic.generation.hf import HFBackend
from fic.generation.openai_http import OpenAICompletionsBackend
from fic.generation.vllm_backend import VLLMBackend
from fic.modeling import resolve_model_name


def get_backend(name: str, model=None, **kw) -> Backend:
    """
    Build a backend by name.

    Args:
        name: `"transformers"` (CPU/GPU, the default elsewhere), `"vllm"` (GPU, needs `pip install 'fic[vllm]'`) or
            `"openai"` (an OpenAI-compatible `/v1/completions` server; pass `base_url=`).
        model: a hub id or local path, or an offline name (`tiny:FAMILY`, `smollm2`, a `.gguf` file; see
            `fic.modeling.resolve_model_name`); for `"transformers"` also an already loaded model (pass `tokenizer=`
            then); for `"openai"` the model name the server expects.
        **kw: passed to the backend's constructor.
    """
    if name in ("transformers", "vllm") and isinstance(model, str):
        model = resolve_model_name(model)  # tiny:FAMILY, smollm2, a .gguf file -> a local folder
    if name == "transformers":
        if model is None:
            raise ValueError("get_backend('transformers') needs model= (a hub id, a local path or a loaded model).")
        return HFBackend(model, **kw)
    if name == "vllm":
        if model is None:
            raise ValueError("get_backend('vllm') needs model= (a hub id or a local path).")
        return VLLMBackend(model, **kw)
    if name == "openai":
        if "base_url" not in kw:
            raise ValueError("get_backend('openai') needs base_url= (e.g. 'http://localhost:8000/v1').")
        if model is None:
            raise ValueError("get_backend('openai') needs model= (the model name the server serves).")
        return OpenAICompletionsBackend(model=model, **kw)
    raise ValueError(f"Unknown generation backend {name!r}; valid names: {', '.join(BACKEND_NAMES)}.")
