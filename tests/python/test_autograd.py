"""mhc.mhc_pre as a torch.autograd.Function: loss.backward() fills the grads of x, phi,
alpha, bias and gamma, matching float64 autograd through the oracle (gradcheck cannot
run in bf16, so the oracle is the reference)."""
import pytest
import torch

import mhc
from conftest import (DTYPES, LEAVES, assert_same_bits, assert_zero_grad_gamma, compare_with_oracle,
                      leaves_of, make_inputs, weighted_loss)


@pytest.mark.parametrize("layout", ["BSND", "TND"])
@pytest.mark.parametrize("gamma", [True, False], ids=["gamma", "nogamma"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("form", ["square", "two_entry"])
def test_backward_fills_grads_matching_oracle(layout, gamma, dtype, form):
    case = {"N": 4, "D": 96, "T": 3, "layout": layout, "dtype": dtype, "gamma": gamma,
            "grad_x_post": False, "form": form}
    inp = make_inputs(case, seed=101)
    leaves = leaves_of(inp)
    h_in, h_post, h_res = mhc.mhc_pre(**leaves)
    assert (h_res is None) == (form == "two_entry")
    assert h_in.requires_grad and h_post.requires_grad
    weighted_loss(h_in, h_post, h_res, inp).backward()

    grads = {"grad_" + name: (None if leaves[name] is None else leaves[name].grad) for name in LEAVES}
    assert grads["grad_x"].dtype == DTYPES[dtype]
    cid = f"autograd-{layout}-{dtype}-{'gamma' if gamma else 'nogamma'}-{form}"
    compare_with_oracle(inp, grads, cid)

    # The same bits as calling the two operators by hand.
    fwd = mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], gamma=inp["gamma"],
                          out_flag=1)
    assert_same_bits("h_in", fwd[0], h_in.detach(), "npu_mhc_pre vs mhc_pre")
    assert_same_bits("h_post", fwd[1], h_post.detach(), "npu_mhc_pre vs mhc_pre")
    by_hand = mhc.npu_mhc_pre_backward(
        inp["x"], inp["phi"], inp["alpha"], inp["grad_h_in"], inp["grad_h_post"],
        inp["grad_h_res"], fwd[3], fwd[4], fwd[5], fwd[1], gamma=inp["gamma"])
    for name, want in zip(("grad_x", "grad_phi", "grad_alpha", "grad_bias", "grad_gamma"), by_hand):
        if name == "grad_gamma" and inp["gamma"] is None:  # no leaf; the face gives zeros
            assert grads[name] is None
            assert_zero_grad_gamma(want, inp["x"])
            continue
        assert_same_bits(name, want, grads[name], "npu_mhc_pre_backward vs loss.backward()")


def test_unused_outputs_get_zero_grads():
    """Only h_in feeds the loss: h_post/h_res grads arrive as None (zeros), and the
    grad of a plain sum arrives as a stride-0 expanded tensor."""
    case = {"N": 4, "D": 64, "T": 5, "layout": "TND", "dtype": "bf16", "gamma": True,
            "grad_x_post": False, "form": "square"}
    inp = make_inputs(case, seed=202)
    leaves = leaves_of(inp)
    h_in, _, _ = mhc.mhc_pre(**leaves)
    h_in.sum().backward()
    inp["grad_h_in"] = torch.ones_like(inp["grad_h_in"])
    inp["grad_h_post"] = torch.zeros_like(inp["grad_h_post"])
    inp["grad_h_res"] = torch.zeros_like(inp["grad_h_res"])
    grads = {"grad_" + name: leaves[name].grad for name in LEAVES}
    compare_with_oracle(inp, grads, "autograd-h_in-only")


def test_only_requested_grads_are_filled():
    case = {"N": 3, "D": 17, "T": 4, "layout": "BSND", "dtype": "fp32", "gamma": True,
            "grad_x_post": False, "form": "factorial"}
    inp = make_inputs(case, seed=303)
    leaves = leaves_of(inp, requires=("phi", "gamma"))
    h_in, h_post, h_res = mhc.mhc_pre(**leaves)
    weighted_loss(h_in, h_post, h_res, inp).backward()
    assert leaves["x"].grad is None and leaves["alpha"].grad is None and leaves["bias"].grad is None
    compare_with_oracle(inp, {"grad_phi": leaves["phi"].grad, "grad_gamma": leaves["gamma"].grad},
                        "autograd-phi-gamma-only")


def test_no_grad_inputs_give_no_graph():
    case = {"N": 2, "D": 8, "T": 2, "layout": "TND", "dtype": "fp16", "gamma": False,
            "grad_x_post": False, "form": "square"}
    inp = make_inputs(case, seed=404)
    h_in, h_post, h_res = mhc.mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"])
    assert not (h_in.requires_grad or h_post.requires_grad or h_res.requires_grad)


def test_non_default_eps_reach_both_operators():
    """hc_eps enters h_pre and the backward's sigma, with either alpha."""
    for form in ("square", "two_entry"):
        case = {"N": 4, "D": 32, "T": 6, "layout": "TND", "dtype": "fp32", "gamma": True,
                "grad_x_post": False, "form": form}
        inp = make_inputs(case, seed=505)
        leaves = leaves_of(inp)
        h_in, h_post, h_res = mhc.mhc_pre(**leaves, norm_eps=1e-2, hc_eps=1e-2)
        weighted_loss(h_in, h_post, h_res, inp).backward()
        outputs = {"h_in": h_in.detach(), "h_post": h_post.detach(),
                   "h_res": None if h_res is None else h_res.detach()}
        outputs.update({"grad_" + name: leaves[name].grad for name in LEAVES})
        compare_with_oracle(inp, outputs, f"eps-1e-2-{form}", norm_eps=1e-2, hc_eps=1e-2)
