"""MhcPreSinkhorn and its backward (SPEC §12), CANN's fused pair, through mhc_pre_sinkhorn
and mhc_pre_sinkhorn_backward (cann_ops_transformer's names, shapes and return order):
bitwise the unfused chain (npu_mhc_pre, npu_mhc_sinkhorn, npu_mhc_sinkhorn_backward,
npu_mhc_pre_backward); every output against the float64 oracle (oracle.pre_sinkhorn64 and
torch autograd through it); the autograd rule; threads and batch invariance; hc_mult and
the other validation; and the whole layer of SPEC §13 through autograd.

Bounds: the MhcPre outputs and the four grads as conftest.check_output (1 ulp + 1e-5 x the
condition magnitude of oracle.magnitudes64, the residual gradient's magnitude raised by
the Sinkhorn backward's own bound); h_res, sum_out, norm_out within FUSED_TOL of their
token's max |truth| (the Sinkhorn's FWD_TOL, 10x for the fp32 error of z_res going in).
"""
import ctypes
import itertools
import os
import re

import pytest
import torch

import mhc
from mhc import _lib
from conftest import (COND_TOL, DTYPES, ERROR_LOG, REPO, SINKHORN_GRAD_TOL, assert_same_bits, check_output,
                      check_token_scaled, strided_copy, token_lead)
from oracle import (F64, forward64, magnitudes64, post64, pre_sinkhorn64, pre_sinkhorn_grads64,
                    sinkhorn_grad64)

FUSED_TOL = 2e-5
FWD8 = ("h_in", "h_post", "h_res", "h_pre", "hc_before_norm", "inv_rms", "sum_out", "norm_out")
GRADS = ("grad_x", "grad_phi", "grad_alpha", "grad_bias")

NS = range(1, 9)
ITERS = (1, 2, 20)
DTYPE_KEYS = ("bf16", "fp16", "fp32")
DS = (1, 7, 64, 100, 512)
TS = (1, 3, 37, 0)
LAYOUTS = ("TND", "BSND")
NONCONTIG = ("none", "inputs", "grads")
EPS = ((1e-6, 1e-6), (1e-2, 1e-3))  # (hc_eps, norm_eps)


