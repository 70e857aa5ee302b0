"""The fused layer boundary MhcPostPre (SPEC §15) through mhc.mhc_post_pre, both variants (V4:
MhcPre with gamma + MhcSinkhorn, h_in with its own h_pre; V4.1: MhcPreSinglePass with the
carried pre_mix): bitwise the unfused chain (npu_mhc_post, then npu_mhc_pre + npu_mhc_sinkhorn
or mhc_pre_single_pass), forward on every kernel family and gradients (autograd through the
chain, where it is expressible, and the chain of backwards at the library's documented
rounding point) on every fp32 family; every output and every gradient against the float64
oracle (oracle.post_pre64, torch autograd through it); the autograd rule; threads and batch
invariance; T = 0; validation in this operator's words; torch.ops.mhc.mhc_post_pre.

Bounds: x_next as test_post.py's out (1 ulp + 1e-5 x post_magnitudes64); the pre's outputs
h_in, h_pre, h_post_next and its gradients (phi, alpha, bias, gamma, pre_mix) as
test_single_pass.py bounds them (conftest.check_output with oracle.magnitudes64 on the
library's x_next, the residual gradient's magnitude raised by the Sinkhorn backward's own
bound; V4: its own h_pre's collapse, grad_h_pre added to g_pre); h_res_next within FUSED_TOL
of its token's max |truth|. The post's gradients (x, h_res, h_out, h_post) as test_post.py
bounds them for the truth's grad of x_next G, raised by the error of the G the library
hands on: 1 ulp of x's dtype (its documented rounding) + 1e-5 x G's magnitude, carried
through MhcPostBackward's sums (post_magnitudes64 of that error, over 1e-5).
"""
import math

import pytest
import torch

import mhc
from mhc import _core, _lib
from conftest import (COND_TOL, DTYPES, FAMILIES, SINKHORN_GRAD_TOL, assert_same_bits, check_output,
                      check_token_scaled, strided_copy, token_lead, ulp)
from oracle import (F64, POST_PRE_LEAVES, forward64, magnitudes64, post64, post_magnitudes64, post_pre64,
                    post_pre_grads64, sinkhorn_grad64)

FUSED_TOL = 2e-5
OUTPUTS = ("x_next", "h_in", "h_pre", "h_post_next", "h_res_next")
OUTPUT_GRADS = tuple("grad_" + name for name in OUTPUTS)
LEAVES = POST_PRE_LEAVES  # x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma
GRADS = tuple("grad_" + name for name in LEAVES)
POST_GRADS = ("grad_x", "grad_h_res", "grad_h_out", "grad_h_post")
PRE_GRADS = ("grad_phi", "grad_alpha", "grad_bias", "grad_pre_mix", "grad_gamma")
# run_post_pre_backward's (and mhc_post_pre_backward's) return order.
BACKWARD_ORDER = POST_GRADS + ("grad_pre_mix", "grad_phi", "grad_alpha", "grad_bias", "grad_gamma")
PER_TOKEN = ("x", "h_res", "h_out", "h_post", "pre_mix") + OUTPUT_GRADS
EPS = ((1e-6, 1e-6, None), (1e-2, 1e-3, None), (1e-6, 1e-6, 1e-3))  # (hc_eps, norm_eps, sinkhorn_eps)
FP32_FAMILIES = [f for f in FAMILIES if f != "reference"]

KEYS = ("single_pass", "N", "D", "T", "layout", "dtype", "gamma", "h_res", "pre_mix", "num_iters", "eps")
CASES = [dict(zip(KEYS, values)) for values in [
    # V4.1
    (True, 1, 7, 3, "TND", "bf16", False, True, True, 20, EPS[0]),
    (True, 1, 16, 2, "BSND", "fp32", True, False, False, 3, EPS[1]),
    (True, 2, 33, 5, "BSND", "fp16", True, True, True, 20, EPS[0]),
    (True, 2, 8, 1, "TND", "bf16", False, False, False, 1, EPS[2]),
    (True, 4, 64, 6, "TND", "fp32", False, True, True, 20, EPS[1]),
    (True, 4, 100, 4, "BSND", "bf16", True, True, False, 20, EPS[0]),
    (True, 4, 17, 3, "TND", "fp16", True, False, True, 2, EPS[2]),
    (True, 4, 32, 2, "BSND", "fp16", False, True, False, 20, EPS[0]),
    # V4
    (False, 1, 9, 3, "BSND", "fp16", True, True, False, 20, EPS[0]),
    (False, 1, 32, 4, "TND", "fp32", False, False, False, 2, EPS[2]),
    (False, 2, 48, 3, "TND", "bf16", True, False, False, 20, EPS[1]),
    (False, 2, 5, 7, "BSND", "fp32", False, True, False, 20, EPS[0]),
    (False, 4, 40, 5, "TND", "bf16", False, True, False, 20, EPS[2]),
    (False, 4, 1, 5, "BSND", "fp16", True, False, False, 3, EPS[0]),
    (False, 4, 128, 3, "BSND", "bf16", True, True, False, 20, EPS[1]),
    (False, 4, 23, 2, "TND", "fp32", True, True, False, 20, EPS[0]),
]]


def variant(case):
    return "V4.1" if case["single_pass"] else "V4"


def case_id(c):
    return (f"{variant(c)}-N{c['N']}-D{c['D']}-T{c['T']}-{c['layout']}-{c['dtype']}-"
            f"{'gamma' if c['gamma'] else 'nogamma'}-{'hres' if c['h_res'] else 'identity'}-"
            f"{'premix' if c['pre_mix'] else 'nopremix'}-I{c['num_iters']}-eps{c['eps'][0]:g}-{c['eps'][2]}")


def test_cases_show_every_value():
    for single_pass in (True, False):
        cases = [c for c in CASES if c["single_pass"] == single_pass]
        for key, values in (("N", (1, 2, 4)), ("dtype", DTYPES), ("layout", ("TND", "BSND")),
                            ("gamma", (True, False)), ("h_res", (True, False))):
            assert {c[key] for c in cases} == set(values), (variant(cases[0]), key)
        assert any(c["D"] % 16 for c in cases) and any(c["D"] % 16 == 0 for c in cases)
    assert {c["pre_mix"] for c in CASES if c["single_pass"]} == {True, False}
    assert not any(c["pre_mix"] for c in CASES if not c["single_pass"])  # V4 has none


