"""The package surface: version, isa, threads, output shapes and dtypes, stride-0 views,
and one production-sized shape against the oracle."""
import math
import re

import pytest
import torch

import mhc
from conftest import (BWD_NAMES, FWD_NAMES, QUICK, assert_same_bits, assert_zero_grad_gamma,
                      compare_with_oracle, make_inputs, run_ours)


def test_version_and_isa():
    assert re.match(r"^\d+\.\d+\.\d+", mhc.__version__), mhc.__version__
    assert mhc.isa() in mhc.available_isas()


def test_thread_setting_round_trips():
    assert mhc.get_num_threads() == 0
    mhc.set_num_threads(3)
    assert mhc.get_num_threads() == 3
    mhc.set_num_threads(0)
    assert mhc.get_num_threads() == 0


@pytest.mark.parametrize("layout", ["BSND", "TND"])
@pytest.mark.parametrize("form", ["square", "factorial", "two_entry", "head"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_output_shapes_dtypes_and_layout(layout, form, dtype):
    n, d = 3, 5
    case = {"N": n, "D": d, "T": 6, "layout": layout, "dtype": dtype, "gamma": True,
            "grad_x_post": True, "form": form}
    inp = make_inputs(case, seed=1)
    lead = tuple(inp["x"].shape[:-2])
    f = inp["phi"].shape[0]
    (h_in, h_post, h_res, inv_rms, h_mix, h_pre), bwd = run_ours(inp)
    res_shape = {"square": lead + (n, n), "factorial": lead + (math.factorial(n),), "two_entry": None,
                 "head": None}
    want = {"h_in": lead + (d,), "h_post": None if form == "head" else lead + (n,), "inv_rms": lead,
            "h_mix": lead + (f,), "h_pre": lead + (n,), "h_res": res_shape[form]}
    for name, t in zip(FWD_NAMES, (h_in, h_post, h_res, inv_rms, h_mix, h_pre)):
        if want[name] is None:
            assert t is None, name
            continue
        assert tuple(t.shape) == want[name], name
        assert t.is_contiguous() and t.device.type == "cpu", name
        assert t.dtype == (inp["x"].dtype if name == "h_in" else torch.float32), name
    shapes = {"grad_x": inp["x"].shape, "grad_phi": inp["phi"].shape, "grad_alpha": inp["alpha"].shape,
              "grad_bias": (f,), "grad_gamma": (n, d)}
    for name, t in zip(BWD_NAMES, bwd):
        assert tuple(t.shape) == tuple(shapes[name]) and t.is_contiguous(), name
        assert t.dtype == (inp["x"].dtype if name == "grad_x" else torch.float32), name
    plain = mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], gamma=inp["gamma"])
    assert plain[3:] == (None, None, None)
    grad_gamma = mhc.npu_mhc_pre_backward(
        inp["x"], inp["phi"], inp["alpha"], inp["grad_h_in"], inp["grad_h_post"], inp["grad_h_res"],
        inv_rms, h_mix, h_pre, h_post)[4]
    assert_zero_grad_gamma(grad_gamma, inp["x"])  # no gamma given


def test_stride_zero_views_equal_materialised_copies():
    """Broadcast (stride-0) inputs, as autograd hands them out, read like real tensors."""
    case = {"N": 4, "D": 16, "T": 9, "layout": "TND", "dtype": "bf16", "gamma": True,
            "grad_x_post": True, "form": "square"}
    inp = make_inputs(case, seed=2)
    broadcast = dict(inp)
    broadcast["x"] = inp["x"][:1].expand(9, 4, 16)
    broadcast["grad_h_in"] = inp["grad_h_in"][0].expand(9, 16)
    broadcast["grad_h_post"] = torch.tensor(0.25).expand(9, 4)
    broadcast["grad_x_post"] = inp["grad_x_post"][:, :, :1].expand(9, 4, 16)
    broadcast["gamma"] = inp["gamma"][:, :1].expand(4, 16)
    dense = {k: (None if v is None else v.contiguous()) for k, v in broadcast.items()}
    for a, b, name in zip(sum(run_ours(dense), ()), sum(run_ours(broadcast), ()), FWD_NAMES + BWD_NAMES):
        assert_same_bits(name, a, b, "materialised vs stride-0 views")


PRODUCTION_CASES = [
    # DeepSeek-V4's N=4, D=4096 at a training-sized T; D=7168 in fp16; N=6 with N! logits
    {"N": 4, "D": 4096, "T": 1000, "layout": "BSND", "dtype": "bf16", "gamma": True,
     "grad_x_post": True, "form": "square"},
    {"N": 4, "D": 7168, "T": 257, "layout": "TND", "dtype": "fp16", "gamma": False,
     "grad_x_post": True, "form": "square"},
    {"N": 6, "D": 1280, "T": 64, "layout": "TND", "dtype": "fp32", "gamma": True,
     "grad_x_post": False, "form": "factorial"},
]


@pytest.mark.skipif(QUICK, reason="production-sized shapes: full runs only")
@pytest.mark.parametrize("case", PRODUCTION_CASES,
                         ids=lambda c: f"N{c['N']}-D{c['D']}-T{c['T']}-{c['dtype']}")
def test_production_shape_against_oracle(case):
    """Shapes too big for the pairwise budget, at the sizes SPEC §9 serves."""
    inp = make_inputs(case, seed=3)
    fwd, bwd = run_ours(inp)
    cid = f"production-N{case['N']}-D{case['D']}-T{case['T']}-{case['dtype']}"
    errs = compare_with_oracle(inp, dict(zip(FWD_NAMES + BWD_NAMES, fwd + bwd)), cid)
    print(f"\n{cid} err/bound (x terms bound): " + ", ".join(
        f"{k}={v[0]:.2g}({v[1]:.2g})" for k, v in errs.items()))


def test_zero_tokens_give_empty_outputs_and_zero_reductions():
    """T = 0: nothing per token, and the token sums are zeros (not torch.empty garbage)."""
    case = {"N": 4, "D": 8, "T": 2, "layout": "TND", "dtype": "bf16", "gamma": True,
            "grad_x_post": True, "form": "square"}
    inp = make_inputs(case, seed=4)
    for name in ("x", "grad_h_in", "grad_h_post", "grad_h_res", "grad_x_post"):
        inp[name] = inp[name][:0]
    torch.full((4096,), float("nan"))  # leave garbage for torch.empty to hand back
    fwd, bwd = run_ours(inp)
    assert all(t.numel() == 0 for t in fwd) and bwd[0].numel() == 0
    for name, t in zip(BWD_NAMES[1:], bwd[1:]):
        assert t.numel() > 0 and not bool(t.abs().max() > 0) and not bool(t.isnan().any()), name
