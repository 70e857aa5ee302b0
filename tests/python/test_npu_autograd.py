"""The autograd rule of mhc.npu_mhc_pre (SPEC §8): with grad mode on and an input that
requires grad, h_in, h_post and h_res carry a grad_fn and loss.backward() runs
npu_mhc_pre_backward; the caches (out_flag=1) are non-differentiable. Grads are checked
against float64 autograd through the oracle, and bitwise against the backward called by
hand. Without a graph to record, the direct path is taken."""
import pytest
import torch

import mhc
from conftest import (DTYPES, LEAVES, assert_same_bits, assert_zero_grad_gamma, compare_with_oracle,
                      leaves_of, make_inputs, weighted_loss)

OUTPUT_NAMES = ("h_in", "h_post", "h_res")
CACHE_NAMES = ("inv_rms", "h_mix", "h_pre")


def small_case(dtype="fp32", gamma=True, form="square", layout="TND", n=4, d=32, t=4):
    return {"N": n, "D": d, "T": t, "layout": layout, "dtype": dtype, "gamma": gamma,
            "grad_x_post": False, "form": form}


def call_npu(args, out_flag=0, **eps):
    return mhc.npu_mhc_pre(args["x"], args["phi"], args["alpha"], args["bias"], gamma=args["gamma"],
                           out_flag=out_flag, **eps)


def grads_of(leaves):
    return {"grad_" + name: (None if leaves[name] is None else leaves[name].grad) for name in LEAVES}


class NoFunction:
    """Stands in for MhcPreFunction where the direct path must be taken."""

    @staticmethod
    def apply(*args):
        raise AssertionError("npu_mhc_pre went through the autograd Function")


