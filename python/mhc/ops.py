"""The torch_npu-style functions on CPU tensors: npu_mhc_pre / npu_mhc_pre_backward,
npu_mhc_sinkhorn / npu_mhc_sinkhorn_backward, npu_mhc_post / npu_mhc_post_backward,
CANN's cann_ops_transformer pair mhc_pre_sinkhorn / mhc_pre_sinkhorn_backward,
DeepSeek-V4.1's mhc_pre_single_pass and mhc_collapse, and the fused layer boundary
mhc_post_pre. Each forward is differentiable: with a graph to record it goes through its
autograd.Function (MhcPreFunction, MhcSinkhornFunction, MhcPostFunction,
MhcPreSinkhornFunction, MhcPreSinglePassFunction, MhcCollapseFunction, MhcPostPreFunction),
else it calls the library directly.

The library calls, argument checks and the backward functions themselves are in
_core.py; imports go one way: _lib <- _core <- autograd <- ops.
"""
import torch

from ._core import (check_collapse_args, check_post_args, check_post_pre_args, check_pre_args,
                    check_pre_single_pass_args, check_pre_sinkhorn_args, check_sinkhorn_args, get_num_threads,
                    mhc_pre_sinkhorn_backward, npu_mhc_post_backward, npu_mhc_pre_backward,
                    npu_mhc_sinkhorn_backward, run_collapse_forward, run_post_forward, run_post_pre_forward,
                    run_pre_forward, run_pre_single_pass_forward, run_pre_sinkhorn_forward, run_rms_norm,
                    run_sinkhorn_forward, set_num_threads)
from .prepared import handle_of
from .autograd import (MhcCollapseFunction, MhcPostFunction, MhcPostPreFunction, MhcPreFunction,
                       MhcPreSinglePassFunction, MhcPreSinkhornFunction, MhcSinkhornFunction)


