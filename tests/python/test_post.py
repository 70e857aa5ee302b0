"""MhcPost / MhcPostBackward (SPEC §11) through npu_mhc_post and npu_mhc_post_backward:
every output (out, grad_x in x's dtype and in fp32, grad_h_res, grad_h_out, grad_h_post)
against the float64 oracle (oracle.post64, written from SPEC's formula, and torch autograd
through it); H enters transposed; the autograd rule gives npu_mhc_post_backward's bits;
strided views, threads, batch invariance and every kernel family bitwise; validation.

Bound (conftest.check_output): |ours - truth| <= 1 ulp of the output's dtype at |truth|
+ 1e-5 x the sum of |terms| of the output's fp32 sum (oracle.post_magnitudes64).
"""
import itertools

import pytest
import torch

import mhc
from conftest import (DTYPES, FAMILIES, assert_same_bits, check_output, strided_copy,
                      token_lead)
from oracle import post64, post_grads64, post_magnitudes64

NS = range(1, 9)
DTYPE_KEYS = ("bf16", "fp16", "fp32")
DS = (1, 7, 64, 100, 512, 4096)
TS = (1, 3, 37, 0)
LAYOUTS = ("TND", "BSND")
NONCONTIG = ("none", "inputs", "grad")
GRAD_NAMES = ("grad_x", "grad_h_res", "grad_h_out", "grad_h_post")


