"""MhcSinkhorn / MhcSinkhornBackward (SPEC §10) through npu_mhc_sinkhorn and
npu_mhc_sinkhorn_backward: every output (y, the caches norm_out and sum_out, grad_x)
against the float64 oracle (oracle.sinkhorn64, written from SPEC's formulas, and torch
autograd through it); the two backward forms (from the caches, recomputed from x) and
the autograd rule give the same bits; finite differences; the autograd rule; threads,
batch invariance and every kernel family bitwise; the face's validation.

Bounds (stated, measured in the reply and in the session summary): every element within
FWD_TOL (forward: y, norm_out, sum_out) or GRAD_TOL (grad_x) times the largest |truth| of
its token's matrix (or divisor vector). The inputs are logits of order one (std 2), as
MhcPre gives them; much larger logits make the softmax nearly one-hot and the backward
ill-conditioned (torch's own fp32 autograd through the same formulas is then off by
~1e-4 of the token's max: not an error of the operator).
"""
import itertools
import math

import pytest
import torch

import mhc
from mhc._core import run_sinkhorn_backward
from conftest import (FAMILIES, SINKHORN_FWD_TOL, SINKHORN_GRAD_TOL, assert_same_bits,
                      check_token_scaled, strided_copy, token_lead)
from oracle import sinkhorn64, sinkhorn_grad64

FWD_TOL = SINKHORN_FWD_TOL    # of the token's max (y, norm_out, sum_out)
GRAD_TOL = SINKHORN_GRAD_TOL  # of the token's max |grad|
FD_TOL = 1e-4                 # our fp32 grad vs float64 central differences, of the token's max

NS = range(1, 9)
ITERS = (1, 2, 20)
TS = (1, 3, 37, 0)
LAYOUTS = ("TND", "BSND")
NONCONTIG = ("none", "x", "grad")  # which operand comes as a strided view
EPS = (1e-6, 1e-2)