def make_cases():
    """Every (N, num_iters) pair; dtype, D, T, layout, strided views and eps cycled across them."""
    cases = []
    for k, (n, iters) in enumerate(itertools.product(NS, ITERS)):
        cases.append({"N": n, "num_iters": iters, "dtype": DTYPE_KEYS[(k // 3 + k) % 3],
                      "D": DS[(k // 3 + 2 * k) % 5], "T": TS[(k // 2) % 4], "layout": LAYOUTS[k % 2],
                      "noncontig": NONCONTIG[(k // 4) % 3], "eps": EPS[(k // 6) % 2]})
    return cases


CASES = make_cases()


def case_id(c):
    return (f"N{c['N']}-I{c['num_iters']}-D{c['D']}-T{c['T']}-{c['layout']}-{c['dtype']}-nc_{c['noncontig']}-"
            f"eps{c['eps'][0]:g}")


def make_inputs(case, seed):
    gen = torch.Generator().manual_seed(seed)
    n, d, dtype = case["N"], case["D"], DTYPES[case["dtype"]]
    lead = token_lead(case)
    f, k = 2 * n + n * n, n * d

    def randn(*shape):
        return torch.randn(shape, generator=gen)

    return {"x": randn(*lead, n, d).to(dtype), "phi": randn(f, k) / k ** 0.5,
            "alpha": 0.5 + torch.rand(3, generator=gen), "bias": 0.5 * randn(f),
            "grad_h_in": randn(*lead, d).to(dtype), "grad_h_post": randn(*lead, n),
            "grad_h_res": randn(*lead, n * n)}


def fused(inp, case, out_flag=True):
    hc_eps, norm_eps = case["eps"]
    return mhc.mhc_pre_sinkhorn(inp["x"], inp["phi"], inp["alpha"], inp["bias"], case["N"], case["num_iters"],
                                hc_eps, norm_eps, out_flag=out_flag)


def fused_backward(inp, case, fwd):
    return mhc.mhc_pre_sinkhorn_backward(inp["grad_h_in"], inp["grad_h_post"], inp["grad_h_res"], inp["x"],
                                         inp["phi"], inp["alpha"], inp["bias"], *fwd[3:], case["eps"][0])


def unfused(inp, case):
    """The chain SPEC §12 defines the pair as: MhcPre (no gamma), MhcSinkhorn on z_res with
    eps = hc_eps; backward MhcSinkhornBackward then MhcPreBackward. In CANN's shapes."""
    hc_eps, norm_eps = case["eps"]
    n, iters = case["N"], case["num_iters"]
    x = inp["x"]
    lead = tuple(x.shape[:-2])
    h_in, h_post, z_res, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(
        x, inp["phi"], inp["alpha"], inp["bias"], norm_eps=norm_eps, hc_eps=hc_eps, out_flag=1)
    h, norm_out, sum_out = mhc.npu_mhc_sinkhorn(z_res, eps=hc_eps, num_iters=iters, out_flag=1)
    fwd = (h_in, h_post, h.reshape(lead + (n * n,)), h_pre, h_mix, inv_rms[..., None],
           sum_out[..., :n], norm_out[..., :n])
    grad_z = mhc.npu_mhc_sinkhorn_backward(inp["grad_h_res"].reshape(lead + (n, n)), norm_out, sum_out)
    bwd = mhc.npu_mhc_pre_backward(x, inp["phi"], inp["alpha"], inp["grad_h_in"], inp["grad_h_post"], grad_z,
                                   inv_rms, h_mix, h_pre, h_post, hc_eps=hc_eps)[:4]
    return fwd, bwd


def check_shapes(inp, case, fwd, bwd):
    x = inp["x"]
    lead, (n, d) = tuple(x.shape[:-2]), tuple(x.shape[-2:])
    f, iters = 2 * n + n * n, case["num_iters"]
    want = {"h_in": lead + (d,), "h_post": lead + (n,), "h_res": lead + (n * n,), "h_pre": lead + (n,),
            "hc_before_norm": lead + (f,), "inv_rms": lead + (1,), "sum_out": (2 * iters,) + lead + (n,),
            "norm_out": (2 * iters,) + lead + (n, n), "grad_x": tuple(x.shape), "grad_phi": (f, n * d),
            "grad_alpha": (3,), "grad_bias": (f,)}
    for name, t in zip(FWD8 + GRADS, fwd + bwd):
        assert tuple(t.shape) == want[name] and t.is_contiguous(), (name, tuple(t.shape))
        assert t.dtype == (x.dtype if name in ("h_in", "grad_x") else torch.float32), name


def check_against_oracle(inp, case, fwd, bwd, cid):
    hc_eps, norm_eps = case["eps"]
    x, phi, alpha, bias = (inp[k] for k in ("x", "phi", "alpha", "bias"))
    n, iters = case["N"], case["num_iters"]
    lead = tuple(x.shape[:-2])
    truth = dict(zip(FWD8, pre_sinkhorn64(x, phi, alpha, bias, iters, hc_eps, norm_eps)))
    # The residual gradient MhcPreBackward receives: d(Σ H·g_res)/dz_res, at the true z_res.
    z64 = pre_sinkhorn_z64(x, phi, alpha, bias, hc_eps, norm_eps)
    gz64 = sinkhorn_grad64(z64, inp["grad_h_res"].reshape(lead + (n, n)), hc_eps, iters)
    # Its fp32 error (the Sinkhorn backward's bound, GRAD_TOL x the token's max) enters
    # MhcPreBackward as an error of its input: raise that input's magnitude to cover it.
    gz_mag = gz64.abs() + (SINKHORN_GRAD_TOL / COND_TOL) * gz64.abs().amax(dim=(-2, -1), keepdim=True)
    mags = magnitudes64(x, phi, alpha, bias, None, norm_eps, hc_eps, inp["grad_h_in"], inp["grad_h_post"], gz_mag)
    ours = dict(zip(FWD8 + GRADS, fwd + bwd))
    v64 = x.to(F64)
    terms = {"h_in": (truth["h_pre"][..., :, None] * v64).abs().sum(dim=-2)}
    pre_names = {"h_in": "h_in", "h_post": "h_post", "h_pre": "h_pre", "hc_before_norm": "h_mix"}
    for name, mag_name in pre_names.items():
        check_output("pre_sinkhorn " + name, ours[name], truth[name], mags[mag_name], cid, terms.get(name))
    check_output("pre_sinkhorn inv_rms", ours["inv_rms"], truth["inv_rms"], mags["inv_rms"][..., None], cid)
    check_token_scaled("pre_sinkhorn h_res", ours["h_res"].reshape(lead + (n, n)),
                       truth["h_res"].reshape(lead + (n, n)), FUSED_TOL, (-2, -1), cid)
    check_token_scaled("pre_sinkhorn norm_out", ours["norm_out"], truth["norm_out"], FUSED_TOL, (-2, -1), cid)
    check_token_scaled("pre_sinkhorn sum_out", ours["sum_out"], truth["sum_out"], FUSED_TOL, (-1,), cid)
    grads = pre_sinkhorn_grads64(x, phi, alpha, bias, iters, hc_eps, norm_eps, inp["grad_h_in"],
                                 inp["grad_h_post"], inp["grad_h_res"])
    for name, want in zip(GRADS, grads):
        terms_abs = mags["grad_x"] if name == "grad_x" else None
        check_output("pre_sinkhorn " + name, ours[name], want, mags[name], cid, terms_abs)


def pre_sinkhorn_z64(x, phi, alpha, bias, hc_eps, norm_eps):
    """z_res of the oracle (MhcPre's h_res logits, SPEC §2) as [.., N, N]."""
    n = x.shape[-2]
    return forward64(x, phi, alpha, bias, None, norm_eps, hc_eps)[2].reshape(x.shape[:-2] + (n, n))


def test_cases_show_every_value():
    for key, values in (("N", NS), ("num_iters", ITERS), ("dtype", DTYPE_KEYS), ("D", DS), ("T", TS),
                        ("layout", LAYOUTS), ("noncontig", NONCONTIG), ("eps", EPS)):
        assert {c[key] for c in CASES} == set(values), key


STYLES = {"x": "reversed", "phi": "step", "alpha": "step", "bias": "step", "grad_h_in": "step",
          "grad_h_post": "reversed", "grad_h_res": "step", "h_pre": "step", "hc_before_norm": "reversed",
          "inv_rms": "step"}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_pre_sinkhorn_against_the_chain_and_the_oracle(case):
    cid = "pre_sinkhorn-" + case_id(case)
    inp = make_inputs(case, seed=9000 + CASES.index(case))
    fwd = fused(inp, case)
    assert len(fwd) == 8
    three = fused(inp, case, out_flag=False)
    assert len(three) == 3
    for name, a, b in zip(FWD8, three, fwd):
        assert_same_bits(name, a, b, "out_flag False vs True")
    bwd = fused_backward(inp, case, fwd)
    check_shapes(inp, case, fwd, bwd)

    # SPEC §12: bitwise the unfused chain.
    chain_fwd, chain_bwd = unfused(inp, case)
    for name, a, b in zip(FWD8 + GRADS, fwd + bwd, chain_fwd + chain_bwd):
        assert_same_bits(name, a, b, "fused vs the unfused chain")

    # Strided views: the very same bits (the caches stay contiguous: the library's layout).
    if case["noncontig"] == "inputs":
        s = dict(inp, **{k: strided_copy(inp[k], STYLES[k]) for k in ("x", "phi", "alpha", "bias")})
        fwd2 = fused(s, case)
        bwd2 = fused_backward(s, case, fwd2)
    elif case["noncontig"] == "grads":
        s = dict(inp, **{k: strided_copy(inp[k], STYLES[k]) for k in ("grad_h_in", "grad_h_post", "grad_h_res")})
        strided_caches = tuple(strided_copy(t, STYLES[k]) for k, t in zip(FWD8[3:6], fwd[3:6])) + fwd[6:]
        fwd2 = fwd
        bwd2 = fused_backward(s, case, fwd[:3] + strided_caches)
    else:
        fwd2, bwd2 = fwd, bwd
    for name, a, b in zip(FWD8 + GRADS, fwd + bwd, fwd2 + bwd2):
        assert_same_bits(name, a, b, f"contiguous vs strided {case['noncontig']}")

    # The autograd rule: mhc_pre_sinkhorn_backward's bits.
    leaves = {k: inp[k].clone().requires_grad_(True) for k in ("x", "phi", "alpha", "bias")}
    hc_eps, norm_eps = case["eps"]
    outputs = mhc.mhc_pre_sinkhorn(leaves["x"], leaves["phi"], leaves["alpha"], leaves["bias"], case["N"],
                                   case["num_iters"], hc_eps, norm_eps)
    assert len(outputs) == 3 and all(o.requires_grad for o in outputs)
    for name, a, b in zip(FWD8, fwd, outputs):
        assert_same_bits(name, a, b.detach(), "direct vs autograd")
    loss = ((outputs[0].float() * inp["grad_h_in"].float()).sum() + (outputs[1] * inp["grad_h_post"]).sum()
            + (outputs[2] * inp["grad_h_res"]).sum())
    loss.backward()
    for name, want, k in zip(GRADS, bwd, ("x", "phi", "alpha", "bias")):
        assert_same_bits(name, want, leaves[k].grad, "mhc_pre_sinkhorn_backward vs loss.backward()")

    if case["T"] == 0:  # nothing per token; the token sums are zeros
        assert not any(bool(g.ne(0).any()) for g in bwd[1:])
        return
    check_against_oracle(inp, case, fwd, bwd, cid)


def test_out_flag_in_the_autograd_path():
    """out_flag=True under autograd: CANN's eight outputs, the caches non-differentiable,
    the bits of the direct call; gradients flow from h_in, h_post, h_res only."""
    case = {"N": 4, "D": 32, "T": 5, "layout": "BSND", "dtype": "bf16", "num_iters": 20, "eps": EPS[0]}
    inp = make_inputs(case, seed=9100)
    direct = fused(inp, case)
    leaves = {k: inp[k].clone().requires_grad_(True) for k in ("x", "phi", "alpha", "bias")}
    outputs = fused(leaves, case)
    assert len(outputs) == 8
    for name, a, b in zip(FWD8, direct, outputs):
        assert_same_bits(name, a, b.detach(), "direct vs autograd")
        assert b.requires_grad == (name in ("h_in", "h_post", "h_res")), name
    outputs[2].sum().backward()
    by_hand = mhc.mhc_pre_sinkhorn_backward(torch.zeros_like(inp["grad_h_in"]), torch.zeros_like(inp["grad_h_post"]),
                                            torch.ones_like(inp["grad_h_res"]), inp["x"], inp["phi"], inp["alpha"],
                                            inp["bias"], *direct[3:])
    for name, want, k in zip(GRADS, by_hand, ("x", "phi", "alpha", "bias")):
        assert_same_bits(name, want, leaves[k].grad, "h_res alone")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        outputs = fused(leaves, case)
        outputs[7].add_(1.0)
        outputs[0].float().sum().backward()


@pytest.mark.parametrize("requires", [("x",), ("phi", "bias"), ("alpha",)])
def test_only_inputs_requiring_grad_get_grads(requires):
    case = {"N": 3, "D": 16, "T": 4, "layout": "TND", "dtype": "fp32", "num_iters": 2, "eps": EPS[0]}
    inp = make_inputs(case, seed=9101)
    leaves = {k: inp[k].clone().requires_grad_(k in requires) for k in ("x", "phi", "alpha", "bias")}
    h_in, h_post, h_res = fused(leaves, case, out_flag=False)
    (h_in.sum() + h_post.sum() + h_res.sum()).backward()
    for k, leaf in leaves.items():
        assert (leaf.grad is None) == (k not in requires), k


class NoFunction:
    @staticmethod
    def apply(*args):
        raise AssertionError("went through the autograd Function")


def test_no_graph_takes_the_direct_path(monkeypatch):
    case = {"N": 4, "D": 16, "T": 3, "layout": "TND", "dtype": "bf16", "num_iters": 3, "eps": EPS[0]}
    inp = make_inputs(case, seed=9102)
    want = fused(inp, case)
    monkeypatch.setattr(mhc.ops, "MhcPreSinkhornFunction", NoFunction)
    for name, a, b in zip(FWD8, want, fused(inp, case)):
        assert_same_bits(name, a, b, "two direct calls")
    with torch.no_grad():
        got = fused(dict(inp, x=inp["x"].clone().requires_grad_(True)), case, out_flag=False)
    assert not any(t.requires_grad for t in got)
    with pytest.raises(AssertionError, match="autograd Function"):
        fused(dict(inp, bias=inp["bias"].clone().requires_grad_(True)), case)


# Determinism and batch invariance.

def test_bitwise_identical_for_1_and_2_threads():
    case = {"N": 4, "D": 64, "T": 1000, "layout": "TND", "dtype": "bf16", "num_iters": 20, "eps": EPS[0]}
    inp = make_inputs(case, seed=9200)
    results = {}
    for threads in (1, 2):
        mhc.set_num_threads(threads)
        fwd = fused(inp, case)
        results[threads] = fwd + fused_backward(inp, case, fwd)
    for name, a, b in zip(FWD8 + GRADS, results[1], results[2]):
        assert_same_bits(name, a, b, "1 vs 2 threads")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_token_alone_equals_token_in_batch(layout):
    case = {"N": 4, "D": 100, "T": 37, "layout": "TND", "dtype": "bf16", "num_iters": 20, "eps": EPS[0]}
    inp = make_inputs(case, seed=9210)
    per_token = ("x", "grad_h_in", "grad_h_post", "grad_h_res")
    if layout == "BSND":
        inp = {k: v.unsqueeze(0) if k in per_token else v for k, v in inp.items()}
    mhc.set_num_threads(2)
    fwd = fused(inp, case)
    grad_x = fused_backward(inp, case, fwd)[0]
    for i in (0, 17, 36):
        pick = (lambda a: a[i:i + 1]) if layout == "TND" else (lambda a: a[:, i:i + 1])
        one = {k: pick(v) if k in per_token else v for k, v in inp.items()}
        alone = fused(one, case)
        alone_grad_x = fused_backward(one, case, alone)[0]
        for name, a, b in zip(FWD8 + ("grad_x",), fwd + (grad_x,), alone + (alone_grad_x,)):
            if name in ("sum_out", "norm_out"):  # [2I, tokens...]
                a = a[:, i:i + 1] if layout == "TND" else a[:, :, i:i + 1]
            else:
                a = pick(a)
            assert_same_bits(name, a, b, f"token {i} in the batch vs alone")


# Validation.

def base():
    case = {"N": 4, "D": 8, "T": 3, "layout": "TND", "dtype": "bf16", "num_iters": 2, "eps": EPS[0]}
    inp = make_inputs(case, seed=9300)
    return case, inp, fused(inp, case)


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires_grad"])
def test_forward_errors_name_the_argument(grad):
    case, inp, _ = base()
    a = dict(inp, phi=inp["phi"].clone().requires_grad_(grad))
    x, phi, alpha, bias = a["x"], a["phi"], a["alpha"], a["bias"]
    cases = [
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 3), ValueError, r"^hc_mult: .*N = 4.*got 3"),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 8), ValueError, "^hc_mult: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 4.0), TypeError, "^hc_mult: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, True), TypeError, "^hc_mult: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, None), TypeError, "^hc_mult: "),
        (lambda: mhc.mhc_pre_sinkhorn(x.double(), phi, alpha, bias, 4), TypeError, "^x: "),
        (lambda: mhc.mhc_pre_sinkhorn(x[0], phi, alpha, bias, 4), ValueError, "^x: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi.bfloat16(), alpha, bias, 4), TypeError, "^phi: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi[:, :-1], alpha, bias, 4), ValueError, "^phi: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi[:8], alpha[:2], bias[:8], 4), ValueError, "^alpha: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha[:2], bias, 4), ValueError, "^alpha: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias[:-1], 4), ValueError, "^bias: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 0), ValueError, "^num_iters: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 2.5), TypeError, "^num_iters: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 2, "1e-6"), TypeError, "^hc_eps: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 2, 1e-6, None), TypeError, "^norm_eps: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, out_flag=2), ValueError, "^out_flag: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, out_flag="yes"), TypeError, "^out_flag: "),
        (lambda: mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 2, 1e-6, 1e-6, True), TypeError, ""),  # keyword-only
    ]
    for call, kind, pattern in cases:
        with pytest.raises(kind, match=pattern):
            call()


