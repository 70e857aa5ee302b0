"""DeepSeek-V4.1's single pass (SPEC §14) through mhc.mhc_pre_single_pass and mhc.mhc_collapse:
every output and every gradient (autograd, through the library's backwards) against the
float64 oracle (oracle.single_pass64, oracle.collapse64 and torch autograd through them)
under every kernel family; the oracle's own gradcheck; the collapse with the carried
pre_mix, not the site's own h_pre; with pre_mix = the own h_pre, mhc_pre_sinkhorn's bits;
the first site's stream 0; threads and batch invariance; T = 0; validation; the
torch.ops.mhc meta kernels; two sites and the final collapse through autograd.

Bounds: h_in, h_pre, h_post and every gradient as conftest.check_output (1 ulp + 1e-5 x
the condition magnitude of oracle.magnitudes64 in its carried mode, the residual
gradient's magnitude raised by the Sinkhorn backward's own bound, as test_pre_sinkhorn.py
does); H within FUSED_TOL of its token's max |truth| (the Sinkhorn's forward bound, 10x
for the fp32 error of z_res going in).
"""
import math

import pytest
import torch

import mhc
from conftest import (COND_TOL, DTYPES, ERROR_LOG, FAMILIES, SINKHORN_GRAD_TOL, assert_same_bits, check_output,
                      check_token_scaled, strided_copy, token_lead)
from oracle import (F64, collapse64, collapse_grads64, forward64, magnitudes64, post64, single_pass64,
                    single_pass_grads64, sinkhorn_grad64)

FUSED_TOL = 2e-5
OUTPUTS = ("h_in", "h_pre", "h_post", "h_res")
LEAVES = ("x", "phi", "alpha", "bias", "pre_mix", "gamma")
GRADS = tuple("grad_" + name for name in LEAVES)
PER_TOKEN = ("x", "pre_mix", "grad_h_in", "grad_h_pre", "grad_h_post", "grad_h_res")
EPS = ((1e-6, 1e-6, None), (1e-2, 1e-3, None), (1e-6, 1e-6, 1e-3))  # (hc_eps, norm_eps, sinkhorn_eps)

KEYS = ("N", "D", "T", "layout", "dtype", "gamma", "pre_mix", "num_iters", "eps")
CASES = [dict(zip(KEYS, values)) for values in [
    (1, 7, 3, "TND", "bf16", False, True, 20, EPS[0]),
    (1, 16, 2, "BSND", "fp32", True, False, 3, EPS[1]),
    (2, 33, 5, "BSND", "fp16", True, True, 20, EPS[0]),
    (2, 8, 1, "TND", "bf16", False, False, 1, EPS[0]),
    (4, 64, 6, "TND", "fp32", False, True, 20, EPS[1]),
    (4, 100, 4, "BSND", "bf16", True, True, 20, EPS[0]),
    (4, 17, 3, "TND", "fp16", False, False, 2, EPS[0]),
    (2, 48, 3, "TND", "fp32", True, True, 20, EPS[2]),
    (4, 1, 5, "BSND", "fp32", True, False, 20, EPS[0]),
    (1, 130, 4, "TND", "fp16", True, True, 20, EPS[0]),
    (4, 32, 2, "BSND", "fp16", True, False, 20, EPS[2]),
    (2, 5, 7, "BSND", "bf16", True, True, 20, EPS[1]),
]]


def case_id(c):
    return (f"N{c['N']}-D{c['D']}-T{c['T']}-{c['layout']}-{c['dtype']}-{'gamma' if c['gamma'] else 'nogamma'}-"
            f"{'premix' if c['pre_mix'] else 'first'}-I{c['num_iters']}-eps{c['eps'][0]:g}-{c['eps'][2]}")


def test_cases_show_every_value():
    for key, values in (("N", (1, 2, 4)), ("dtype", DTYPES), ("layout", ("TND", "BSND")), ("gamma", (True, False)),
                        ("pre_mix", (True, False))):
        assert {c[key] for c in CASES} == set(values), key
    assert any(c["D"] % 16 for c in CASES) and any(c["D"] % 16 == 0 for c in CASES)
    for n in (1, 2, 4):  # each N at a first site and a carried one
        assert {c["pre_mix"] for c in CASES if c["N"] == n} == {True, False}, n


def make_inputs(case, seed):
    """Inputs in the test dtype; pre_mix in [0.1, 1.6], far from the own h_pre's values."""
    gen = torch.Generator().manual_seed(seed)
    n, d, dtype = case["N"], case["D"], DTYPES[case["dtype"]]
    lead = token_lead(case)
    f, k = 2 * n + n * n, n * d

    def randn(*shape):
        return torch.randn(shape, generator=gen)

    return {
        "x": randn(*lead, n, d).to(dtype),
        "phi": randn(f, k) / math.sqrt(k),
        "alpha": 0.5 + torch.rand(3, generator=gen),
        "bias": 0.5 * randn(f),
        "pre_mix": 0.1 + 1.5 * torch.rand(lead + (n,), generator=gen) if case["pre_mix"] else None,
        "gamma": 1.0 + 0.5 * randn(n, d) if case["gamma"] else None,
        "grad_h_in": randn(*lead, d).to(dtype),
        "grad_h_pre": randn(*lead, n),
        "grad_h_post": randn(*lead, n),
        "grad_h_res": randn(*lead, n, n),
    }


def options(case):
    hc_eps, norm_eps, sinkhorn_eps = case["eps"]
    return dict(num_iters=case["num_iters"], hc_eps=hc_eps, norm_eps=norm_eps, sinkhorn_eps=sinkhorn_eps)


