"""Generation backends behind one interface: `backend.generate(prompts, SamplingParams(...)) -> list[list[str]]`.

`get_backend("transformers" | "vllm" | "openai", model, **kw)` builds one; see `fic.generation.base` for the
contract (raw prompts in, `n` continuations per prompt out, special tokens kept, cut before the first stop string).
"""

from fic.generation.base import BACKEND_NAMES, Backend, SamplingParams, cut_at_stop, derive_seed
from fic.generation.factory import get_backend
from fic.generation.hf import HFBackend
from fic.generation.openai_http import (
    OpenAICompletionsBackend,
    OpenAIEndpoint,
    OpenAIHTTPError,
    chat_complete,
    run_sync,
)
from fic.generation.vllm_backend import VLLMBackend

__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "HFBackend",
    "OpenAICompletionsBackend",
    "OpenAIEndpoint",
    "OpenAIHTTPError",
    "SamplingParams",
    "VLLMBackend",
    "chat_complete",
    "cut_at_stop",
    "derive_seed",
    "get_backend",
    "run_sync",
]