def make_inputs(case, seed):
    """Inputs in the test dtype: h_res row-stochastic (positive, not symmetric), pre_mix in
    [0.1, 1.6]; the incoming grads of the five outputs (those in x's dtype made in it)."""
    gen = torch.Generator().manual_seed(seed)
    n, d, dtype = case["N"], case["D"], DTYPES[case["dtype"]]
    lead = token_lead(case)
    f, k = 2 * n + n * n, n * d

    def randn(*shape):
        return torch.randn(shape, generator=gen)

    return {
        "x": randn(*lead, n, d).to(dtype),
        "h_res": torch.softmax(randn(*lead, n, n), dim=-1) if case["h_res"] else None,
        "h_out": randn(*lead, d).to(dtype),
        "h_post": 2 * torch.rand(lead + (n,), generator=gen),
        "phi": randn(f, k) / math.sqrt(k),
        "alpha": 0.5 + torch.rand(3, generator=gen),
        "bias": 0.5 * randn(f),
        "pre_mix": 0.1 + 1.5 * torch.rand(lead + (n,), generator=gen) if case["pre_mix"] else None,
        "gamma": 1.0 + 0.5 * randn(n, d) if case["gamma"] else None,
        "grad_x_next": randn(*lead, n, d).to(dtype),
        "grad_h_in": randn(*lead, d).to(dtype),
        "grad_h_pre": randn(*lead, n),
        "grad_h_post_next": randn(*lead, n),
        "grad_h_res_next": randn(*lead, n, n),
    }


def options(case):
    hc_eps, norm_eps, sinkhorn_eps = case["eps"]
    return dict(single_pass=case["single_pass"], num_iters=case["num_iters"], hc_eps=hc_eps, norm_eps=norm_eps,
                sinkhorn_eps=sinkhorn_eps)


def post_pre(inp, case):
    return mhc.mhc_post_pre(inp["x"], inp["h_res"], inp["h_out"], inp["h_post"], inp["phi"], inp["alpha"],
                            inp["bias"], inp["pre_mix"], gamma=inp["gamma"], **options(case))


def loss_of(outputs, inp, omit=()):
    """Σ over the outputs of output·its grad tensor (those named in omit left out): the incoming
    grads are then exactly the test's grad tensors."""
    loss = 0
    for name, t in zip(OUTPUTS, outputs):
        if "grad_" + name not in omit:
            loss = loss + (t.float() * inp["grad_" + name].float()).sum()
    return loss


def run_ours(inp, case, requires=LEAVES, omit=()):
    """Through autograd: ({output: tensor}, {grad_<leaf>: grad or None})."""
    leaves = {k: None if inp[k] is None else inp[k].clone().requires_grad_(k in requires) for k in LEAVES}
    outputs = post_pre(dict(inp, **leaves), case)
    assert len(outputs) == 5 and all(o.requires_grad for o in outputs)
    loss_of(outputs, inp, omit).backward()
    grads = {"grad_" + k: None if leaves[k] is None else leaves[k].grad for k in LEAVES}
    return dict(zip(OUTPUTS, (o.detach() for o in outputs))), grads


def check_shapes(inp, fwd, grads):
    x = inp["x"]
    lead, (n, d) = tuple(x.shape[:-2]), tuple(x.shape[-2:])
    f = 2 * n + n * n
    want = {"x_next": tuple(x.shape), "h_in": lead + (d,), "h_pre": lead + (n,), "h_post_next": lead + (n,),
            "h_res_next": lead + (n, n), "grad_x": tuple(x.shape), "grad_h_res": lead + (n, n),
            "grad_h_out": lead + (d,), "grad_h_post": lead + (n,), "grad_phi": (f, n * d), "grad_alpha": (3,),
            "grad_bias": (f,), "grad_pre_mix": lead + (n,), "grad_gamma": (n, d)}
    for name, t in list(fwd.items()) + list(grads.items()):
        if name in ("grad_h_res", "grad_pre_mix", "grad_gamma") and inp[name[5:]] is None:
            assert t is None, name
            continue
        assert tuple(t.shape) == want[name] and t.is_contiguous(), (name, tuple(t.shape))
        in_x_dtype = name in ("x_next", "h_in", "grad_x", "grad_h_out")
        assert t.dtype == (x.dtype if in_x_dtype else torch.float32), name


def check_against_oracle(inp, case, fwd, grads, cid):
    hc_eps, norm_eps, sinkhorn_eps = case["eps"]
    single_pass, iters = case["single_pass"], case["num_iters"]
    eps = hc_eps if sinkhorn_eps is None else sinkhorn_eps
    x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma = (inp[k] for k in LEAVES)
    what = f"post_pre {variant(case)} "
    x_next = fwd["x_next"]  # the library's, rounded: what its pre reads
    kw = dict(single_pass=single_pass, num_iters=iters, hc_eps=hc_eps, norm_eps=norm_eps, sinkhorn_eps=sinkhorn_eps)
    truth = dict(zip(OUTPUTS, post_pre64(*(inp[k] for k in LEAVES), x_next=x_next, **kw)))
    want = post_pre_grads64({k: inp[k] for k in LEAVES}, {k: inp[k] for k in OUTPUT_GRADS}, x_next=x_next, **kw)

    # The pre's side, on the library's x_next, as test_single_pass.py (V4: the own h_pre's collapse).
    z64 = forward64(x_next, phi, alpha, bias, gamma, norm_eps, hc_eps)[2]
    gz64 = sinkhorn_grad64(z64, inp["grad_h_res_next"], eps, iters)
    gz_mag = gz64.abs() + (SINKHORN_GRAD_TOL / COND_TOL) * gz64.abs().amax(dim=(-2, -1), keepdim=True)
    mags = magnitudes64(x_next, phi, alpha, bias, gamma, norm_eps, hc_eps, inp["grad_h_in"], inp["grad_h_post_next"],
                        gz_mag, inp["grad_x_next"], carried=(pre_mix, inp["grad_h_pre"]) if single_pass else None,
                        grad_h_pre=None if single_pass else inp["grad_h_pre"])
    for name, mag in (("h_in", "h_in"), ("h_pre", "h_pre"), ("h_post_next", "h_post")):
        check_output(what + name, fwd[name], truth[name], mags[mag], cid, mags["h_in"] if name == "h_in" else None)
    check_token_scaled(what + "h_res_next", fwd["h_res_next"], truth["h_res_next"], FUSED_TOL, (-2, -1), cid)
    for name in PRE_GRADS:
        if want[name] is None:
            assert grads[name] is None, name
            continue
        check_output(what + name, grads[name], want[name], mags[name], cid)

    # The post's side: x_next against post64 (unrounded); the grads from the truth's G, whose
    # copy in the library is rounded to x's dtype (its documented rounding point).
    g64 = want["x_next"]
    g_err = ulp(g64, x.dtype) + COND_TOL * mags["grad_x"]
    post_mags = post_magnitudes64(x, h_res, h_out, h_post, g64)
    err_mags = post_magnitudes64(x, h_res, h_out, h_post, g_err)
    check_output(what + "x_next", x_next, post64(x, h_res, h_out, h_post), post_mags["out"], cid, post_mags["out"])
    for name in POST_GRADS:
        if want[name] is None:
            assert grads[name] is None, name
            continue
        mag = post_mags[name] + err_mags[name] / COND_TOL
        check_output(what + name, grads[name], want[name], mag, cid,
                     mag if name in ("grad_x", "grad_h_out") else None)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