def single_pass(inp, case):
    return mhc.mhc_pre_single_pass(inp["x"], inp["phi"], inp["alpha"], inp["bias"], inp["pre_mix"],
                                   gamma=inp["gamma"], **options(case))


def loss_of(outputs, inp):
    """Σ h_in·g_in + Σ h_pre·g_pre + Σ h_post·g_post + Σ H·g_H: the incoming grads of the
    outputs are then exactly the test's grad tensors."""
    h_in, h_pre, h_post, h_res = outputs
    return ((h_in.float() * inp["grad_h_in"].float()).sum() + (h_pre * inp["grad_h_pre"]).sum()
            + (h_post * inp["grad_h_post"]).sum() + (h_res * inp["grad_h_res"]).sum())


def run_ours(inp, case, requires=LEAVES):
    """Through autograd: ({output: tensor}, {grad_<leaf>: grad or None})."""
    leaves = {k: None if inp[k] is None else inp[k].clone().requires_grad_(k in requires) for k in LEAVES}
    outputs = single_pass(dict(inp, **leaves), case)
    assert len(outputs) == 4 and all(o.requires_grad for o in outputs)
    loss_of(outputs, inp).backward()
    grads = {"grad_" + k: None if leaves[k] is None else leaves[k].grad for k in LEAVES}
    return dict(zip(OUTPUTS, (o.detach() for o in outputs))), grads


def check_shapes(inp, fwd, grads):
    x = inp["x"]
    lead, (n, d) = tuple(x.shape[:-2]), tuple(x.shape[-2:])
    f = 2 * n + n * n
    want = {"h_in": lead + (d,), "h_pre": lead + (n,), "h_post": lead + (n,), "h_res": lead + (n, n),
            "grad_x": tuple(x.shape), "grad_pre_mix": lead + (n,), "grad_phi": (f, n * d), "grad_alpha": (3,),
            "grad_bias": (f,), "grad_gamma": (n, d)}
    for name, t in list(fwd.items()) + list(grads.items()):
        if name in ("grad_pre_mix", "grad_gamma") and inp[name[5:]] is None:
            assert t is None, name
            continue
        assert tuple(t.shape) == want[name] and t.is_contiguous(), (name, tuple(t.shape))
        assert t.dtype == (x.dtype if name in ("h_in", "grad_x") else torch.float32), name


def check_against_oracle(inp, case, fwd, grads, cid):
    hc_eps, norm_eps, sinkhorn_eps = case["eps"]
    iters = case["num_iters"]
    x, phi, alpha, bias, pre_mix, gamma = (inp[k] for k in LEAVES)
    truth = dict(zip(OUTPUTS, single_pass64(x, phi, alpha, bias, pre_mix, gamma, iters, hc_eps, norm_eps,
                                            sinkhorn_eps)))
    # The residual gradient the pre side receives: d(Σ H·g_H)/dz_res at the true z_res; its
    # fp32 error (the Sinkhorn backward's bound) raises that input's magnitude.
    z64 = forward64(x, phi, alpha, bias, gamma, norm_eps, hc_eps)[2]
    gz64 = sinkhorn_grad64(z64, inp["grad_h_res"], hc_eps if sinkhorn_eps is None else sinkhorn_eps, iters)
    gz_mag = gz64.abs() + (SINKHORN_GRAD_TOL / COND_TOL) * gz64.abs().amax(dim=(-2, -1), keepdim=True)
    mags = magnitudes64(x, phi, alpha, bias, gamma, norm_eps, hc_eps, inp["grad_h_in"], inp["grad_h_post"], gz_mag,
                        carried=(pre_mix, inp["grad_h_pre"]))
    for name in ("h_in", "h_pre", "h_post"):
        check_output("single_pass " + name, fwd[name], truth[name], mags[name], cid,
                     mags["h_in"] if name == "h_in" else None)
    check_token_scaled("single_pass h_res", fwd["h_res"], truth["h_res"], FUSED_TOL, (-2, -1), cid)
    want = dict(zip(GRADS, single_pass_grads64(x, phi, alpha, bias, pre_mix, gamma, iters, hc_eps, norm_eps,
                                               sinkhorn_eps, inp["grad_h_in"], inp["grad_h_pre"],
                                               inp["grad_h_post"], inp["grad_h_res"])))
    for name in GRADS:
        if want[name] is None:
            assert grads[name] is None, name
            continue
        check_output("single_pass " + name, grads[name], want[name], mags[name], cid,
                     mags["grad_x"] if name == "grad_x" else None)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
def test_single_pass_against_the_oracle(isa_family, case):
    cid = f"single_pass-{isa_family}-{case_id(case)}"
    inp = make_inputs(case, seed=11000 + CASES.index(case))
    fwd, grads = run_ours(inp, case)
    check_shapes(inp, fwd, grads)
    direct = single_pass(inp, case)  # no graph: the library called directly
    assert not any(t.requires_grad for t in direct)
    for name, a in zip(OUTPUTS, direct):
        assert_same_bits(name, a, fwd[name], "direct vs autograd")
    if inp["pre_mix"] is None:  # the first site selects stream 0
        assert_same_bits("h_in", inp["x"][..., 0, :], fwd["h_in"], "first site vs x's stream 0")
    check_against_oracle(inp, case, fwd, grads, cid)


# The oracle itself.