def make_cases():
    """Every (N, num_iters) pair; T, layout, strided views and eps cycled across them so
    that each value of each meets many of the others."""
    cases = []
    for k, (n, iters) in enumerate(itertools.product(NS, ITERS)):
        cases.append({"N": n, "num_iters": iters, "T": TS[k % 4], "layout": LAYOUTS[(k // 4) % 2],
                      "noncontig": NONCONTIG[k % 3], "eps": EPS[(k // 3) % 2]})
    return cases


CASES = make_cases()


def case_id(c):
    return f"N{c['N']}-I{c['num_iters']}-T{c['T']}-{c['layout']}-nc_{c['noncontig']}-eps{c['eps']:g}"


def make_z(case, seed, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    lead, n = token_lead(case), case["N"]
    z = scale * torch.randn(lead + (n, n), generator=gen)
    grad = torch.randn(lead + (n, n), generator=gen)
    return z, grad


def pitch(n):
    return 8 * math.ceil(n / 8)


def check_cache_shapes(z, norm_out, sum_out, iters):
    lead, n = tuple(z.shape[:-2]), z.shape[-1]
    na = pitch(n)
    assert tuple(norm_out.shape) == (2 * iters,) + lead + (n, na), tuple(norm_out.shape)
    assert tuple(sum_out.shape) == (2 * iters,) + lead + (na,), tuple(sum_out.shape)
    for cache in (norm_out, sum_out):
        assert cache.dtype == torch.float32 and cache.is_contiguous()
    # The padding (columns N..Na-1) is written as 0 (mhc.hpp).
    assert not bool(norm_out[..., n:].ne(0).any()) and not bool(sum_out[..., n:].ne(0).any())


def check_against_oracle(z, grad, eps, iters, y, norm_out, sum_out, grad_x, cid):
    n = z.shape[-1]
    h64, norms64, sums64 = sinkhorn64(z, eps, iters, with_caches=True)
    check_token_scaled("sinkhorn y", y, h64, FWD_TOL, (-2, -1), cid)
    if norm_out is not None:
        check_token_scaled("sinkhorn norm_out", norm_out[..., :n], norms64, FWD_TOL, (-2, -1), cid)
        check_token_scaled("sinkhorn sum_out", sum_out[..., :n], sums64, FWD_TOL, (-1,), cid)
    if grad_x is not None:
        check_token_scaled("sinkhorn grad_x", grad_x, sinkhorn_grad64(z, grad, eps, iters), GRAD_TOL,
                           (-2, -1), cid)


def autograd_grad(z, grad, eps, iters, out_flag):
    leaf = z.detach().clone().requires_grad_(True)
    y, norm_out, sum_out = mhc.npu_mhc_sinkhorn(leaf, eps=eps, num_iters=iters, out_flag=out_flag)
    assert y.requires_grad and y.grad_fn is not None
    if out_flag:
        assert not norm_out.requires_grad and not sum_out.requires_grad
    else:
        assert norm_out is None and sum_out is None
    y.backward(grad)
    return y.detach(), leaf.grad


def test_cases_show_every_value():
    for key, values in (("N", NS), ("num_iters", ITERS), ("T", TS), ("layout", LAYOUTS),
                        ("noncontig", NONCONTIG), ("eps", EPS)):
        assert {c[key] for c in CASES} == set(values), key
    assert {(c["N"], c["num_iters"]) for c in CASES} == set(itertools.product(NS, ITERS))


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_sinkhorn_against_float64_oracle(case):
    cid = "sinkhorn-" + case_id(case)
    z, grad = make_z(case, seed=7000 + CASES.index(case))
    eps, iters = case["eps"], case["num_iters"]
    y, norm_out, sum_out = mhc.npu_mhc_sinkhorn(z, eps=eps, num_iters=iters, out_flag=1)
    assert y.dtype == torch.float32 and y.shape == z.shape and y.is_contiguous()
    check_cache_shapes(z, norm_out, sum_out, iters)
    plain = mhc.npu_mhc_sinkhorn(z, eps=eps, num_iters=iters)
    assert plain[1] is None and plain[2] is None
    assert_same_bits("y", y, plain[0], "out_flag=0 vs out_flag=1")
    grad_x = mhc.npu_mhc_sinkhorn_backward(grad, norm_out, sum_out)
    assert grad_x.dtype == torch.float32 and grad_x.shape == z.shape

    # Strided views give the very same bits, in the forward and in both backward forms
    # (the recompute, as the autograd rule of out_flag=0 runs it, reads a strided x too).
    if case["noncontig"] == "x":
        z_strided = strided_copy(z, "reversed" if case["N"] > 1 else "step")
        strided = mhc.npu_mhc_sinkhorn(z_strided, eps=eps, num_iters=iters, out_flag=1)
        for name, a, b in zip(("y", "norm_out", "sum_out"), (y, norm_out, sum_out), strided):
            assert_same_bits(name, a, b, "contiguous vs strided x")
        assert_same_bits("grad_x", grad_x, run_sinkhorn_backward(grad, None, None, z_strided, eps, iters),
                         "caches vs recompute from a strided x")
    elif case["noncontig"] == "grad":
        grad_strided = strided_copy(grad, "step")
        assert_same_bits("grad_x", grad_x, mhc.npu_mhc_sinkhorn_backward(grad_strided, norm_out, sum_out),
                         "contiguous vs strided grad_y")
        assert_same_bits("grad_x", grad_x, run_sinkhorn_backward(grad_strided, None, None, z, eps, iters),
                         "caches vs recompute with a strided grad_y")

    # Both backward forms and the autograd rule: the same bits (SPEC §10).
    for out_flag in (0, 1):
        y_ag, g_ag = autograd_grad(z, grad, eps, iters, out_flag)
        assert_same_bits("y", y, y_ag, f"direct vs autograd (out_flag={out_flag})")
        assert_same_bits("grad_x", grad_x, g_ag,
                         f"npu_mhc_sinkhorn_backward vs autograd ({'caches' if out_flag else 'recompute'})")

    if case["T"] == 0:
        assert y.numel() == 0 and grad_x.numel() == 0
        return
    check_against_oracle(z, grad, eps, iters, y, norm_out, sum_out, grad_x, cid)
    # The last step normalises columns: each sums to c/(c + eps) < 1, c its sum before.
    assert float(y.double().sum(dim=-2).max()) <= 1 + 1e-6


@pytest.mark.parametrize("iters", ITERS)
@pytest.mark.parametrize("n", [2, 4, 8])
def test_identity_leaning_logits(n, iters):
    """Logits as MhcPre's initialisation gives them (a strong diagonal, small noise), std
    0.5 around it, on [B,S,N,N] with non-contiguous x."""
    gen = torch.Generator().manual_seed(7100 + n * 10 + iters)
    z = 4.0 * torch.eye(n) + 0.5 * torch.randn(2, 5, n, n, generator=gen)
    grad = torch.randn(2, 5, n, n, generator=gen)
    y, norm_out, sum_out = mhc.npu_mhc_sinkhorn(strided_copy(z, "reversed"), num_iters=iters, out_flag=1)
    grad_x = mhc.npu_mhc_sinkhorn_backward(grad, norm_out, sum_out)
    check_against_oracle(z, grad, 1e-6, iters, y, norm_out, sum_out, grad_x, f"sinkhorn-diag-N{n}-I{iters}")


# Finite differences.

@pytest.mark.parametrize("n, iters", [(1, 2), (2, 1), (3, 2), (4, 3)])
def test_oracle_passes_gradcheck(n, iters):
    """The float64 oracle's autograd agrees with float64 finite differences (torch.autograd.gradcheck)."""
    gen = torch.Generator().manual_seed(7200 + n)
    z = torch.randn(2, n, n, generator=gen, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: sinkhorn64(t, 1e-6, iters), (z,), eps=1e-6, atol=1e-8, rtol=1e-6)


def central_differences(z, grad, eps, iters, h=1e-6):
    """d(Σ sinkhorn64(z)·grad)/dz by float64 central differences, one element at a time."""
    z64, g64 = z.to(torch.float64), grad.to(torch.float64)
    flat = z64.flatten()
    out = torch.empty_like(flat)
    for k in range(flat.numel()):
        plus, minus = flat.clone(), flat.clone()
        plus[k] += h
        minus[k] -= h
        f_plus = (sinkhorn64(plus.view(z.shape), eps, iters) * g64).sum()
        f_minus = (sinkhorn64(minus.view(z.shape), eps, iters) * g64).sum()
        out[k] = (f_plus - f_minus) / (2 * h)
    return out.view(z.shape)


@pytest.mark.parametrize("n, iters", [(2, 1), (3, 2), (4, 20), (8, 20), (5, 2)])
def test_fp32_backward_agrees_with_finite_differences(n, iters):
    """Our fp32 grad_x (both forms) within FD_TOL of the token's max of float64 central
    differences of the oracle forward; the differences agree with the oracle's autograd."""
    case = {"N": n, "T": 3, "layout": "TND"}
    z, grad = make_z(case, seed=7300 + n * 100 + iters)
    fd = central_differences(z, grad, 1e-6, iters)
    exact = sinkhorn_grad64(z, grad, 1e-6, iters)
    assert float((fd - exact).abs().max()) <= 1e-7 * max(float(exact.abs().max()), 1.0)
    _, norm_out, sum_out = mhc.npu_mhc_sinkhorn(z, num_iters=iters, out_flag=1)
    ours = mhc.npu_mhc_sinkhorn_backward(grad, norm_out, sum_out)
    check_token_scaled("sinkhorn grad_x[fd]", ours, fd, FD_TOL, (-2, -1), f"sinkhorn-fd-N{n}-I{iters}")
    assert_same_bits("grad_x", ours, autograd_grad(z, grad, 1e-6, iters, 0)[1], "caches vs recompute")


# The autograd rule.

@pytest.mark.parametrize("out_flag", [0, 1])
def test_autograd_with_a_loss_of_y(out_flag):
    """y.sum() (an expanded grad_y of stride 0) and a loss mixing y with other tensors."""
    z, _ = make_z({"N": 4, "T": 6, "layout": "BSND"}, seed=7400)
    leaf = z.clone().requires_grad_(True)
    y = mhc.npu_mhc_sinkhorn(leaf, num_iters=5, out_flag=out_flag)[0]
    (y.sum() + (y * y).sum()).backward()
    truth = sinkhorn_grad64(z, 1 + 2 * sinkhorn64(z, 1e-6, 5), 1e-6, 5)
    check_token_scaled("sinkhorn grad_x[autograd]", leaf.grad, truth, GRAD_TOL, (-2, -1),
                       f"sinkhorn-autograd-flag{out_flag}")


def test_caches_are_non_differentiable_and_guarded():
    z, grad = make_z({"N": 3, "T": 4, "layout": "TND"}, seed=7401)
    leaf = z.clone().requires_grad_(True)
    y, norm_out, sum_out = mhc.npu_mhc_sinkhorn(leaf, num_iters=2, out_flag=1)
    assert norm_out.grad_fn is None and sum_out.grad_fn is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        (norm_out.sum() + sum_out.sum()).backward()
    norm_out.add_(1.0)  # the backward's saved state
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward(grad)


def test_out_flag_0_keeps_x_for_the_backward():
    """out_flag=0 saves x (the recompute reads it): modifying x in place is caught."""
    z, grad = make_z({"N": 3, "T": 4, "layout": "TND"}, seed=7402)
    leaf = z.clone().requires_grad_(True)
    x = leaf * 1.0  # a non-leaf we may modify
    y = mhc.npu_mhc_sinkhorn(x, num_iters=2)[0]
    x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward(grad)


class NoFunction:
    @staticmethod
    def apply(*args):
        raise AssertionError("went through the autograd Function")


@pytest.mark.parametrize("mode", ["plain", "no_grad", "inference_mode"])
def test_no_graph_takes_the_direct_path(monkeypatch, mode):
    z, _ = make_z({"N": 4, "T": 3, "layout": "TND"}, seed=7403)
    want = mhc.npu_mhc_sinkhorn(z, out_flag=1)
    monkeypatch.setattr(mhc.ops, "MhcSinkhornFunction", NoFunction)
    arg = z if mode == "plain" else z.clone().requires_grad_(True)
    ctx = torch.no_grad() if mode == "no_grad" else torch.inference_mode() if mode == "inference_mode" else None
    if ctx is None:
        got = mhc.npu_mhc_sinkhorn(arg, out_flag=1)
    else:
        with ctx:
            got = mhc.npu_mhc_sinkhorn(arg, out_flag=1)
    for name, a, b in zip(("y", "norm_out", "sum_out"), want, got):
        assert not b.requires_grad
        assert_same_bits(name, a, b, f"direct vs {mode}")
    with pytest.raises(AssertionError, match="autograd Function"):
        mhc.npu_mhc_sinkhorn(z.clone().requires_grad_(True))


# Determinism and batch invariance (SPEC §5, §10: per token by construction).

def run_all(z, grad, iters=20):
    y, norm_out, sum_out = mhc.npu_mhc_sinkhorn(z, num_iters=iters, out_flag=1)
    grad_x = mhc.npu_mhc_sinkhorn_backward(grad, norm_out, sum_out)
    recompute = autograd_grad(z, grad, 1e-6, iters, 0)[1]
    return {"y": y, "norm_out": norm_out, "sum_out": sum_out, "grad_x": grad_x, "grad_x(recompute)": recompute}


@pytest.mark.parametrize("n", [4, 7])
def test_bitwise_identical_for_1_and_2_threads(n):
    z, grad = make_z({"N": n, "T": 1000, "layout": "TND"}, seed=7500 + n)
    results = {}
    for threads in (1, 2):
        mhc.set_num_threads(threads)
        results[threads] = run_all(z, grad)
    for name in results[1]:
        assert_same_bits(name, results[1][name], results[2][name], "1 thread vs 2 threads")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_token_alone_equals_token_in_batch(layout):
    n, t = 5, 37
    z, grad = make_z({"N": n, "T": t, "layout": "TND"}, seed=7510)
    if layout == "BSND":
        z, grad = z.unsqueeze(0), grad.unsqueeze(0)
    mhc.set_num_threads(2)
    batch = run_all(z, grad, iters=3)
    for i in (0, 17, 36):
        pick = (lambda a: a[i:i + 1]) if layout == "TND" else (lambda a: a[:, i:i + 1])
        alone = run_all(pick(z), pick(grad), iters=3)
        for name, got in alone.items():
            want = batch[name]
            if name in ("norm_out", "sum_out"):  # [2I, tokens...]
                want = want[:, i:i + 1] if layout == "TND" else want[:, :, i:i + 1]
            else:
                want = pick(want)
            assert_same_bits(name, want, got, f"token {i} in the batch vs alone")


@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
def test_every_family_gives_the_reference_bits(isa_family):
    """SPEC §10 fixes the fp32 steps (sums in index order, true divisions, one exp):
    every kernel family gives the same bits, on many tokens (the vector paths) and few."""
    for n, t, iters in ((4, 1000, 20), (3, 37, 2), (8, 5, 1), (1, 9, 3), (6, 1, 20)):
        z, grad = make_z({"N": n, "T": t, "layout": "BSND"}, seed=7600 + n)
        got = run_all(z, grad, iters)
        mhc.set_isa("reference")
        want = run_all(z, grad, iters)
        mhc.set_isa(isa_family)
        for name in got:
            assert_same_bits(name, want[name], got[name], f"reference vs {isa_family} (N={n}, T={t}, I={iters})")


# The face's validation: TypeError for a dtype or a Python type, ValueError naming the
# tensor for the rest; outputs past the library's limits are refused before allocation.

@pytest.fixture
def caches():
    z, grad = make_z({"N": 4, "T": 3, "layout": "TND"}, seed=7700)
    _, norm_out, sum_out = mhc.npu_mhc_sinkhorn(z, num_iters=2, out_flag=1)
    return z, grad, norm_out, sum_out


FORWARD_ERRORS = [
    (lambda z: mhc.npu_mhc_sinkhorn(z.bfloat16()), TypeError, "^x: .*fp32"),
    (lambda z: mhc.npu_mhc_sinkhorn(z.double()), TypeError, "^x: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z.tolist()), TypeError, "^x: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z[..., :3]), ValueError, r"^x: .*\[3,4,3\]"),
    (lambda z: mhc.npu_mhc_sinkhorn(z[0]), ValueError, "^x: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z[None, None]), ValueError, "^x: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z[:, :0, :0]), ValueError, "^x: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z, num_iters=0), ValueError, "^num_iters: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z, num_iters=2.0), TypeError, "^num_iters: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z, num_iters=True), TypeError, "^num_iters: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z, eps="1e-6"), TypeError, "^eps: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z, eps=float("nan")), ValueError, "^eps: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z, eps=-1.0), ValueError, "^eps: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z, out_flag=2), ValueError, "^out_flag: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z, out_flag=True), TypeError, "^out_flag: "),
    (lambda z: mhc.npu_mhc_sinkhorn(z, 1e-6), TypeError, ""),  # eps is keyword-only
]


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("k", range(len(FORWARD_ERRORS)))
def test_forward_errors_name_the_argument(caches, k, grad):
    """The same exception and message on the direct and the autograd path."""
    call, kind, pattern = FORWARD_ERRORS[k]
    z = caches[0].clone().requires_grad_(grad)
    with pytest.raises(kind, match=pattern):
        call(z)


def test_backward_errors_name_the_tensor(caches):
    z, grad, norm_out, sum_out = caches
    cases = [
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad.bfloat16(), norm_out, sum_out), TypeError, "^grad_y: "),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad[..., :3], norm_out, sum_out), ValueError, "^grad_y: "),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad[0], norm_out, sum_out), ValueError, "^grad_y: "),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad, None, sum_out), TypeError, "^norm_out: "),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad, norm_out, None), TypeError, "^sum_out: "),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad, norm_out.double(), sum_out), TypeError, "^norm_out: "),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad, norm_out, sum_out.bfloat16()), TypeError, "^sum_out: "),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad, norm_out[:3], sum_out[:3]), ValueError, "^norm_out: "),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad, norm_out, sum_out[:2]), ValueError, "^sum_out: "),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad, norm_out[:, :2], sum_out[:, :2]), ValueError, "^norm_out: "),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad, norm_out[..., :5], sum_out[..., :5]), ValueError,
         "^norm_out: .*contiguous"),
        (lambda: mhc.npu_mhc_sinkhorn_backward(grad, norm_out[..., :3, :], sum_out), ValueError, "^norm_out: "),
    ]
    for call, kind, pattern in cases:
        with pytest.raises(kind, match=pattern):
            call()


