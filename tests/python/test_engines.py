"""The inference engines' faces (SPEC §16) through mhc.engines against the float64 truth of
DeepSeek-V4's inference math (oracle.hc_pre64, hc_post64, hc_head64, rms_norm64): SGLang's ops
(torch.ops.sgl_kernel.hc_pre_fused_cpu, hc_post_fused_cpu, hc_head_fused_cpu, registered by
mhc.engines.register_sgl_kernel, and the same functions in mhc.engines.sgl_kernel) and vLLM's
CPU wrappers (mhc.engines.vllm: mhc_pre_cpu, mhc_post_cpu, hc_head_fused_cpu, mhc_pre_delayed),
over the engines' own CPU test shapes: hc 2 and 4; d 128, 141, 4096, 7168; T 0, 1, 7, 64, 128;
bf16 and fp16; Sinkhorn iters 8 and 20; the head's scale 0-d. The other options (layout, the
eps, norm_weight absent / x's dtype / fp32, hc_post_mult_value, pre_mix, n_splits) are cycled
across the grid. MHC_TEST_QUICK=1 runs a covering subset (every value of every factor, small
cases), the full run the whole grid. The bitwise contracts (the library's own operators,
threads, batches, layouts, strides, meta tensors, registration) are in test_engines_faces.py.

Bounds as the other oracle suites: y / layer_input (without norm_weight: h_in), post and
next_pre as conftest.check_output (1 ulp of the output's dtype + 1e-5 x oracle.magnitudes64's
condition magnitude, post's scaled by hc_post_mult_value / 2); comb within FUSED_TOL of its
token's max |truth| (test_pre_sinkhorn.py's); the residual update as test_post.py (1 ulp +
1e-5 x post_magnitudes64); the fused RMSNorm (SPEC §16: over the h_in ROUNDED to x's dtype) on
the library's own rounded h_in (its output without norm_weight), 1 ulp + 1e-5 x |truth|.
"""
import itertools
import math
import random
import warnings

import pytest
import torch

import mhc
import mhc.engines
from mhc.engines import sgl_kernel, vllm
from conftest import DTYPES, QUICK, assert_same_bits, check_output, check_token_scaled, token_lead
from oracle import hc_head64, hc_post64, hc_pre64, magnitudes64, post_magnitudes64, rms_norm64

FUSED_TOL = 2e-5
HCS, DS, TS, DTYPE_KEYS, ITERS = (2, 4), (128, 141, 4096, 7168), (0, 1, 7, 64, 128), ("bf16", "fp16"), (8, 20)
# (rms_eps, hc_pre_eps, hc_sinkhorn_eps, norm_eps): distinct values catch a swapped eps.
EPS = ((1e-6, 1e-6, 1e-6, 1e-6), (1e-2, 1e-6, 1e-6, 1e-5), (1e-6, 1e-2, 1e-3, 1e-2), (1e-5, 1e-3, 1e-3, 0.0))
CYCLED = {"layout": ("TND", "BSND"), "eps": EPS, "norm": ("none", "x", "fp32"), "mult": (2.0, 1.0, 2.5),
          "pre_mix": (True, False), "n_splits": (1, 16), "scale": ("0d", "1")}
QUICK_BUDGET = 2 ** 17  # T*N*D of a quick case


def make_grid(with_iters):
    """The engines' test shapes, every combination; each cycled option balanced over the grid (every
    value as often as the others) in a fixed shuffled order, so that the options combine."""
    cases = [dict(zip(("hc", "d", "T", "dtype", "iters"), values))
             for values in itertools.product(HCS, DS, TS, DTYPE_KEYS, ITERS if with_iters else (None,))]
    for j, (name, options) in enumerate(CYCLED.items()):
        order = [options[k % len(options)] for k in range(len(cases))]
        random.Random(17 + j).shuffle(order)
        for case, value in zip(cases, order):
            case[name] = value
    return cases


def cost(c):
    return c["T"] * c["hc"] * c["d"]


# Always in the quick subset: DeepSeek-V4's own shape (hc 4, d 7168 / 4096) with a few tokens.
QUICK_PINNED = ((4, 7168, 7, "bf16"), (4, 4096, 64, "fp16"))