def test_the_oracle_passes_gradcheck():
    """float64 finite differences agree with autograd through single_pass64 (both sites)
    and collapse64."""
    gen = torch.Generator().manual_seed(11100)
    n, d, t = 2, 3, 2
    f = 2 * n + n * n

    def leaf(*shape, scale=1.0, shift=0.0):
        return (shift + scale * torch.randn(shape, generator=gen, dtype=F64)).requires_grad_(True)

    x, phi, alpha = leaf(t, n, d), leaf(f, n * d, scale=0.4), leaf(3, scale=0.2, shift=0.8)
    bias, pre_mix, gamma = leaf(f, scale=0.5), leaf(t, n, scale=0.3, shift=0.7), leaf(n, d, scale=0.2, shift=1.0)

    def site(x, phi, alpha, bias, pre_mix, gamma):
        return single_pass64(x, phi, alpha, bias, pre_mix, gamma, num_iters=3, hc_eps=1e-2, norm_eps=1e-3,
                             sinkhorn_eps=1e-3)[:4]

    assert torch.autograd.gradcheck(site, (x, phi, alpha, bias, pre_mix, gamma))
    assert torch.autograd.gradcheck(lambda x, phi, alpha, bias: site(x, phi, alpha, bias, None, None),
                                    (x, phi, alpha, bias))
    assert torch.autograd.gradcheck(collapse64, (x, pre_mix))
    # SPEC §14's backward in closed form: grad_p = Σ_d v·g, the collapse's grad_x = p·g.
    g = torch.randn(t, d, generator=gen, dtype=F64)
    grad_x, grad_p = collapse_grads64(x, pre_mix, g)
    assert torch.allclose(grad_p, (x * g[:, None, :]).sum(-1))
    assert torch.allclose(grad_x, pre_mix[..., None] * g[:, None, :])


# The collapse is the carried pre_mix's, not the site's own h_pre.

@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_site_collapses_with_the_carried_pre_mix(dtype):
    """pre_mix (2, -1, 0.5, 3) is far from any h_pre (in (0, 1)): h_in (and mhc_collapse's h) is
    the pre_mix collapse and not the own one. With only h_in in the loss, phi, alpha and bias
    get exactly zero (h_in does not depend on them) and grad_x is mhc_collapse's backward's.
    (The two forwards need not share bits: the site's h_in is MhcPre's sum, which a family
    may form with FMA or, the reference, in float64.)"""
    case = {"N": 4, "D": 40, "T": 5, "layout": "TND", "dtype": dtype, "gamma": False, "pre_mix": True,
            "num_iters": 20, "eps": EPS[0]}
    inp = make_inputs(case, seed=11200)
    x = inp["x"]
    pre_mix = torch.tensor([2.0, -1.0, 0.5, 3.0]).repeat(5, 1)
    h_in, h_pre, _, _ = mhc.mhc_pre_single_pass(x, inp["phi"], inp["alpha"], inp["bias"], pre_mix)
    carried, own = collapse64(x, pre_mix), collapse64(x, h_pre)
    scale = (pre_mix.to(F64)[..., None].abs() * x.to(F64).abs()).sum(dim=-2)
    tol = torch.finfo(x.dtype).eps * carried.abs() + COND_TOL * scale
    for name, h in (("h_in", h_in), ("mhc_collapse h", mhc.mhc_collapse(x, pre_mix))):
        assert bool(((h.to(F64) - carried).abs() <= tol).all()), f"{name} is not the carried pre_mix's collapse"
        assert float((h.to(F64) - own).abs().max()) > 0.5, f"{name} is the own h_pre's collapse"

    leaves = {k: inp[k].clone().requires_grad_(True) for k in ("x", "phi", "alpha", "bias")}
    p = pre_mix.clone().requires_grad_(True)
    out = mhc.mhc_pre_single_pass(leaves["x"], leaves["phi"], leaves["alpha"], leaves["bias"], p)
    (out[0].float() * inp["grad_h_in"].float()).sum().backward()
    for k in ("phi", "alpha", "bias"):
        assert not bool(leaves[k].grad.ne(0).any()), f"grad_{k}: h_in does not depend on {k}"
    want_x, want_p = collapse_grads64(x, pre_mix, inp["grad_h_in"])
    collapse_x, collapse_p = mhc._core.run_collapse_backward(inp["grad_h_in"], x, pre_mix)
    assert_same_bits("grad_x", collapse_x, leaves["x"].grad, "mhc_collapse's backward vs the site's")
    mag_p = (x.to(F64).abs() * inp["grad_h_in"].to(F64).abs()[:, None, :]).sum(-1)
    for name, ours in (("grad_pre_mix", p.grad), ("collapse grad_pre_mix", collapse_p)):
        check_output(name, ours, want_p, mag_p, f"carried-{dtype}")
    own_p = (x.to(F64) * inp["grad_h_in"].to(F64)[:, None, :]).sum(-1)  # = want_p; the own h_pre's would
    assert torch.allclose(want_p, own_p)  # add a path into phi: checked zero above