def test_post_pre_against_the_oracle(isa_family, case):
    cid = f"post_pre-{isa_family}-{case_id(case)}"
    inp = make_inputs(case, seed=13000 + CASES.index(case))
    fwd, grads = run_ours(inp, case)
    check_shapes(inp, fwd, grads)
    direct = post_pre(inp, case)  # no graph: the library called directly
    assert len(direct) == 5 and not any(t.requires_grad for t in direct)
    for name, a in zip(OUTPUTS, direct):
        assert_same_bits(name, a, fwd[name], "direct vs autograd")
    if case["single_pass"] and inp["pre_mix"] is None:  # V4.1's first site selects stream 0
        assert_same_bits("h_in", fwd["x_next"][..., 0, :], fwd["h_in"], "first site vs x_next's stream 0")
    check_against_oracle(inp, case, fwd, grads, cid)


def test_the_oracle_passes_gradcheck():
    """float64 finite differences agree with autograd through post_pre64, both variants, with
    and without h_res, pre_mix and gamma; and SPEC §15's composition: post64, then the pre on it."""
    gen = torch.Generator().manual_seed(13100)
    n, d, t = 2, 3, 2
    f = 2 * n + n * n

    def leaf(*shape, scale=1.0, shift=0.0):
        return (shift + scale * torch.randn(shape, generator=gen, dtype=F64)).requires_grad_(True)

    x, h_res, h_out, h_post = leaf(t, n, d), leaf(t, n, n, scale=0.3, shift=0.5), leaf(t, d), leaf(t, n, shift=1.0)
    phi, alpha, bias = leaf(f, n * d, scale=0.4), leaf(3, scale=0.2, shift=0.8), leaf(f, scale=0.5)
    pre_mix, gamma = leaf(t, n, scale=0.3, shift=0.7), leaf(n, d, scale=0.2, shift=1.0)
    kw = dict(num_iters=3, hc_eps=1e-2, norm_eps=1e-3, sinkhorn_eps=1e-3)

    def v41(*a):
        return post_pre64(*a, single_pass=True, **kw)[:5]

    def v4(x, h_res, h_out, h_post, phi, alpha, bias, gamma):
        return post_pre64(x, h_res, h_out, h_post, phi, alpha, bias, None, gamma, single_pass=False, **kw)[:5]

    assert torch.autograd.gradcheck(v41, (x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma))
    assert torch.autograd.gradcheck(lambda x, h_out, h_post, phi, alpha, bias: v41(
        x, None, h_out, h_post, phi, alpha, bias, None, None), (x, h_out, h_post, phi, alpha, bias))
    assert torch.autograd.gradcheck(v4, (x, h_res, h_out, h_post, phi, alpha, bias, gamma))
    assert torch.autograd.gradcheck(lambda x, h_out, h_post, phi, alpha, bias: v4(
        x, None, h_out, h_post, phi, alpha, bias, None), (x, h_out, h_post, phi, alpha, bias))
    with torch.no_grad():
        x_next = post64(x, h_res, h_out, h_post)
        got = post_pre64(x, h_res, h_out, h_post, phi, alpha, bias, None, gamma, single_pass=False, **kw)
        h_in, h_post_next, z, inv_rms, h_mix, h_pre = forward64(x_next, phi, alpha, bias, gamma, 1e-3, 1e-2)
        assert torch.equal(got[0], x_next) and torch.equal(got[1], h_in) and torch.equal(got[2], h_pre)
        assert torch.equal(got[3], h_post_next) and torch.equal(got[5], inv_rms) and torch.equal(got[6], h_mix)


# Bitwise the unfused chain.

CHAIN_CASES = [CASES[i] for i in (0, 2, 4, 5, 8, 10, 11, 14)]


def chain_forward(inp, case):
    """npu_mhc_post, then V4's npu_mhc_pre (gamma, out_flag=1) + npu_mhc_sinkhorn(eps=sinkhorn_eps) or
    V4.1's mhc_pre_single_pass: (x_next, h_in, h_pre, h_post_next, h_res_next); differentiable
    (h_pre in V4 is npu_mhc_pre's cache: no grad flows from it)."""
    hc_eps, norm_eps, sinkhorn_eps = case["eps"]
    x_next = mhc.npu_mhc_post(inp["x"], inp["h_res"], inp["h_out"], inp["h_post"])
    if case["single_pass"]:
        return (x_next,) + tuple(mhc.mhc_pre_single_pass(
            x_next, inp["phi"], inp["alpha"], inp["bias"], inp["pre_mix"], gamma=inp["gamma"],
            num_iters=case["num_iters"], hc_eps=hc_eps, norm_eps=norm_eps, sinkhorn_eps=sinkhorn_eps))
    h_in, h_post_next, z_res, _, _, h_pre = mhc.npu_mhc_pre(x_next, inp["phi"], inp["alpha"], inp["bias"],
                                                           gamma=inp["gamma"], norm_eps=norm_eps, hc_eps=hc_eps,
                                                           out_flag=1)
    h = mhc.npu_mhc_sinkhorn(z_res, eps=hc_eps if sinkhorn_eps is None else sinkhorn_eps,
                             num_iters=case["num_iters"])[0]
    return x_next, h_in, h_pre, h_post_next, h


