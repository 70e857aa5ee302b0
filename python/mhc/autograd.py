"""The autograd rule of npu_mhc_pre (SPEC §8), mhc_pre, its three-output form, and
mhc_head, its one-output form for a one-entry alpha (the head, SPEC §6)."""
import torch
from torch.autograd.function import once_differentiable

from ._core import check_pre_args, npu_mhc_pre_backward, run_pre_forward


class MhcPreFunction(torch.autograd.Function):
    """Forward with caches; backward through the library's MhcPreBackward.

    apply(x, phi, alpha, bias, gamma, norm_eps, hc_eps, out_flag=0, inner_precise=0)
    returns (h_in, h_post, h_res), and with out_flag=1 also the caches (inv_rms, h_mix,
    h_pre). The caches are always computed (the backward needs them); returned, they are
    non-differentiable outputs, so gradients flow from h_in, h_post and h_res only.
    h_res is None for a two-entry alpha, h_post and h_res for a one-entry one.
    inner_precise=1 runs the forward's product in HF32; the backward runs in fp32, as
    torch_npu's (SPEC §8).
    """

    @staticmethod
    def forward(ctx, x, phi, alpha, bias, gamma, norm_eps, hc_eps, out_flag=0, inner_precise=0):
        norm_eps, hc_eps, precision = check_pre_args(x, phi, alpha, bias, gamma, norm_eps, hc_eps,
                                                     out_flag, inner_precise)
        outputs = run_pre_forward(x, phi, alpha, bias, gamma, norm_eps, hc_eps, precision,
                                  with_caches=True)
        h_in, h_post, h_res, inv_rms, h_mix, h_pre = outputs
        ctx.save_for_backward(x, phi, alpha, gamma, inv_rms, h_mix, h_pre, h_post)
        ctx.hc_eps = hc_eps
        ctx.h_in_shape = h_in.shape
        ctx.h_res_shape = None if h_res is None else h_res.shape
        # Unused outputs give None grads (zeros made below only when needed).
        ctx.set_materialize_grads(False)
        if not out_flag:
            return h_in, h_post, h_res
        ctx.mark_non_differentiable(inv_rms, h_mix, h_pre)
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h_in, grad_h_post, grad_h_res, *grads_of_caches):
        needs = ctx.needs_input_grad  # one per argument of apply (7 to 9)
        no_grads_of_options = (None,) * (len(needs) - 5)  # norm_eps, hc_eps[, out_flag[, inner_precise]]
        if not any(needs[:5]):
            return (None,) * 5 + no_grads_of_options
        x, phi, alpha, gamma, inv_rms, h_mix, h_pre, h_post = ctx.saved_tensors
        if grad_h_in is None:
            grad_h_in = torch.zeros(ctx.h_in_shape, dtype=x.dtype)
        if h_post is None:
            grad_h_post = None  # one-entry alpha, the head: no post branch
        elif grad_h_post is None:
            grad_h_post = torch.zeros(h_post.shape, dtype=torch.float32)
        if ctx.h_res_shape is None:
            grad_h_res = None  # one- or two-entry alpha: no residual branch
        elif grad_h_res is None:
            grad_h_res = torch.zeros(ctx.h_res_shape, dtype=torch.float32)
        grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma = npu_mhc_pre_backward(
            x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix, h_pre, h_post,
            gamma=gamma, hc_eps=ctx.hc_eps)
        grads = (grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma)
        return tuple(g if need else None for g, need in zip(grads, needs[:5])) + no_grads_of_options


def mhc_pre(x, phi, alpha, bias, gamma=None, norm_eps=1e-6, hc_eps=1e-6, inner_precise=0):
    """Differentiable mHC pre-block: returns (h_in, h_post, h_res).

    h_res is None for a two-entry alpha (h_post too for a one-entry alpha: mhc_head is
    that form). loss.backward() fills the grads of x, phi, alpha, bias and gamma (those
    that require grad). The same as
    npu_mhc_pre(...)[:3], except that the caches are computed on every call.
    inner_precise: 0 (fp32) or 1 (HF32) for the forward's product, as npu_mhc_pre's.
    """
    return MhcPreFunction.apply(x, phi, alpha, bias, gamma, norm_eps, hc_eps, 0, inner_precise)


def mhc_head(x, phi, alpha, bias, gamma=None, *, norm_eps=1e-6, hc_eps=1e-6, inner_precise=0):
    """Differentiable mHC head (SPEC §6, one-entry alpha): returns h_in [.., D] in x's dtype,
    h_in[d] = sum_n h_pre[n] x[n, d], h_pre = sigmoid(alpha[0] * r * (phi . x*gamma) + bias)
    + hc_eps; phi is [N, N*D], alpha [1], bias [N].

    DeepSeek-V4's hc_head: the weighted sum of the streams that ends a model. The rule is
    MhcPreFunction's, so loss.backward() runs npu_mhc_pre_backward (fp32) and fills the
    grads of x, phi, alpha, bias and gamma; inner_precise as npu_mhc_pre's.
    """
    check_pre_args(x, phi, alpha, bias, gamma, norm_eps, hc_eps, 0, inner_precise)
    if alpha.numel() != 1:
        raise ValueError(
            f"alpha: mhc_head expects a one-entry alpha (alpha_pre), got {alpha.numel()} entries; "
            "for two or three entries (the pre block's h_post and h_res too) use mhc_pre")
    return MhcPreFunction.apply(x, phi, alpha, bias, gamma, norm_eps, hc_eps, 0, inner_precise)[0]
