"""How much a user turn depends on its answer, measured by a small language model: a likelihood ratio.

    ratio = log p(turn | context with its own answer) - log p(turn | the same context with a foil answer)

per token of the turn, under a small causal LM with a chat template (default: SmolLM2-135M-Instruct, the `smollm2`
GGUF shipped in a package). The turn is scored as the user message after the context: the context rendered with
the model's own template up to the bare user header (`fic.chat.role_prefix`, as the probe renders it), then the
turn's tokens. A turn that names a number or term only this answer introduced is much likelier after it than after
another answer (ratio well above 0); a stock turn ("Can you give me an example of that?") is about as likely after
any answer (ratio near 0). The foil answers are those of `fic.judges.contrast.foil_contexts`.

This is a feature for fitting and measuring judges (`scripts/judge_calibration.py`), not part of the default judge:
two forward passes of the LM per turn (the last `max_context_tokens` of the context, 128 by default: the
answer's end and the user header) cost far more on a CPU than the offline judge (~90 turns/s).
"""

from __future__ import annotations

import logging

from .base import Case
from .contrast import foil_contexts

logger = logging.getLogger(__name__)


class TurnLikelihood:
    """Per-token log-likelihood of user turns after a context, and the own-vs-foil ratio.

    Args:
        model: a causal LM name or path (`smollm2` by default, resolved like every fic model name).
        max_context_tokens: the context is cut from the left to this many tokens (the turn is never cut).
        max_turn_tokens: the turn is cut to its first this many tokens.
        batch_size: sequences per forward pass.
    """

    def __init__(self, model: str = "smollm2", max_context_tokens: int = 128, max_turn_tokens: int = 32,
                 batch_size: int = 8):  # fmt: skip
        import torch

        from fic.modeling import load_model, load_tokenizer, resolve_model_name

        name = resolve_model_name(model)
        self.tokenizer = load_tokenizer(name)
        self.model = load_model(name, dtype="float32").eval()
        self.torch = torch
        self.max_context_tokens, self.max_turn_tokens, self.batch_size = (
            max_context_tokens,
            max_turn_tokens,
            batch_size,
        )

    def _ids(self, messages: list[dict], turn: str) -> tuple[list[int], int]:
        from fic.chat import role_prefix

        prefix = self.tokenizer(role_prefix(self.tokenizer, messages, "user"), add_special_tokens=False)["input_ids"]
        turn_ids = self.tokenizer(turn, add_special_tokens=False)["input_ids"][: self.max_turn_tokens]
        prefix = prefix[-self.max_context_tokens :]
        return prefix + turn_ids, len(turn_ids)

    def log_likelihood(self, contexts: list[list[dict]], turns: list[str]) -> list[float | None]:
        """Mean log-probability per token of each turn after its context (None for an empty turn)."""
        torch = self.torch
        seqs = [self._ids(c, t) for c, t in zip(contexts, turns)]
        out: list[float | None] = []
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        for start in range(0, len(seqs), self.batch_size):
            batch = seqs[start : start + self.batch_size]
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, (ids, _) in enumerate(batch):  # right padding: positions stay those of the unpadded sequence
                input_ids[row, : len(ids)] = torch.tensor(ids)
                mask[row, : len(ids)] = 1
            with torch.no_grad():
                logp = torch.log_softmax(self.model(input_ids=input_ids, attention_mask=mask).logits.float(), dim=-1)
            for row, (ids, n_turn) in enumerate(batch):
                if n_turn == 0:
                    out.append(None)
                    continue
                positions = torch.arange(len(ids) - n_turn - 1, len(ids) - 1)
                targets = torch.tensor(ids[len(ids) - n_turn :])
                out.append(float(logp[row, positions, targets].mean()))
        return out

    def ratios(self, cases: list[Case]) -> list[float | None]:
        """`log p(turn | own answer) - log p(turn | foil answer)` per token, for each case (None for an empty turn).

        The foils are `foil_contexts(cases)`: pass the cases of one dataset together, so the foil is another item's
        answer of the same kind."""
        turns = [c.user_turn for c in cases]
        own = self.log_likelihood([c.messages for c in cases], turns)
        foil = self.log_likelihood(foil_contexts(cases), turns)
        return [None if a is None or b is None else a - b for a, b in zip(own, foil)]