def test_the_permutation_form_of_phi_is_refused():
    """The fused pair has F = 2N + N*N (its Sinkhorn needs the N x N logits); phi with
    2N + N! rows (legal for MhcPre) is a ValueError."""
    case, inp, _ = base()
    with pytest.raises(ValueError):
        mhc.mhc_pre_sinkhorn(inp["x"], torch.randn(32, 32), inp["alpha"], torch.randn(32), 4)


def test_backward_errors_name_the_argument():
    case, inp, fwd = base()
    args = [inp["grad_h_in"], inp["grad_h_post"], inp["grad_h_res"], inp["x"], inp["phi"], inp["alpha"],
            inp["bias"]] + list(fwd[3:])
    names = ("grad_hin", "grad_h_post", "grad_h_res", "x", "phi", "alpha", "bias", "h_pre", "hc_before_norm",
             "inv_rms", "sum_out", "norm_out")
    for i, name in enumerate(names):
        if name != "x":  # x sets N and D: the others are then judged against it
            wrong_shape = list(args)
            wrong_shape[i] = args[i][..., :-1] if args[i].shape[-1] > 1 else args[i][:-1]
            with pytest.raises(ValueError, match=f"^{name}: "):
                mhc.mhc_pre_sinkhorn_backward(*wrong_shape)
        wrong_dtype = list(args)
        wrong_dtype[i] = args[i].double()
        with pytest.raises(TypeError, match=f"^{name}: "):
            mhc.mhc_pre_sinkhorn_backward(*wrong_dtype)
        missing = list(args)
        missing[i] = None
        with pytest.raises(TypeError, match=f"^{name}: "):
            mhc.mhc_pre_sinkhorn_backward(*missing)
    with pytest.raises(TypeError, match="^hc_eps: "):
        mhc.mhc_pre_sinkhorn_backward(*args, hc_eps="1e-6")
    # inv_rms as CANN's [.., 1] or the per-token [..] of npu_mhc_pre: the same bits.
    per_token = list(args)
    per_token[9] = args[9][..., 0]
    for name, a, b in zip(GRADS, mhc.mhc_pre_sinkhorn_backward(*args), mhc.mhc_pre_sinkhorn_backward(*per_token)):
        assert_same_bits(name, a, b, "inv_rms [T,1] vs [T]")