def quick_subset(cases, factors):
    """QUICK_PINNED, then greedily the cheap case (T*N*D <= QUICK_BUDGET, T > 0) that shows the
    most values not yet shown, until every value of every factor but T = 0 is; then the cheapest
    T = 0 case."""
    chosen = [next(c for c in cases if (c["hc"], c["d"], c["T"], c["dtype"]) == pin) for pin in QUICK_PINNED]
    want = {(f, c[f]) for c in cases for f in factors} - {("T", 0)} - {(f, c[f]) for c in chosen for f in factors}
    cheap = [c for c in cases if 0 < cost(c) <= QUICK_BUDGET]
    while want:
        best = max(cheap, key=lambda c: (sum((f, c[f]) in want for f in factors), -cost(c)))
        assert any((f, best[f]) in want for f in factors), f"not coverable within the budget: {sorted(want)}"
        chosen.append(best)
        want -= {(f, best[f]) for f in factors}
    return chosen + [min((c for c in cases if c["T"] == 0), key=lambda c: c["hc"] * c["d"])]


PRE_FACTORS = ("hc", "d", "T", "dtype", "iters", "layout", "eps", "norm", "mult", "pre_mix", "n_splits")
TOKEN_FACTORS = ("hc", "d", "T", "dtype", "layout", "eps", "scale")
PRE_GRID, TOKEN_GRID = make_grid(True), make_grid(False)
PRE_CASES = quick_subset(PRE_GRID, PRE_FACTORS) if QUICK else PRE_GRID
TOKEN_CASES = quick_subset(TOKEN_GRID, TOKEN_FACTORS) if QUICK else TOKEN_GRID


def case_id(c):
    eps = "-".join(f"{e:g}" for e in c["eps"])
    tail = (f"-I{c['iters']}-norm_{c['norm']}-mult{c['mult']:g}-{'premix' if c['pre_mix'] else 'first'}"
            if c["iters"] else f"-scale_{c['scale']}")
    return f"hc{c['hc']}-d{c['d']}-T{c['T']}-{c['layout']}-{c['dtype']}-eps{eps}{tail}"


def test_the_grid_and_its_quick_subset():
    assert len(PRE_GRID) == 2 * 4 * 5 * 2 * 2 and len(TOKEN_GRID) == 2 * 4 * 5 * 2
    for grid, cases, factors in ((PRE_GRID, PRE_CASES, PRE_FACTORS), (TOKEN_GRID, TOKEN_CASES, TOKEN_FACTORS)):
        for f in factors:  # the run subset (quick or full) shows every value of every factor
            assert {c[f] for c in cases} == {c[f] for c in grid}, f
        assert {c[f] for c in grid for f in ("eps",)} == set(EPS)
    assert len(quick_subset(PRE_GRID, PRE_FACTORS)) <= 12 and len(quick_subset(TOKEN_GRID, TOKEN_FACTORS)) <= 10