@pytest.mark.parametrize("layout", ["BSND", "TND"])
@pytest.mark.parametrize("out_flag", [0, 1])
@pytest.mark.parametrize("form", ["square", "two_entry", "head"])
@pytest.mark.parametrize("gamma", [True, False], ids=["gamma", "nogamma"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_backward_matches_oracle_and_the_backward_by_hand(dtype, gamma, form, out_flag, layout):
    case = small_case(dtype, gamma, form, layout)
    inp = make_inputs(case, seed=611)
    leaves = leaves_of(inp)
    outputs = call_npu(leaves, out_flag)
    assert len(outputs) == 6
    h_in, h_post, h_res, inv_rms, h_mix, h_pre = outputs
    assert (h_res is None) == (form in ("two_entry", "head")) and (h_post is None) == (form == "head")
    for name, out in zip(OUTPUT_NAMES, outputs[:3]):
        assert out is None or (out.requires_grad and out.grad_fn is not None), name
    for name, cache in zip(CACHE_NAMES, outputs[3:]):
        if out_flag:
            assert not cache.requires_grad and cache.grad_fn is None, name
        else:
            assert cache is None, name

    # The forward gives the bits of the direct path, with the same out_flag.
    direct = call_npu(inp, out_flag)
    for name, want, got in zip(OUTPUT_NAMES + CACHE_NAMES, direct, outputs):
        assert_same_bits(name, want, None if got is None else got.detach(), "direct vs autograd path")

    weighted_loss(h_in, h_post, h_res, inp).backward()
    grads = grads_of(leaves)
    assert grads["grad_x"].dtype == DTYPES[dtype] and bool(grads["grad_x"].ne(0).any())
    cid = f"npu-autograd-{layout}-{dtype}-{'gamma' if gamma else 'nogamma'}-{form}-flag{out_flag}"
    compare_with_oracle(inp, grads, cid)

    caches = call_npu(inp, out_flag=1)
    by_hand = mhc.npu_mhc_pre_backward(
        inp["x"], inp["phi"], inp["alpha"], inp["grad_h_in"], inp["grad_h_post"], inp["grad_h_res"],
        caches[3], caches[4], caches[5], caches[1], gamma=inp["gamma"])
    for (name, got), want in zip(grads.items(), by_hand):
        if name == "grad_gamma" and inp["gamma"] is None:  # no leaf; the face gives zeros
            assert got is None
            assert_zero_grad_gamma(want, inp["x"])
            continue
        assert_same_bits(name, want, got, "npu_mhc_pre_backward vs loss.backward()")


@pytest.mark.parametrize("out_flag", [0, 1])
def test_gradients_are_not_lost(out_flag):
    """Each of h_in, h_post, h_res alone carries a gradient back to x."""
    inp = make_inputs(small_case("bf16"), seed=612)
    for k in range(3):
        leaves = leaves_of(inp)
        outputs = call_npu(leaves, out_flag)
        outputs[k].float().sum().backward()
        x_grad = leaves["x"].grad
        assert x_grad is not None and bool(x_grad.ne(0).any()), OUTPUT_NAMES[k]
        assert all(leaves[name].grad is not None for name in LEAVES), OUTPUT_NAMES[k]


def test_npu_mhc_pre_and_mhc_pre_give_the_same_bits():
    inp = make_inputs(small_case("bf16", layout="BSND"), seed=613)
    results = []
    for call in (lambda a: call_npu(a, out_flag=1)[:3], lambda a: mhc.mhc_pre(**a)):
        leaves = leaves_of(inp)
        outputs = call(leaves)
        weighted_loss(*outputs, inp).backward()
        results.append([o.detach() for o in outputs] + list(grads_of(leaves).values()))
    for name, a, b in zip(OUTPUT_NAMES + tuple(grads_of(leaves)), *results):
        assert_same_bits(name, a, b, "npu_mhc_pre vs mhc_pre")


def test_caches_are_non_differentiable():
    """A cache in the loss contributes nothing; a loss of caches alone has no graph."""
    inp = make_inputs(small_case(), seed=614)
    leaves = leaves_of(inp)
    h_in, _, _, inv_rms, h_mix, h_pre = call_npu(leaves, out_flag=1)
    (h_in.sum() + inv_rms.sum() + h_mix.sum() + h_pre.sum()).backward()
    with_caches = grads_of(leaves)

    leaves = leaves_of(inp)
    call_npu(leaves, out_flag=1)[0].sum().backward()
    for name, want in grads_of(leaves).items():
        assert_same_bits(name, want, with_caches[name], "h_in alone vs h_in + caches")

    _, _, _, inv_rms, h_mix, h_pre = call_npu(leaves_of(inp), out_flag=1)
    with pytest.raises(RuntimeError, match="does not require grad"):
        (inv_rms.sum() + h_mix.sum() + h_pre.sum()).backward()


def test_a_cache_modified_in_place_is_torchs_runtime_error():
    """The returned caches are the backward's saved state: changing them is caught."""
    inp = make_inputs(small_case(), seed=615)
    h_in, _, _, _, h_mix, _ = call_npu(leaves_of(inp), out_flag=1)
    h_mix.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        h_in.sum().backward()


@pytest.mark.parametrize("out_flag", [0, 1])
def test_no_input_requiring_grad_takes_the_direct_path(monkeypatch, out_flag):
    inp = make_inputs(small_case("fp16"), seed=616)
    want = call_npu(inp, out_flag)
    monkeypatch.setattr(mhc.ops, "MhcPreFunction", NoFunction)
    outputs = call_npu(inp, out_flag)
    for name, w, got in zip(OUTPUT_NAMES + CACHE_NAMES, want, outputs):
        assert got is None or (got.grad_fn is None and not got.requires_grad), name
        assert_same_bits(name, w, got, "two direct calls")
    with pytest.raises(AssertionError, match="went through the autograd Function"):
        call_npu(leaves_of(inp, requires=("bias",)), out_flag)  # the stand-in is reached


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_no_grad_modes_take_the_direct_path(monkeypatch, mode):
    inp = make_inputs(small_case("bf16"), seed=617)
    leaves = leaves_of(inp)
    want = call_npu(inp, out_flag=1)
    monkeypatch.setattr(mhc.ops, "MhcPreFunction", NoFunction)
    with getattr(torch, mode)():
        outputs = call_npu(leaves, out_flag=1)
    for name, w, got in zip(OUTPUT_NAMES + CACHE_NAMES, want, outputs):
        assert got.grad_fn is None and not got.requires_grad, name
        assert_same_bits(name, w, got, f"direct call vs {mode}")


@pytest.mark.parametrize("requires", [("x",), ("phi", "gamma"), ("alpha", "bias"), ("gamma",)])
def test_only_inputs_requiring_grad_get_grads(requires):
    inp = make_inputs(small_case("fp32", form="factorial", n=3, d=17, layout="BSND"), seed=618)
    leaves = leaves_of(inp, requires=requires)
    h_in, h_post, h_res, _, _, _ = call_npu(leaves, out_flag=1)
    weighted_loss(h_in, h_post, h_res, inp).backward()
    grads = grads_of(leaves)
    for name in LEAVES:
        assert (grads["grad_" + name] is None) == (name not in requires), name
    compare_with_oracle(inp, {"grad_" + name: grads["grad_" + name] for name in requires},
                        f"npu-autograd-only-{'-'.join(requires)}")


def test_non_default_eps_reach_the_backward():
    inp = make_inputs(small_case("fp32", form="two_entry"), seed=619)
    leaves = leaves_of(inp)
    h_in, h_post, h_res, _, _, _ = call_npu(leaves, out_flag=1, norm_eps=1e-2, hc_eps=1e-2)
    weighted_loss(h_in, h_post, h_res, inp).backward()
    outputs = {"h_in": h_in.detach(), "h_post": h_post.detach(), "h_res": None}
    outputs.update(grads_of(leaves))
    compare_with_oracle(inp, outputs, "npu-autograd-eps-1e-2", norm_eps=1e-2, hc_eps=1e-2)


def error_of(call):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    return info.type, str(info.value)


# Caught by the Python-side checks before the forward starts (the others later: a meta
# tensor among CPU ones and x's rank while the outputs are shaped, the rest by the
# library before it computes).
PYTHON_SIDE = {"out_flag 2", "out_flag True", "norm_eps str", "x fp64"}
BAD_CALLS = {
    "out_flag 2": lambda a: call_npu(a, out_flag=2),
    "out_flag True": lambda a: call_npu(a, out_flag=True),
    "norm_eps str": lambda a: call_npu(a, norm_eps="1e-6"),
    "hc_eps nan": lambda a: call_npu(a, hc_eps=float("nan")),
    "x fp64": lambda a: call_npu(dict(a, x=a["x"].double()), out_flag=1),
    "phi bf16": lambda a: call_npu(dict(a, phi=a["phi"].bfloat16())),
    "gamma on meta": lambda a: call_npu(dict(a, gamma=a["gamma"].to("meta"))),
    "x rank 2": lambda a: call_npu(dict(a, x=a["x"][0])),
    "phi too short": lambda a: call_npu(dict(a, phi=a["phi"][:, :-1])),
    "bias too long": lambda a: call_npu(dict(a, bias=torch.cat([a["bias"], a["bias"]]))),
}


@pytest.mark.parametrize("bad", sorted(BAD_CALLS))
def test_errors_with_grad_are_the_errors_without(monkeypatch, bad):
    """Same exception and message whether or not a graph would be recorded; the
    Python-side checks come before any output is made."""
    inp = make_inputs(small_case(), seed=620)
    want = error_of(lambda: BAD_CALLS[bad](inp))
    grad_inputs = leaves_of(inp)  # all require grad
    assert error_of(lambda: BAD_CALLS[bad](grad_inputs)) == want
    if bad in PYTHON_SIDE:
        def no_forward(*args, **kwargs):
            raise AssertionError("the forward ran before the checks")
        monkeypatch.setattr(mhc.autograd, "run_pre_forward", no_forward)
        assert error_of(lambda: BAD_CALLS[bad](grad_inputs)) == want