def test_outputs_past_the_limit_are_value_errors(allocations):
    n, d = 4, 1
    x = torch.zeros((), dtype=torch.bfloat16).expand(2 ** 30, n, d)  # 2^32 elements
    phi, alpha, bias = torch.zeros(24, 4), torch.ones(3), torch.zeros(24)
    with pytest.raises(ValueError, match=r"^num_iters: .*2\^44"):
        mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 1024, out_flag=True)  # caches 2^45
    huge = torch.zeros((), dtype=torch.bfloat16).expand(2 ** 44, n, d)
    with pytest.raises(ValueError, match=r"^x: .*2\^44"):
        mhc.mhc_pre_sinkhorn(huge, phi, alpha, bias, 4)
    assert allocations == [], allocations


def test_exported():
    for name in ("mhc_pre_sinkhorn", "mhc_pre_sinkhorn_backward", "MhcPreSinkhornFunction"):
        assert name in mhc.__all__ and getattr(mhc, name) is not None


# The whole layer (SPEC §13) through autograd.

def layer(x, phi, alpha, bias, w, n, iters, fused_pair, post_of=mhc.npu_mhc_post):
    """x_{l+1} = MhcPost(x, H, F(h_in), h_post) with F a linear map w; the pre block fused
    (mhc_pre_sinkhorn) or unfused (npu_mhc_pre then npu_mhc_sinkhorn)."""
    lead = x.shape[:-2]
    if fused_pair:
        h_in, h_post, h = mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, n, iters)
        h = h.reshape(lead + (n, n))
    else:
        h_in, h_post, z = mhc.npu_mhc_pre(x, phi, alpha, bias)[:3]
        h = mhc.npu_mhc_sinkhorn(z, num_iters=iters)[0]  # its backward recomputes from z
    h_out = (h_in.float() @ w).to(x.dtype)
    return post_of(x, h, h_out, h_post)


