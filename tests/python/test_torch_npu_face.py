"""torch_npu's conventions of the Python face (SPEC §8): calls as torch_npu's tests make
them, inner_precise (1 = HF32, SPEC §7), grad_gamma zeros without gamma, a two-entry
alpha's h_res and grad_h_res, and the library's size limits checked before any output
is allocated."""
import numpy as np
import pytest
import torch

import mhc
from conftest import (BWD_NAMES, ERROR_LOG, FWD_NAMES, TERMS_TOL, assert_same_bits,
                      assert_zero_grad_gamma, check_output, compare_with_oracle, expanded, leaves_of,
                      make_inputs, ulp, weighted_loss)
from oracle import forward64, hf32, magnitudes64


def case_of(dtype="bf16", gamma=True, form="square", layout="BSND", n=4, d=64, t=6,
            grad_x_post=False):
    return {"N": n, "D": d, "T": t, "layout": layout, "dtype": dtype, "gamma": gamma,
            "grad_x_post": grad_x_post, "form": form}


def case_id(case):
    return (f"N{case['N']}-D{case['D']}-T{case['T']}-{case['layout']}-{case['dtype']}-"
            f"{'gamma' if case['gamma'] else 'nogamma'}-{case['form']}")


def forward(inp, **kwargs):
    return mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], gamma=inp["gamma"],
                           **kwargs)


def backward_args(inp, fwd):
    """The ten positional tensors of npu_mhc_pre_backward, in SPEC §8's order."""
    _, h_post, _, inv_rms, h_mix, h_pre = fwd
    return [inp["x"], inp["phi"], inp["alpha"], inp["grad_h_in"], inp["grad_h_post"],
            inp["grad_h_res"], inv_rms, h_mix, h_pre, h_post]


# Calls as torch_npu's tests make them.

@pytest.mark.parametrize("grad_x_post", [False, True], ids=["nogxp", "gxp"])
@pytest.mark.parametrize("gamma", [True, False], ids=["gamma", "nogamma"])
@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_torch_npu_style_calls(layout, gamma, grad_x_post):
    """The forward with keywords, the backward with ten positional tensors and then
    gamma=, hc_eps=, grad_x_post= (or all thirteen positional); .float() on every output."""
    case = case_of(gamma=gamma, layout=layout, grad_x_post=grad_x_post)
    inp = make_inputs(case, seed=801)
    fwd = forward(inp, norm_eps=1e-6, hc_eps=1e-6, out_flag=1, inner_precise=0)
    for name, a, b in zip(FWD_NAMES, fwd, forward(inp, out_flag=1)):
        assert_same_bits(name, a, b, "inner_precise=0 vs the default")
    args = backward_args(inp, fwd)
    bwd = mhc.npu_mhc_pre_backward(*args, gamma=inp["gamma"], hc_eps=1e-6,
                                   grad_x_post=inp["grad_x_post"])
    positional = mhc.npu_mhc_pre_backward(*args, inp["gamma"], 1e-6, inp["grad_x_post"])
    for name, a, b in zip(BWD_NAMES, bwd, positional):
        assert_same_bits(name, a, b, "keywords vs positional")
    for name, t in zip(FWD_NAMES + BWD_NAMES, fwd + bwd):
        assert t.float().dtype == torch.float32, name
    compare_with_oracle(inp, dict(zip(FWD_NAMES + BWD_NAMES, fwd + bwd)), "torch_npu-style-" + case_id(case))


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_grad_gamma_without_gamma_is_a_fresh_zero_tensor(dtype):
    case = case_of(dtype=dtype, gamma=False, layout="TND", n=3, d=5, t=4)
    inp = make_inputs(case, seed=802)
    fwd = forward(inp, out_flag=1)
    first = mhc.npu_mhc_pre_backward(*backward_args(inp, fwd))[4]
    assert_zero_grad_gamma(first, inp["x"])
    first.add_(1.0)  # the next call's grad_gamma is its own tensor
    assert_zero_grad_gamma(mhc.npu_mhc_pre_backward(*backward_args(inp, fwd))[4], inp["x"])


