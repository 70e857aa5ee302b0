"""The head (SPEC §6, one-entry alpha, F = N): npu_mhc_pre / npu_mhc_pre_backward with
alpha [1], and mhc.mhc_head, against the float64 oracle (oracle.py's head form), under
every kernel family this build and CPU run, plus the head's rejections and limits.

The pairwise cover of test_oracle_cover.py holds the head as one of its forms (default
family, and every family through ctest's MHC_ISA runs); here a smaller set that still
shows N 1..8, T 0 and 1, both layouts, the three dtypes, gamma and grad_x_post with
and without, and strided views, runs under each family in turn.
"""
import pytest
import torch

import mhc
from conftest import (BWD_NAMES, FWD_NAMES, LEAVES, assert_same_bits, assert_zero_grad_gamma,
                      compare_with_oracle, expanded, leaves_of, make_inputs, run_ours,
                      run_ours_strided, weighted_loss)

FAMILIES = tuple(mhc.available_isas())
KEYS = ("N", "D", "T", "layout", "dtype", "gamma", "grad_x_post", "noncontig")
HEAD_CASES = [dict(zip(KEYS, values), form="head") for values in [
    (1, 1, 1, "TND", "bf16", True, False, "none"),
    (2, 7, 3, "BSND", "fp16", False, True, "inputs"),
    (3, 64, 0, "TND", "fp32", True, True, "none"),
    (4, 100, 37, "BSND", "bf16", True, True, "grads"),
    (5, 512, 1, "TND", "fp16", True, False, "inputs"),
    (6, 64, 3, "TND", "bf16", False, False, "grads"),
    (7, 7, 37, "BSND", "fp32", False, True, "inputs"),
    (8, 100, 3, "TND", "fp16", True, True, "none"),
    (4, 512, 0, "BSND", "bf16", False, True, "grads"),
    (4, 1, 37, "TND", "fp32", True, False, "grads"),
    (8, 512, 37, "BSND", "bf16", True, True, "inputs"),
    (1, 100, 37, "BSND", "fp16", True, True, "none"),
    (2, 512, 1, "BSND", "fp32", False, False, "grads"),
    (3, 7, 1, "BSND", "bf16", True, True, "grads"),
]]
TOKEN_OUTPUTS = ("h_in", "inv_rms", "h_mix", "h_pre", "grad_x")
SUMS = ("grad_phi", "grad_alpha", "grad_bias", "grad_gamma")


def case_id(case):
    return (f"N{case['N']}-D{case['D']}-T{case['T']}-{case['layout']}-{case['dtype']}-"
            f"{'gamma' if case['gamma'] else 'nogamma'}-{'gxp' if case['grad_x_post'] else 'nogxp'}-"
            f"nc_{case['noncontig']}")


@pytest.fixture
def family(request):
    """Runs the test under the family of its parameter; back to the default after."""
    name = request.param
    if name not in mhc.available_isas():
        pytest.skip(f"{name}: not run by this build or CPU")
    mhc.set_isa(name)
    yield name
    mhc.set_isa(None)


def head(inp, **kwargs):
    return mhc.mhc_head(inp["x"], inp["phi"], inp["alpha"], inp["bias"], inp["gamma"], **kwargs)


def head_grads(inp, requires=LEAVES, **kwargs):
    """mhc_head through autograd: (h_in, {grad_<leaf>: grad or None})."""
    leaves = leaves_of(inp, requires)
    h_in = head(leaves, **kwargs)
    assert h_in.requires_grad and h_in.grad_fn is not None
    weighted_loss(h_in, None, None, inp).backward()
    return h_in.detach(), {"grad_" + k: (None if leaves[k] is None else leaves[k].grad) for k in LEAVES}


def check_shapes(inp, fwd, bwd):
    x = inp["x"]
    lead, (n, d) = tuple(x.shape[:-2]), tuple(x.shape[-2:])
    want = {"h_in": lead + (d,), "inv_rms": lead, "h_mix": lead + (n,), "h_pre": lead + (n,),
            "grad_x": tuple(x.shape), "grad_phi": (n, n * d), "grad_alpha": (1,), "grad_bias": (n,),
            "grad_gamma": (n, d)}
    outputs = dict(zip(FWD_NAMES + BWD_NAMES, fwd + bwd))
    assert outputs["h_post"] is None and outputs["h_res"] is None
    for name, shape in want.items():
        t = outputs[name]
        assert tuple(t.shape) == shape and t.is_contiguous(), (name, tuple(t.shape))
        assert t.dtype == (x.dtype if name in ("h_in", "grad_x") else torch.float32), name