@pytest.fixture(scope="session")
def sgl_ops():
    """torch.ops.sgl_kernel with the three ops defined (by this process's first registration)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a False here: another test registered them already
        mhc.engines.register_sgl_kernel()
    return torch.ops.sgl_kernel


def make_inputs(case, seed):
    """The streams x (vLLM: residual) [.., N, D] in the case's dtype; V4's weights hc_fn [N*N+2N,
    N*D], hc_scale [3], hc_base [N*N+2N] (and the head's, hc_fn [N, N*D], hc_scale 0-d or [1],
    hc_base [N]); the sub-layer's output y [.., D]; post [.., N] in [0, 2); comb [.., N, N]
    row-stochastic; pre_mix [.., N] in [0.1, 1.6]; norm_weight [D] fp32 (rounded to x's dtype
    where the case says)."""
    gen = torch.Generator().manual_seed(seed)
    n, d, dtype = case["hc"], case["d"], DTYPES[case["dtype"]]
    lead = token_lead(case)
    f, k = 2 * n + n * n, n * d

    def randn(*shape):
        return torch.randn(shape, generator=gen)

    def rand(*shape):
        return torch.rand(shape, generator=gen)

    inp = {"x": randn(*lead, n, d).to(dtype), "hc_fn": randn(f, k) / math.sqrt(k), "hc_scale": 0.5 + rand(3),
           "hc_base": 0.5 * randn(f), "head_fn": randn(n, k) / math.sqrt(k), "head_scale": 0.5 + rand(),
           "head_base": 0.5 * randn(n), "y": randn(*lead, d).to(dtype), "post": 2 * rand(*lead, n),
           "comb": torch.softmax(randn(*lead, n, n), dim=-1), "pre_mix": 0.1 + 1.5 * rand(*lead, n),
           "norm_weight": 1.0 + 0.25 * randn(d)}
    if case.get("scale") == "1":
        inp["head_scale"] = inp["head_scale"].reshape(1)
    if case.get("norm") == "x":
        inp["norm_weight"] = inp["norm_weight"].to(dtype)
    return inp


def check_type(name, t, shape, dtype):
    assert tuple(t.shape) == tuple(shape), f"{name}: shape {tuple(t.shape)} != {tuple(shape)}"
    assert t.dtype == dtype, f"{name}: dtype {t.dtype} != {dtype}"
    assert t.device.type == "cpu", f"{name}: device {t.device}"


def pre_magnitudes(inp, case, eps, pre_mix=None, delayed=False):
    """oracle.magnitudes64 of the forward outputs (h_in, h_post, h_pre), no gamma; the grads zero."""
    x = inp["x"]
    lead, n = tuple(x.shape[:-2]), x.shape[-2]
    zero = torch.zeros
    return magnitudes64(x, inp["hc_fn"], inp["hc_scale"], inp["hc_base"], None, eps[0], eps[1],
                        zero(lead + (x.shape[-1],)), zero(lead + (n,)), zero(lead + (n, n)),
                        carried=(pre_mix, None) if delayed else None)


def check_pre_outputs(what, case, inp, eps, mult, post, comb, h_in, next_pre=None, pre_mix=None, delayed=False):
    """post [.., N, 1] or [.., N], comb, h_in (unnormalised) and next_pre against hc_pre64."""
    cid = f"{what}-{case_id(case)}"
    x = inp["x"]
    truth = hc_pre64(x, inp["hc_fn"], inp["hc_scale"], inp["hc_base"], case["iters"], eps[0], eps[1], eps[2], mult,
                     delayed=delayed, pre_mix=pre_mix)
    mags = pre_magnitudes(inp, case, eps, pre_mix, delayed)
    check_output(f"{what} y", h_in, truth[0], mags["h_in"], cid, mags["h_in"])
    check_output(f"{what} post", post.reshape(truth[1].shape), truth[1], mags["h_post"] * (mult / 2), cid)
    check_token_scaled(f"{what} comb", comb, truth[2], FUSED_TOL, (-2, -1), cid)
    if next_pre is not None:
        check_output(f"{what} next_pre", next_pre, truth[3], mags["h_pre"], cid)


def check_norm(what, case, layer_input, h_in, weight, norm_eps):
    """SPEC §16's fused RMSNorm on the library's own rounded h_in."""
    truth = rms_norm64(h_in, weight, norm_eps)
    check_output(f"{what} layer_input(norm_{case['norm']})", layer_input, truth, truth.abs(),
                 f"{what}-{case_id(case)}")


# SGLang: torch.ops.sgl_kernel.*.

@pytest.mark.parametrize("case", PRE_CASES, ids=case_id)
def test_sgl_hc_pre_against_the_oracle(sgl_ops, case):
    inp = make_inputs(case, seed=17000 + PRE_GRID.index(case))
    x, n, d = inp["x"], case["hc"], case["d"]
    lead = tuple(x.shape[:-2])
    rms_eps, hc_eps = case["eps"][0], case["eps"][1]
    args = (x, inp["hc_fn"], inp["hc_scale"], inp["hc_base"], n, case["iters"], rms_eps, hc_eps)
    y, post, comb = sgl_ops.hc_pre_fused_cpu(*args)
    check_type("y", y, lead + (d,), x.dtype)
    check_type("post", post, lead + (n,), torch.float32)
    check_type("comb", comb, lead + (n, n), torch.float32)
    for name, a, b in zip(("y", "post", "comb"), (y, post, comb), sgl_kernel.hc_pre_fused_cpu(*args)):
        assert_same_bits(name, a, b, "torch.ops.sgl_kernel vs mhc.engines.sgl_kernel")
    if case["T"]:  # one hc_eps for the gate and the Sinkhorn (SPEC §16)
        check_pre_outputs("sgl hc_pre", case, inp, (rms_eps, hc_eps, hc_eps), 2.0, post, comb, y)


@pytest.mark.parametrize("case", TOKEN_CASES, ids=case_id)
def test_hc_post_against_the_oracle(sgl_ops, case):
    """sgl's hc_post_fused_cpu and vLLM's mhc_post_cpu (post [.., N] and [.., N, 1]): one result."""
    inp = make_inputs(case, seed=17400 + TOKEN_GRID.index(case))
    x, y, post, comb = inp["x"], inp["y"], inp["post"], inp["comb"]
    out = sgl_ops.hc_post_fused_cpu(y, x, post, comb)
    check_type("out", out, x.shape, x.dtype)
    for what, other in (("mhc.engines.sgl_kernel", sgl_kernel.hc_post_fused_cpu(y, x, post, comb)),
                        ("vllm post [.., N]", vllm.mhc_post_cpu(y, x, post, comb)),
                        ("vllm post [.., N, 1]", vllm.mhc_post_cpu(y, x, post[..., None], comb))):
        assert_same_bits("out", out, other, f"torch.ops.sgl_kernel vs {what}")
    if case["T"]:
        mag = post_magnitudes64(x, comb, y, post, torch.zeros(x.shape))["out"]
        check_output("hc_post out", out, hc_post64(y, x, post, comb), mag, f"hc_post-{case_id(case)}", mag)


@pytest.mark.parametrize("case", TOKEN_CASES, ids=case_id)
def test_hc_head_against_the_oracle(sgl_ops, case):
    """sgl's hc_head_fused_cpu (hc_eps, norm_eps) and vLLM's (rms_norm_eps, hc_eps): one result."""
    inp = make_inputs(case, seed=17800 + TOKEN_GRID.index(case))
    x, fn, scale, base = inp["x"], inp["head_fn"], inp["head_scale"], inp["head_base"]
    norm_eps, hc_eps = case["eps"][0], case["eps"][1]
    h = sgl_ops.hc_head_fused_cpu(x, fn, scale, base, hc_eps, norm_eps)
    check_type("y", h, tuple(x.shape[:-2]) + (case["d"],), x.dtype)
    assert_same_bits("y", h, sgl_kernel.hc_head_fused_cpu(x, fn, scale, base, hc_eps, norm_eps),
                     "torch.ops.sgl_kernel vs mhc.engines.sgl_kernel")
    assert_same_bits("y", h, vllm.hc_head_fused_cpu(x, fn, scale, base, norm_eps, hc_eps),
                     "sgl_kernel (hc_eps, norm_eps) vs vllm (rms_norm_eps, hc_eps)")
    if case["T"]:
        mags = magnitudes64(x, fn, scale.reshape(1), base, None, norm_eps, hc_eps,
                            torch.zeros(tuple(x.shape[:-2]) + (case["d"],)), None, None)
        check_output("hc_head y", h, hc_head64(x, fn, scale, base, hc_eps, norm_eps), mags["h_in"],
                     f"hc_head-{case_id(case)}", mags["h_in"])


# vLLM: mhc.engines.vllm.

def norm_weight_of(inp, case):
    return None if case["norm"] == "none" else inp["norm_weight"]


def vllm_pre_args(inp, case):
    rms_eps, pre_eps, sinkhorn_eps, _ = case["eps"]
    return (inp["x"], inp["hc_fn"], inp["hc_scale"], inp["hc_base"], rms_eps, pre_eps, sinkhorn_eps, case["mult"],
            case["iters"])


@pytest.mark.parametrize("case", PRE_CASES, ids=case_id)
def test_vllm_mhc_pre_cpu_against_the_oracle(case):
    inp = make_inputs(case, seed=18200 + PRE_GRID.index(case))
    x, n, d = inp["x"], case["hc"], case["d"]
    lead, norm_eps = tuple(x.shape[:-2]), case["eps"][3]
    plain = vllm.mhc_pre_cpu(*vllm_pre_args(inp, case), case["n_splits"])
    assert len(plain) == 3
    post, comb, h_in = plain
    check_type("post", post, lead + (n, 1), torch.float32)
    check_type("comb", comb, lead + (n, n), torch.float32)
    check_type("layer_input", h_in, lead + (d,), x.dtype)
    weight = norm_weight_of(inp, case)
    normed = vllm.mhc_pre_cpu(*vllm_pre_args(inp, case), case["n_splits"], norm_weight=weight, norm_eps=norm_eps)
    for name, a, b in zip(("post", "comb"), plain[:2], normed[:2]):
        assert_same_bits(name, a, b, "without vs with norm_weight")
    check_type("layer_input", normed[2], lead + (d,), x.dtype)
    if case["T"] == 0:
        return
    check_pre_outputs("vllm mhc_pre_cpu", case, inp, case["eps"], case["mult"], post, comb, h_in)
    if weight is None:
        assert_same_bits("layer_input", h_in, normed[2], "norm_weight=None twice")
    else:
        check_norm("vllm mhc_pre_cpu", case, normed[2], h_in, weight, norm_eps)


@pytest.mark.parametrize("case", PRE_CASES, ids=case_id)
def test_vllm_mhc_pre_delayed_against_the_oracle(case):
    """V4.1 (SPEC §14): layer_input collapsed with pre_mix (None: stream 0), next_pre = the site's
    own h_pre; post, comb as mhc_pre_cpu's (the same bits)."""
    inp = make_inputs(case, seed=18600 + PRE_GRID.index(case))
    x, n, d = inp["x"], case["hc"], case["d"]
    lead, norm_eps = tuple(x.shape[:-2]), case["eps"][3]
    pre_mix = inp["pre_mix"] if case["pre_mix"] else None
    plain = vllm.mhc_pre_delayed(*vllm_pre_args(inp, case), pre_mix=pre_mix)
    assert len(plain) == 4
    post, comb, h_in, next_pre = plain
    for name, t, shape, dtype in (("post", post, lead + (n, 1), torch.float32),
                                  ("comb", comb, lead + (n, n), torch.float32),
                                  ("layer_input", h_in, lead + (d,), x.dtype),
                                  ("next_pre", next_pre, lead + (n,), torch.float32)):
        check_type(name, t, shape, dtype)
    pre = vllm.mhc_pre_cpu(*vllm_pre_args(inp, case))
    for name, a, b in zip(("post", "comb"), pre[:2], plain[:2]):
        assert_same_bits(name, a, b, "mhc_pre_cpu vs mhc_pre_delayed")
    weight = norm_weight_of(inp, case)
    normed = vllm.mhc_pre_delayed(*vllm_pre_args(inp, case), pre_mix=pre_mix, norm_weight=weight, norm_eps=norm_eps)
    for name, a, b in zip(("post", "comb", "next_pre"), plain[:2] + plain[3:], normed[:2] + normed[3:]):
        assert_same_bits(name, a, b, "without vs with norm_weight")
    if pre_mix is None:  # the first site selects stream 0, exactly
        assert_same_bits("layer_input", x[..., 0, :], h_in, "first site vs stream 0")
    if case["T"] == 0:
        return
    check_pre_outputs("vllm mhc_pre_delayed", case, inp, case["eps"], case["mult"], post, comb, h_in, next_pre,
                      pre_mix, delayed=True)
    if weight is not None:
        check_norm("vllm mhc_pre_delayed", case, normed[2], h_in, weight, norm_eps)