@pytest.mark.parametrize("isa_family", [f for f in FAMILIES if f != "reference"], indirect=True)
def test_with_the_own_h_pre_it_is_mhc_pre_sinkhorn(isa_family):
    """SPEC §14: with pre_mix = the token's own h_pre (no gamma, sinkhorn_eps = hc_eps) the
    forward is MhcPreSinkhorn's, bit for bit, on every fp32 family."""
    shapes = [(1, 7, 3, "bf16", "TND", 20, EPS[0]), (2, 100, 5, "fp16", "BSND", 3, EPS[1]),
              (4, 64, 37, "bf16", "BSND", 20, EPS[0]), (4, 33, 2, "fp32", "TND", 1, EPS[1]),
              (4, 512, 9, "fp32", "TND", 20, EPS[0])]
    for n, d, t, dtype, layout, iters, (hc_eps, norm_eps, _) in shapes:
        case = {"N": n, "D": d, "T": t, "layout": layout, "dtype": dtype, "gamma": False, "pre_mix": False,
                "num_iters": iters, "eps": EPS[0]}
        inp = make_inputs(case, seed=11300 + n + d)
        x = inp["x"]
        lead = tuple(x.shape[:-2])
        fused = mhc.mhc_pre_sinkhorn(x, inp["phi"], inp["alpha"], inp["bias"], n, iters, hc_eps, norm_eps,
                                     out_flag=True)
        ours = mhc.mhc_pre_single_pass(x, inp["phi"], inp["alpha"], inp["bias"], fused[3], num_iters=iters,
                                       hc_eps=hc_eps, norm_eps=norm_eps)
        what = f"mhc_pre_sinkhorn vs the single pass with its h_pre ({isa_family}, N={n}, D={d}, T={t}, {dtype})"
        for name, want, got in (("h_in", fused[0], ours[0]), ("h_pre", fused[3], ours[1]),
                                ("h_post", fused[1], ours[2]), ("h_res", fused[2], ours[3].reshape(lead + (n * n,)))):
            assert_same_bits(name, want, got, what)


@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
def test_the_first_site_selects_stream_0(isa_family):
    """pre_mix None: h_in = x[..., 0, :] bit for bit, every dtype and layout."""
    for dtype, layout, n, d in (("bf16", "BSND", 4, 100), ("fp16", "TND", 2, 7), ("fp32", "BSND", 1, 64),
                                ("bf16", "TND", 4, 513)):
        case = {"N": n, "D": d, "T": 5, "layout": layout, "dtype": dtype, "gamma": True, "pre_mix": False,
                "num_iters": 2, "eps": EPS[0]}
        inp = make_inputs(case, seed=11400 + d)
        h_in = single_pass(inp, case)[0]
        assert_same_bits("h_in", inp["x"][..., 0, :], h_in, f"first site vs stream 0 ({isa_family}, {dtype})")


# The autograd rule.

@pytest.mark.parametrize("requires", [("x",), ("pre_mix",), ("phi", "bias"), ("alpha", "gamma")])
def test_only_inputs_requiring_grad_get_grads(requires):
    case = dict(CASES[5])
    inp = make_inputs(case, seed=11500)
    _, grads = run_ours(inp, case, requires)
    everything = run_ours(inp, case)[1]
    for name in GRADS:
        if name[5:] in requires:
            assert_same_bits(name, everything[name], grads[name], "all leaves vs some")
        else:
            assert grads[name] is None, name


def test_unused_outputs_are_zero_grads():
    """Only h_pre feeds the loss (what the next site sends back): the others' grads arrive as
    None, taken as zeros; the same bits as zeros given explicitly."""
    case = dict(CASES[2])
    inp = make_inputs(case, seed=11510)
    zeros = dict(inp, grad_h_in=torch.zeros_like(inp["grad_h_in"]), grad_h_post=torch.zeros_like(inp["grad_h_post"]),
                 grad_h_res=torch.zeros_like(inp["grad_h_res"]))
    _, want = run_ours(zeros, case)
    leaves = {k: inp[k].clone().requires_grad_(True) for k in LEAVES}
    outputs = single_pass(leaves, case)
    (outputs[1] * inp["grad_h_pre"]).sum().backward()
    for name in GRADS:
        assert_same_bits(name, want[name], leaves[name[5:]].grad, "unused outputs vs zero grads")


class NoFunction:
    @staticmethod
    def apply(*args):
        raise AssertionError("went through the autograd Function")


def test_no_graph_takes_the_direct_path(monkeypatch):
    case = dict(CASES[0])
    inp = make_inputs(case, seed=11520)
    want = single_pass(inp, case)
    monkeypatch.setattr(mhc.ops, "MhcPreSinglePassFunction", NoFunction)
    monkeypatch.setattr(mhc.ops, "MhcCollapseFunction", NoFunction)
    for name, a, b in zip(OUTPUTS, want, single_pass(inp, case)):
        assert_same_bits(name, a, b, "two direct calls")
    mhc.mhc_collapse(inp["x"], inp["pre_mix"])
    with torch.no_grad():
        got = single_pass(dict(inp, pre_mix=inp["pre_mix"].clone().requires_grad_(True)), case)
    assert not any(t.requires_grad for t in got)
    with pytest.raises(AssertionError, match="autograd Function"):
        single_pass(dict(inp, pre_mix=inp["pre_mix"].clone().requires_grad_(True)), case)
    with pytest.raises(AssertionError, match="autograd Function"):
        mhc.mhc_collapse(inp["x"], inp["pre_mix"].clone().requires_grad_(True))


def test_strided_views_give_the_same_bits():
    case = dict(CASES[5])
    inp = make_inputs(case, seed=11530)
    want_fwd, want_grads = run_ours(inp, case)
    styles = {"x": "reversed", "phi": "step", "alpha": "step", "bias": "step", "pre_mix": "reversed",
              "gamma": "reversed", "grad_h_in": "step", "grad_h_pre": "reversed", "grad_h_post": "step",
              "grad_h_res": "reversed"}
    fwd, grads = run_ours({k: strided_copy(v, styles[k]) for k, v in inp.items()}, case)
    for name in OUTPUTS:
        assert_same_bits(name, want_fwd[name], fwd[name], "contiguous vs strided")
    for name in GRADS:
        assert_same_bits(name, want_grads[name], grads[name], "contiguous vs strided")


