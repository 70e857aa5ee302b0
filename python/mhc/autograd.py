"""mhc_pre: the differentiable forward, backed by npu_mhc_pre / npu_mhc_pre_backward."""
import torch
from torch.autograd.function import once_differentiable

from .ops import npu_mhc_pre, npu_mhc_pre_backward


class MhcPreFunction(torch.autograd.Function):
    """Forward with caches; backward through the library's MhcPreBackward."""

    @staticmethod
    def forward(ctx, x, phi, alpha, bias, gamma, norm_eps, hc_eps):
        h_in, h_post, h_res, inv_rms, h_mix, h_pre = npu_mhc_pre(
            x, phi, alpha, bias, gamma=gamma, norm_eps=norm_eps, hc_eps=hc_eps, out_flag=1)
        ctx.save_for_backward(x, phi, alpha, gamma, inv_rms, h_mix, h_pre, h_post)
        ctx.hc_eps = hc_eps
        ctx.h_in_shape = h_in.shape
        ctx.h_res_shape = None if h_res is None else h_res.shape
        # Unused outputs give None grads (zeros made below only when needed).
        ctx.set_materialize_grads(False)
        return h_in, h_post, h_res

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h_in, grad_h_post, grad_h_res):
        needs = ctx.needs_input_grad
        if not any(needs[:5]):
            return (None,) * 7
        x, phi, alpha, gamma, inv_rms, h_mix, h_pre, h_post = ctx.saved_tensors
        if grad_h_in is None:
            grad_h_in = torch.zeros(ctx.h_in_shape, dtype=x.dtype)
        if grad_h_post is None:
            grad_h_post = torch.zeros(h_post.shape, dtype=torch.float32)
        if ctx.h_res_shape is None:
            grad_h_res = None  # two-entry alpha: no residual branch
        elif grad_h_res is None:
            grad_h_res = torch.zeros(ctx.h_res_shape, dtype=torch.float32)
        grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma = npu_mhc_pre_backward(
            x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix, h_pre, h_post,
            gamma=gamma, hc_eps=ctx.hc_eps)
        grads = (grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma)
        return tuple(g if need else None for g, need in zip(grads, needs[:5])) + (None, None)


def mhc_pre(x, phi, alpha, bias, gamma=None, norm_eps=1e-6, hc_eps=1e-6):
    """Differentiable mHC pre-block: returns (h_in, h_post, h_res).

    h_res is None for a two-entry alpha. loss.backward() fills the grads of x, phi,
    alpha, bias and gamma (those that require grad).
    """
    return MhcPreFunction.apply(x, phi, alpha, bias, gamma, norm_eps, hc_eps)