@pytest.mark.parametrize("case", HEAD_CASES, ids=case_id)
@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_head_against_float64_oracle(family, case):
    cid = f"head-{family}-{case_id(case)}"
    inp = make_inputs(case, seed=4100 + HEAD_CASES.index(case))
    assert inp["alpha"].shape == (1,) and inp["grad_h_post"] is None and inp["grad_h_res"] is None
    fwd, bwd = run_ours(inp)  # grad_h_post, grad_h_res and h_post all None
    check_shapes(inp, fwd, bwd)
    plain = mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], gamma=inp["gamma"])
    assert plain[1:] == (None,) * 5
    assert_same_bits("h_in", plain[0], fwd[0], "out_flag=0 vs out_flag=1")

    # Strided views give the very same bits.
    fwd2, bwd2 = run_ours_strided(inp, case["noncontig"], fwd, bwd)
    for name, a, b in zip(FWD_NAMES + BWD_NAMES, fwd + bwd, fwd2 + bwd2):
        assert_same_bits(name, a, b, f"contiguous vs strided ({case['noncontig']})")

    # mhc_head: the forward's h_in, and loss.backward() is npu_mhc_pre_backward by hand
    # (without grad_x_post, which only the operator takes).
    h_in, grads = head_grads(inp)
    assert_same_bits("h_in", fwd[0], h_in, "npu_mhc_pre vs mhc_head")
    by_hand = dict(zip(BWD_NAMES, mhc.npu_mhc_pre_backward(
        inp["x"], inp["phi"], inp["alpha"], inp["grad_h_in"], None, None, fwd[3], fwd[4], fwd[5],
        None, gamma=inp["gamma"])))
    for name, got in grads.items():
        if name == "grad_gamma" and inp["gamma"] is None:
            assert got is None
            continue
        assert_same_bits(name, by_hand[name], got, "npu_mhc_pre_backward vs mhc_head's backward")

    if case["T"] == 0:  # nothing per token; the token sums are zeros
        for name, t in zip(FWD_NAMES + BWD_NAMES, fwd + bwd):
            if name in TOKEN_OUTPUTS:
                assert t.numel() == 0, name
            elif name in SUMS:
                assert t.numel() > 0 and not bool(t.ne(0).any()), name
        for name in SUMS:
            assert grads[name] is None or not bool(grads[name].ne(0).any()), name
        return
    compare_with_oracle(inp, dict(zip(FWD_NAMES + BWD_NAMES, fwd + bwd)), cid)
    if case["grad_x_post"]:  # else by_hand is bwd, checked above
        compare_with_oracle(dict(inp, grad_x_post=None), by_hand, cid + "(no grad_x_post)")


@pytest.mark.parametrize("layout", ["BSND", "TND"])
@pytest.mark.parametrize("out_flag", [0, 1])
@pytest.mark.parametrize("gamma", [True, False], ids=["gamma", "nogamma"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_npu_mhc_pre_autograd_with_a_one_entry_alpha(dtype, gamma, out_flag, layout):
    """(h_in, None, None, caches or None): h_in carries the gradient into every input,
    the same bits as mhc_head's."""
    case = {"N": 4, "D": 32, "T": 5, "layout": layout, "dtype": dtype, "gamma": gamma,
            "grad_x_post": False, "form": "head"}
    inp = make_inputs(case, seed=4200)
    leaves = leaves_of(inp)
    outputs = mhc.npu_mhc_pre(leaves["x"], leaves["phi"], leaves["alpha"], leaves["bias"],
                              gamma=leaves["gamma"], out_flag=out_flag)
    assert len(outputs) == 6 and outputs[1] is None and outputs[2] is None
    assert outputs[0].requires_grad
    if out_flag:
        assert all(not c.requires_grad and c.grad_fn is None for c in outputs[3:])
    else:
        assert outputs[3:] == (None, None, None)
    direct = mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], gamma=inp["gamma"],
                             out_flag=out_flag)
    for name, want, got in zip(FWD_NAMES, direct, outputs):
        assert_same_bits(name, want, None if got is None else got.detach(), "direct vs autograd path")
    weighted_loss(outputs[0], None, None, inp).backward()
    h_in, want = head_grads(inp)
    for name in LEAVES:
        got = leaves[name].grad if leaves[name] is not None else None
        assert_same_bits("grad_" + name, want["grad_" + name], got, "npu_mhc_pre vs mhc_head")
    compare_with_oracle(inp, want, f"head-npu-autograd-{layout}-{dtype}-{gamma}-flag{out_flag}")


