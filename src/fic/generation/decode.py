"""The token-level decode loop shared by the transformers backend (`HFBackend`) and training-time rollouts.

Prompts are token ids. They are left-padded into one batch and run through the model once (`use_cache=True`); the
KV cache, attention mask and last-position logits are then repeated `n` times along the batch (the cache's own
`reorder_cache`) and all `batch * n` rows decode together, one token per step. A row ends at one of `end_ids`, when
`stop(tokens)` says so, or at `max_new_tokens`; finished rows are dropped from the cache, so the remaining rows decode
with less work, and the loop stops when none is left. `model.generate` keeps every row of the batch until the
longest one ends (a finished row is fed padding) and runs its logits processors and stopping criteria at each step;
both cost more than the forward of a small model on a CPU.

Which token a row takes is the caller's `pick(logits, rows)` (greedy, seeded inverse-CDF sampling in `HFBackend`,
TRL's sampling settings in the VASD rollouts).

Lockstep (`synced`). When each forward is itself a collective (FSDP, DeepSpeed ZeRO-3 without gathered weights),
every process must run the same number of forwards. `synced(more: bool) -> bool` then tells the loop whether any
process still has rows to decode; a process whose rows have all ended keeps one finished row in the cache and runs
it, discarding what it writes, until every process is done (what `model.generate(synced_gpus=True)` does).

Continuing a conversation (`decode_kept`). A multi-turn rollout asks for turn after turn of the same rows, each
prompt the previous one plus the reply and the next user message (re-rendered and re-tokenized by the caller).
`decode_kept` returns, with the continuations, the KV cache it ends with (`Kept`: every row kept, a finished row
riding along under a zero attention mask instead of being dropped) and the token ids each row's cache holds. Given
that back with the next prompts, it keeps each row's longest common prefix of cached ids and new prompt (always
leaving at least one token to feed), masks the cache columns after it (a tokenization that differs from what was
generated costs nothing but those columns), and feeds only the rest of each prompt, left-padded into one chunk:
one forward over the new tokens instead of a prefill of the whole conversation. The context each row attends to is
exactly its prompt's ids at positions 0..len-1, as in a fresh prefill; the logits differ by float noise only
(other batch and chunk shapes).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

Pick = Callable[[torch.Tensor, list[int]], torch.Tensor]


def model_kwargs(model) -> tuple[str, dict]:
    """The name of the KV-cache argument this model's forward takes, and the prefill's extra kwargs."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(base.forward).parameters
    # transformers renamed `past_key_values` to `cache` during 5.x; speak whichever this model understands.
    cache_kw = "cache" if "cache" in params else "past_key_values"
    return cache_kw, ({"logits_to_keep": 1} if "logits_to_keep" in params else {})


def greedy_pick(logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
    return logits.argmax(dim=-1)


def _device(model) -> torch.device:
    device = getattr(model, "device", None)
    return torch.device(device) if device is not None else next(model.parameters()).device


def _forward(model, cache_kw, input_ids, attention_mask, position_ids, cache=None, **kw):
    if cache is not None:
        kw[cache_kw] = cache
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, **kw)
    new_cache = getattr(out, "cache", None)
    if new_cache is None:
        new_cache = getattr(out, "past_key_values", None)
    if new_cache is None:
        raise ValueError(f"{type(model).__name__} returned no KV cache; the decode loop needs use_cache support.")
    return out.logits[:, -1, :].float(), new_cache