def chain_backwards(inp, case):
    """The chain of backwards at the library's documented rounding point: the pre's backward
    with grad_x_next as its grad_x_post (fp32 sums, rounded once to x's dtype), then
    MhcPostBackward on that; V4 without grad_h_pre (MhcPreBackward has none)."""
    hc_eps, norm_eps, sinkhorn_eps = case["eps"]
    eps = hc_eps if sinkhorn_eps is None else sinkhorn_eps
    iters = case["num_iters"]
    x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma = (inp[k] for k in LEAVES)
    x_next = _core.run_post_forward(x, h_res, h_out, h_post)
    if case["single_pass"]:
        h_in, h_pre, h_post_next, h, inv_rms, h_mix = _core.run_pre_single_pass_forward(
            x_next, phi, alpha, bias, pre_mix, gamma, iters, hc_eps, norm_eps, eps)
        g_next, g_pre_mix, g_phi, g_alpha, g_bias, g_gamma = _core.run_pre_single_pass_backward(
            x_next, phi, alpha, bias, pre_mix, gamma, inp["grad_h_in"], inp["grad_h_pre"], inp["grad_h_post_next"],
            inp["grad_h_res_next"], inv_rms, h_mix, h_pre, h_post_next, iters, hc_eps, norm_eps, eps,
            grad_x_post=inp["grad_x_next"])
    else:
        h_in, h_post_next, z_res, inv_rms, h_mix, h_pre = _core.run_pre_forward(
            x_next, phi, alpha, bias, gamma, norm_eps, hc_eps, _lib.MATMUL_FP32, True)
        g_z = _core.run_sinkhorn_backward(inp["grad_h_res_next"], None, None, z_res, eps, iters)
        g_next, g_phi, g_alpha, g_bias, g_gamma = mhc.npu_mhc_pre_backward(
            x_next, phi, alpha, inp["grad_h_in"], inp["grad_h_post_next"], g_z, inv_rms, h_mix, h_pre, h_post_next,
            gamma=gamma, hc_eps=hc_eps, grad_x_post=inp["grad_x_next"])
        g_pre_mix = None
        g_gamma = g_gamma if gamma is not None else None
    assert g_next.dtype == x.dtype
    g_x, g_h_res, g_h_out, g_h_post = _core.run_post_backward(g_next, x, h_res, h_out, h_post, x.dtype,
                                                              with_grad_h_res=h_res is not None)
    return dict(grad_x=g_x, grad_h_res=g_h_res, grad_h_out=g_h_out, grad_h_post=g_h_post, grad_phi=g_phi,
                grad_alpha=g_alpha, grad_bias=g_bias, grad_pre_mix=g_pre_mix, grad_gamma=g_gamma), inv_rms, h_mix


@pytest.mark.parametrize("case", CHAIN_CASES, ids=case_id)
@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
def test_the_unfused_chain(isa_family, case):
    """Forward: every output and the caches, bitwise the chain's, on every family. Gradients on
    every fp32 family: autograd through the chain where it is expressible (x_next's own grad
    only with fp32 x, where the chain's second rounding is none; V4 without h_pre's grad, a
    cache of npu_mhc_pre), and the chain of backwards at the documented rounding point with
    every output's grad (V4: but h_pre's)."""
    what = f"fused vs the unfused chain ({isa_family}, {case_id(case)})"
    inp = make_inputs(case, seed=13200 + CASES.index(case))
    single_pass = case["single_pass"]
    for name, want, got in zip(OUTPUTS, chain_forward(inp, case), post_pre(inp, case)):
        assert_same_bits(name, want, got, what)
    checked = _core.check_post_pre_args(*(inp[k] for k in LEAVES[:8]), single_pass, inp["gamma"], case["num_iters"],
                                        *case["eps"])
    fused = _core.run_post_pre_forward(*(inp[k] for k in LEAVES), *checked)
    chain_grads, inv_rms, h_mix = chain_backwards(inp, case)
    assert_same_bits("inv_rms", inv_rms, fused[5], what)
    assert_same_bits("h_mix", h_mix, fused[6], what)
    if isa_family == "reference":
        return  # its gradients: within the oracle's bounds (test_post_pre_against_the_oracle)

    omit = () if single_pass else ("grad_h_pre",)
    _, ours = run_ours(inp, case, omit=omit)
    for name in GRADS:
        assert_same_bits(name, chain_grads[name], ours[name], what + ", the backwards' chain")

    omit += () if case["dtype"] == "fp32" else ("grad_x_next",)
    _, ours = run_ours(inp, case, omit=omit)
    leaves = {k: None if inp[k] is None else inp[k].clone().requires_grad_(True) for k in LEAVES}
    loss_of(chain_forward(dict(inp, **leaves), case), inp, omit).backward()
    for name in GRADS:
        want = None if leaves[name[5:]] is None else leaves[name[5:]].grad
        assert_same_bits(name, want, ours[name], what + ", autograd through the chain (omitting " + str(omit) + ")")