def test_the_backward_has_no_inner_precise():
    inp = make_inputs(case_of(), seed=803)
    fwd = forward(inp, out_flag=1)
    with pytest.raises(TypeError, match="inner_precise"):
        mhc.npu_mhc_pre_backward(*backward_args(inp, fwd), inner_precise=1)


def test_inner_precise_is_keyword_only():
    inp = make_inputs(case_of(), seed=804)
    with pytest.raises(TypeError):
        mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], None, 1e-6, 1e-6, 0, 1)


# A two-entry alpha: no h_res; a grad_h_res given is not read (SPEC §6).

@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_two_entry_alpha_has_no_h_res_and_ignores_grad_h_res(layout):
    case = case_of(form="two_entry", layout=layout)
    inp = make_inputs(case, seed=805)
    fwd = forward(inp, out_flag=1)
    assert fwd[2] is None
    assert forward(inp)[2] is None
    args = backward_args(inp, fwd)
    assert args[5] is None
    want = mhc.npu_mhc_pre_backward(*args, gamma=inp["gamma"])
    lead, n = tuple(inp["x"].shape[:-2]), case["N"]
    for grad_h_res in (torch.randn(lead + (n, n)),  # what torch_npu passes
                       torch.full(lead + (n * n,), float("nan")), torch.zeros(7),
                       torch.zeros(lead + (n, n), dtype=torch.float64)):
        args[5] = grad_h_res
        got = mhc.npu_mhc_pre_backward(*args, gamma=inp["gamma"])
        for name, a, b in zip(BWD_NAMES, want, got):
            assert_same_bits(name, a, b, f"grad_h_res None vs {tuple(grad_h_res.shape)} {grad_h_res.dtype}")


# inner_precise: the int 0 or 1.

INVALID_INNER_PRECISE = [2, -1, True, False, 1.0, 0.0, "1", None, torch.tensor(1), np.float64(1.0)]


@pytest.mark.parametrize("value", INVALID_INNER_PRECISE, ids=repr)
def test_inner_precise_outside_0_and_1_is_value_error(value):
    """bool is refused as torch's int arguments refuse it; every face names inner_precise."""
    inp = make_inputs(case_of(), seed=806)
    with pytest.raises(ValueError, match="^inner_precise: "):
        forward(inp, inner_precise=value)
    leaves = leaves_of(inp)
    with pytest.raises(ValueError, match="^inner_precise: "):  # the autograd path
        forward(leaves, inner_precise=value)
    with pytest.raises(ValueError, match="^inner_precise: "):
        mhc.mhc_pre(**leaves, inner_precise=value)


@pytest.mark.parametrize("value", [0, 1, np.int64(1), np.int32(0)], ids=repr)
def test_inner_precise_takes_ints(value):
    inp = make_inputs(case_of(), seed=807)
    want = forward(inp, out_flag=1, inner_precise=int(value))
    for name, a, b in zip(FWD_NAMES, want, forward(inp, out_flag=1, inner_precise=value)):
        assert_same_bits(name, a, b, f"inner_precise={value!r} vs {int(value)}")


# inner_precise=1: h_mix = hf32(phi) · hf32(u) (SPEC §7), everything else as in fp32.

def test_hf32_rounding_of_the_golden():
    """The golden's hf32 is SPEC §7's: 10 stored bits, half away from zero, a carry
    into the exponent, ±Inf and the default NaN kept."""
    cases = [(1.0, 1.0), (1 + 2 ** -11, 1 + 2 ** -10), (-(1 + 2 ** -11), -(1 + 2 ** -10)),
             (1 + 2 ** -11 - 2 ** -23, 1.0), (1 + 3 * 2 ** -11, 1 + 2 ** -9), (2 - 2 ** -23, 2.0),
             (torch.finfo(torch.float32).max, float("inf")), (float("inf"), float("inf")),
             (-float("inf"), -float("inf")), (-0.0, -0.0), (71362 * 2 ** -149, 73728 * 2 ** -149)]
    got = hf32(torch.tensor([a for a, _ in cases]))
    want = torch.tensor([b for _, b in cases])
    assert torch.equal(got.view(torch.int32), want.view(torch.int32)), (got.tolist(), want.tolist())
    assert bool(hf32(torch.tensor([float("nan")])).isnan().all())


