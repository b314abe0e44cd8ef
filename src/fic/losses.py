"""Pure tensor losses for distillation on response tokens.

The divergence is TRL's generalised Jensen-Shannon divergence between the student's and the teacher's next-token
distributions, per response token (`beta` picks it):

    beta = 0      forward KL(p_teacher || p_student)
    0 < beta < 1  beta * KL(p_teacher || m) + (1 - beta) * KL(p_student || m),  m = (1 - beta) p_student + beta p_teacher
    beta = 1      reverse KL(p_student || p_teacher)

Both distributions are `softmax(logits / temperature)`. (As in TRL and GKD, the interior formula tends to 0 at both
ends; the end points are defined as the two KLs, not as its limits.) The loss is the sum of the per-token divergence
over the masked response tokens divided by `num_items_in_batch`: the number of response tokens in the whole
accumulated batch, so that micro-batches of one optimizer step add up to exactly the full-batch loss. When it is
not given, the local token count is used.

Two ways in:

- `generalized_jsd(student_logits, teacher_logits, ...)` takes logits. It is the plain path for small vocabularies
  and logits that already exist (it holds a few tensors of the logits' size).
- `chunked_generalized_jsd(student_hidden, student_weight, teacher_hidden, teacher_weight, ...)` takes the final
  hidden states and the `lm_head` weights, so the `B x T x V` logits are never materialised, neither in the forward
  nor in the backward. It keeps only the masked positions and hands them to TRL's `ChunkedDivergenceFunction`
  (`trl.kernels.chunked_divergence`), which projects `[token_chunk x 32768]` vocabulary tiles in fp32, folds them
  into online-logsumexp statistics and recomputes them in the backward (Triton kernels on CUDA, torch elsewhere).
  Peak extra memory is about `2 x min(N, token_chunk_size) x 32768 x 4` bytes for the tiles plus, when the head is
  trained, an fp32 `V x H` gradient accumulator. `token_chunk_size` bounds the tile height (default: all rows on CUDA, 64 on CPU).

`chunked_nll` is the same idea for the negative log-likelihood of given tokens (the sequence-level variant trains
with it), on TRL's `ChunkedLogProbFunction`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["LossOutput", "chunked_generalized_jsd", "chunked_nll", "generalized_jsd", "per_token_generalized_jsd"]

# The vocabulary tile width of `chunked_nll` (TRL's divergence kernel fixes its own at 32768).
NLL_VOCAB_CHUNK = 32768


@dataclass
class LossOutput:
    """A reduced loss and the detached sums needed to log and to reduce across ranks.

    Attributes:
        loss: scalar, `token_sum / num_items_in_batch` (differentiable).
        token_sum: sum of the per-token values over the masked tokens (detached).
        entropy_sum: sum of the student's per-token entropy in nats over the masked tokens (detached).
        num_tokens: number of masked (counted) tokens in this call.
    """

    loss: torch.Tensor
    token_sum: torch.Tensor
    entropy_sum: torch.Tensor
    num_tokens: torch.Tensor


CPU_TOKEN_CHUNK_SIZE = 64


def _check_beta_temperature(beta: float, temperature: float) -> None:
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta: expected a value in [0, 1] (0 = forward KL, 1 = reverse KL), got {beta!r}")
    if not temperature > 0.0:
        raise ValueError(f"temperature: expected a positive value, got {temperature!r}")


def _reduce(per_token: torch.Tensor, num_items_in_batch, n_local: torch.Tensor) -> torch.Tensor:
    total = per_token.sum()
    if num_items_in_batch is None:
        # clamped so a fully masked call reduces to a finite zero
        return total / n_local.clamp(min=1).to(total.dtype)
    if isinstance(num_items_in_batch, torch.Tensor):
        num_items_in_batch = num_items_in_batch.to(total.device, total.dtype)
    elif num_items_in_batch <= 0:
        raise ValueError(f"num_items_in_batch: expected a positive token count, got {num_items_in_batch!r}")
    return total / num_items_in_batch


def per_token_generalized_jsd(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, beta: float = 0.5, temperature: float = 1.0
) -> torch.Tensor:
    """The divergence of every position, from logits of shape `(..., V)`; returns shape `(...)`.

    The gradient flows to the student only (the teacher is detached).
    """
    _check_beta_temperature(beta, temperature)
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"teacher_logits: shape {tuple(teacher_logits.shape)} differs from student_logits "
            f"{tuple(student_logits.shape)}; align both on the same response tokens and vocabulary"
        )
    log_ps = torch.log_softmax(student_logits / temperature, dim=-1)
    log_pt = torch.log_softmax(teacher_logits.detach().to(student_logits.dtype) / temperature, dim=-1)
    if beta == 0.0:
        return (log_pt.exp() * (log_pt - log_ps)).sum(-1)
    if beta == 1.0:
        return (log_ps.exp() * (log_ps - log_pt)).sum(-1)
    log_m = torch.logaddexp(log_ps + math.log(1 - beta), log_pt + math.log(beta))
    return (beta * log_pt.exp() * (log_pt - log_m) + (1 - beta) * log_ps.exp() * (log_ps - log_m)).sum(-1)


def generalized_jsd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor | None = None,
    beta: float = 0.5,
    temperature: float = 1.0,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Generalised JSD from logits `(..., V)` over the positions where `mask` is nonzero, summed and divided by
    `num_items_in_batch` (default: the number of masked positions). Returns a scalar."""
    per_token = per_token_generalized_jsd(student_logits, teacher_logits, beta=beta, temperature=temperature)
    if mask is None:
        mask = torch.ones(per_token.shape, dtype=torch.bool, device=per_token.device)
    elif mask.shape != per_token.shape:
        raise ValueError(
            f"mask: shape {tuple(mask.shape)} differs from the logits' positions {tuple(per_token.shape)}"
        )
    mask = mask.to(per_token.device) != 0
    return _reduce(per_token.masked_fill(~mask, 0.0), num_items_in_batch, mask.sum())