@pytest.mark.parametrize("single_pass", [True, False], ids=["V4.1", "V4"])
def test_the_backward_function_is_the_rule(single_pass):
    """_core.mhc_post_pre_backward on the forward's outputs and caches, with grad_x_next and
    grad_h_pre None (absent: 0) or given: the autograd rule's bits; grad_x asked in fp32
    rounded to x's dtype is grad_x."""
    case = dict(CASES[5] if single_pass else CASES[14])
    inp = make_inputs(case, seed=13250)
    checked = _core.check_post_pre_args(*(inp[k] for k in LEAVES[:8]), single_pass, inp["gamma"], case["num_iters"],
                                        *case["eps"])
    x_next, _, h_pre, h_post_next, _, inv_rms, h_mix = _core.run_post_pre_forward(*(inp[k] for k in LEAVES),
                                                                                 *checked)
    hc_eps, norm_eps, sinkhorn_eps = case["eps"]
    for omit in ((), ("grad_x_next", "grad_h_pre")):
        g = {k: None if k in omit else inp[k] for k in OUTPUT_GRADS}

        def backward(**kw):
            return _core.mhc_post_pre_backward(
                *(inp[k] for k in LEAVES), x_next, g["grad_x_next"], g["grad_h_in"], g["grad_h_pre"],
                g["grad_h_post_next"], g["grad_h_res_next"], inv_rms, h_mix, h_pre, h_post_next,
                single_pass=single_pass, num_iters=case["num_iters"], hc_eps=hc_eps, norm_eps=norm_eps,
                sinkhorn_eps=sinkhorn_eps, **kw)

        got = dict(zip(BACKWARD_ORDER, backward()))
        _, want = run_ours(inp, case, omit=omit)
        for name in GRADS:
            assert_same_bits(name, want[name], got[name], f"the backward function vs autograd (omitting {omit})")
        grad_x32 = backward(grad_x_dtype=torch.float32)[0]
        assert grad_x32.dtype == torch.float32
        assert_same_bits("grad_x", got["grad_x"], grad_x32.to(inp["x"].dtype), "fp32 grad_x rounded vs x's dtype")


# The autograd rule.

@pytest.mark.parametrize("requires", [("x",), ("h_res", "h_post"), ("h_out",), ("phi", "bias"), ("alpha", "gamma"),
                                      ("pre_mix",)])
def test_only_inputs_requiring_grad_get_grads(requires):
    case = dict(CASES[2])
    inp = make_inputs(case, seed=13300)
    _, grads = run_ours(inp, case, requires)
    everything = run_ours(inp, case)[1]
    for name in GRADS:
        if name[5:] in requires:
            assert_same_bits(name, everything[name], grads[name], "all leaves vs some")
        else:
            assert grads[name] is None, name


@pytest.mark.parametrize("single_pass", [True, False], ids=["V4.1", "V4"])
def test_unused_outputs_are_zero_grads(single_pass):
    """Only h_pre feeds the loss: the other outputs' grads arrive as None (grad_x_next None is
    the library's absent one), the same bits as zeros given explicitly."""
    case = dict(CASES[2] if single_pass else CASES[8])
    inp = make_inputs(case, seed=13310)
    zeros = dict(inp, **{k: torch.zeros_like(inp[k]) for k in OUTPUT_GRADS if k != "grad_h_pre"})
    _, want = run_ours(zeros, case)
    leaves = {k: None if inp[k] is None else inp[k].clone().requires_grad_(True) for k in LEAVES}
    outputs = post_pre(dict(inp, **leaves), case)
    (outputs[2] * inp["grad_h_pre"]).sum().backward()
    for name in GRADS:
        got = None if leaves[name[5:]] is None else leaves[name[5:]].grad
        assert_same_bits(name, want[name], got, "unused outputs vs zero grads")


class NoFunction:
    @staticmethod
    def apply(*args):
        raise AssertionError("went through the autograd Function")


def test_no_graph_takes_the_direct_path(monkeypatch):
    case = dict(CASES[0])
    inp = make_inputs(case, seed=13320)
    want = post_pre(inp, case)
    monkeypatch.setattr(mhc.ops, "MhcPostPreFunction", NoFunction)
    for name, a, b in zip(OUTPUTS, want, post_pre(inp, case)):
        assert_same_bits(name, a, b, "two direct calls")
    with torch.no_grad():
        got = post_pre(dict(inp, h_post=inp["h_post"].clone().requires_grad_(True)), case)
    assert not any(t.requires_grad for t in got)
    with pytest.raises(AssertionError, match="autograd Function"):
        post_pre(dict(inp, h_post=inp["h_post"].clone().requires_grad_(True)), case)


@pytest.mark.parametrize("single_pass", [True, False], ids=["V4.1", "V4"])
def test_strided_views_give_the_same_bits(single_pass):
    case = dict(CASES[5] if single_pass else CASES[14])
    inp = make_inputs(case, seed=13330)
    want_fwd, want_grads = run_ours(inp, case)
    styles = {"x": "reversed", "h_res": "reversed", "h_out": "step", "h_post": "step", "phi": "step",
              "alpha": "step", "bias": "step", "pre_mix": "reversed", "gamma": "reversed", "grad_x_next": "reversed",
              "grad_h_in": "step", "grad_h_pre": "reversed", "grad_h_post_next": "step", "grad_h_res_next": "reversed"}
    fwd, grads = run_ours({k: strided_copy(v, styles[k]) for k, v in inp.items()}, case)
    for name in OUTPUTS:
        assert_same_bits(name, want_fwd[name], fwd[name], "contiguous vs strided")
    for name in GRADS:
        assert_same_bits(name, want_grads[name], grads[name], "contiguous vs strided")


# Determinism and batch invariance.

@pytest.mark.parametrize("single_pass", [True, False], ids=["V4.1", "V4"])
def test_bitwise_identical_for_1_and_2_threads(single_pass):
    case = {"single_pass": single_pass, "N": 4, "D": 64, "T": 1000, "layout": "TND", "dtype": "bf16", "gamma": True,
            "h_res": True, "pre_mix": single_pass, "num_iters": 20, "eps": EPS[0]}
    inp = make_inputs(case, seed=13400)
    results = {}
    for threads in (1, 2):
        mhc.set_num_threads(threads)
        fwd, grads = run_ours(inp, case)
        results[threads] = [fwd[k] for k in OUTPUTS] + [grads[k] for k in GRADS]
    for name, a, b in zip(OUTPUTS + GRADS, results[1], results[2]):
        assert_same_bits(name, a, b, "1 vs 2 threads")