HF32_CASES = [case_of(dtype, gamma, form, layout="BSND" if form == "square" else "TND")
              for dtype in ("bf16", "fp16", "fp32") for gamma in (True, False)
              for form in ("square", "factorial", "two_entry", "head")] + [
    case_of("bf16", True, "square", "TND", n=4, d=4096, t=3),
    case_of("fp32", False, "factorial", "TND", n=3, d=5, t=7),
    case_of("fp16", True, "factorial", "BSND", n=6, d=128, t=4),
]

HF32_SEPARATION = 4  # the fp32 product is at least this many HF32 tolerances off


def hf32_h_mix_ratio(ours, truth64, mag64):
    """max |ours - truth| / (1 ulp + TERMS_TOL * sum|terms|): fp32 rounding of the sum."""
    bound = ulp(truth64, torch.float32) + TERMS_TOL * mag64
    return float(((ours.to(torch.float64) - truth64).abs() / bound).max())


@pytest.mark.parametrize("case", HF32_CASES, ids=case_id)
def test_inner_precise_1_rounds_the_product_operands_to_hf32(case):
    inp = make_inputs(case, seed=808)
    x, phi, alpha, bias, gamma = (inp[k] for k in ("x", "phi", "alpha", "bias", "gamma"))
    ours = dict(zip(FWD_NAMES, forward(inp, out_flag=1, inner_precise=1)))
    fp32 = dict(zip(FWD_NAMES, forward(inp, out_flag=1)))
    truth = dict(zip(FWD_NAMES, forward64(x, phi, alpha, bias, gamma, hf32_matmul=True)))
    mags = magnitudes64(x, phi, alpha, bias, gamma, 1e-6, 1e-6, inp["grad_h_in"],
                        inp["grad_h_post"], inp["grad_h_res"])
    cid = "hf32-" + case_id(case)

    ratio = hf32_h_mix_ratio(ours["h_mix"], truth["h_mix"], mags["h_mix"])
    ERROR_LOG.record("h_mix[hf32]", "err / (ulp + 1e-6 sum|terms|)", ratio, cid)
    assert ratio <= 1, f"h_mix: {ratio:.3g} x fp32 rounding off hf32(phi)·hf32(u) ({cid})"
    off = hf32_h_mix_ratio(fp32["h_mix"], truth["h_mix"], mags["h_mix"])
    assert off > HF32_SEPARATION, f"h_mix: the fp32 product is only {off:.3g} tolerances off HF32's ({cid})"

    # The rest of the forward follows that h_mix.
    v64 = x.to(torch.float64)
    terms_abs = {"h_in": (truth["h_pre"][..., :, None] * v64).abs().sum(dim=-2)}
    for name in ("h_in", "h_post", "h_res", "inv_rms", "h_pre"):
        if truth[name] is None:
            assert ours[name] is None, name
            continue
        check_output(name, ours[name], truth[name], mags[name], cid, terms_abs.get(name))


@pytest.mark.parametrize("form", ["square", "two_entry"])
def test_inner_precise_1_through_autograd(form):
    """The autograd path gives the direct path's HF32 outputs, and its backward is
    npu_mhc_pre_backward (fp32) on the HF32 forward's caches; mhc_pre takes it too."""
    case = case_of(form=form, layout="TND", d=32, t=5)
    inp = make_inputs(case, seed=809)
    direct = forward(inp, out_flag=1, inner_precise=1)
    results = []
    for call in (lambda a: forward(a, out_flag=1, inner_precise=1),
                 lambda a: mhc.mhc_pre(**a, inner_precise=1)):
        leaves = leaves_of(inp)
        outputs = call(leaves)
        for name, want, got in zip(FWD_NAMES, direct, outputs):
            assert_same_bits(name, want, None if got is None else got.detach(), "direct vs autograd")
        weighted_loss(*outputs[:3], inp).backward()
        results.append([leaves[name].grad for name in ("x", "phi", "alpha", "bias", "gamma")])
    by_hand = mhc.npu_mhc_pre_backward(*backward_args(inp, direct), gamma=inp["gamma"])
    for grads in results:
        for name, want, got in zip(BWD_NAMES, by_hand, grads):
            assert_same_bits(name, want, got, "npu_mhc_pre_backward vs loss.backward()")


