"""The one interface every generation backend implements.

A backend takes *raw* prompt strings (already rendered with the chat template, BOS included when the template writes
it) and returns, for each prompt, ``n`` continuations: text only, the prompt excluded, cut at the first stop string
(the stop string itself is not included).

Special tokens. By default (``keep_special_tokens=True``) a continuation is the raw decoded text with special tokens
kept, so that a leaked ``<|im_start|>`` or a second role header stays visible to whoever reads it (the follow-up
judge counts it as a ``malformed_artifact``). A trailing end-of-sequence / pad token that merely ended generation is
removed; anything generated before it is kept verbatim. ``keep_special_tokens=False`` removes special tokens instead.

Seeds. Sample ``j`` of prompt ``i`` is drawn with a random stream derived from ``(seed, i, j)`` where the backend
allows it (see :func:`derive_seed`), so the same call with the same seed gives the same text, and different seeds give
different samples. Greedy decoding (``temperature == 0``) ignores the seed.

Greedy with ``n > 1``. Greedy samples are all the same text, and vLLM (offline engine and server) refuses the request
("n must be 1 when using greedy sampling"). Every backend therefore decodes one continuation per prompt and repeats
it ``n`` times (:func:`one_greedy_sample`, :func:`repeat_greedy`).
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
from dataclasses import dataclass, field

BACKEND_NAMES = ("transformers", "vllm", "openai")


@dataclass
class SamplingParams:
    """
    Sampling settings shared by every backend.

    Args:
        n (`int`, *optional*, defaults to `1`):
            Number of continuations per prompt.
        temperature (`float`, *optional*, defaults to `0.0`):
            Softmax temperature; `0` means greedy decoding.
        top_p (`float`, *optional*, defaults to `1.0`):
            Nucleus sampling mass in `(0, 1]`; `1.0` disables it.
        max_new_tokens (`int`, *optional*, defaults to `128`):
            Maximum number of generated tokens per continuation.
        stop (`list[str]`, *optional*, defaults to `[]`):
            Generation stops at the first occurrence of any of these strings; the text is cut before it.
        seed (`int`, *optional*, defaults to `0`):
            Base seed; sample `j` of prompt `i` uses a stream derived from `(seed, i, j)`.
    """

    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop: list[str] = field(default_factory=list)
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop)
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"SamplingParams.n must be an integer >= 1, got {self.n!r}.")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0 (0 = greedy), got {self.temperature!r}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}; use 1.0 to disable it.")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}.")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"SamplingParams.stop must be a list of non-empty strings, got {self.stop!r}.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class Backend(abc.ABC):
    """A text generator: raw prompts in, `n` continuations per prompt out."""

    name: str = "base"

    def generate(
        self,
        prompts: list[str],
        params: SamplingParams,
        progress: bool = False,
        keep_special_tokens: bool = True,
    ) -> list[list[str]]:
        """Return `params.n` continuations for each prompt, in prompt order (see the module docstring)."""
        prompts = check_prompts(prompts)
        if not prompts:
            return []
        return repeat_greedy(self._generate(prompts, one_greedy_sample(params), progress, keep_special_tokens), params)

    def max_context(self) -> int | None:
        """The most tokens (prompt plus continuation) the model takes, or None when the backend cannot tell."""
        return None

    @abc.abstractmethod
    def _generate(self, prompts: list[str], params: SamplingParams, progress: bool, keep_special_tokens: bool):
        """`generate` on checked, non-empty `prompts`: what each backend implements."""


def one_greedy_sample(params: SamplingParams) -> SamplingParams:
    """The settings a backend decodes with: `n=1` when greedy (its samples are identical; vLLM refuses n > 1 there)."""
    return dataclasses.replace(params, n=1) if params.greedy and params.n > 1 else params


def repeat_greedy(results: list[list[str]], params: SamplingParams) -> list[list[str]]:
    """`results` decoded with `one_greedy_sample(params)`, each prompt's text repeated to `params.n` when greedy."""
    if params.greedy and params.n > 1:
        return [texts * params.n for texts in results]
    return results


def derive_seed(seed: int, *indices: int) -> int:
    """A stable 63-bit seed from a base seed and indices (prompt index, sample index), independent of the platform."""
    key = ",".join(str(int(v)) for v in (seed, *indices)).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") & ((1 << 63) - 1)


def cut_at_stop(text: str, stop: list[str]) -> str:
    """Cut `text` before the earliest occurrence of any stop string (the stop string is not kept)."""
    cut = len(text)
    for s in stop:
        i = text.find(s)
        if i != -1 and i < cut:
            cut = i
    return text[:cut]


def check_prompts(prompts) -> list[str]:
    if isinstance(prompts, str):
        raise ValueError("generate(prompts=...) takes a list of prompt strings, got a single str; wrap it: [prompt].")
    prompts = list(prompts)
    bad = [i for i, p in enumerate(prompts) if not isinstance(p, str)]
    if bad:
        raise ValueError(
            f"generate(prompts=...) needs raw strings; item {bad[0]} is {type(prompts[bad[0]]).__name__}. "
            "Render messages first, e.g. with fic.chat.role_prefix(tokenizer, messages)."
        )
    return prompts
