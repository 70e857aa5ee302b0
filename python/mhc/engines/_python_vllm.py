"""mhc.engines.vllm's functions on the ctypes path (mhc's Python face): what it calls where
libmhc_torch.so is not built, the same bits (tests/python/test_engines*.py run both)."""
from .. import ops
from . import sgl_kernel
from .common import check_site_scalars, inference, post_rows, scaled_post, streams, tokens


def _layer_input(h_in, norm_weight, norm_eps):
    return h_in if norm_weight is None else ops.mhc_rms_norm(h_in, norm_weight, norm_eps)


def _pre_v4(flat, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, sinkhorn_repeat):
    """(h_in, h_post, comb) of V4's site on [T, N, D] streams: the fused pair when one eps
    serves the gate and the Sinkhorn, else MhcPre then MhcSinkhorn (the same bits, SPEC §12)."""
    n = flat.shape[-2]
    if float(hc_pre_eps) == float(hc_sinkhorn_eps):
        return ops.mhc_pre_sinkhorn(flat, fn, hc_scale, hc_base, n, sinkhorn_repeat, hc_eps=hc_pre_eps,
                                    norm_eps=rms_eps)[:3]
    h_in, h_post, z = ops.npu_mhc_pre(flat, fn, hc_scale, hc_base, norm_eps=rms_eps, hc_eps=hc_pre_eps)[:3]
    return h_in, h_post, ops.npu_mhc_sinkhorn(z, eps=hc_sinkhorn_eps, num_iters=sinkhorn_repeat)[0]


def _site_outputs(lead, n, d, h_post, comb, layer_input):
    return h_post.reshape(lead + (n, 1)), comb.reshape(lead + (n, n)), layer_input.reshape(lead + (d,))


@inference
def mhc_pre_cpu(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                sinkhorn_repeat, n_splits=1, norm_weight=None, norm_eps=0.0):
    """V4's site: (post [..., N, 1], comb [..., N, N], layer_input [..., D])."""
    flat, lead = streams(residual, "residual")
    check_site_scalars(rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, norm_weight, norm_eps)
    n, d = flat.shape[-2], flat.shape[-1]
    h_in, h_post, comb = _pre_v4(flat, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                                 sinkhorn_repeat)
    return _site_outputs(lead, n, d, scaled_post(h_post, hc_post_mult_value), comb,
                         _layer_input(h_in, norm_weight, norm_eps))


def mhc_post_cpu(x, residual, post_layer_mix, comb_res_mix):
    """The residual update (SPEC §11): SGLang's hc_post_fused_cpu."""
    return sgl_kernel.hc_post_fused_cpu(x, residual, post_layer_mix, comb_res_mix)


def hc_head_fused_cpu(hidden_states, hc_fn, hc_scale, hc_base, rms_norm_eps, hc_eps):
    """The model's end (SPEC §6): SGLang's op of the same name, eps order (norm, hc)."""
    return sgl_kernel.hc_head_fused_cpu(hidden_states, hc_fn, hc_scale, hc_base, hc_eps, rms_norm_eps)


@inference
def mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                       hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat, norm_weight=None, norm_eps=1e-6):
    """mhc_post_cpu then mhc_pre_cpu on the rounded streams, in one pass over them (MhcPostPre,
    SPEC §15; the same bits as the two calls): (residual_cur, post_cur [..., N, 1], comb_cur,
    layer_input_cur)."""
    flat, lead = streams(residual, "residual")
    check_site_scalars(rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, norm_weight, norm_eps)
    n, d = flat.shape[-2], flat.shape[-1]
    x_next, h_in, _, h_post, comb = ops.mhc_post_pre(
        flat, tokens(comb_res_mix, 2)[0], tokens(x, 1)[0], post_rows(post_layer_mix, residual.dim()), fn, hc_scale,
        hc_base, num_iters=sinkhorn_repeat, hc_eps=hc_pre_eps, norm_eps=rms_eps, sinkhorn_eps=hc_sinkhorn_eps)
    return (x_next.reshape(lead + (n, d)),) + _site_outputs(lead, n, d, scaled_post(h_post, hc_post_mult_value),
                                                           comb, _layer_input(h_in, norm_weight, norm_eps))


@inference
def mhc_pre_delayed(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                    sinkhorn_repeat, pre_mix=None, norm_weight=None, norm_eps=1e-6):
    """DeepSeek-V4.1's site (SPEC §14): h_in collapsed with the carried pre_mix (the previous
    site's h_pre; None at the first site: stream 0 exactly). Returns (post [..., N, 1], comb,
    layer_input, next_pre [..., N] fp32: this site's h_pre, for the next site)."""
    flat, lead = streams(residual, "residual")
    check_site_scalars(rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, norm_weight, norm_eps)
    n, d = flat.shape[-2], flat.shape[-1]
    carried = None if pre_mix is None else tokens(pre_mix, 1)[0]
    h_in, h_pre, h_post, comb = ops.mhc_pre_single_pass(
        flat, fn, hc_scale, hc_base, carried, num_iters=sinkhorn_repeat, hc_eps=hc_pre_eps, norm_eps=rms_eps,
        sinkhorn_eps=hc_sinkhorn_eps)
    return _site_outputs(lead, n, d, scaled_post(h_post, hc_post_mult_value), comb,
                         _layer_input(h_in, norm_weight, norm_eps)) + (h_pre.reshape(lead + (n,)),)
