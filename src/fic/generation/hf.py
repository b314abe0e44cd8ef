"""transformers backend: a small decode loop whose `n` samples per prompt share one prefill.

`model.generate(num_return_sequences=n)` copies each prompt `n` times *before* the prefill, so it pays for the
prompt `n` times. Here a batch of prompts is left-padded and run through the model once (`use_cache=True`); the
KV cache, attention mask and last-position logits are then repeated `n` times along the batch (the cache's own
`reorder_cache`, which every cache layer type implements) and all `batch_size * n` rows decode together, one token
per step. Finished rows (end-of-sequence token, a stop string, or `max_new_tokens`) are dropped from the cache so
the remaining rows decode with less work. The prompt's compute is shared, its KV memory is not: the cache holds `n`
copies (vLLM's paged cache shares the blocks too). Greedy decoding runs one row per prompt and copies the text.
The loop itself is `fic.generation.decode`, which VASD's training-time rollouts share.

Sampling. `temperature == 0` is greedy (argmax, deterministic, equal to `model.generate(do_sample=False)`).
Otherwise tokens are drawn from `softmax(logits / T)` restricted to the top-p nucleus by inverse-CDF sampling: each
row draws one uniform number per step from its own CPU `torch.Generator`, seeded by `derive_seed(seed, i, j)` for
sample `j` of prompt `i` (its index in the `prompts` list). A sample therefore does not depend on `batch_size`, on
the other prompts in the call, or on `n` (up to the float noise that padding adds to the logits). Only the
SamplingParams fields apply: no top-k, no repetition penalty, whatever the model's generation_config says.

Text. Prompts are tokenized with `add_special_tokens=False` (the rendered template already holds BOS when it writes
one). A continuation is decoded with special tokens kept (unless `keep_special_tokens=False`), without the end-of-
sequence token that ended it, and cut before the first stop string.
"""

from __future__ import annotations

import logging
import os

import torch
from safetensors import SafetensorError
from tqdm.auto import tqdm

from fic.errors import model_load_error
from fic.generation.base import Backend, SamplingParams, cut_at_stop, derive_seed
from fic.generation.decode import decode, model_kwargs

logger = logging.getLogger(__name__)

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def _resolve_dtype(dtype):
    if dtype is None or isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"HFBackend(dtype={dtype!r}) is not a known dtype; use one of {sorted(_DTYPES)} or 'auto'.")
    return _DTYPES[dtype]


def _eos_ids(model, tokenizer) -> set[int]:
    ids: set[int] = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, tokenizer.eos_token_id):
        if value is None:
            continue
        ids.update(value if isinstance(value, (list, tuple)) else [value])
    return {int(i) for i in ids}