# Sizes past the library's limit (2^44 elements): our ValueError naming the tensor,
# before any output is allocated.

N4_F, N64_F = 2 * 4 + 16, 2 * 64 + 64 * 64
TOO_LARGE = [
    # (x's dims, phi's dims, the tensor named, words of the message)
    ((2 ** 20, 2 ** 20, 4, 2 ** 18), (N4_F, 2 ** 20), "x", "2^44"),  # 2^60 elements: grad_x, h_in
    ((1, 2 ** 30, 2 ** 30), (24, 32), "x", "2^44"),  # N*D = 2^60: grad_gamma; h_post 4 GiB
    ((2 ** 58, 4, 0), (N4_F, 0), "x", "D >= 1"),  # empty x, h_post would be 2^60 elements
    ((2, 4096, 4096), (2 * 4096 + 4096 ** 2, 4096 ** 2), "phi", "2^44"),  # F*K ~ 2^48: grad_phi
    ((2 ** 37, 64, 1), (N64_F, 64), "phi", "2^44"),  # T*F ~ 2^49: h_mix
]


def too_large_inputs(x_dims, phi_dims, dtype=torch.bfloat16):
    lead, (n, d), f = x_dims[:-2], x_dims[-2:], phi_dims[0]
    x = expanded(x_dims, dtype) if d else torch.empty(x_dims, dtype=dtype)
    return {"x": x, "phi": expanded(phi_dims), "alpha": torch.rand(3), "bias": expanded((f,)),
            "gamma": expanded((n, d)), "grad_h_in": expanded(lead + (d,), dtype),
            "grad_h_post": expanded(lead + (n,)), "grad_h_res": expanded(lead + (n, n)),
            "inv_rms": expanded(lead), "h_mix": expanded(lead + (f,)), "h_pre": expanded(lead + (n,)),
            "h_post": expanded(lead + (n,))}


@pytest.mark.parametrize("x_dims, phi_dims, name, words", TOO_LARGE, ids=lambda v: str(v).replace(" ", ""))
@pytest.mark.parametrize("path", ["direct", "autograd"])
def test_forward_outputs_past_the_limit_are_value_errors(x_dims, phi_dims, name, words, path, allocations):
    a = too_large_inputs(x_dims, phi_dims)
    if path == "autograd":
        a["phi"] = torch.zeros((), requires_grad=True).expand(phi_dims)
    with pytest.raises(ValueError) as info:
        mhc.npu_mhc_pre(a["x"], a["phi"], a["alpha"], a["bias"], gamma=a["gamma"], out_flag=1)
    message = str(info.value)
    assert message.startswith(name + ":") and words in message, message
    assert allocations == [], allocations


@pytest.mark.parametrize("x_dims, phi_dims, name, words", TOO_LARGE, ids=lambda v: str(v).replace(" ", ""))
@pytest.mark.parametrize("gamma", [True, False], ids=["gamma", "nogamma"])
def test_backward_outputs_past_the_limit_are_value_errors(x_dims, phi_dims, name, words, gamma, allocations):
    a = too_large_inputs(x_dims, phi_dims)
    if not gamma:
        a["gamma"] = None
    with pytest.raises(ValueError) as info:
        mhc.npu_mhc_pre_backward(*(a[k] for k in ("x", "phi", "alpha", "grad_h_in", "grad_h_post",
                                                  "grad_h_res", "inv_rms", "h_mix", "h_pre", "h_post")),
                                 gamma=a["gamma"])
    message = str(info.value)
    assert message.startswith(name + ":") and words in message, message
    assert allocations == [], allocations