def test_grad_x_post_enters_unrounded():
    """The backward's grad_x_post (fp32, what MhcPostBackward hands on) adds into grad_x
    before its one rounding: the oracle's grad_x plus grad_x_post, within the bound."""
    case = dict(CASES[5])
    inp = make_inputs(case, seed=11540)
    x, phi, alpha, bias, pre_mix, gamma = (inp[k] for k in LEAVES)
    opts = (case["num_iters"],) + case["eps"][:2] + (case["eps"][0],)
    h_in, h_pre, h_post, h_res, inv_rms, h_mix = mhc._core.run_pre_single_pass_forward(x, phi, alpha, bias, pre_mix,
                                                                                      gamma, *opts)
    grad_x_post = torch.randn(x.shape, generator=torch.Generator().manual_seed(11541))
    grad_x = mhc._core.run_pre_single_pass_backward(
        x, phi, alpha, bias, pre_mix, gamma, inp["grad_h_in"], inp["grad_h_pre"], inp["grad_h_post"],
        inp["grad_h_res"], inv_rms, h_mix, h_pre, h_post, *opts, grad_x_post=grad_x_post)[0]
    hc_eps, norm_eps, _ = case["eps"]
    want = single_pass_grads64(x, phi, alpha, bias, pre_mix, gamma, case["num_iters"], hc_eps, norm_eps, None,
                               inp["grad_h_in"], inp["grad_h_pre"], inp["grad_h_post"], inp["grad_h_res"])[0]
    z64 = forward64(x, phi, alpha, bias, gamma, norm_eps, hc_eps)[2]
    gz64 = sinkhorn_grad64(z64, inp["grad_h_res"], hc_eps, case["num_iters"])
    gz_mag = gz64.abs() + (SINKHORN_GRAD_TOL / COND_TOL) * gz64.abs().amax(dim=(-2, -1), keepdim=True)
    mag = magnitudes64(x, phi, alpha, bias, gamma, norm_eps, hc_eps, inp["grad_h_in"], inp["grad_h_post"], gz_mag,
                       grad_x_post, carried=(pre_mix, inp["grad_h_pre"]))["grad_x"]
    check_output("single_pass grad_x", grad_x, want + grad_x_post.to(F64), mag, "grad_x_post", mag)


# Determinism and batch invariance.

def thread_inputs():
    case = {"N": 4, "D": 64, "T": 1000, "layout": "TND", "dtype": "bf16", "gamma": True, "pre_mix": True,
            "num_iters": 20, "eps": EPS[0]}
    return case, make_inputs(case, seed=11600)


def test_bitwise_identical_for_1_and_2_threads():
    case, inp = thread_inputs()
    results = {}
    for threads in (1, 2):
        mhc.set_num_threads(threads)
        fwd, grads = run_ours(inp, case)
        first_fwd, first_grads = run_ours(dict(inp, pre_mix=None), case)
        results[threads] = [fwd[k] for k in OUTPUTS] + [grads[k] for k in GRADS] + \
                           [first_fwd["h_in"], first_grads["grad_x"], first_grads["grad_phi"]]
    names = OUTPUTS + GRADS + ("first h_in", "first grad_x", "first grad_phi")
    for name, a, b in zip(names, results[1], results[2]):
        assert_same_bits(name, a, b, "1 vs 2 threads")


def test_collapse_bitwise_identical_for_1_and_2_threads():
    _, inp = thread_inputs()
    results = {}
    for threads in (1, 2):
        mhc.set_num_threads(threads)
        x, p = inp["x"].clone().requires_grad_(True), inp["pre_mix"].clone().requires_grad_(True)
        h = mhc.mhc_collapse(x, p)
        (h.float() * inp["grad_h_in"].float()).sum().backward()
        results[threads] = (h.detach(), x.grad, p.grad)
    for name, a, b in zip(("h", "grad_x", "grad_pre_mix"), results[1], results[2]):
        assert_same_bits(name, a, b, "1 vs 2 threads")


@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_token_alone_equals_token_in_batch(layout):
    """A token's outputs and its own grads (grad_x, grad_pre_mix), alone and inside a batch of
    7, for both operators."""
    case = {"N": 4, "D": 100, "T": 7, "layout": "TND", "dtype": "bf16", "gamma": True, "pre_mix": True,
            "num_iters": 20, "eps": EPS[0]}
    inp = make_inputs(case, seed=11610)
    if layout == "BSND":
        inp = {k: v.unsqueeze(0) if k in PER_TOKEN else v for k, v in inp.items()}
    mhc.set_num_threads(2)

    def everything(inp):
        fwd, grads = run_ours(inp, case)
        x, p = inp["x"].clone().requires_grad_(True), inp["pre_mix"].clone().requires_grad_(True)
        h = mhc.mhc_collapse(x, p)
        (h.float() * inp["grad_h_in"].float()).sum().backward()
        return dict(fwd, grad_x=grads["grad_x"], grad_pre_mix=grads["grad_pre_mix"], collapse_h=h.detach(),
                    collapse_grad_x=x.grad, collapse_grad_pre_mix=p.grad)

    batch = everything(inp)
    for i in (0, 3, 6):
        pick = (lambda a: a[i:i + 1]) if layout == "TND" else (lambda a: a[:, i:i + 1])
        alone = everything({k: pick(v) if k in PER_TOKEN else v for k, v in inp.items()})
        for name, got in alone.items():
            assert_same_bits(name, pick(batch[name]), got, f"token {i} in the batch vs alone")


# No tokens.

