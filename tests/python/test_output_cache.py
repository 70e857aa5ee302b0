"""The Python face's output cache (python/mhc/_output_cache.py): large outputs reuse
buffers whose tensors are gone, never one still referenced, and give the same bits."""
import gc

import pytest
import torch

import mhc


def _case(T=512, N=4, D=1024, seed=0):
    g = torch.Generator().manual_seed(seed)
    F, K = 2 * N + N * N, N * D
    x = torch.randn(T, N, D, generator=g).bfloat16()
    phi = torch.randn(F, K, generator=g) / K ** 0.5
    alpha = torch.tensor([0.5, 0.4, 0.3])
    bias = torch.randn(F, generator=g) * 0.1
    return x, phi, alpha, bias


@pytest.fixture(autouse=True)
def restore_capacity():
    capacity, _ = mhc.get_output_cache()
    yield
    mhc.set_output_cache(capacity)


def test_a_dropped_output_is_reused_and_gives_the_same_bits():
    x, phi, alpha, bias = _case()
    mhc.set_output_cache(0)
    fresh = [t.clone() for t in mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=1)]
    mhc.set_output_cache(1 << 30)
    first = mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=1)
    ptr = first[0].data_ptr()  # h_in: 512 x 1024 bf16 = 1 MiB, cached
    first[0].fill_(float("nan"))
    del first
    gc.collect()
    assert mhc.get_output_cache()[1] >= 1 << 20
    second = mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=1)
    assert second[0].data_ptr() == ptr
    for got, want in zip(second, fresh):
        assert torch.equal(got, want)


def test_a_buffer_still_viewed_is_not_handed_out():
    x, phi, alpha, bias = _case()
    mhc.set_output_cache(1 << 30)
    h_in = mhc.npu_mhc_pre(x, phi, alpha, bias)[0]
    row = h_in[7]  # a view keeps the buffer alive after the tensor is dropped
    kept = row.clone()
    ptr = h_in.data_ptr()
    del h_in
    gc.collect()
    again = mhc.npu_mhc_pre(x * 2, phi, alpha, bias)[0]
    assert again.data_ptr() != ptr
    assert torch.equal(row, kept)


def test_backward_outputs_are_cached_and_correct():
    x, phi, alpha, bias = _case()
    h_in, h_post, h_res, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=1)
    g = torch.Generator().manual_seed(1)
    grads_in = (torch.randn(h_in.shape, generator=g).bfloat16(), torch.randn(h_post.shape, generator=g),
                torch.randn(h_res.shape, generator=g))
    args = (x, phi, alpha) + grads_in + (inv_rms, h_mix, h_pre, h_post)
    mhc.set_output_cache(0)
    want = [t.clone() for t in mhc.npu_mhc_pre_backward(*args)[:4]]
    mhc.set_output_cache(1 << 30)
    hits = mhc._output_cache.cache.hits
    for _ in range(3):
        got = mhc.npu_mhc_pre_backward(*args)
        for a, b in zip(got[:4], want):
            assert torch.equal(a, b)
        del got
        gc.collect()
    assert mhc._output_cache.cache.hits >= hits + 2  # grad_x (4 MiB) and grad_phi reused


def test_capacity_bounds_what_is_kept_and_zero_releases_it():
    x, phi, alpha, bias = _case()
    mhc.set_output_cache(1 << 30)
    outputs = mhc.npu_mhc_pre(x, phi, alpha, bias)
    del outputs
    gc.collect()
    assert mhc.get_output_cache()[1] > 0
    mhc.set_output_cache(0)
    assert mhc.get_output_cache() == (0, 0)
    mhc.set_output_cache(1 << 20)  # room for h_in only
    outputs = mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=1)
    del outputs
    gc.collect()
    assert mhc.get_output_cache()[1] <= 1 << 20


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_capacities_are_refused(bad, error):
    with pytest.raises(error, match="nbytes"):
        mhc.set_output_cache(bad)


def test_help_states_the_default_size_and_how_to_turn_it_off():
    import os

    from mhc import _output_cache

    doc = mhc.__doc__
    assert "2 GiB" in doc and "MHC_OUTPUT_CACHE_MB" in doc and "set_output_cache(0)" in doc
    if "MHC_OUTPUT_CACHE_MB" not in os.environ:
        assert _output_cache._default_capacity() == 2 << 30
