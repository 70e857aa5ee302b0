"""Weights prepared once (mhc.prepare_pre, prepared=; SPEC §2's operators): every output of
npu_mhc_pre, mhc_pre_sinkhorn, mhc_pre_single_pass and mhc_post_pre bitwise those of the same
call without the handle, under every kernel family, decode-sized and longer batches, HF32 and a
strided phi; a weight changed in place since (its version counter), or another tensor, is a
ValueError naming it; a call recording a graph checks the handle and gives the same bits and
gradients. Through mhc.engines' torch ops the handles are implicit: one per weight set, made
again when a weight changes in place, the outputs those of the ctypes path without handles.
"""
import pytest
import torch

import mhc
import mhc.engines
from conftest import FAMILIES, assert_same_bits

N = 4
F = 2 * N + N * N


def weights(d, gamma=True, strided=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    k = N * d
    phi = (torch.rand(F, k, generator=g) * 2 - 1) * (2 / k ** 0.5)
    if strided:
        big = torch.zeros(F, 2 * k)
        big[:, ::2] = phi
        phi = big[:, ::2]
    alpha = torch.rand(3, generator=g) + 0.25
    bias = torch.rand(F, generator=g) * 2 - 1
    gam = torch.rand(N, d, generator=g) + 0.5 if gamma else None
    return phi, alpha, bias, gam


def streams(t, d, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t, N, d, generator=g).to(dtype)


def same(outputs, expected, what):
    for i, (a, b) in enumerate(zip(outputs, expected)):
        assert_same_bits(f"output {i}", a, b, what)


CASES = [(1, 40, torch.bfloat16, 0, False), (7, 40, torch.float16, 1, False), (64, 40, torch.float32, 0, True),
         (65, 40, torch.bfloat16, 0, False), (200, 141, torch.bfloat16, 1, False), (96, 40, torch.float16, 0, True)]


@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
@pytest.mark.parametrize("t,d,dtype,inner_precise,strided", CASES)
def test_npu_mhc_pre_prepared_is_unprepared(isa_family, t, d, dtype, inner_precise, strided):
    phi, alpha, bias, gamma = weights(d, strided=strided)
    x = streams(t, d, dtype)
    w = mhc.prepare_pre(phi, alpha, bias, gamma)
    want = mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma, out_flag=1, inner_precise=inner_precise)
    for use in ("first use", "forms kept"):
        got = mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma, out_flag=1, inner_precise=inner_precise, prepared=w)
        same(got, want, f"{isa_family} {use}")


@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
@pytest.mark.parametrize("t", [3, 90])
def test_fused_operators_prepared_are_unprepared(isa_family, t):
    d = 40
    phi, alpha, bias, gamma = weights(d, seed=3)
    x = streams(t, d, torch.bfloat16)
    w = mhc.prepare_pre(phi, alpha, bias)
    same(mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, N, out_flag=True, prepared=w),
         mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, N, out_flag=True), "mhc_pre_sinkhorn")
    wg = mhc.prepare_pre(phi, alpha, bias, gamma)
    pre_mix = torch.rand(t, N) + 0.05
    same(mhc.mhc_pre_single_pass(x, phi, alpha, bias, pre_mix, gamma=gamma, prepared=wg),
         mhc.mhc_pre_single_pass(x, phi, alpha, bias, pre_mix, gamma=gamma), "mhc_pre_single_pass")
    h_out = streams(t, d, torch.bfloat16, seed=5)[:, 0]
    h_post = torch.rand(t, N) * 2
    h_res = torch.rand(t, N, N)
    for single_pass, mix in ((False, None), (True, pre_mix)):
        same(mhc.mhc_post_pre(x, h_res, h_out, h_post, phi, alpha, bias, mix, single_pass=single_pass, gamma=gamma,
                              prepared=wg),
             mhc.mhc_post_pre(x, h_res, h_out, h_post, phi, alpha, bias, mix, single_pass=single_pass, gamma=gamma),
             f"mhc_post_pre single_pass={single_pass}")


def test_a_weight_changed_in_place_is_refused_naming_it():
    phi, alpha, bias, gamma = weights(40)
    x = streams(5, 40, torch.bfloat16)
    w = mhc.prepare_pre(phi, alpha, bias, gamma)
    assert w.current()
    with torch.no_grad():
        bias.add_(0.5)  # an optimizer's step
    assert not w.current()
    with pytest.raises(ValueError, match=r"^bias: changed in place since prepare_pre"):
        mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma, prepared=w)
    w = mhc.prepare_pre(phi, alpha, bias, gamma)  # prepared again: the new values
    same(mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma, prepared=w),
         mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma), "after preparing again")