def layer64(x, phi, alpha, bias, w, n, iters):
    h_in, h_post, h = pre_sinkhorn64(x, phi, alpha, bias, iters)[:3]
    return post64(x, h.reshape(x.shape[:-2] + (n, n)), h_in @ w.to(F64), h_post)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_layer_through_autograd(dtype):
    """Fused and unfused pre blocks give the same bits for the layer and every grad; both
    agree with float64 autograd through the oracle's layer (normwise, fp32 x: 1e-5;
    bf16 x: bf16's rounding of h_in, h_out and x_{l+1} dominates, 2e-2)."""
    n, d, t, iters = 4, 64, 6, 20
    case = {"N": n, "D": d, "T": t, "layout": "BSND", "dtype": dtype, "num_iters": iters, "eps": EPS[0]}
    inp = make_inputs(case, seed=9400)
    gen = torch.Generator().manual_seed(9401)
    w = torch.randn(d, d, generator=gen) / d ** 0.5
    g = torch.randn(inp["x"].shape, generator=gen).to(inp["x"].dtype)
    results = []
    for fused_pair in (True, False):
        leaves = {k: inp[k].clone().requires_grad_(True) for k in ("x", "phi", "alpha", "bias")}
        wl = w.clone().requires_grad_(True)
        out = layer(leaves["x"], leaves["phi"], leaves["alpha"], leaves["bias"], wl, n, iters, fused_pair)
        (out.float() * g.float()).sum().backward()
        results.append([out.detach()] + [leaves[k].grad for k in ("x", "phi", "alpha", "bias")] + [wl.grad])
    names = ("x_next", "grad_x", "grad_phi", "grad_alpha", "grad_bias", "grad_w")
    for name, a, b in zip(names, *results):
        assert_same_bits(name, a, b, "fused vs unfused pre block")
    leaves64 = [inp[k].detach().to(F64).requires_grad_(True) for k in ("x", "phi", "alpha", "bias")]
    w64 = w.to(F64).requires_grad_(True)
    out64 = layer64(*leaves64, w64, n, iters)
    grads64 = torch.autograd.grad((out64 * g.to(F64)).sum(), leaves64 + [w64])
    tol = 1e-5 if dtype == "fp32" else 2e-2
    for name, ours, truth in zip(names, results[0], (out64.detach(),) + grads64):
        rel = float(torch.linalg.vector_norm(ours.double() - truth) / torch.linalg.vector_norm(truth))
        ERROR_LOG.record(f"layer {name}[{dtype}]", "normwise rel", rel, f"layer-{dtype}")
        assert rel <= tol, f"{name}: normwise {rel:.3g} > {tol:g}"