def decode(
    model,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    end_ids: set[int],
    pad_id: int,
    pick: Pick = greedy_pick,
    n: int = 1,
    stop: Callable[[list[int]], bool] | None = None,
    keep_end: bool = False,
    synced: Callable[[bool], bool] | None = None,
    call_kwargs: tuple[str, dict] | None = None,
) -> list[list[list[int]]]:
    """`n` continuations (token ids) for each prompt; row `b * n + j` of the batch is sample `j` of prompt `b`.

    Args:
        model: a causal LM (or PEFT model) that returns a KV cache; called as is (no mode change, no grad change).
        prompts: token ids, at least one id each.
        max_new_tokens: longest continuation; under `synced`, it must be the same on every process.
        end_ids: tokens that end a row; kept as its last token with `keep_end=True`, left out otherwise.
        pad_id: any id (it sits under a zero attention mask).
        pick: `pick(logits [rows, vocab], rows) -> token per row`, `rows` the indices (`b * n + j`) of the rows
            still decoding, in the order of `logits`.
        stop: `stop(tokens_so_far) -> bool`, checked after each new token (stop strings); the token is kept.
        synced: see the module docstring; `None` when each process decodes on its own.
        call_kwargs: `model_kwargs(model)`, when the caller already has it.
    """
    if not prompts or any(not ids for ids in prompts):
        raise ValueError("decode(prompts=...): needs at least one prompt, each with at least one token id")
    cache_kw, prefill_kw = call_kwargs or model_kwargs(model)
    device = _device(model)
    width = max(len(ids) for ids in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for b, ids in enumerate(prompts):
        input_ids[b, width - len(ids) :] = torch.tensor(ids)
        attention_mask[b, width - len(ids) :] = 1
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)

    # One prefill for the batch, then every prompt's row repeated n times (cache included).
    logits, cache = _forward(model, cache_kw, input_ids, attention_mask, position_ids, **prefill_kw)
    rows = torch.arange(len(prompts), device=device).repeat_interleave(n)
    if n > 1:
        cache.reorder_cache(rows)
        logits, attention_mask = logits[rows], attention_mask[rows]
    next_pos = position_ids[rows, -1] + 1

    tokens: list[list[int]] = [[] for _ in range(len(prompts) * n)]
    active = list(range(len(prompts) * n))  # original row index of each row still in the cache
    writing = True  # False once this process only runs a finished row to keep in step with the others
    for step in range(max_new_tokens):
        next_tok = pick(logits, active)
        keep = []
        if writing:
            for a, (row, tok) in enumerate(zip(active, next_tok.tolist())):
                if tok in end_ids:
                    if keep_end:
                        tokens[row].append(tok)
                    continue
                tokens[row].append(tok)
                if stop is not None and stop(tokens[row]):
                    continue
                keep.append(a)
        last = step == max_new_tokens - 1  # the same step on every process: max_new_tokens is shared
        more = bool(keep) and not last
        if synced is not None and not last:
            more = synced(more)
        if not more:
            break
        if not keep:  # synced, and this process is done: one finished row joins the others' forwards
            keep, writing = [0], False
        if len(keep) < len(active):
            idx = torch.tensor(keep, device=device)
            cache.reorder_cache(idx)
            attention_mask, next_pos, next_tok = attention_mask[idx], next_pos[idx], next_tok[idx]
            active = [active[a] for a in keep]
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(active), 1))], dim=-1)
        logits, cache = _forward(model, cache_kw, next_tok[:, None], attention_mask, next_pos[:, None], cache)
        next_pos = next_pos + 1
    return [tokens[b * n : (b + 1) * n] for b in range(len(prompts))]


