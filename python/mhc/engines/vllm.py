"""vLLM's CPU mHC wrappers (SPEC §16; vllm.model_executor.kernels.mhc.cpu) by their names,
signatures, defaults and output layouts, on mhc's operators, and the fused boundary and
DeepSeek-V4.1's single pass for inference (SPEC §14-§15):

    post, comb, layer_input = mhc_pre_cpu(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                                          hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat)
    residual = mhc_post_cpu(x, residual, post, comb)
    h = hc_head_fused_cpu(hidden_states, hc_fn, hc_scale, hc_base, rms_norm_eps, hc_eps)
    residual, post, comb, layer_input = mhc_fused_post_pre(x, residual, post, comb, fn, ...)
    post, comb, layer_input, next_pre = mhc_pre_delayed(residual, fn, ..., pre_mix=next_pre)

residual is [..., N, D] bf16 or fp16 (any leading dims, T = 0, any strides); post is
[..., N, 1] fp32 and comb [..., N, N] fp32. Beyond SGLang's op: a gate eps (hc_pre_eps)
apart from the Sinkhorn's (hc_sinkhorn_eps), any post multiplier (h_post = mult·σ(z_post)
in fp32; 2 is SPEC §2 bit for bit) and norm_weight [D] (x's dtype or fp32), the next
sub-layer's RMSNorm applied to h_in as rounded (MhcRmsNorm). n_splits (a GPU split-K
factor) is accepted and changes nothing: the outputs never depend on it, nor on the batch.
hc_head_fused_cpu's eps order here is (norm, hc), the reverse of SGLang's op.

Each call goes to torch.ops.mhc_engines.* (libmhc_torch.so, registered from C++) when it is
built, else to the same composition through mhc's Python face (_python_vllm): the same bits.
"""
from . import _native, _python_vllm

_ops = _native.ops


def mhc_pre_cpu(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                sinkhorn_repeat, n_splits=1, norm_weight=None, norm_eps=0.0):
    """V4's site: (post [..., N, 1], comb [..., N, N], layer_input [..., D])."""
    if _ops is None:
        return _python_vllm.mhc_pre_cpu(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                                        hc_post_mult_value, sinkhorn_repeat, n_splits, norm_weight, norm_eps)
    return _ops.mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                        sinkhorn_repeat, norm_weight, norm_eps, False, None)[:3]


def mhc_post_cpu(x, residual, post_layer_mix, comb_res_mix):
    """The residual update (SPEC §11): out[j] = post[j]·x + Σ_i comb[i, j]·residual[i]."""
    if _ops is None:
        return _python_vllm.mhc_post_cpu(x, residual, post_layer_mix, comb_res_mix)
    return _ops.mhc_post(x, residual, post_layer_mix, comb_res_mix)


def hc_head_fused_cpu(hidden_states, hc_fn, hc_scale, hc_base, rms_norm_eps, hc_eps):
    """The model's end (SPEC §6); eps order (norm, hc)."""
    if _ops is None:
        return _python_vllm.hc_head_fused_cpu(hidden_states, hc_fn, hc_scale, hc_base, rms_norm_eps, hc_eps)
    return _ops.hc_head_fused_cpu(hidden_states, hc_fn, hc_scale, hc_base, hc_eps, rms_norm_eps)


def mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                       hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat, norm_weight=None, norm_eps=1e-6):
    """mhc_post_cpu then mhc_pre_cpu on the rounded streams, in one pass over them (MhcPostPre,
    SPEC §15; the same bits as the two calls): (residual_cur, post_cur [..., N, 1], comb_cur,
    layer_input_cur)."""
    if _ops is None:
        return _python_vllm.mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base,
                                               rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                                               sinkhorn_repeat, norm_weight, norm_eps)
    return _ops.mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps,
                                   hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat, norm_weight,
                                   norm_eps)


def mhc_pre_delayed(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                    sinkhorn_repeat, pre_mix=None, norm_weight=None, norm_eps=1e-6):
    """DeepSeek-V4.1's site (SPEC §14): h_in collapsed with the carried pre_mix (the previous
    site's h_pre; None at the first site: stream 0 exactly). Returns (post [..., N, 1], comb,
    layer_input, next_pre [..., N] fp32: this site's h_pre, for the next site)."""
    if _ops is None:
        return _python_vllm.mhc_pre_delayed(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                                            hc_post_mult_value, sinkhorn_repeat, pre_mix, norm_weight, norm_eps)
    return _ops.mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                        sinkhorn_repeat, norm_weight, norm_eps, True, pre_mix)