# The ctypes prototypes come from the library's description of its operators
# (mhc_operators); they must be the prototypes mhc.h declares, and every operator the
# header declares must be described (a mismatch would not fail by itself: ctypes would
# pass the arguments wrongly).

def header_prototypes():
    text = open(os.path.join(REPO, "include", "mhc", "mhc.h")).read()
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
    found = {}
    for m in re.finditer(r"MHC_API\s+int\s+(mhc_\w+)\s*\(([^)]*)\)\s*;", text):
        params = [" ".join(p.split()) for p in m[2].split(",")]
        found[m[1]] = [re.sub(r"\s*\w+$", "", p) for p in params]  # drop the parameter names
    return found


def test_bindings_match_the_header():
    c_types = {"const mhc_tensor *": ctypes.POINTER(_lib.MhcTensor), "double": ctypes.c_double,
               "int64_t": ctypes.c_int64, "const mhc_options *": ctypes.POINTER(_lib.MhcOptions)}
    # The operators: the functions of tensors that end with the call's options
    # (mhc_prepare_pre takes tensors but is no operator).
    prototypes = {name: params for name, params in header_prototypes().items()
                  if "const mhc_tensor *" in params and params[-1] == "const mhc_options *"}
    assert sorted(prototypes) == sorted("mhc_" + name for name in _lib.OPERATORS)
    for name in _lib.OPERATORS:
        fn = getattr(_lib, name)
        assert fn is getattr(_lib.lib, "mhc_" + name)
        want = [c_types[p] for p in prototypes["mhc_" + name]]
        assert list(fn.argtypes) == want, f"{name}: argtypes {fn.argtypes} != the header's {prototypes[name]}"
        assert fn.restype is ctypes.c_int, name