@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize("single_pass", [True, False], ids=["V4.1", "V4"])
def test_token_alone_equals_token_in_batch(single_pass, layout):
    """A token's outputs and its own grads (x, h_res, h_out, h_post, pre_mix), alone and inside
    a batch of 7."""
    case = {"single_pass": single_pass, "N": 4, "D": 100, "T": 7, "layout": "TND", "dtype": "bf16", "gamma": True,
            "h_res": True, "pre_mix": single_pass, "num_iters": 20, "eps": EPS[0]}
    inp = make_inputs(case, seed=13410)
    if layout == "BSND":
        inp = {k: v.unsqueeze(0) if k in PER_TOKEN and v is not None else v for k, v in inp.items()}
    mhc.set_num_threads(2)
    per_token_grads = ("grad_x", "grad_h_res", "grad_h_out", "grad_h_post") + (("grad_pre_mix",) if single_pass else ())

    def everything(inp):
        fwd, grads = run_ours(inp, case)
        return dict(fwd, **{k: grads[k] for k in per_token_grads})

    batch = everything(inp)
    for i in (0, 3, 6):
        pick = (lambda a: a[i:i + 1]) if layout == "TND" else (lambda a: a[:, i:i + 1])
        alone = everything({k: pick(v) if k in PER_TOKEN and v is not None else v for k, v in inp.items()})
        for name, got in alone.items():
            assert_same_bits(name, pick(batch[name]), got, f"token {i} in the batch vs alone")


# No tokens.

@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize("single_pass,pre_mix", [(True, True), (True, False), (False, False)],
                         ids=["V4.1-premix", "V4.1-first", "V4"])
def test_no_tokens(single_pass, pre_mix, layout):
    """T = 0: empty outputs of the right shapes, zero parameter gradients."""
    case = {"single_pass": single_pass, "N": 4, "D": 24, "T": 0, "layout": layout, "dtype": "bf16", "gamma": True,
            "h_res": True, "pre_mix": pre_mix, "num_iters": 20, "eps": EPS[0]}
    inp = make_inputs(case, seed=13500)
    fwd, grads = run_ours(inp, case)
    check_shapes(inp, fwd, grads)
    assert all(t.numel() == 0 for t in fwd.values())
    for name in ("grad_x", "grad_h_res", "grad_h_out", "grad_h_post"):
        assert grads[name].numel() == 0, name
    assert (grads["grad_pre_mix"] is None) == (not pre_mix)
    for name in ("grad_phi", "grad_alpha", "grad_bias", "grad_gamma"):
        assert grads[name].numel() > 0 and not bool(grads[name].ne(0).any()), name


# Validation.

def base(single_pass=True):
    case = {"single_pass": single_pass, "N": 4, "D": 8, "T": 3, "layout": "TND", "dtype": "bf16", "gamma": True,
            "h_res": True, "pre_mix": single_pass, "num_iters": 2, "eps": EPS[0]}
    return make_inputs(case, seed=13600)


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires_grad"])
def test_v4_with_a_pre_mix_is_refused(grad):
    inp = base()
    x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma = (inp[k] for k in LEAVES)
    pre_mix = pre_mix.clone().requires_grad_(grad)
    for run in (lambda: mhc.mhc_post_pre(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix),
                lambda: mhc.mhc_post_pre(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, single_pass=False,
                                         gamma=gamma),
                lambda: torch.ops.mhc.mhc_post_pre(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix)):
        with pytest.raises(ValueError, match=r"^pre_mix: expected None with single_pass=False"):
            run()


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires_grad"])
def test_errors_name_the_argument(grad):
    inp = base()
    inp["phi"] = inp["phi"].clone().requires_grad_(grad)
    x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma = (inp[k] for k in LEAVES)

    def call(**changes):
        a = dict(x=x, h_res=h_res, h_out=h_out, h_post=h_post, phi=phi, alpha=alpha, bias=bias, pre_mix=pre_mix)
        kw = dict(single_pass=True, gamma=gamma)
        for key, value in changes.items():
            (a if key in a else kw)[key] = value
        return lambda: mhc.mhc_post_pre(*a.values(), **kw)

    cases = [
        (call(x=x.double()), TypeError, "^x: "),
        (call(x=x[0]), ValueError, "^x: "),
        (call(x="x"), TypeError, "^x: expected a torch.Tensor, got str"),
        (call(h_res=h_res[:, :-1]), ValueError, r"^h_res: expected \[T,N,N\]"),
        (call(h_res=h_res[:-1]), ValueError, "^h_res: "),
        (call(h_res=h_res.bfloat16()), TypeError, "^h_res: "),
        (call(h_out=h_out[:, :-1]), ValueError, "^h_out: "),
        (call(h_out=h_out.float()), TypeError, r"^h_out: expected dtype bf16 \(x's dtype\)"),
        (call(h_out=None), TypeError, "^h_out: expected a torch.Tensor, got None"),
        (call(h_post=h_post[:, :-1]), ValueError, "^h_post: "),
        (call(h_post=h_post.double()), TypeError, "^h_post: "),
        (call(phi=phi[:, :-1]), ValueError, "^phi: "),
        (call(phi=torch.randn(2 * 4 + 24, 32)), ValueError, "^phi: "),  # the permutation form: refused
        (call(phi=phi.bfloat16()), TypeError, "^phi: "),
        (call(alpha=alpha[:2]), ValueError, "^alpha: "),
        (call(bias=bias[:-1]), ValueError, "^bias: "),
        (call(pre_mix=pre_mix[:, :-1]), ValueError, "^pre_mix: "),
        (call(pre_mix=pre_mix[:-1]), ValueError, "^pre_mix: "),
        (call(pre_mix=pre_mix.double()), TypeError, "^pre_mix: expected dtype fp32, got torch.float64"),
        (call(single_pass=2), ValueError, "^single_pass: "),
        (call(single_pass="yes"), TypeError, "^single_pass: "),
        (call(gamma=gamma[:-1]), ValueError, "^gamma: "),
        (call(gamma=gamma.double()), TypeError, "^gamma: "),
        (call(num_iters=0), ValueError, "^num_iters: "),
        (call(num_iters=2.5), TypeError, "^num_iters: "),
        (call(hc_eps="1e-6"), TypeError, "^hc_eps: "),
        (call(norm_eps=None), TypeError, "^norm_eps: "),
        (call(sinkhorn_eps="1e-6"), TypeError, "^sinkhorn_eps: "),
        (lambda: mhc.mhc_post_pre(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, True), TypeError, ""),
    ]
    for run, kind, pattern in cases:
        with pytest.raises(kind, match=pattern):
            run()