def _flatten_valid(hidden: torch.Tensor, valid: torch.Tensor | None, name: str) -> torch.Tensor:
    flat = hidden.reshape(-1, hidden.size(-1))
    if valid is None:
        return flat
    if valid.numel() != flat.size(0):
        raise ValueError(
            f"mask: {valid.numel()} positions, but {name} has {flat.size(0)} (shape {tuple(hidden.shape)}); the mask "
            "must cover the same response positions"
        )
    return flat[valid]


def chunked_generalized_jsd(
    student_hidden: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_hidden: torch.Tensor,
    teacher_weight: torch.Tensor,
    mask: torch.Tensor | None = None,
    beta: float = 0.5,
    temperature: float = 1.0,
    num_items_in_batch: int | torch.Tensor | None = None,
    student_bias: torch.Tensor | None = None,
    teacher_bias: torch.Tensor | None = None,
    student_logit_scale: float = 1.0,
    teacher_logit_scale: float = 1.0,
    student_softcap: float | None = None,
    teacher_softcap: float | None = None,
    token_chunk_size: int | None = None,
) -> LossOutput:
    """Generalised JSD from hidden states and `lm_head` weights, without materialising the logits.

    Args:
        student_hidden: `(..., H_s)` student hidden states aligned to the response tokens (before the head).
        student_weight: `(V, H_s)` student `lm_head` weight (receives a gradient when it requires one).
        teacher_hidden: `(..., H_t)` teacher hidden states at the same positions (no gradient).
        teacher_weight: `(V, H_t)` teacher `lm_head` weight; the vocabulary must match the student's.
        mask: `(...)` nonzero at the response tokens that count; default all.
        beta: 0 forward KL, 1 reverse KL, else the generalised JSD.
        temperature: softmax temperature applied to both models' logits.
        num_items_in_batch: response tokens in the whole accumulated batch; default the local count.
        student_bias, teacher_bias: optional `(V,)` head biases.
        student_logit_scale, teacher_logit_scale: logit multipliers (Cohere/Granite-style heads).
        student_softcap, teacher_softcap: final logit soft-capping (Gemma-style heads).
        token_chunk_size: rows per call of the kernel (bounds the tile height); default all rows on CUDA, 64 on CPU.

    Returns:
        `LossOutput` with the reduced loss and the detached divergence/entropy sums.
    """
    from trl.kernels.chunked_divergence import ChunkedDivergenceFunction  # trl's kernels: ~2.6 s more than torch

    _check_beta_temperature(beta, temperature)
    vocab_s, vocab_t = _rows(student_weight), _rows(teacher_weight)
    if vocab_s != vocab_t:
        raise ValueError(f"teacher_weight: vocabulary {vocab_t} differs from the student's {vocab_s}")
    if student_hidden.shape[:-1] != teacher_hidden.shape[:-1]:
        raise ValueError(
            f"teacher_hidden: positions {tuple(teacher_hidden.shape[:-1])} differ from the student's "
            f"{tuple(student_hidden.shape[:-1])}; align both on the same response tokens"
        )
    if token_chunk_size is not None and token_chunk_size < 1:
        raise ValueError(f"token_chunk_size: expected a positive number of rows, got {token_chunk_size!r}")
    valid = None if mask is None else (mask.reshape(-1).to(student_hidden.device) != 0)
    h_s = _flatten_valid(student_hidden, valid, "student_hidden")
    h_t = _flatten_valid(teacher_hidden.detach(), valid, "teacher_hidden")
    n = h_s.size(0)
    if token_chunk_size is None:
        # TRL's kernel tiles the vocabulary; without Triton (CPU) each tile's temporaries scale with the rows per call,
        # so small calls keep the peak low and are faster (benchmarks/chunked_divergence: 64 rows -> 0.055 memory,
        # 0.86 time of full logits). On CUDA one call over all rows is what the kernel is built for.
        token_chunk_size = n if h_s.is_cuda else CPU_TOKEN_CHUNK_SIZE
    chunk = token_chunk_size
    divergences, entropies = [], []
    for start in range(0, max(n, 1), max(chunk, 1)):
        div, ent = ChunkedDivergenceFunction.apply(
            h_s[start : start + chunk],
            student_weight,
            student_bias,
            h_t[start : start + chunk],
            _no_grad(teacher_weight),
            _no_grad(teacher_bias),
            float(beta),
            float(temperature),
            float(student_logit_scale),
            student_softcap,
            float(teacher_logit_scale),
            teacher_softcap,
        )
        divergences.append(div)
        entropies.append(ent)
    per_token = torch.cat(divergences)
    entropy = torch.cat(entropies)
    n_local = torch.tensor(n, device=per_token.device)
    loss = _reduce(per_token, num_items_in_batch, n_local)
    return LossOutput(loss, per_token.detach().sum(), entropy.detach().sum(), n_local)