def test_other_weights_or_handles_are_refused():
    phi, alpha, bias, gamma = weights(40)
    x = streams(5, 40, torch.bfloat16)
    w = mhc.prepare_pre(phi, alpha, bias, gamma)
    with pytest.raises(ValueError, match=r"^phi: expected the tensor prepared was made from"):
        mhc.npu_mhc_pre(x, phi.clone(), alpha, bias, gamma=gamma, prepared=w)
    with pytest.raises(ValueError, match=r"^gamma: expected the tensor"):
        mhc.npu_mhc_pre(x, phi, alpha, bias, prepared=w)
    with pytest.raises(ValueError, match=r"^gamma: expected the tensor"):
        mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, N, prepared=w)
    with pytest.raises(ValueError, match=r"^gamma: expected none"):
        mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma, prepared=mhc.prepare_pre(phi, alpha, bias))
    with pytest.raises(TypeError, match=r"^prepared: expected an mhc.PreparedPre"):
        mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma, prepared=object())
    same(mhc.npu_mhc_pre(x, phi.view(F, -1), alpha, bias, gamma=gamma, prepared=w),
         mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma), "an alias of the same view")
    with pytest.raises(TypeError, match=r"^phi: expected dtype fp32"):
        mhc.prepare_pre(phi.double(), alpha, bias)
    with pytest.raises(ValueError, match=r"^phi: expected \[F,K\], got \[3840\]"):
        mhc.prepare_pre(phi.flatten(), alpha, bias)


def test_a_recorded_graph_checks_the_handle_and_gives_the_same_gradients():
    phi, alpha, bias, gamma = weights(40)
    x = streams(6, 40, torch.float32)
    w = mhc.prepare_pre(phi, alpha, bias, gamma)
    grads = []
    for prepared in (w, None):
        xs = x.clone().requires_grad_()
        h_in, h_post, h_res = mhc.npu_mhc_pre(xs, phi, alpha, bias, gamma=gamma, prepared=prepared)[:3]
        (h_in.sum() + h_post.square().sum() + h_res.sum()).backward()
        grads.append((h_in.detach(), xs.grad))
    same(grads[0], grads[1], "under autograd")


needs_native = pytest.mark.skipif(mhc.engines._native.ops is None, reason="libmhc_torch.so not built")


@needs_native
def test_engine_ops_prepare_each_weight_set_once_and_again_after_an_in_place_change():
    ops = torch.ops.mhc_engines
    ops.clear_prepared_cache()
    d, t = 64, 9
    fn, hc_scale, hc_base, _ = weights(d, gamma=False, seed=7)
    residual = streams(t, d, torch.bfloat16)
    made = ops.prepared_cache_info()[1]

    def pre():
        return ops.mhc_pre(residual, fn, hc_scale, hc_base, 1e-6, 1e-6, 1e-6, 2.0, 20, None, 1e-6, False, None)

    def unprepared():  # the ctypes path: no handle at all
        from mhc.engines import _python_vllm
        return _python_vllm.mhc_pre_cpu(residual, fn, hc_scale, hc_base, 1e-6, 1e-6, 1e-6, 2.0, 20)

    first = pre()
    assert ops.prepared_cache_info() == [1, made + 1]
    same(pre()[:3], first[:3], "a second call")
    same(first[:3], unprepared(), "against the ctypes path")
    assert ops.prepared_cache_info() == [1, made + 1], "a second call makes no new handle"
    with torch.no_grad():
        fn.mul_(-0.5)  # in place: its version counter moves
    after = pre()
    assert ops.prepared_cache_info() == [1, made + 2]
    same(after[:3], unprepared(), "after the in-place change")
    assert not torch.equal(after[0], first[0])
    # Another weight set is another entry; the head's 0-d scale keys on the caller's tensor.
    head_fn, head_base = fn[:N].clone(), hc_base[:N].clone()
    head_scale = torch.tensor(0.75)
    for _ in range(2):
        ops.hc_head_fused_cpu(residual, head_fn, head_scale, head_base, 1e-6, 1e-6)
    assert ops.prepared_cache_info() == [2, made + 3]
    ops.clear_prepared_cache()
    assert ops.prepared_cache_info()[0] == 0