def _builds_graph(*inputs):
    """True when autograd would record a call on these inputs (grad mode on and one of
    them requires grad)."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)


def npu_mhc_pre(x, phi, alpha, bias, *, gamma=None, norm_eps=1e-6, hc_eps=1e-6, out_flag=0,
                inner_precise=0, prepared=None):
    """mHC pre-block forward (SPEC §2), differentiable (SPEC §8).

    Returns (h_in, h_post, h_res, inv_rms, h_mix, h_pre); the last three are None
    unless out_flag=1, h_res is None for a two-entry alpha (F = 2N), h_post and h_res
    for a one-entry alpha (the head, F = N: h_mix is [.., N]; see also mhc_head).

    inner_precise is torch_npu's int: 0 computes h_mix = phi · u in fp32, 1 rounds
    both operands to HF32 first (SPEC §7); anything else (a bool, 1.0, "1", 2) is a
    ValueError.

    When grad mode is on and x, phi, alpha, bias or gamma requires grad, the call goes
    through autograd.MhcPreFunction: h_in, h_post and h_res (those returned) get a
    grad_fn whose backward is npu_mhc_pre_backward. The caches inv_rms, h_mix, h_pre are
    non-differentiable outputs (requires_grad False): they are the backward's saved
    state, not values to train through, so gradients flow from h_in, h_post and h_res
    only. Otherwise (no input requires grad, torch.no_grad, inference_mode) the library
    is called directly.

    prepared: mhc.prepare_pre(phi, alpha, bias, gamma), the weights prepared once (the
    same bits; see mhc.prepared).
    """
    handle = handle_of(prepared, phi, alpha, bias, gamma)
    if _builds_graph(x, phi, alpha, bias, gamma):
        outputs = MhcPreFunction.apply(x, phi, alpha, bias, gamma, norm_eps, hc_eps, out_flag,
                                       inner_precise)
        return outputs if out_flag else outputs + (None, None, None)
    norm_eps, hc_eps, precision = check_pre_args(x, phi, alpha, bias, gamma, norm_eps, hc_eps,
                                                 out_flag, inner_precise)
    return run_pre_forward(x, phi, alpha, bias, gamma, norm_eps, hc_eps, precision,
                           with_caches=bool(out_flag), prepared=handle)


def npu_mhc_sinkhorn(x, *, eps=1e-6, num_iters=20, out_flag=0):
    """MhcSinkhorn (SPEC §10): each token's x [N, N] (fp32, [B,S,N,N] or [T,N,N]) onto the
    doubly stochastic matrices: a row softmax plus eps, then num_iters column/row
    normalisations, ending on columns, every divisor plus eps.

    Returns (y, norm_out, sum_out): y fp32 of x's shape; the caches None unless out_flag=1,
    then norm_out [2I, *x.shape[:-2], N, Na] and sum_out [2I, *x.shape[:-2], Na] fp32 with
    Na = 8*ceil(N/8) (CANN's sizes; the padding is 0): slot 0 the softmax p and its row sums,
    slot k the matrix after step k and that step's divisors. Only npu_mhc_sinkhorn_backward
    (this library's) reads them.

    Differentiable in y for either out_flag (MhcSinkhornFunction): with out_flag=1 the
    backward reads the caches (non-differentiable outputs, requires_grad False); with
    out_flag=0 it keeps only x and recomputes each token's forward: N*N floats a token kept
    (16 at N = 4) instead of 2I*(N*Na+Na) -- the same bits either way.
    """
    if _builds_graph(x):
        outputs = MhcSinkhornFunction.apply(x, eps, num_iters, out_flag)
        return outputs if isinstance(outputs, tuple) else (outputs, None, None)
    eps, num_iters = check_sinkhorn_args(x, eps, num_iters, out_flag)
    return run_sinkhorn_forward(x, eps, num_iters, with_caches=bool(out_flag))


def npu_mhc_post(x, h_res, h_out, h_post):
    """MhcPost (SPEC §11), the residual update: out[j] = h_post[j]·h_out + Σ_i h_res[i, j]·x[i]
    per token (h_res TRANSPOSED, as CANN, TileKernels and Megatron have it), or
    x[j] + h_post[j]·h_out when h_res is None; fp32 in SPEC's order, rounded once to x's dtype.

    x [B,S,N,D] or [T,N,D] (bf16, fp16 or fp32), h_res [.., N, N] fp32 or None, h_out [.., D]
    in x's dtype, h_post [.., N] fp32; out has x's shape and dtype. Differentiable in all
    inputs (MhcPostFunction, backward npu_mhc_post_backward) when one requires grad.
    """
    if _builds_graph(x, h_res, h_out, h_post):
        return MhcPostFunction.apply(x, h_res, h_out, h_post)
    check_post_args(x, h_res, h_out, h_post)
    return run_post_forward(x, h_res, h_out, h_post)


def mhc_pre_sinkhorn(x, phi, alpha, bias, hc_mult, num_iters=20, hc_eps=1e-6, norm_eps=1e-6, *,
                     out_flag=False, prepared=None):
    """MhcPreSinkhorn (SPEC §12), CANN's fused pair as its cann_ops_transformer extension
    calls it: MhcPre without gamma, then MhcSinkhorn on h_res with eps = hc_eps; the same
    bits as that chain. x [B,S,N,D] or [T,N,D]; phi [N*N + 2N, N*D], alpha [3], bias
    [N*N + 2N] fp32; hc_mult must be x's N.

    Returns (h_in, h_post, h_res), as CANN's wrapper: h_in [.., D] in x's dtype, h_post
    [.., N], h_res [.., N*N] fp32 (doubly stochastic, row-major). out_flag=True (the
    keyword-only flag of CANN's operator) returns CANN's eight outputs in its order:
    (h_in, h_post, h_res, h_pre [.., N], hc_before_norm [.., F] (= h_mix), inv_rms [.., 1],
    sum_out [2I, .., N], norm_out [2I, .., N, N]), the caches mhc_pre_sinkhorn_backward reads.

    Differentiable (MhcPreSinkhornFunction) when x, phi, alpha or bias requires grad:
    gradients flow from h_in, h_post and h_res through mhc_pre_sinkhorn_backward; the
    caches are non-differentiable outputs. prepared: mhc.prepare_pre(phi, alpha, bias).
    """
    handle = handle_of(prepared, phi, alpha, bias, None)
    if _builds_graph(x, phi, alpha, bias):
        return MhcPreSinkhornFunction.apply(x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps,
                                            out_flag)
    num_iters, hc_eps, norm_eps, out_flag = check_pre_sinkhorn_args(
        x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, out_flag)
    outputs = run_pre_sinkhorn_forward(x, phi, alpha, bias, num_iters, hc_eps, norm_eps,
                                       with_caches=out_flag, prepared=handle)
    return outputs if out_flag else outputs[:3]


def mhc_pre_single_pass(x, phi, alpha, bias, pre_mix=None, *, gamma=None, num_iters=20, hc_eps=1e-6,
                        norm_eps=1e-6, sinkhorn_eps=None, prepared=None):
    """MhcPreSinglePass (SPEC §14), DeepSeek-V4.1's site: MhcPre's maps (alpha [3], phi
    [N*N + 2N, N*D], bias [N*N + 2N], gamma [N, D] or None), H = MhcSinkhorn(z_res) with
    eps = sinkhorn_eps (None: hc_eps), and h_in[d] = Σ_n pre_mix[n]·x[n, d] (fp32, rounded
    once) with the carried pre_mix [.., N] fp32, the previous site's h_pre, not this site's
    own. pre_mix None is the model's first site: h_in = x[..., 0, :] exactly.

    Returns (h_in, h_pre, h_post, h_res): h_in [.., D] in x's dtype; h_pre [.., N] (with
    +hc_eps: the next site's pre_mix), h_post [.., N] and h_res [.., N, N] (H, doubly
    stochastic) fp32. x [B,S,N,D] or [T,N,D] (bf16, fp16 or fp32).

    Differentiable (MhcPreSinglePassFunction) when x, phi, alpha, bias, pre_mix or gamma
    requires grad: gradients flow from all four outputs through the library's backward.
    prepared: mhc.prepare_pre(phi, alpha, bias, gamma).
    """
    handle = handle_of(prepared, phi, alpha, bias, gamma)
    if _builds_graph(x, phi, alpha, bias, pre_mix, gamma):
        return MhcPreSinglePassFunction.apply(x, phi, alpha, bias, pre_mix, gamma, num_iters, hc_eps, norm_eps,
                                              sinkhorn_eps)
    options = check_pre_single_pass_args(x, phi, alpha, bias, pre_mix, gamma, num_iters, hc_eps, norm_eps,
                                         sinkhorn_eps)
    return run_pre_single_pass_forward(x, phi, alpha, bias, pre_mix, gamma, *options, prepared=handle)[:4]


def mhc_collapse(x, pre_mix):
    """MhcCollapse (SPEC §14): h[d] = Σ_n pre_mix[n]·x[n, d] per token, in fp32 with n
    ascending, rounded once to x's dtype (a V4.1 model ends with the last site's h_pre).
    x [B,S,N,D] or [T,N,D], pre_mix [.., N] fp32; h [.., D]. Differentiable in both
    (MhcCollapseFunction) when one requires grad."""
    if _builds_graph(x, pre_mix):
        return MhcCollapseFunction.apply(x, pre_mix)
    check_collapse_args(x, pre_mix)
    return run_collapse_forward(x, pre_mix)


def mhc_rms_norm(x, weight, eps=1e-6):
    """MhcRmsNorm (SPEC §16), the next sub-layer's RMSNorm an engine fuses into h_in's
    write: per token y[d] = rne((x[d]·1/sqrt(ms + eps))·weight[d]) with ms = (Σ_d x[d]²)/D
    in fp32, summed in an order that depends on D only (a token's y never depends on its
    batch). x [B,S,D] or [T,D] (bf16, fp16 or fp32), weight [D] in x's dtype or fp32; y like
    x. Inference only: no backward (a call that autograd would record raises)."""
    if _builds_graph(x, weight):
        raise RuntimeError("mhc_rms_norm: no backward (an inference operator); call it under torch.no_grad() "
                           "or on tensors that do not require grad")
    return run_rms_norm(x, weight, eps)


def mhc_post_pre(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix=None, *, single_pass=False, gamma=None,
                 num_iters=20, hc_eps=1e-6, norm_eps=1e-6, sinkhorn_eps=None, prepared=None):
    """MhcPostPre (SPEC §15), the layer boundary fused: MhcPost of site s, then site s+1's
    pre on the rounded x_next, in one call; the same bits as that unfused chain.

        x_next = npu_mhc_post(x, h_res, h_out, h_post)        site s (§11): h_res None is the
                                                               identity; rounded to x's dtype
        V4   (single_pass=False): h_in, h_post_next, z, *_, h_pre = npu_mhc_pre(x_next, phi, alpha,
                 bias, gamma=gamma, out_flag=1); h_res_next = npu_mhc_sinkhorn(z, eps=sinkhorn_eps)
                 (h_in collapsed with its own h_pre; pre_mix must be None)
        V4.1 (single_pass=True):  h_in, h_pre, h_post_next, h_res_next = mhc_pre_single_pass(x_next,
                 phi, alpha, bias, pre_mix, gamma=gamma) (pre_mix None: h_in = x_next's stream 0)

    x [B,S,N,D] or [T,N,D] (bf16, fp16 or fp32), h_res [.., N, N] fp32 or None, h_out [.., D]
    in x's dtype, h_post [.., N] fp32: site s's; phi [N*N + 2N, N*D], alpha [3], bias
    [N*N + 2N], gamma [N, D] or None, pre_mix [.., N] or None (fp32): site s+1's. Both Sinkhorn
    options are site s+1's: num_iters, and sinkhorn_eps (None: hc_eps).

    Returns (x_next, h_in, h_pre, h_post_next, h_res_next): x_next x's shape and dtype, h_in
    [.., D] in x's dtype, h_pre [.., N] (with +hc_eps: V4.1's next pre_mix), h_post_next
    [.., N] and h_res_next [.., N, N] (H, doubly stochastic) fp32.

    Differentiable (MhcPostPreFunction) when any tensor input requires grad, from all five
    outputs: x_next's grad (from elsewhere, e.g. the residual path) enters site s+1's pre
    backward where MhcPreBackward adds grad_x_post (fp32); h_pre's grad in V4 adds to the
    grad h_pre receives through h_in, in V4.1 it is its whole grad. The grad of x_next is
    rounded once to x's dtype, then MhcPostBackward of site s runs on it: this is the
    library's rounding point, not autograd's (the unfused chain under autograd rounds the
    pre's grad_x, then the sum with x_next's other grad). prepared: mhc.prepare_pre(phi,
    alpha, bias, gamma), site s+1's weights prepared once.
    """
    handle = handle_of(prepared, phi, alpha, bias, gamma)
    if _builds_graph(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma):
        return MhcPostPreFunction.apply(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, single_pass,
                                        num_iters, hc_eps, norm_eps, sinkhorn_eps)
    single_pass, *options = check_post_pre_args(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, single_pass,
                                                 gamma, num_iters, hc_eps, norm_eps, sinkhorn_eps)
    return run_post_pre_forward(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, single_pass,
                                *options, prepared=handle)[:5]


__all__ = ["npu_mhc_pre", "npu_mhc_pre_backward", "npu_mhc_sinkhorn", "npu_mhc_sinkhorn_backward",
           "npu_mhc_post", "npu_mhc_post_backward", "mhc_pre_sinkhorn", "mhc_pre_sinkhorn_backward",
           "mhc_pre_single_pass", "mhc_collapse", "mhc_post_pre", "mhc_rms_norm", "set_num_threads", "get_num_threads"]