def test_backward_ignores_grad_h_post_grad_h_res_and_h_post():
    case = {"N": 3, "D": 20, "T": 4, "layout": "BSND", "dtype": "bf16", "gamma": True,
            "grad_x_post": True, "form": "head"}
    inp = make_inputs(case, seed=4300)
    _, _, _, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"],
                                                     gamma=inp["gamma"], out_flag=1)
    lead, n = tuple(inp["x"].shape[:-2]), case["N"]

    def backward(grad_h_post, grad_h_res, h_post):
        return mhc.npu_mhc_pre_backward(inp["x"], inp["phi"], inp["alpha"], inp["grad_h_in"], grad_h_post,
                                        grad_h_res, inv_rms, h_mix, h_pre, h_post, gamma=inp["gamma"],
                                        grad_x_post=inp["grad_x_post"])

    want = backward(None, None, None)
    nan = float("nan")
    for given in [(torch.randn(lead + (n,)), torch.randn(lead + (n, n)), torch.rand(lead + (n,))),
                  (torch.full(lead + (n,), nan), torch.full(lead + (n * n,), nan),
                   torch.full(lead + (n,), nan)),
                  (torch.zeros(7), torch.zeros(2, 2), torch.zeros(5, dtype=torch.float64)),
                  (torch.zeros(lead + (n,), dtype=torch.float64), None, torch.zeros(lead + (n,)).bfloat16()),
                  ("not a tensor", 3, [1.0])]:
        got = backward(*given)
        for name, a, b in zip(BWD_NAMES, want, got):
            assert_same_bits(name, a, b, "grad_h_post/grad_h_res/h_post None vs given")
    compare_with_oracle(inp, dict(zip(BWD_NAMES, want)), "head-ignored-inputs")
    want = mhc.npu_mhc_pre_backward(inp["x"], inp["phi"], inp["alpha"], inp["grad_h_in"], None, None,
                                    inv_rms, h_mix, h_pre, None)
    assert_zero_grad_gamma(want[4], inp["x"])  # no gamma given: zeros [N, D] as the other forms


def test_mhc_head_fills_only_the_requested_grads():
    case = {"N": 5, "D": 9, "T": 6, "layout": "TND", "dtype": "fp32", "gamma": True,
            "grad_x_post": False, "form": "head"}
    inp = make_inputs(case, seed=4400)
    for requires in (("x",), ("phi", "gamma"), ("alpha", "bias")):
        _, grads = head_grads(inp, requires)
        for name in LEAVES:
            assert (grads["grad_" + name] is None) == (name not in requires), (requires, name)
        compare_with_oracle(inp, {"grad_" + k: grads["grad_" + k] for k in requires},
                            "head-only-" + "-".join(requires))


def test_mhc_head_eps_and_inner_precise():
    case = {"N": 4, "D": 48, "T": 7, "layout": "BSND", "dtype": "bf16", "gamma": True,
            "grad_x_post": False, "form": "head"}
    inp = make_inputs(case, seed=4500)
    h_in, grads = head_grads(inp, norm_eps=1e-2, hc_eps=1e-2)
    compare_with_oracle(inp, dict(grads, h_in=h_in), "head-eps-1e-2", norm_eps=1e-2, hc_eps=1e-2)
    assert_same_bits("h_in", mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"],
                                             gamma=inp["gamma"], norm_eps=1e-2, hc_eps=1e-2)[0],
                     h_in, "npu_mhc_pre vs mhc_head with eps 1e-2")
    # inner_precise=1: the HF32 forward; the backward (fp32) on its caches.
    direct = mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], gamma=inp["gamma"],
                             out_flag=1, inner_precise=1)
    h_in, grads = head_grads(inp, inner_precise=1)
    assert_same_bits("h_in", direct[0], h_in, "npu_mhc_pre vs mhc_head with inner_precise=1")
    assert not torch.equal(direct[4], mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"],
                                                      gamma=inp["gamma"], out_flag=1)[4])
    by_hand = mhc.npu_mhc_pre_backward(inp["x"], inp["phi"], inp["alpha"], inp["grad_h_in"], None, None,
                                       direct[3], direct[4], direct[5], None, gamma=inp["gamma"])
    for name, want in zip(BWD_NAMES, by_hand):
        assert_same_bits(name, want, grads[name], "npu_mhc_pre_backward vs mhc_head (HF32 forward)")
    for value in (2, True, 1.0):
        with pytest.raises(ValueError, match="^inner_precise: "):
            head(inp, inner_precise=value)


def test_mhc_head_is_exported():
    assert "mhc_head" in mhc.__all__ and mhc.mhc_head is mhc.autograd.mhc_head


# Rejections.

def head_inputs(n=4, d=8, t=3, rows=None):
    gen = torch.Generator().manual_seed(4600)
    f = n if rows is None else rows
    return {"x": torch.randn(t, n, d, generator=gen).bfloat16(), "phi": torch.randn(f, n * d, generator=gen),
            "alpha": torch.rand(1, generator=gen), "bias": torch.randn(f, generator=gen), "gamma": None}