def test_caches_of_another_pitch_are_read_at_their_pitch(caches):
    """Only the library reads the caches; a copy at pitch N (the fused pair's) gives the same bits."""
    z, grad, norm_out, sum_out = caches
    want = mhc.npu_mhc_sinkhorn_backward(grad, norm_out, sum_out)
    got = mhc.npu_mhc_sinkhorn_backward(grad, norm_out[..., :4].contiguous(), sum_out[..., :4].contiguous())
    assert_same_bits("grad_x", want, got, "pitch 8 vs pitch 4")


def test_outputs_past_the_limit_are_value_errors(allocations):
    huge = torch.zeros(()).expand(2 ** 40, 8, 8)
    with pytest.raises(ValueError, match=r"^x: .*2\^44"):
        mhc.npu_mhc_sinkhorn(huge)
    with pytest.raises(ValueError, match=r"^grad_y: .*2\^44"):
        mhc.npu_mhc_sinkhorn_backward(huge, torch.zeros(2, 1, 8, 8), torch.zeros(2, 1, 8))
    z = torch.zeros(()).expand(2 ** 30, 4, 4)  # 2^34 elements: y fits, the caches 2^44+ do not
    with pytest.raises(ValueError, match=r"^num_iters: .*2\^44"):
        mhc.npu_mhc_sinkhorn(z, num_iters=512, out_flag=1)
    assert allocations == [], allocations


def test_exported():
    for name in ("npu_mhc_sinkhorn", "npu_mhc_sinkhorn_backward", "MhcSinkhornFunction"):
        assert name in mhc.__all__ and getattr(mhc, name) is not None
    assert mhc.ops.npu_mhc_sinkhorn is mhc.npu_mhc_sinkhorn