def make_cases():
    """Every (N, dtype) pair; D, T, layout, h_res present or absent and strided views cycled
    across them (every dtype meets every D; the cycles' lengths differ, so values mix)."""
    cases = []
    for k, (n, dtype) in enumerate(itertools.product(NS, DTYPE_KEYS)):
        d = DS[(k // 3 + k % 3) % 6]
        t = TS[(k // 2) % 4] if d < 4096 else 3  # the big rows on few tokens
        cases.append({"N": n, "dtype": dtype, "D": d, "T": t, "layout": LAYOUTS[(k // 3) % 2],
                      "h_res": k % 4 != 1, "noncontig": NONCONTIG[(k // 4) % 3]})
    return cases


CASES = make_cases()


def case_id(c):
    return (f"N{c['N']}-D{c['D']}-T{c['T']}-{c['layout']}-{c['dtype']}-"
            f"{'hres' if c['h_res'] else 'nohres'}-nc_{c['noncontig']}")


def make_inputs(case, seed):
    gen = torch.Generator().manual_seed(seed)
    lead, n, d, dtype = token_lead(case), case["N"], case["D"], DTYPES[case["dtype"]]

    def randn(*shape):
        return torch.randn(lead + shape, generator=gen)

    return {"x": randn(n, d).to(dtype),
            "h_res": randn(n, n) if case["h_res"] else None,  # any real matrix, not symmetric
            "h_out": randn(d).to(dtype),
            "h_post": 2 * torch.rand(lead + (n,), generator=gen),
            "grad": randn(n, d).to(dtype)}


def post(inp):
    return mhc.npu_mhc_post(inp["x"], inp["h_res"], inp["h_out"], inp["h_post"])


def post_backward(inp, **kwargs):
    return mhc.npu_mhc_post_backward(inp["grad"], inp["x"], inp["h_res"], inp["h_out"], inp["h_post"], **kwargs)


STYLES = {"x": "reversed", "h_res": "reversed", "h_out": "step", "h_post": "step", "grad": "reversed"}


def strided_inputs(inp, which):
    names = ("grad",) if which == "grad" else ("x", "h_res", "h_out", "h_post")
    return dict(inp, **{k: strided_copy(inp[k], STYLES[k] if inp[k].dim() >= 2 else "step")
                        for k in names if inp[k] is not None})


def check_against_oracle(inp, out, grads, grad_x32, cid):
    x, h_res, h_out, h_post, g = (inp[k] for k in ("x", "h_res", "h_out", "h_post", "grad"))
    mags = post_magnitudes64(x, h_res, h_out, h_post, g)
    # Outputs in x's dtype log in ulps and sums of |terms| (the terms argument), fp32 ones normwise.
    check_output("post out", out, post64(x, h_res, h_out, h_post), mags["out"], cid, mags["out"])
    truth = post_grads64(x, h_res, h_out, h_post, g)
    for name, ours, want in zip(GRAD_NAMES, grads, truth):
        terms = mags[name] if name in ("grad_x", "grad_h_out") else None
        check_output("post " + name, ours, want, mags[name], cid, terms)
    check_output("post grad_x(fp32 asked)", grad_x32, truth[0], mags["grad_x"], cid)


def autograd_grads(inp):
    leaves = {k: (None if inp[k] is None else inp[k].clone().requires_grad_(True))
              for k in ("x", "h_res", "h_out", "h_post")}
    out = mhc.npu_mhc_post(leaves["x"], leaves["h_res"], leaves["h_out"], leaves["h_post"])
    assert out.requires_grad and out.grad_fn is not None
    out.backward(inp["grad"])
    return out.detach(), tuple(None if leaves[k] is None else leaves[k].grad
                               for k in ("x", "h_res", "h_out", "h_post"))


def test_cases_show_every_value():
    for key, values in (("N", NS), ("dtype", DTYPE_KEYS), ("D", DS), ("T", TS), ("layout", LAYOUTS),
                        ("h_res", (True, False)), ("noncontig", NONCONTIG)):
        assert {c[key] for c in CASES} == set(values), key


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_post_against_float64_oracle(case):
    cid = "post-" + case_id(case)
    inp = make_inputs(case, seed=8000 + CASES.index(case))
    x = inp["x"]
    lead, n, d = tuple(x.shape[:-2]), case["N"], case["D"]
    out = post(inp)
    grads = post_backward(inp)
    grad_x32 = post_backward(inp, grad_x_dtype=torch.float32)[0]
    assert out.dtype == x.dtype and out.shape == x.shape and out.is_contiguous()
    want = {"grad_x": (x.shape, x.dtype), "grad_h_res": (lead + (n, n), torch.float32),
            "grad_h_out": (lead + (d,), x.dtype), "grad_h_post": (lead + (n,), torch.float32)}
    for name, t in zip(GRAD_NAMES, grads):
        assert (t.shape, t.dtype) == want[name] and t.is_contiguous(), name
    assert grad_x32.dtype == torch.float32 and grad_x32.shape == x.shape
    # fp32 grad_x rounded once to x's dtype is the default grad_x, bit for bit.
    assert_same_bits("grad_x", grads[0], grad_x32.to(x.dtype), "x's dtype vs fp32 rounded")
    # grad_x_dtype=x's dtype is the default.
    assert_same_bits("grad_x", grads[0], post_backward(inp, grad_x_dtype=x.dtype)[0], "default vs x's dtype")

    if case["noncontig"] != "none":  # strided views: the very same bits
        s = strided_inputs(inp, case["noncontig"])
        assert_same_bits("out", out, post(s), "contiguous vs strided")
        for name, a, b in zip(GRAD_NAMES, grads, post_backward(s)):
            assert_same_bits(name, a, b, f"contiguous vs strided {case['noncontig']}")

    # The autograd rule: npu_mhc_post_backward's bits, grad_h_res only for a given h_res.
    out_ag, grads_ag = autograd_grads(inp)
    assert_same_bits("out", out, out_ag, "direct vs autograd")
    for name, a, b in zip(GRAD_NAMES, grads, grads_ag):
        if name == "grad_h_res" and inp["h_res"] is None:
            assert b is None
            continue
        assert_same_bits(name, a, b, "npu_mhc_post_backward vs out.backward()")

    if case["T"] == 0:
        assert out.numel() == 0 and all(g.numel() == 0 for g in grads)
        return
    check_against_oracle(inp, out, grads, grad_x32, cid)


# H enters transposed (SPEC §11: out_j = Σ_i H[i, j]·x_i).

@pytest.mark.parametrize("dtype", DTYPE_KEYS)
def test_h_res_enters_transposed(dtype):
    """A cyclic shift H[i, (i+1) % N] = 1 (not symmetric for N = 4) with h_post = 0 moves
    stream j-1 to stream j exactly; untransposed it would move stream j+1. Backward:
    grad_x_i = Σ_j H[i, j]·g_j = g_{i+1}; grad_h_res[i, j] = Σ_d x_i·g_j."""
    n, d, t = 4, 33, 5
    gen = torch.Generator().manual_seed(8100)
    dt = DTYPES[dtype]
    x = torch.randn(t, n, d, generator=gen).to(dt)
    g = torch.randn(t, n, d, generator=gen).to(dt)
    shift = torch.zeros(n, n)
    for i in range(n):
        shift[i, (i + 1) % n] = 1.0
    h_res = shift.expand(t, n, n).contiguous()
    h_out = torch.randn(t, d, generator=gen).to(dt)
    out = mhc.npu_mhc_post(x, h_res, h_out, torch.zeros(t, n))
    for j in range(n):
        assert torch.equal(out[:, j], x[:, (j - 1) % n]), f"stream {j} is not stream {(j - 1) % n}"
    grad_x, grad_h_res, _, _ = mhc.npu_mhc_post_backward(g, x, h_res, h_out, torch.zeros(t, n))
    for i in range(n):
        assert torch.equal(grad_x[:, i], g[:, (i + 1) % n]), f"grad of stream {i} is not grad {(i + 1) % n}"
    want = torch.einsum("tid,tjd->tij", x.double(), g.double())
    assert float((grad_h_res.double() - want).abs().max()) <= 1e-5 * float(want.abs().max())
    assert not torch.allclose(want, want.transpose(-1, -2))


def test_a_general_non_symmetric_h_res_is_far_from_its_transpose():
    """With a random H the transposed formula's output is O(1) off ours: the oracle check
    of test_post_against_float64_oracle would fail if the library did not transpose."""
    case = {"N": 4, "D": 64, "T": 6, "layout": "BSND", "dtype": "fp32", "h_res": True, "noncontig": "none"}
    inp = make_inputs(case, seed=8101)
    out = post(inp).double()
    right = post64(inp["x"], inp["h_res"], inp["h_out"], inp["h_post"])
    wrong = post64(inp["x"], inp["h_res"].transpose(-1, -2), inp["h_out"], inp["h_post"])
    assert float((out - right).abs().max()) < 1e-5 * float(right.abs().max())
    assert float((out - wrong).abs().max()) > 0.1 * float(right.abs().max())


# The autograd rule.

@pytest.mark.parametrize("requires", [("x",), ("h_res",), ("h_out", "h_post"), ("x", "h_res", "h_out", "h_post")])
def test_only_inputs_requiring_grad_get_grads(requires):
    case = {"N": 3, "D": 40, "T": 4, "layout": "TND", "dtype": "bf16", "h_res": True, "noncontig": "none"}
    inp = make_inputs(case, seed=8200)
    by_hand = dict(zip(("x", "h_res", "h_out", "h_post"), post_backward(inp)))
    leaves = {k: inp[k].clone().requires_grad_(k in requires) for k in ("x", "h_res", "h_out", "h_post")}
    (mhc.npu_mhc_post(leaves["x"], leaves["h_res"], leaves["h_out"], leaves["h_post"]).float()
     * inp["grad"].float()).sum().backward()
    for k, leaf in leaves.items():
        if k in requires:
            assert_same_bits("grad_" + k, by_hand[k], leaf.grad, "npu_mhc_post_backward vs autograd")
        else:
            assert leaf.grad is None, k


def test_saved_inputs_modified_in_place_are_caught():
    case = {"N": 2, "D": 8, "T": 3, "layout": "TND", "dtype": "fp32", "h_res": True, "noncontig": "none"}
    inp = make_inputs(case, seed=8201)
    x = inp["x"].clone().requires_grad_(True)
    h = inp["h_res"] * 1.0
    out = mhc.npu_mhc_post(x, h, inp["h_out"], inp["h_post"])
    h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


class NoFunction:
    @staticmethod
    def apply(*args):
        raise AssertionError("went through the autograd Function")


def test_no_graph_takes_the_direct_path(monkeypatch):
    case = {"N": 4, "D": 16, "T": 3, "layout": "BSND", "dtype": "fp16", "h_res": False, "noncontig": "none"}
    inp = make_inputs(case, seed=8202)
    want = post(inp)
    monkeypatch.setattr(mhc.ops, "MhcPostFunction", NoFunction)
    assert_same_bits("out", want, post(inp), "two direct calls")
    with torch.no_grad():
        got = mhc.npu_mhc_post(inp["x"].clone().requires_grad_(True), None, inp["h_out"], inp["h_post"])
    assert not got.requires_grad
    with pytest.raises(AssertionError, match="autograd Function"):
        mhc.npu_mhc_post(inp["x"], None, inp["h_out"], inp["h_post"].clone().requires_grad_(True))


# Determinism, batch invariance, kernel families.

def run_all(inp):
    return dict(zip(("out",) + GRAD_NAMES + ("grad_x[fp32]",),
                    (post(inp),) + post_backward(inp) + post_backward(inp, grad_x_dtype=torch.float32)[:1]))


@pytest.mark.parametrize("n, d, t, dtype", [(4, 64, 1000, "bf16"), (4, 4096, 1, "fp32"), (7, 100, 37, "fp16")])
def test_bitwise_identical_for_1_and_2_threads(n, d, t, dtype):
    for h_res in (True, False):
        case = {"N": n, "D": d, "T": t, "layout": "TND", "dtype": dtype, "h_res": h_res, "noncontig": "none"}
        inp = make_inputs(case, seed=8300)
        results = {}
        for threads in (1, 2):
            mhc.set_num_threads(threads)
            results[threads] = run_all(inp)
        for name in results[1]:
            assert_same_bits(name, results[1][name], results[2][name], f"1 vs 2 threads (h_res {h_res})")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("h_res", [True, False], ids=["hres", "nohres"])
def test_token_alone_equals_token_in_batch(layout, h_res):
    case = {"N": 4, "D": 100, "T": 37, "layout": "TND", "dtype": "bf16", "h_res": h_res, "noncontig": "none"}
    inp = make_inputs(case, seed=8310)
    if layout == "BSND":
        inp = {k: None if v is None else v.unsqueeze(0) for k, v in inp.items()}
    mhc.set_num_threads(2)
    batch = run_all(inp)
    for i in (0, 17, 36):
        pick = (lambda a: a[i:i + 1]) if layout == "TND" else (lambda a: a[:, i:i + 1])
        alone = run_all({k: None if v is None else pick(v) for k, v in inp.items()})
        for name, got in alone.items():
            assert_same_bits(name, pick(batch[name]), got, f"token {i} in the batch vs alone")


@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
def test_every_family_gives_the_reference_bits(isa_family):
    """SPEC §11 fixes the fp32 operations and their order (no FMA): every family, the same bits."""
    shapes = [(4, 4096, 3), (4, 64, 200), (3, 7, 37), (8, 100, 5), (1, 513, 2)]
    for (n, d, t), dtype, h_res in itertools.product(shapes, DTYPE_KEYS, (True, False)):
        case = {"N": n, "D": d, "T": t, "layout": "BSND", "dtype": dtype, "h_res": h_res, "noncontig": "none"}
        inp = make_inputs(case, seed=8400 + n)
        got = run_all(inp)
        mhc.set_isa("reference")
        want = run_all(inp)
        mhc.set_isa(isa_family)
        for name in got:
            assert_same_bits(name, want[name], got[name], f"reference vs {isa_family} ({case_id(case)})")


# Validation.

def base_inputs():
    case = {"N": 4, "D": 8, "T": 3, "layout": "TND", "dtype": "bf16", "h_res": True, "noncontig": "none"}
    return make_inputs(case, seed=8500)


FORWARD_ERRORS = [
    ({"x": lambda a: a["x"].double()}, TypeError, "^x: "),
    ({"x": lambda a: a["x"].tolist()}, TypeError, "^x: "),
    ({"x": lambda a: a["x"][0]}, ValueError, "^x: "),
    ({"x": lambda a: a["x"][:, :, :0], "h_out": lambda a: a["h_out"][:, :0]}, ValueError, "^x: "),
    ({"h_res": lambda a: a["h_res"].bfloat16()}, TypeError, "^h_res: "),
    ({"h_res": lambda a: a["h_res"][:, :3]}, ValueError, "^h_res: "),
    ({"h_res": lambda a: a["h_res"].reshape(3, 16)}, ValueError, "^h_res: "),
    ({"h_out": lambda a: a["h_out"].float()}, TypeError, "^h_out: "),
    ({"h_out": lambda a: a["h_out"][:, :7]}, ValueError, "^h_out: "),
    ({"h_out": lambda a: None}, TypeError, "^h_out: "),
    ({"h_post": lambda a: a["h_post"][:2]}, ValueError, "^h_post: "),
    ({"h_post": lambda a: a["h_post"].half()}, TypeError, "^h_post: "),
    ({"h_post": lambda a: a["h_post"].to("meta")}, ValueError, "^h_post: "),
]


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("k", range(len(FORWARD_ERRORS)))
def test_forward_errors_name_the_tensor(k, grad):
    changes, kind, pattern = FORWARD_ERRORS[k]
    a = base_inputs()
    if grad:
        a["h_post"] = a["h_post"].requires_grad_(True)
    a.update({name: change(a) for name, change in changes.items()})
    with pytest.raises(kind, match=pattern):
        post(a)


def test_backward_errors_name_the_tensor():
    a = base_inputs()
    cases = [
        ({"grad": a["grad"].float()}, {}, TypeError, "^grad_y: "),
        ({"grad": a["grad"][:2]}, {}, ValueError, "^grad_y: "),
        ({"grad": None}, {}, TypeError, "^grad_y: "),
        ({"x": a["x"].half()}, {}, TypeError, ""),
        ({"h_res": a["h_res"][..., :3]}, {}, ValueError, "^h_res: "),
        ({"h_out": a["h_out"][:, :7]}, {}, ValueError, "^h_out: "),
        ({"h_post": a["h_post"][:, :3]}, {}, ValueError, "^h_post: "),
        ({}, {"grad_x_dtype": torch.float16}, TypeError, "^grad_x_dtype: "),
        ({}, {"grad_x_dtype": torch.float64}, TypeError, "^grad_x_dtype: "),
        ({}, {"grad_x_dtype": "float32"}, TypeError, "^grad_x_dtype: "),
    ]
    for changes, kwargs, kind, pattern in cases:
        with pytest.raises(kind, match=pattern):
            post_backward(dict(a, **changes), **kwargs)
    with pytest.raises(TypeError):  # grad_x_dtype is keyword-only
        mhc.npu_mhc_post_backward(a["grad"], a["x"], a["h_res"], a["h_out"], a["h_post"], torch.float32)


def test_outputs_past_the_limit_are_value_errors(allocations):
    # T*N*N = 2^46 > 2^44 with D = 1: grad_h_res would be the big one.
    x = torch.zeros((), dtype=torch.bfloat16).expand(2 ** 40, 8, 1)
    h_out = torch.zeros((), dtype=torch.bfloat16).expand(2 ** 40, 1)
    h_post = torch.zeros(()).expand(2 ** 40, 8)
    with pytest.raises(ValueError, match=r"^x: .*2\^44"):
        mhc.npu_mhc_post(x, None, h_out, h_post)
    with pytest.raises(ValueError, match=r"^x: .*2\^44"):
        mhc.npu_mhc_post_backward(x, x, None, h_out, h_post)
    assert allocations == [], allocations


def test_exported():
    for name in ("npu_mhc_post", "npu_mhc_post_backward", "MhcPostFunction"):
        assert name in mhc.__all__ and getattr(mhc, name) is not None
    assert mhc.ops.npu_mhc_post is mhc.npu_mhc_post