def test_checks_go_in_argument_order():
    """Two wrong arguments: the first in the signature's order is named, by the Python checks
    (types) and by the library's (shapes: site s's tensors, then site s+1's)."""
    inp = base()
    x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma = (inp[k] for k in LEAVES)
    P = mhc.mhc_post_pre
    for run, kind, name in (
            (lambda: P(x, h_res, h_out.double(), h_post, phi.double(), alpha, bias, pre_mix, single_pass=True),
             TypeError, "h_out"),
            (lambda: P(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix.double(), single_pass=True,
                       gamma=gamma.double()), TypeError, "pre_mix"),
            (lambda: P(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma=gamma.double()), ValueError,
             "pre_mix"),
            (lambda: P(x, h_res, h_out, h_post, phi, alpha, bias.double(), pre_mix), TypeError, "bias"),
            (lambda: P(x, h_res[:, :-1], h_out, h_post, phi[:, :-1], alpha, bias, pre_mix, single_pass=True),
             ValueError, "h_res"),
            (lambda: P(x, h_res, h_out, h_post[:, :-1], phi, alpha, bias, pre_mix[:, :-1], single_pass=True),
             ValueError, "h_post"),
            (lambda: P(x, h_res, h_out, h_post, phi, alpha, bias[:-1], pre_mix[:, :-1], single_pass=True,
                       gamma=gamma[:-1]), ValueError, "bias")):
        with pytest.raises(kind, match=f"^{name}: "):
            run()


@pytest.mark.parametrize("single_pass", [True, False], ids=["V4.1", "V4"])
def test_backward_errors_in_this_operators_words(single_pass):
    """The backward function's tensors that are site s+1's named as this operator names them
    (x_next, h_post_next, grad_h_post_next, grad_h_res_next, grad_x_next), not as the inner
    pre's (x, h_post, grad_h_post, grad_h_res, grad_x_post); V4 with a pre_mix refused."""
    inp = base(single_pass)
    case = {"num_iters": 2, "eps": EPS[0]}
    checked = _core.check_post_pre_args(*(inp[k] for k in LEAVES[:8]), single_pass, inp["gamma"], case["num_iters"],
                                        *case["eps"])
    x_next, _, h_pre, h_post_next, _, inv_rms, h_mix = _core.run_post_pre_forward(*(inp[k] for k in LEAVES),
                                                                                 *checked)
    given = dict({k: inp[k] for k in LEAVES + OUTPUT_GRADS}, x_next=x_next, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre,
                 h_post_next=h_post_next)
    order = LEAVES + ("x_next", "grad_x_next", "grad_h_in", "grad_h_pre", "grad_h_post_next", "grad_h_res_next",
                      "inv_rms", "h_mix", "h_pre", "h_post_next")

    def backward(**changes):
        a = dict(given, **changes)
        return lambda: _core.mhc_post_pre_backward(*(a[k] for k in order), single_pass=single_pass, num_iters=2)

    backward()()  # the unchanged call runs
    t, n, d = x_next.shape
    cases = [
        (backward(x_next=x_next[:, :-1]), ValueError, r"^x_next: expected \[T,N,D\]"),
        (backward(x_next=x_next.float()), TypeError, r"^x_next: expected dtype bf16 \(x's dtype\)"),
        (backward(grad_x_next=inp["grad_x_next"][..., :-1]), ValueError, "^grad_x_next: "),
        (backward(grad_x_next=inp["grad_x_next"].half()), TypeError, r"^grad_x_next: .*x_next's dtype"),
        (backward(grad_h_in=inp["grad_h_in"][:, :-1]), ValueError, "^grad_h_in: "),
        (backward(grad_h_pre=inp["grad_h_pre"][:, :-1]), ValueError, "^grad_h_pre: "),
        (backward(grad_h_post_next=inp["grad_h_post_next"][:, :-1]), ValueError, "^grad_h_post_next: "),
        (backward(grad_h_res_next=inp["grad_h_res_next"][:, :-1]), ValueError, "^grad_h_res_next: "),
        (backward(inv_rms=inv_rms[:-1]), ValueError, "^inv_rms: "),
        (backward(h_mix=h_mix[:, :-1]), ValueError, "^h_mix: "),
        (backward(h_pre=h_pre[:, :-1]), ValueError, "^h_pre: "),
        (backward(h_post_next=h_post_next[:, :-1]), ValueError, r"^h_post_next: expected \[T,N\]"),
        (backward(h_post_next=h_post_next.double()), TypeError, "^h_post_next: "),
        (backward(h_res=inp["h_res"][:, :-1]), ValueError, "^h_res: "),
    ]
    if not single_pass:
        cases.append((backward(pre_mix=torch.rand(t, n)), ValueError, "^pre_mix: expected absent"))
    for run, kind, pattern in cases:
        with pytest.raises(kind, match=pattern) as error:
            run()
        for inner in ("grad_x_post", "grad_h_post:", "grad_h_res:", " h_post:", "h_post "):
            assert inner not in str(error.value), str(error.value)
    # Two wrong: the first in the argument order.
    with pytest.raises(ValueError, match="^x_next: "):
        backward(x_next=x_next[:, :-1], h_post_next=h_post_next[:, :-1])()
    with pytest.raises(ValueError, match="^grad_h_post_next: "):
        backward(grad_h_post_next=inp["grad_h_post_next"][:, :-1], h_post_next=h_post_next[:, :-1])()