def _rows(weight: torch.Tensor) -> int:
    """Vocabulary size of an `lm_head` weight; a DeepSpeed ZeRO-3 parameter outside its gather is an empty shard
    that keeps its real shape in `ds_shape`."""
    return int(weight.ds_shape[0]) if hasattr(weight, "ds_shape") else int(weight.shape[0])


def _no_grad(tensor):
    """The teacher's weight as the kernel should see it: detached, except a DeepSpeed ZeRO-3 parameter, which the
    kernel gathers itself (`maybe_gather_lm_head_ctx`) and which a `.detach()` would turn into its empty local shard
    without the `ds_status` the gather reads. The kernel returns no gradient for the teacher either way."""
    if tensor is None or hasattr(tensor, "ds_status"):
        return tensor
    return tensor.detach()


def chunked_nll(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    num_items_in_batch: int | torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    logit_scale: float = 1.0,
    softcap: float | None = None,
    vocab_chunk_size: int = NLL_VOCAB_CHUNK,
) -> LossOutput:
    """Negative log-likelihood of `targets` from hidden states and the `lm_head` weight, chunked over the vocabulary.

    Args:
        hidden: `(..., H)` hidden states at the positions that predict `targets`.
        weight: `(V, H)` `lm_head` weight.
        targets: `(...)` token ids.
        mask: `(...)` nonzero where the token counts; default all.
        temperature, bias, logit_scale, softcap: as for `chunked_generalized_jsd`.
        num_items_in_batch: tokens in the whole accumulated batch; default the local count.
        vocab_chunk_size: vocabulary tile width.

    Returns:
        `LossOutput`; `token_sum` is the summed NLL, `entropy_sum` the summed model entropy.
    """
    from trl.kernels.chunked_logprob import ChunkedLogProbFunction

    if not temperature > 0.0:
        raise ValueError(f"temperature: expected a positive value, got {temperature!r}")
    if targets.shape != hidden.shape[:-1]:
        raise ValueError(
            f"targets: shape {tuple(targets.shape)} differs from the hidden positions {tuple(hidden.shape[:-1])}"
        )
    valid = None if mask is None else (mask.reshape(-1).to(hidden.device) != 0)
    h = _flatten_valid(hidden, valid, "hidden")
    t = targets.reshape(-1).to(hidden.device)
    t = t if valid is None else t[valid]
    logprobs, entropy, *_ = ChunkedLogProbFunction.apply(
        h, weight, bias, t, float(temperature), int(vocab_chunk_size), softcap, float(logit_scale), ("entropy",)
    )
    nll = -logprobs
    n_local = torch.tensor(h.size(0), device=nll.device)
    loss = _reduce(nll, num_items_in_batch, n_local)
    return LossOutput(loss, nll.detach().sum(), entropy.detach().sum(), n_local)