class HFBackend(Backend):
    """
    Generate with a transformers causal LM (CPU or GPU).

    Args:
        model_or_path: a hub id or local path, or an already loaded model (e.g. a PEFT model during training; its
            train/eval mode is restored after each call).
        tokenizer: the tokenizer; required with a loaded model, loaded from the path otherwise.
        device: where to put a model loaded from a path (default: cuda when available, else cpu); a loaded model is
            moved only when `device` is given.
        dtype: dtype for a model loaded from a path (`"bfloat16"`, `torch.float16`, `"auto"`, ...).
        batch_size: prompts per prefill; the decode batch holds `batch_size * n` rows.
        max_batch_tokens: at most this many padded prompt tokens per batch (prompts x the longest prompt); long
            prompts then run in smaller batches (default: no cap). Prompts are batched longest first either way.
    """

    name = "transformers"

    def __init__(self, model_or_path, tokenizer=None, device=None, dtype=None, batch_size: int = 8,
                 max_batch_tokens: int | None = None):  # fmt: skip
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"HFBackend(batch_size={batch_size!r}) must be an integer >= 1.")
        if max_batch_tokens is not None and (not isinstance(max_batch_tokens, int) or max_batch_tokens < 1):
            raise ValueError(f"HFBackend(max_batch_tokens={max_batch_tokens!r}) must be an integer >= 1 or None.")
        self.batch_size, self.max_batch_tokens = batch_size, max_batch_tokens
        if isinstance(model_or_path, (str, os.PathLike)):
            # transformers: heavy (seconds), only loading a model by name needs it
            from transformers import AutoModelForCausalLM, AutoTokenizer

            path = str(model_or_path)
            kwargs = {} if dtype is None else {"dtype": _resolve_dtype(dtype)}
            what = "tokenizer"
            try:  # not cached and offline, or damaged files: one error naming the model and the fix
                self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(path)
                what = "model"
                self.model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
            except (OSError, ValueError, SafetensorError) as err:
                raise model_load_error(path, what, err) from None
            self.model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
            self.model.eval()
        else:
            if tokenizer is None:
                raise ValueError("HFBackend got a loaded model but tokenizer=None; pass its tokenizer=.")
            self.model, self.tokenizer = model_or_path, tokenizer
            if device is not None or dtype is not None:
                self.model.to(**{k: v for k, v in (("device", device), ("dtype", _resolve_dtype(dtype))) if v})
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        # Padding sits under a zero attention mask, so any id works; eos (or 0) when the tokenizer has no pad.
        self.pad_id = pad if pad is not None else (min(self.eos_ids) if self.eos_ids else 0)
        self._call_kwargs = model_kwargs(self.model)

    @property
    def device(self) -> torch.device:
        device = getattr(self.model, "device", None)
        return torch.device(device) if device is not None else next(self.model.parameters()).device

    def max_context(self) -> int | None:
        return getattr(getattr(self.model, "config", None), "max_position_embeddings", None)

    def _generate(self, prompts, params, progress, keep_special_tokens) -> list[list[str]]:
        token_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        empty = [i for i, ids in enumerate(token_ids) if not ids]
        if empty:
            raise ValueError(f"generate(prompts=...): prompt {empty[0]} is empty; every prompt needs >= 1 token.")
        was_training = self.model.training
        self.model.eval()
        results: list[list[str]] = [[] for _ in prompts]
        try:
            with torch.inference_mode(), tqdm(total=len(prompts), desc="generate", disable=not progress) as bar:
                for indices in self._batches(token_ids):
                    chunk = [token_ids[i] for i in indices]
                    for i, samples in zip(indices, self._generate_chunk(chunk, indices, params)):
                        results[i] = [self._decode(s, params.stop, keep_special_tokens) for s in samples]
                    bar.update(len(chunk))
        finally:
            if was_training:
                self.model.train()
        return results

    def _decode(self, ids: list[int], stop: list[str], keep_special_tokens: bool) -> str:
        text = self.tokenizer.decode(
            ids, skip_special_tokens=not keep_special_tokens, clean_up_tokenization_spaces=False
        )
        return cut_at_stop(text, stop)

    def _batches(self, token_ids: list[list[int]]) -> list[list[int]]:
        """Prompt indices per batch: longest prompts first, at most `batch_size` prompts and, when set,
        `max_batch_tokens` padded prompt tokens (prompts x the longest) per batch. Sorting keeps one long prompt
        from padding a whole batch of short ones; the first batch is the largest, so memory runs out early if at all.
        """
        order = sorted(range(len(token_ids)), key=lambda i: -len(token_ids[i]))
        batches: list[list[int]] = []
        for i in order:
            batch = batches[-1] if batches else None
            full = batch is None or len(batch) >= self.batch_size
            if not full and self.max_batch_tokens:
                full = (len(batch) + 1) * len(token_ids[batch[0]]) > self.max_batch_tokens
            if full:
                batches.append([i])
            else:
                batch.append(i)
        return batches

    def _generate_chunk(
        self, chunk: list[list[int]], indices: list[int], params: SamplingParams
    ) -> list[list[list[int]]]:
        """Token ids of `params.n` continuations for each prompt of `chunk` (prompt `b` is prompt `indices[b]`)."""
        n = params.n
        generators = None
        if not params.greedy:
            generators = [
                torch.Generator().manual_seed(derive_seed(params.seed, indices[b], j))
                for b in range(len(chunk))
                for j in range(n)
            ]
        window = max((len(s.encode("utf-8")) for s in params.stop), default=0) + 4

        def pick(logits, rows):
            return self._pick(logits, params, None if generators is None else [generators[r] for r in rows])

        def stop(tokens):
            return self._hits_stop(tokens[-window:], params.stop)

        return decode(
            self.model, chunk, max_new_tokens=params.max_new_tokens, end_ids=self.eos_ids, pad_id=self.pad_id,
            pick=pick, n=n, stop=stop if params.stop else None, call_kwargs=self._call_kwargs,
        )  # fmt: skip

    def _hits_stop(self, tail: list[int], stop: list[str]) -> bool:
        # A stop string that completes now ends in the newest token and spans at most one token per byte, so the
        # last `max_stop_bytes + 4` tokens are enough to see it; earlier ones were checked at earlier steps.
        text = self.tokenizer.decode(tail, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return any(s in text for s in stop)

    @staticmethod
    def _pick(logits: torch.Tensor, params: SamplingParams, generators) -> torch.Tensor:
        if generators is None:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / params.temperature, dim=-1)
        order = None
        if params.top_p < 1.0:
            probs, order = probs.sort(dim=-1, descending=True)
            # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
            probs = probs.masked_fill(probs.cumsum(-1) - probs >= params.top_p, 0.0)
        cdf = probs.cumsum(dim=-1)
        u = torch.tensor([torch.rand((), generator=g).item() for g in generators], device=logits.device)
        # right=True picks the first index whose cdf exceeds u, so a zero-probability token is never chosen.
        picked = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).clamp(max=cdf.shape[-1] - 1)
        if order is not None:
            picked = order.gather(-1, picked)
        return picked.squeeze(-1)