@pytest.mark.parametrize("entries", [2, 3, 4, 0])
@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires_grad"])
def test_mhc_head_with_another_alpha_is_a_value_error(entries, grad, monkeypatch):
    n = 4
    a = head_inputs(n, rows={2: 2 * n, 3: 2 * n + n * n}.get(entries, n))
    a["alpha"] = torch.rand(entries)
    if grad:
        a = leaves_of(a)

    def no_forward(*args, **kwargs):
        raise AssertionError("the forward ran before the check")

    monkeypatch.setattr(mhc.autograd, "run_pre_forward", no_forward)
    with pytest.raises(ValueError, match=f"^alpha: .*one-entry.*got {entries} entries.*mhc_pre"):
        head(a)


def test_mhc_head_checks_arguments_in_order():
    a = head_inputs()
    with pytest.raises(TypeError, match="^x: "):
        mhc.mhc_head(a["x"].double(), a["phi"], torch.rand(3), a["bias"])
    with pytest.raises(TypeError, match="^alpha: "):
        mhc.mhc_head(a["x"], a["phi"], [0.5], a["bias"])
    with pytest.raises(TypeError):  # keyword-only options
        mhc.mhc_head(a["x"], a["phi"], a["alpha"], a["bias"], None, 1e-6)


@pytest.mark.parametrize("path", ["direct", "autograd", "mhc_head", "backward"])
def test_one_entry_alpha_with_2n_rows_of_phi_is_a_value_error_naming_phi(path):
    """phi fixes F: with 2N rows it asks for a two-entry alpha, and says so."""
    n = 4
    a = head_inputs(n, rows=2 * n)
    if path == "autograd":
        a = leaves_of(a)
    if path == "backward":
        ok = head_inputs(n)
        caches = mhc.npu_mhc_pre(ok["x"], ok["phi"], ok["alpha"], ok["bias"], out_flag=1)
        call = lambda: mhc.npu_mhc_pre_backward(  # noqa: E731
            a["x"], a["phi"], a["alpha"], torch.randn(3, 8).bfloat16(), None, None, caches[3],
            caches[4], caches[5], None)
    elif path == "mhc_head":
        call = lambda: head(a)  # noqa: E731
    else:
        call = lambda: mhc.npu_mhc_pre(a["x"], a["phi"], a["alpha"], a["bias"], out_flag=1)  # noqa: E731
    with pytest.raises(ValueError, match=r"phi has F=2N rows") as info:
        call()
    assert "[1]" in str(info.value), str(info.value)


@pytest.mark.parametrize("path", ["direct", "mhc_head"])
def test_one_entry_alpha_with_2n_bias_is_a_value_error_naming_bias(path):
    a = head_inputs()
    a["bias"] = torch.randn(8)
    with pytest.raises(ValueError, match="^bias: "):
        head(a) if path == "mhc_head" else mhc.npu_mhc_pre(a["x"], a["phi"], a["alpha"], a["bias"])


def test_backward_of_the_head_needs_its_caches():
    a = head_inputs()
    with pytest.raises(TypeError, match="inv_rms"):
        mhc.npu_mhc_pre_backward(a["x"], a["phi"], a["alpha"], torch.randn(3, 8).bfloat16(), None, None,
                                 None, torch.zeros(3, 4), torch.zeros(3, 4), None)


# Sizes past the library's limit: our ValueError naming the tensor, nothing allocated.

HEAD_TOO_LARGE = [
    ((2 ** 20, 2 ** 20, 4, 2 ** 18), (4, 2 ** 20), "x"),  # T*K = 2^60
    ((1, 2 ** 30, 2 ** 30), (4, 32), "x"),  # K = 2^60: grad_gamma
    ((1, 2 ** 20, 2 ** 10), (2 ** 20, 2 ** 30), "phi"),  # F*K = 2^50: grad_phi
]


@pytest.mark.parametrize("x_dims, phi_dims, name", HEAD_TOO_LARGE, ids=lambda v: str(v).replace(" ", ""))
@pytest.mark.parametrize("path", ["direct", "mhc_head", "backward"])
def test_head_outputs_past_the_limit_are_value_errors(x_dims, phi_dims, name, path, allocations):
    lead, (n, d), f = x_dims[:-2], x_dims[-2:], phi_dims[0]
    x, phi, alpha, bias = expanded(x_dims, torch.bfloat16), expanded(phi_dims), torch.rand(1), expanded((f,))
    with pytest.raises(ValueError) as info:
        if path == "direct":
            mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=1)
        elif path == "mhc_head":
            mhc.mhc_head(x, phi, alpha.requires_grad_(), bias)  # the autograd path
        else:
            mhc.npu_mhc_pre_backward(x, phi, alpha, expanded(lead + (d,), torch.bfloat16), None, None,
                                     expanded(lead), expanded(lead + (f,)), expanded(lead + (n,)), None)
    message = str(info.value)
    assert message.startswith(name + ":") and "2^44" in message, message
    assert allocations == [], allocations
