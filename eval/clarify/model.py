"""A chat model for the clarification evaluations: messages in, replies out, through `fic.generation`.

Conversations are rendered with the model's own chat template (`fic.chat.render(..., add_generation_prompt=True)`)
and generation stops at the template's turn-end strings, so one call returns exactly one assistant turn.
"""

from __future__ import annotations

import functools
import logging

from fic.chat import render, turn_end_strings

logger = logging.getLogger(__name__)


class ChatModel:
    """
    Wrap a generation backend and a tokenizer.

    Args:
        model: a local path, hub id or `tiny:FAMILY` (loaded by the backend), used for the tokenizer too; with the
            `openai` backend, the name the server serves (the tokenizer is loaded from that name resolved locally).
        backend: `fic.generation` backend name (`transformers`, `vllm`, `openai`).
        max_new_tokens: default cap per reply.
        **backend_kwargs: passed to `fic.generation.get_backend`.
    """

    def __init__(self, model: str, backend: str = "transformers", max_new_tokens: int = 64, **backend_kwargs):
        # fic.generation (torch) and fic.modeling (trl): the scripted policies and users never build a model
        from fic.generation import get_backend
        from fic.modeling import load_tokenizer, resolve_model_name

        self.name = resolve_model_name(str(model))  # also accepts tiny:FAMILY
        tokenizer = None
        if backend == "transformers":  # a clear ModelLoadError for a wrong path, before the weights are read
            tokenizer = backend_kwargs.pop("tokenizer", None) or load_tokenizer(self.name)
            backend_kwargs["tokenizer"] = tokenizer
        # A server is asked for the model by the name it serves (`--model smollm2`), never by a local folder.
        self.backend = get_backend(backend, model=str(model) if backend == "openai" else self.name, **backend_kwargs)
        self.tokenizer = tokenizer or getattr(self.backend, "tokenizer", None) or load_tokenizer(self.name)
        self.stop = turn_end_strings(self.tokenizer, role="assistant")
        self.max_new_tokens = max_new_tokens
        # transformers: replies are a pure function of (prompts, sampling params), every row drawing from its own
        # generator seeded by (seed, row, sample), so a repeated call (an episode's first turn under each user
        # profile) is answered from memory. Other backends (sampling servers) are always asked.
        self._memo: dict[tuple, list[list[str]]] | None = {} if backend == "transformers" else None

    def chat(
        self,
        conversations: list[list[dict]],
        n: int = 1,
        temperature: float = 0.0,
        seed: int = 0,
        max_new_tokens: int | None = None,
    ) -> list[list[str]]:
        """`n` assistant replies (stripped) for each conversation."""
        from fic.generation import SamplingParams

        prompts = [render(self.tokenizer, conv, add_generation_prompt=True) for conv in conversations]
        params = SamplingParams(
            n=n,
            temperature=temperature,
            max_new_tokens=max_new_tokens or self.max_new_tokens,
            stop=self.stop,
            seed=seed,
        )
        memo_key = (tuple(prompts), n, temperature, seed, params.max_new_tokens)
        if self._memo is not None and memo_key in self._memo:
            return [list(texts) for texts in self._memo[memo_key]]
        outs = self.backend.generate(prompts, params, keep_special_tokens=False)
        replies = [[text.strip() for text in texts] for texts in outs]
        if self._memo is not None:
            self._memo[memo_key] = replies
        return [list(texts) for texts in replies]


@functools.lru_cache(maxsize=4)
def load_chat_model(model: str, backend: str = "transformers", base_url: str | None = None,
                    batch_size: int | None = None, max_batch_tokens: int | None = None) -> ChatModel:  # fmt: skip
    """A `ChatModel`, loaded once per process for each (model, backend, base_url, batch sizes)."""
    kwargs = {"base_url": base_url} if base_url else {}
    if backend == "transformers":
        kwargs.update({k: v for k, v in (("batch_size", batch_size), ("max_batch_tokens", max_batch_tokens)) if v})
    return ChatModel(model, backend=backend, **kwargs)