@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize("pre_mix", [True, False], ids=["premix", "first"])
def test_no_tokens(layout, pre_mix):
    """T = 0: empty outputs of the right shapes, zero parameter gradients."""
    case = {"N": 4, "D": 24, "T": 0, "layout": layout, "dtype": "bf16", "gamma": True, "pre_mix": pre_mix,
            "num_iters": 20, "eps": EPS[0]}
    inp = make_inputs(case, seed=11700)
    fwd, grads = run_ours(inp, case)
    check_shapes(inp, fwd, grads)
    assert all(t.numel() == 0 for t in fwd.values())
    assert grads["grad_x"].numel() == 0 and (grads["grad_pre_mix"] is None) == (not pre_mix)
    for name in ("grad_phi", "grad_alpha", "grad_bias", "grad_gamma"):
        assert grads[name].numel() > 0 and not bool(grads[name].ne(0).any()), name
    if pre_mix:
        x, p = inp["x"].clone().requires_grad_(True), inp["pre_mix"].clone().requires_grad_(True)
        h = mhc.mhc_collapse(x, p)
        assert h.shape == inp["grad_h_in"].shape and h.dtype == x.dtype
        h.float().sum().backward()
        assert x.grad.shape == x.shape and p.grad.shape == p.shape


# MhcCollapse against the oracle.

COLLAPSE_CASES = [(1, 7, 3, "TND", "bf16"), (2, 100, 5, "BSND", "fp16"), (4, 64, 37, "TND", "fp32"),
                  (4, 33, 1, "BSND", "bf16"), (3, 1, 4, "TND", "fp16"), (4, 513, 6, "BSND", "fp32"),
                  (2, 16, 2, "TND", "bf16"), (4, 24, 0, "BSND", "fp32")]


@pytest.mark.parametrize("shape", COLLAPSE_CASES, ids=lambda s: "N{}-D{}-T{}-{}-{}".format(*s))
@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
def test_collapse_against_the_oracle(isa_family, shape):
    n, d, t, layout, dtype = shape
    case = {"N": n, "D": d, "T": t, "layout": layout}
    lead = token_lead(case)
    gen = torch.Generator().manual_seed(11800 + n * d + t)
    x = torch.randn(lead + (n, d), generator=gen).to(DTYPES[dtype])
    pre_mix = torch.randn(lead + (n,), generator=gen)
    g = torch.randn(lead + (d,), generator=gen).to(x.dtype)
    leaves = [x.clone().requires_grad_(True), pre_mix.clone().requires_grad_(True)]
    h = mhc.mhc_collapse(*leaves)
    assert h.requires_grad and h.shape == lead + (d,) and h.dtype == x.dtype
    (h.float() * g.float()).sum().backward()
    assert_same_bits("h", mhc.mhc_collapse(x, pre_mix), h.detach(), "direct vs autograd")
    grad_x, grad_p = leaves[0].grad, leaves[1].grad
    assert grad_x.dtype == x.dtype and grad_p.dtype == torch.float32 and grad_p.shape == pre_mix.shape
    direct = mhc._core.run_collapse_backward(g, x, pre_mix)
    assert_same_bits("grad_x", direct[0], grad_x, "the backward vs autograd")
    assert_same_bits("grad_pre_mix", direct[1], grad_p, "the backward vs autograd")
    if t == 0:
        return
    cid = f"collapse-{isa_family}-N{n}-D{d}-T{t}-{layout}-{dtype}"
    v, p, g64 = x.to(F64), pre_mix.to(F64), g.to(F64)
    want_x, want_p = collapse_grads64(x, pre_mix, g)
    h_mag = (p[..., None].abs() * v.abs()).sum(-2)
    check_output("collapse h", h.detach(), collapse64(x, pre_mix), h_mag, cid, h_mag)
    gx_mag = p[..., None].abs() * g64[..., None, :].abs()
    check_output("collapse grad_x", grad_x, want_x, gx_mag, cid, gx_mag)
    check_output("collapse grad_pre_mix", grad_p, want_p, (v.abs() * g64[..., None, :].abs()).sum(-1), cid)


# Validation.

def base():
    case = {"N": 4, "D": 8, "T": 3, "layout": "TND", "dtype": "bf16", "gamma": True, "pre_mix": True,
            "num_iters": 2, "eps": EPS[0]}
    return make_inputs(case, seed=11900)


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires_grad"])
def test_errors_name_the_argument(grad):
    inp = base()
    inp["phi"] = inp["phi"].clone().requires_grad_(grad)
    x, phi, alpha, bias, pre_mix, gamma = (inp[k] for k in LEAVES)

    def call(**changes):
        a = dict(x=x, phi=phi, alpha=alpha, bias=bias, pre_mix=pre_mix)
        kw = dict(gamma=gamma)
        for key, value in changes.items():
            (a if key in a else kw)[key] = value
        return lambda: mhc.mhc_pre_single_pass(a["x"], a["phi"], a["alpha"], a["bias"], a["pre_mix"], **kw)

    cases = [
        (call(pre_mix=pre_mix[:, :-1]), ValueError, "^pre_mix: "),
        (call(pre_mix=pre_mix[:-1]), ValueError, "^pre_mix: "),
        (call(pre_mix=pre_mix[None]), ValueError, "^pre_mix: "),
        (call(pre_mix=pre_mix.bfloat16()), TypeError, "^pre_mix: "),
        (call(pre_mix=pre_mix.double()), TypeError, "^pre_mix: expected dtype fp32, got torch.float64"),
        (call(pre_mix=[0.25] * 4), TypeError, "^pre_mix: expected a torch.Tensor, got list"),
        (call(alpha=alpha[:2]), ValueError, "^alpha: "),
        (call(phi=phi[:8], alpha=alpha[:2], bias=bias[:8]), ValueError, "^alpha: "),
        (call(alpha=alpha[:1]), ValueError, "^alpha: "),
        (call(gamma=gamma[:, :-1]), ValueError, "^gamma: "),
        (call(gamma=gamma[:-1]), ValueError, "^gamma: "),
        (call(gamma=gamma.double()), TypeError, "^gamma: "),
        (call(gamma=gamma.bfloat16()), TypeError, "^gamma: "),
        (call(x=x.double()), TypeError, "^x: "),
        (call(x=x[0]), ValueError, "^x: "),
        (call(phi=phi[:, :-1]), ValueError, "^phi: "),
        (call(phi=phi.bfloat16()), TypeError, "^phi: "),
        (call(bias=bias[:-1]), ValueError, "^bias: "),
        (call(num_iters=0), ValueError, "^num_iters: "),
        (call(num_iters=2.5), TypeError, "^num_iters: "),
        (call(hc_eps="1e-6"), TypeError, "^hc_eps: "),
        (call(norm_eps=None), TypeError, "^norm_eps: "),
        (call(sinkhorn_eps="1e-6"), TypeError, "^sinkhorn_eps: "),
        (lambda: mhc.mhc_pre_single_pass(x, phi, alpha, bias, pre_mix, gamma), TypeError, ""),  # keyword-only
    ]
    for run, kind, pattern in cases:
        with pytest.raises(kind, match=pattern):
            run()


