"""fic.losses against a plain full-logit reference written out from the definitions (float64)."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fic.losses import chunked_generalized_jsd, chunked_nll, generalized_jsd, per_token_generalized_jsd

BETAS = [0.0, 0.25, 0.5, 0.9, 1.0]
TOL = 1e-5


def reference_per_token(student_logits, teacher_logits, beta, temperature):
    """The textbook formulas on explicit probabilities."""
    p_s = torch.softmax(student_logits / temperature, -1)
    p_t = torch.softmax(teacher_logits / temperature, -1)
    if beta == 0.0:
        return (p_t * (p_t.log() - p_s.log())).sum(-1)
    if beta == 1.0:
        return (p_s * (p_s.log() - p_t.log())).sum(-1)
    m = (1 - beta) * p_s + beta * p_t
    return beta * (p_t * (p_t.log() - m.log())).sum(-1) + (1 - beta) * (p_s * (p_s.log() - m.log())).sum(-1)


def reference_loss(student_logits, teacher_logits, mask, beta, temperature, num_items=None):
    per_token = reference_per_token(student_logits, teacher_logits, beta, temperature)
    total = (per_token * mask).sum()
    return total / (mask.sum() if num_items is None else num_items)


def make(B=3, T=5, H=7, V=13, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    hs = torch.randn(B, T, H, generator=g, dtype=dtype, requires_grad=True)
    ws = torch.randn(V, H, generator=g, dtype=dtype, requires_grad=True)
    ht = torch.randn(B, T, H, generator=g, dtype=dtype)
    wt = torch.randn(V, H, generator=g, dtype=dtype)
    mask = (torch.rand(B, T, generator=g) > 0.3).to(dtype)
    mask[0, 0] = 1
    return hs, ws, ht, wt, mask


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_logit_path_matches_reference_values_and_grads(beta, temperature):
    hs, ws, ht, wt, mask = make()
    zs = hs @ ws.T
    zt = ht @ wt.T
    got = generalized_jsd(zs, zt, mask, beta=beta, temperature=temperature)
    ref = reference_loss(zs, zt, mask, beta, temperature)
    assert abs(got.item() - ref.item()) < TOL
    g_got = torch.autograd.grad(got, (hs, ws), retain_graph=True)
    g_ref = torch.autograd.grad(ref, (hs, ws))
    for a, b in zip(g_got, g_ref):
        assert (a - b).abs().max().item() < TOL


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("token_chunk_size", [None, 4])
def test_chunked_path_matches_reference_values_and_grads(beta, temperature, token_chunk_size):
    hs, ws, ht, wt, mask = make(seed=1)
    bias = torch.randn(ws.shape[0], dtype=torch.float64, requires_grad=True)
    out = chunked_generalized_jsd(
        hs, ws, ht, wt, mask, beta=beta, temperature=temperature, student_bias=bias, token_chunk_size=token_chunk_size
    )
    ref = reference_loss(hs @ ws.T + bias, ht @ wt.T, mask, beta, temperature)
    assert abs(out.loss.item() - ref.item()) < TOL
    assert out.num_tokens.item() == mask.sum().item()
    assert abs(out.token_sum.item() / mask.sum().item() - ref.item()) < TOL
    g_got = torch.autograd.grad(out.loss, (hs, ws, bias))
    g_ref = torch.autograd.grad(ref, (hs, ws, bias))
    for a, b in zip(g_got, g_ref):
        assert a.dtype == b.dtype
        assert (a - b).abs().max().item() < TOL


def test_chunked_entropy_is_the_student_entropy():
    hs, ws, ht, wt, mask = make(seed=2)
    out = chunked_generalized_jsd(hs, ws, ht, wt, mask, beta=0.5)
    p = torch.softmax(hs @ ws.T, -1)
    ent = -(p * p.log()).sum(-1)
    assert abs(out.entropy_sum.item() - (ent * mask).sum().item()) < TOL


@pytest.mark.parametrize("beta", BETAS)
def test_zero_on_identical_distributions(beta):
    hs, ws, _, _, mask = make(seed=3)
    out = chunked_generalized_jsd(hs, ws, hs.detach(), ws.detach(), mask, beta=beta, temperature=1.3)
    assert abs(out.loss.item()) < 1e-6
    grads = torch.autograd.grad(out.loss, (hs, ws))
    assert all(g.abs().max().item() < 1e-6 for g in grads)
    z = torch.randn(4, 6, 11, dtype=torch.float64)
    assert abs(generalized_jsd(z, z.clone(), beta=beta).item()) < 1e-12


def test_end_points_are_forward_and_reverse_kl():
    g = torch.Generator().manual_seed(4)
    zs, zt = (
        torch.randn(2, 3, 9, generator=g, dtype=torch.float64),
        torch.randn(2, 3, 9, generator=g, dtype=torch.float64),
    )
    ls, lt = torch.log_softmax(zs, -1), torch.log_softmax(zt, -1)
    forward_kl = torch.nn.functional.kl_div(ls, lt, log_target=True, reduction="none").sum(-1)
    reverse_kl = torch.nn.functional.kl_div(lt, ls, log_target=True, reduction="none").sum(-1)
    assert torch.allclose(per_token_generalized_jsd(zs, zt, beta=0.0), forward_kl, atol=1e-12)
    assert torch.allclose(per_token_generalized_jsd(zs, zt, beta=1.0), reverse_kl, atol=1e-12)
    assert not torch.allclose(forward_kl, reverse_kl)
    # the interior is symmetric at beta = 0.5 (standard JSD)
    assert torch.allclose(per_token_generalized_jsd(zs, zt, 0.5), per_token_generalized_jsd(zt, zs, 0.5), atol=1e-12)


@pytest.mark.parametrize("path", ["logits", "chunked"])
def test_masked_positions_change_nothing(path):
    hs, ws, ht, wt, mask = make(seed=5)
    hs2 = hs.detach().clone()
    hs2[mask == 0] += 10 * torch.randn_like(hs2[mask == 0])  # scramble only masked positions
    hs2.requires_grad_(True)

    def loss(h):
        if path == "logits":
            return generalized_jsd(h @ ws.T, ht @ wt.T, mask, beta=0.3)
        return chunked_generalized_jsd(h, ws, ht, wt, mask, beta=0.3).loss

    a, b = loss(hs), loss(hs2)
    assert abs(a.item() - b.item()) < 1e-10
    (grad,) = torch.autograd.grad(b, hs2)
    assert grad[mask == 0].abs().max().item() == 0.0
    assert grad[mask != 0].abs().max().item() > 0.0


@pytest.mark.parametrize("path", ["logits", "chunked"])
def test_normalisation_under_gradient_accumulation(path):
    """Two micro-batches with num_items_in_batch = all response tokens add up to the full-batch loss and gradient."""
    hs, ws, ht, wt, mask = make(B=4, seed=6)
    mask[2:] = 0
    mask[2, :2] = 1  # unequal token counts per micro-batch: a per-micro-batch mean would be wrong
    total = mask.sum()

    def loss(sl, num_items):
        if path == "logits":
            return generalized_jsd(hs[sl] @ ws.T, ht[sl] @ wt.T, mask[sl], beta=0.5, num_items_in_batch=num_items)
        return chunked_generalized_jsd(hs[sl], ws, ht[sl], wt, mask[sl], beta=0.5, num_items_in_batch=num_items).loss

    full = loss(slice(None), None)
    g_full = torch.autograd.grad(full, (hs, ws))
    parts = [loss(slice(0, 2), total), loss(slice(2, 4), total)]
    accumulated = parts[0] + parts[1]
    g_acc = torch.autograd.grad(accumulated, (hs, ws))
    assert abs(full.item() - accumulated.item()) < TOL
    for a, b in zip(g_full, g_acc):
        assert (a - b).abs().max().item() < TOL
    naive = loss(slice(0, 2), None) / 2 + loss(slice(2, 4), None) / 2
    assert abs(naive.item() - full.item()) > 1e-3


def test_fully_masked_batch_is_a_finite_zero():
    hs, ws, ht, wt, mask = make(seed=7)
    out = chunked_generalized_jsd(hs, ws, ht, wt, torch.zeros_like(mask), beta=0.5)
    assert out.loss.item() == 0.0 and out.num_tokens.item() == 0
    out.loss.backward()  # must not fail


def test_chunked_nll_matches_cross_entropy():
    hs, ws, _, _, mask = make(seed=8)
    targets = torch.randint(0, ws.shape[0], mask.shape, generator=torch.Generator().manual_seed(0))
    out = chunked_nll(hs, ws, targets, mask, temperature=1.5)
    logits = (hs @ ws.T) / 1.5
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="none")
    ref = (ce * mask.reshape(-1)).sum() / mask.sum()
    assert abs(out.loss.item() - ref.item()) < TOL
    for a, b in zip(torch.autograd.grad(out.loss, (hs, ws)), torch.autograd.grad(ref, (hs, ws))):
        assert (a - b).abs().max().item() < TOL


class _LargestTensor(TorchDispatchMode):
    """Records the largest tensor any aten op produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_chunked_path_never_builds_the_full_logits():
    """Forward and backward with V = 40,000: no tensor reaches N x V elements (the tiles are N x 32,768)."""
    B, T, H, V = 2, 8, 4, 40_000
    g = torch.Generator().manual_seed(9)
    hs = torch.randn(B, T, H, generator=g, requires_grad=True)
    ws = (0.1 * torch.randn(V, H, generator=g)).requires_grad_(True)
    ht, wt = torch.randn(B, T, H, generator=g), 0.1 * torch.randn(V, H, generator=g)
    mask = torch.ones(B, T)
    full = B * T * V
    with _LargestTensor() as probe:
        out = chunked_generalized_jsd(hs, ws, ht, wt, mask, beta=0.5)
        out.loss.backward()
    assert probe.largest < full, (probe.largest, full)
    with _LargestTensor() as naive:  # the probe does see a full-logit computation
        generalized_jsd(hs @ ws.T, ht @ wt.T, mask, beta=0.5)
    assert naive.largest >= full


def test_bad_arguments_name_the_field():
    hs, ws, ht, wt, mask = make()
    with pytest.raises(ValueError, match="beta"):
        generalized_jsd(hs @ ws.T, ht @ wt.T, beta=1.5)
    with pytest.raises(ValueError, match="temperature"):
        chunked_generalized_jsd(hs, ws, ht, wt, temperature=0.0)
    with pytest.raises(ValueError, match="teacher_logits"):
        generalized_jsd(torch.zeros(2, 5), torch.zeros(2, 6))
    with pytest.raises(ValueError, match="teacher_hidden"):
        chunked_generalized_jsd(hs, ws, ht[:, :2], wt)
    with pytest.raises(ValueError, match="mask"):
        chunked_generalized_jsd(hs, ws, ht, wt, mask[:, :2])
    with pytest.raises(ValueError, match="num_items_in_batch"):
        generalized_jsd(hs @ ws.T, ht @ wt.T, num_items_in_batch=0)