@dataclass
class Kept:
    """The KV cache a `decode_kept` call ends with, to continue from (see the module docstring).

    `mask` and `positions` have one column per cache position: 1 where the column holds a token of the row's context
    (`positions`: its position there, -1 elsewhere). `tokens[r]`: the ids row `r`'s unmasked columns hold, in order.
    The cache is consumed (reordered in place) by the call it is given to."""

    cache: object
    mask: torch.Tensor
    positions: torch.Tensor
    tokens: list[list[int]]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def decode_kept(
    model,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    end_ids: set[int],
    pad_id: int,
    pick: Pick = greedy_pick,
    keep_end: bool = False,
    synced: Callable[[bool], bool] | None = None,
    call_kwargs: tuple[str, dict] | None = None,
    kept: Kept | None = None,
    rows: list[int | None] | None = None,
) -> tuple[list[list[int]], Kept]:
    """One continuation per prompt, and the KV cache to continue from (see the module docstring).

    `kept`, `rows`: a previous call's `Kept` and, per prompt, the row of it to continue (`None`: no reuse, the whole
    prompt is fed). Other arguments as in `decode` (one sample per prompt). Returns the continuations (the end token
    kept with `keep_end=True`, as in `decode`) and the new `Kept`, one row per prompt.
    """
    if not prompts or any(not ids for ids in prompts):
        raise ValueError("decode_kept(prompts=...): needs at least one prompt, each with at least one token id")
    cache_kw, prefill_kw = call_kwargs or model_kwargs(model)
    device = _device(model)
    count = len(prompts)
    if kept is not None:
        rows = list(rows) if rows is not None else list(range(count))
        if len(rows) != count:
            raise ValueError(f"decode_kept(rows=...): one entry per prompt ({count}), got {len(rows)}")
        idx = torch.tensor([r if r is not None else 0 for r in rows], device=device)
        cache = kept.cache
        cache.reorder_cache(idx)
        common = [
            0 if r is None else min(_common_prefix(kept.tokens[r], ids), len(ids) - 1) for r, ids in zip(rows, prompts)
        ]
        limit = torch.tensor(common, device=device)[:, None]
        held = (kept.mask[idx] > 0) & (kept.positions[idx] < limit) & (kept.positions[idx] >= 0)
        past_mask = held.long()
        past_pos = torch.where(held, kept.positions[idx], -1)
    else:
        cache, common = None, [0] * count
        past_mask = torch.zeros((count, 0), dtype=torch.long, device=device)
        past_pos = torch.zeros((count, 0), dtype=torch.long, device=device)
    tails = [ids[c:] for ids, c in zip(prompts, common)]
    width = max(len(t) for t in tails)
    input_ids = torch.full((count, width), pad_id, dtype=torch.long)
    chunk_pos = torch.full((count, width), -1, dtype=torch.long)
    for b, (tail, c) in enumerate(zip(tails, common)):
        input_ids[b, width - len(tail) :] = torch.tensor(tail)
        chunk_pos[b, width - len(tail) :] = torch.arange(c, c + len(tail))
    input_ids, chunk_pos = input_ids.to(device), chunk_pos.to(device)
    attention_mask = torch.cat([past_mask, (chunk_pos >= 0).long()], dim=-1)
    positions = torch.cat([past_pos, chunk_pos], dim=-1)
    logits, cache = _forward(model, cache_kw, input_ids, attention_mask, chunk_pos.clamp(min=0), cache, **prefill_kw)
    next_pos = torch.tensor([len(ids) for ids in prompts], device=device)
    context = [list(ids) for ids in prompts]  # what each row's unmasked cache columns hold
    tokens: list[list[int]] = [[] for _ in range(count)]
    writing = [True] * count
    all_rows = list(range(count))
    for step in range(max_new_tokens):
        next_tok = pick(logits, all_rows)
        fed = []
        for row, tok in enumerate(next_tok.tolist()):
            if not writing[row]:
                continue
            if tok in end_ids:
                writing[row] = False
                if keep_end:
                    tokens[row].append(tok)
                continue
            tokens[row].append(tok)
            fed.append(row)
        last = step == max_new_tokens - 1
        more = bool(fed) and not last
        if synced is not None and not last:
            more = synced(more)
        if not more:
            break
        # rows that have ended ride along: a pad token under a zero mask, nothing recorded
        live = torch.zeros(count, dtype=torch.bool, device=device)
        if fed:
            live[torch.tensor(fed, device=device)] = True
        step_ids = torch.where(live, next_tok, torch.full_like(next_tok, pad_id))
        for row in fed:
            context[row].append(tokens[row][-1])
        attention_mask = torch.cat([attention_mask, live.long()[:, None]], dim=-1)
        positions = torch.cat([positions, torch.where(live, next_pos, -1)[:, None]], dim=-1)
        logits, cache = _forward(model, cache_kw, step_ids[:, None], attention_mask, next_pos[:, None], cache)
        next_pos = next_pos + live.long()
    return tokens, Kept(cache=cache, mask=attention_mask, positions=positions, tokens=context)


def sampling_pick(
    temperature: float,
    top_p: float | None = 1.0,
    top_k: int | None = 0,
    min_p: float | None = 0.0,
    generator: torch.Generator | None = None,
) -> Pick:
    """A `pick` with `model.generate`'s sampling settings, applied in its order (temperature, top-k, top-p, min-p).

    `temperature == 0` is greedy. Draws come from torch's global random state on the logits' device (or
    `generator`), as `model.generate` draws them, so a resumed run that restores the RNG state samples the same.
    """
    if temperature is None or temperature == 0:
        return greedy_pick
    top_p = 1.0 if top_p is None else top_p
    top_k = top_k or 0
    min_p = min_p or 0.0

    def pick(logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        scores = logits / temperature
        if 0 < top_k < scores.size(-1):
            kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if top_p < 1.0:
            sorted_scores, order = scores.sort(dim=-1, descending=True)
            probs = sorted_scores.softmax(dim=-1)
            # Drop the tokens after the smallest prefix whose mass reaches top_p (the first one always stays).
            drop = (probs.cumsum(dim=-1) - probs) >= top_p
            scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
        if min_p > 0.0:
            probs = scores.softmax(dim=-1)
            scores = scores.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), float("-inf"))
        return torch.multinomial(scores.softmax(dim=-1), 1, generator=generator).squeeze(-1)

    return pick