def test_checks_go_in_argument_order():
    """Two wrong arguments: the first in the signature's order is named."""
    inp = base()
    x, phi, alpha, bias, pre_mix, gamma = (inp[k] for k in LEAVES)
    with pytest.raises(TypeError, match="^pre_mix: "):
        mhc.mhc_pre_single_pass(x, phi, alpha, bias, pre_mix.double(), gamma=gamma.double())
    with pytest.raises(TypeError, match="^bias: "):
        mhc.mhc_pre_single_pass(x, phi, alpha, bias.double(), pre_mix.double())


def test_the_permutation_form_of_phi_is_refused():
    """The single pass has R = N*N (its Sinkhorn needs the N x N logits); phi with 2N + N!
    rows (legal for MhcPre) is a ValueError."""
    inp = base()
    f = 2 * 4 + math.factorial(4)
    with pytest.raises(ValueError, match="^(phi|bias|alpha): "):
        mhc.mhc_pre_single_pass(inp["x"], torch.randn(f, 32), inp["alpha"], torch.randn(f), inp["pre_mix"])


def test_collapse_errors_name_the_argument():
    inp = base()
    x, pre_mix = inp["x"], inp["pre_mix"]
    cases = [
        (lambda: mhc.mhc_collapse(x, None), TypeError, "^pre_mix: expected a torch.Tensor, got None"),
        (lambda: mhc.mhc_collapse(x, pre_mix[:, :-1]), ValueError, "^pre_mix: "),
        (lambda: mhc.mhc_collapse(x, pre_mix[:-1]), ValueError, "^pre_mix: "),
        (lambda: mhc.mhc_collapse(x, pre_mix.bfloat16()), TypeError, "^pre_mix: "),
        (lambda: mhc.mhc_collapse(x, pre_mix.double()), TypeError, "^pre_mix: "),
        (lambda: mhc.mhc_collapse(x.double(), pre_mix), TypeError, "^x: "),
        (lambda: mhc.mhc_collapse(x[0], pre_mix), ValueError, "^x: "),
        (lambda: mhc.mhc_collapse("x", pre_mix), TypeError, "^x: expected a torch.Tensor, got str"),
    ]
    for run, kind, pattern in cases:
        with pytest.raises(kind, match=pattern):
            run()
    with pytest.raises(ValueError, match="^pre_mix: "):
        mhc.mhc_collapse(x, pre_mix[:, :-1].clone().requires_grad_(True))


def test_outputs_past_the_limit_are_value_errors(allocations):
    huge = torch.zeros((), dtype=torch.bfloat16).expand(2 ** 42, 4, 4)  # T*N*D = 2^46
    p = torch.zeros(()).expand(2 ** 42, 4)
    with pytest.raises(ValueError, match=r"^x: .*2\^44"):
        mhc.mhc_collapse(huge, p)
    with pytest.raises(ValueError, match=r"^x: .*2\^44"):
        mhc.mhc_pre_single_pass(huge, torch.zeros(24, 16), torch.ones(3), torch.zeros(24), p)
    assert allocations == [], allocations


# torch.ops.mhc: the meta kernels' shapes and dtypes, autograd on meta tensors.

@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_meta_kernels(dtype, layout):
    case = {"N": 2, "D": 9, "T": 6, "layout": layout, "dtype": dtype, "gamma": True, "pre_mix": True,
            "num_iters": 3, "eps": EPS[0]}
    inp = make_inputs(case, seed=12000)
    for pre_mix, gamma in ((inp["pre_mix"], inp["gamma"]), (None, None)):
        args = (inp["x"], inp["phi"], inp["alpha"], inp["bias"], pre_mix)
        want = torch.ops.mhc.mhc_pre_single_pass(*args, gamma=gamma, num_iters=3)
        for a, b in zip(want, mhc.mhc_pre_single_pass(*args, gamma=gamma, num_iters=3)):
            assert torch.equal(a, b)
        meta = torch.ops.mhc.mhc_pre_single_pass(*(None if t is None else t.to("meta") for t in args),
                                                 gamma=None if gamma is None else gamma.to("meta"), num_iters=3)
        assert len(meta) == 4
        for name, a, b in zip(OUTPUTS, meta, want):
            assert a.device.type == "meta" and (a.shape, a.dtype) == (b.shape, b.dtype), name
    h = torch.ops.mhc.mhc_collapse(inp["x"], inp["pre_mix"])
    assert torch.equal(h, mhc.mhc_collapse(inp["x"], inp["pre_mix"]))
    meta_h = torch.ops.mhc.mhc_collapse(inp["x"].to("meta"), inp["pre_mix"].to("meta"))
    assert meta_h.device.type == "meta" and (meta_h.shape, meta_h.dtype) == (h.shape, h.dtype)