# mhc.mhc_rms_norm (SPEC §16's formula on its own).

NORM_CASES = [(d, lead, dt, w) for d, lead, dt, w in itertools.product(
    (1, 128, 141, 4096, 7168), ((0,), (1,), (7,), (2, 32)), ("bf16", "fp16", "fp32"), ("x", "fp32"))
    if not QUICK or (d in (141, 4096) and lead in ((7,), (0,)))]


@pytest.mark.parametrize("d,lead,dtype,weight_dtype", NORM_CASES,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_mhc_rms_norm_against_the_oracle(d, lead, dtype, weight_dtype):
    gen = torch.Generator().manual_seed(19000 + d + len(lead))
    x = (3.0 * torch.randn(lead + (d,), generator=gen)).to(DTYPES[dtype])
    w32 = 1.0 + 0.25 * torch.randn(d, generator=gen)
    w = w32.to(x.dtype) if weight_dtype == "x" else w32
    cid = f"rms_norm-d{d}-{lead}-{dtype}-w{weight_dtype}"
    for eps in (1e-6, 1e-2):
        y = mhc.mhc_rms_norm(x, w, eps)
        check_type("y", y, x.shape, x.dtype)
        assert_same_bits("y", y, torch.ops.mhc.mhc_rms_norm(x, w, eps), "mhc vs torch.ops.mhc")
        if eps == 1e-6:
            assert_same_bits("y", y, mhc.mhc_rms_norm(x, w), "eps=1e-6 vs the default")
        if x.numel():
            truth = rms_norm64(x, w, eps)
            check_output("rms_norm y", y, truth, truth.abs(), f"{cid}-eps{eps:g}")
    if weight_dtype == "x":  # the same weights in fp32: the same bits (SPEC §16 computes in fp32)
        assert_same_bits("y", y, mhc.mhc_rms_norm(x, w.float(), 1e-2), "x-dtype vs fp32 weight")