def test_forward_outputs_in_this_operators_words():
    """The library's forward, its outputs given wrong (mhc_post_pre allocates them; here through
    the library call itself): site s+1's named x_next, h_post_next, h_res_next, not as the inner
    pre names them (x, h_post, h_res); x_next on top of x refused."""
    inp = base()
    x = inp["x"]
    t, n, d = x.shape
    outputs = dict(x_next=torch.empty(x.shape, dtype=x.dtype), h_in=torch.empty(t, d, dtype=x.dtype),
                   h_pre=torch.empty(t, n), h_post_next=torch.empty(t, n), h_res_next=torch.empty(t, n, n),
                   inv_rms=torch.empty(t), h_mix=torch.empty(t, 2 * n + n * n))

    def forward(**changes):
        _core._call("post_pre_forward", _core._options(1e-6, 1e-6), **{k: inp[k] for k in LEAVES}, single_pass=1,
                    sinkhorn_eps=1e-6, num_iters=2, **dict(outputs, **changes))

    forward()
    for changes, kind, pattern in (
            (dict(x_next=torch.empty(t, n, d - 1, dtype=x.dtype)), ValueError, r"^x_next: expected \[T,N,D\]"),
            (dict(x_next=torch.empty(x.shape)), TypeError, r"^x_next: expected dtype bf16 \(x's dtype\)"),
            (dict(x_next=x), ValueError, "^x_next: output memory overlaps input x"),
            (dict(h_in=torch.empty(t, d + 1, dtype=x.dtype)), ValueError, "^h_in: "),
            (dict(h_pre=torch.empty(t, n + 1)), ValueError, "^h_pre: "),
            (dict(h_post_next=torch.empty(t, n - 1)), ValueError, r"^h_post_next: expected \[T,N\]"),
            (dict(h_post_next=torch.empty(t, n, dtype=torch.bfloat16)), TypeError, "^h_post_next: "),
            (dict(h_res_next=torch.empty(t, n, n - 1)), ValueError, r"^h_res_next: expected \[T,N,N\]"),
            (dict(inv_rms=torch.empty(t + 1)), ValueError, "^inv_rms: "),
            (dict(h_mix=torch.empty(t, 2 * n + n * n - 1)), ValueError, "^h_mix: ")):
        with pytest.raises(kind, match=pattern):
            forward(**changes)


def test_outputs_past_the_limit_are_value_errors(allocations):
    huge = torch.zeros((), dtype=torch.bfloat16).expand(2 ** 42, 4, 4)  # T*N*D = 2^46
    h_out = torch.zeros((), dtype=torch.bfloat16).expand(2 ** 42, 4)
    p = torch.zeros(()).expand(2 ** 42, 4)
    with pytest.raises(ValueError, match=r"^x: .*2\^44"):
        mhc.mhc_post_pre(huge, None, h_out, p, torch.zeros(24, 16), torch.ones(3), torch.zeros(24), p,
                         single_pass=True)
    wide = torch.zeros((), dtype=torch.bfloat16).expand(2 ** 38, 64, 1)  # T*N*D = 2^44, T*N*N = 2^50
    with pytest.raises(ValueError, match=r"^x: .*2\^44"):
        mhc.mhc_post_pre(wide, None, torch.zeros((), dtype=torch.bfloat16).expand(2 ** 38, 1),
                         torch.zeros(()).expand(2 ** 38, 64), torch.zeros(3, 3), torch.ones(3), torch.zeros(3))
    assert allocations == [], allocations


# torch.ops.mhc.mhc_post_pre.

@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_the_torch_operator_and_its_meta_kernel(dtype, layout):
    case = {"single_pass": True, "N": 2, "D": 9, "T": 6, "layout": layout, "dtype": dtype, "gamma": True,
            "h_res": True, "pre_mix": True, "num_iters": 3, "eps": EPS[0]}
    inp = make_inputs(case, seed=13700)
    x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma = (inp[k] for k in LEAVES)
    for h, p, g, single_pass in ((h_res, pre_mix, gamma, True), (None, None, None, True), (h_res, None, gamma, False),
                                 (None, None, None, False)):
        args = (x, h, h_out, h_post, phi, alpha, bias, p)
        kw = dict(single_pass=single_pass, num_iters=3, sinkhorn_eps=1e-4)
        want = mhc.mhc_post_pre(*args, gamma=g, **kw)
        got = torch.ops.mhc.mhc_post_pre(*args, gamma=g, **kw)
        assert len(got) == 5
        for name, a, b in zip(OUTPUTS, got, want):
            assert_same_bits(name, b, a, "torch.ops.mhc vs mhc")
        meta = torch.ops.mhc.mhc_post_pre(*(None if t is None else t.to("meta") for t in args),
                                          gamma=None if g is None else g.to("meta"), **kw)
        assert len(meta) == 5
        for name, a, b in zip(OUTPUTS, meta, want):
            assert a.device.type == "meta" and (a.shape, a.dtype) == (b.shape, b.dtype), name


@pytest.mark.parametrize("single_pass", [True, False], ids=["V4.1", "V4"])
def test_autograd_through_the_torch_operator(single_pass):
    case = dict(CASES[5] if single_pass else CASES[14])
    inp = make_inputs(case, seed=13710)
    want_fwd, want = run_ours(inp, case)
    leaves = {k: None if inp[k] is None else inp[k].clone().requires_grad_(True) for k in LEAVES}
    outputs = torch.ops.mhc.mhc_post_pre(*(leaves[k] for k in LEAVES[:8]), gamma=leaves["gamma"], **options(case))
    loss_of(outputs, inp).backward()
    for name, a in zip(OUTPUTS, outputs):
        assert_same_bits(name, want_fwd[name], a.detach(), "torch.ops.mhc vs mhc")
    for name in GRADS:
        got = None if leaves[name[5:]] is None else leaves[name[5:]].grad
        assert_same_bits(name, want[name], got, "torch.ops.mhc vs mhc")


@pytest.mark.parametrize("single_pass", [True, False], ids=["V4.1", "V4"])
def test_autograd_on_meta_tensors(single_pass):
    case = {"single_pass": single_pass, "N": 4, "D": 16, "T": 3, "layout": "BSND", "dtype": "bf16", "gamma": True,
            "h_res": True, "pre_mix": single_pass, "num_iters": 3, "eps": EPS[0]}
    inp = make_inputs(case, seed=13720)
    leaves = {k: None if inp[k] is None else inp[k].to("meta").requires_grad_(True) for k in LEAVES}
    outputs = torch.ops.mhc.mhc_post_pre(*(leaves[k] for k in LEAVES[:8]), single_pass=single_pass,
                                         gamma=leaves["gamma"])
    sum(o.float().sum() for o in outputs).backward()
    for k, t in leaves.items():
        if t is None:
            continue
        assert t.grad is not None and t.grad.device.type == "meta" and t.grad.shape == t.shape, k
        assert t.grad.dtype == t.dtype, k


def test_exported():
    for name in ("mhc_post_pre", "MhcPostPreFunction"):
        assert name in mhc.__all__ and getattr(mhc, name) is not None
    assert mhc.ops.mhc_post_pre is mhc.mhc_post_pre