def test_autograd_on_meta_tensors():
    case = {"N": 4, "D": 16, "T": 3, "layout": "BSND", "dtype": "bf16", "gamma": True, "pre_mix": True,
            "num_iters": 3, "eps": EPS[0]}
    inp = make_inputs(case, seed=12010)
    leaves = {k: inp[k].to("meta").requires_grad_(True) for k in LEAVES}
    outputs = torch.ops.mhc.mhc_pre_single_pass(leaves["x"], leaves["phi"], leaves["alpha"], leaves["bias"],
                                                leaves["pre_mix"], gamma=leaves["gamma"])
    h = torch.ops.mhc.mhc_collapse(leaves["x"], leaves["pre_mix"])
    (sum(o.float().sum() for o in outputs) + h.float().sum()).backward()
    for k, t in leaves.items():
        assert t.grad is not None and t.grad.device.type == "meta" and t.grad.shape == t.shape, k
        assert t.grad.dtype == t.dtype, k


def test_exported():
    for name in ("mhc_pre_single_pass", "MhcPreSinglePassFunction", "mhc_collapse", "MhcCollapseFunction"):
        assert name in mhc.__all__ and getattr(mhc, name) is not None
    assert mhc.ops.mhc_pre_single_pass is mhc.mhc_pre_single_pass and mhc.ops.mhc_collapse is mhc.mhc_collapse


# A V4.1 model (SPEC §14) through autograd: two sites and the final collapse.

def model(x, sites, ws, first_pre_mix=None):
    """site s: (h_in, h_pre, h_post, H) = single pass(x_s, p_s); x_{s+1} = MhcPost(x_s, H,
    F_s(h_in), h_post); p_{s+1} = h_pre; the end: MhcCollapse(x_L, p_L)."""
    p = first_pre_mix
    for (phi, alpha, bias), w in zip(sites, ws):
        h_in, h_pre, h_post, h = mhc.mhc_pre_single_pass(x, phi, alpha, bias, p)
        x = mhc.npu_mhc_post(x, h, (h_in.float() @ w).to(x.dtype), h_post)
        p = h_pre
    return mhc.mhc_collapse(x, p)


def model64(x, sites, ws):
    p = None
    for (phi, alpha, bias), w in zip(sites, ws):
        h_in, h_pre, h_post, h = single_pass64(x, phi, alpha, bias, p)[:4]
        x = post64(x, h, h_in @ w, h_post)
        p = h_pre
    return collapse64(x, p)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_model_through_autograd(dtype):
    """Every parameter's and x's grad through two sites and the end's collapse (h_pre carried
    into the next site) agree with float64 autograd through the oracle's model (normwise,
    fp32 x: 1e-5; bf16 x: bf16's rounding of h_in, the sub-layers' outputs and x_{s+1}
    dominates, 2e-2)."""
    n, d = 4, 48
    case = {"N": n, "D": d, "T": 6, "layout": "BSND", "dtype": dtype, "gamma": False, "pre_mix": False,
            "num_iters": 20, "eps": EPS[0]}
    gen = torch.Generator().manual_seed(12100)
    x = make_inputs(case, seed=12101)["x"]
    sites = [tuple(make_inputs(case, seed=12102 + s)[k] for k in ("phi", "alpha", "bias")) for s in range(2)]
    ws = [torch.randn(d, d, generator=gen) / d ** 0.5 for _ in range(2)]
    g = torch.randn(x.shape[:-2] + (d,), generator=gen)
    leaves = [x.clone().requires_grad_(True)] + [t.clone().requires_grad_(True) for site in sites for t in site]
    w_leaves = [w.clone().requires_grad_(True) for w in ws]
    out = model(leaves[0], [tuple(leaves[1 + 3 * s:4 + 3 * s]) for s in range(2)], w_leaves)
    (out.float() * g).sum().backward()
    leaves64 = [t.detach().to(F64).requires_grad_(True) for t in leaves + w_leaves]
    out64 = model64(leaves64[0], [tuple(leaves64[1 + 3 * s:4 + 3 * s]) for s in range(2)], leaves64[7:])
    grads64 = torch.autograd.grad((out64 * g.to(F64)).sum(), leaves64)
    names = ["out", "grad_x"] + [f"site{s} grad_{k}" for s in range(2) for k in ("phi", "alpha", "bias")] + \
            ["grad_w0", "grad_w1"]
    ours = [out.detach()] + [t.grad for t in leaves + w_leaves]
    tol = 1e-5 if dtype == "fp32" else 2e-2
    for name, a, truth in zip(names, ours, [out64.detach()] + list(grads64)):
        rel = float(torch.linalg.vector_norm(a.double() - truth) / torch.linalg.vector_norm(truth))
        ERROR_LOG.record(f"v4.1 model {name}[{dtype}]", "normwise rel", rel, f"model-{dtype}")
        assert rel <= tol, f"{name}: normwise {rel:.3g} > {tol:g}"
