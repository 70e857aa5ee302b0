"""The autograd rules: of npu_mhc_pre (SPEC §8), with mhc_pre, its three-output form, and
mhc_head, its one-output form for a one-entry alpha (the head, SPEC §6); of
npu_mhc_sinkhorn (SPEC §10), npu_mhc_post (SPEC §11), mhc_pre_sinkhorn (SPEC §12),
mhc_pre_single_pass and mhc_collapse (SPEC §14), mhc_post_pre (SPEC §15). Each backward is
the library's backward operator (once differentiable)."""
import torch
from torch.autograd.function import once_differentiable

from ._core import (check_collapse_args, check_post_args, check_post_pre_args, check_pre_args,
                    check_pre_single_pass_args, check_pre_sinkhorn_args, check_sinkhorn_args,
                    mhc_pre_sinkhorn_backward, npu_mhc_pre_backward, run_collapse_backward, run_collapse_forward,
                    run_post_backward, run_post_forward, run_post_pre_backward, run_post_pre_forward,
                    run_pre_forward, run_pre_single_pass_backward, run_pre_single_pass_forward,
                    run_pre_sinkhorn_forward, run_sinkhorn_backward, run_sinkhorn_forward)


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
            grad_h_in = torch.zeros(ctx.h_in_shape, dtype=x.dtype, device=x.device)
        if h_post is None:
            grad_h_post = None  # one-entry alpha, the head: no post branch
        elif grad_h_post is None:
            grad_h_post = torch.zeros(h_post.shape, dtype=torch.float32, device=x.device)
        if ctx.h_res_shape is None:
            grad_h_res = None  # one- or two-entry alpha: no residual branch
        elif grad_h_res is None:
            grad_h_res = torch.zeros(ctx.h_res_shape, dtype=torch.float32, device=x.device)
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


class MhcSinkhornFunction(torch.autograd.Function):
    """npu_mhc_sinkhorn's rule: y = MhcSinkhorn(x), backward through MhcSinkhornBackward.

    apply(x, eps, num_iters, out_flag=0) returns y, and with out_flag=1 (y, norm_out,
    sum_out), the caches non-differentiable outputs that the backward reads (modifying them
    in place makes backward an error). With out_flag=0 nothing but x is kept: the backward
    recomputes each token's forward from x (the same bits as from the caches, SPEC §10).
    """

    @staticmethod
    def forward(ctx, x, eps, num_iters, out_flag=0):
        eps, num_iters = check_sinkhorn_args(x, eps, num_iters, out_flag)
        y, norm_out, sum_out = run_sinkhorn_forward(x, eps, num_iters, with_caches=bool(out_flag))
        ctx.set_materialize_grads(False)
        ctx.eps, ctx.num_iters = eps, num_iters
        if not out_flag:
            ctx.save_for_backward(x, None, None)
            return y
        ctx.save_for_backward(None, norm_out, sum_out)
        ctx.mark_non_differentiable(norm_out, sum_out)
        return y, norm_out, sum_out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y, *grads_of_caches):
        no_grads_of_options = (None,) * (len(ctx.needs_input_grad) - 1)
        if grad_y is None or not ctx.needs_input_grad[0]:
            return (None,) + no_grads_of_options
        x, norm_out, sum_out = ctx.saved_tensors
        grad_x = run_sinkhorn_backward(grad_y, norm_out, sum_out, x, ctx.eps, ctx.num_iters)
        return (grad_x,) + no_grads_of_options


class MhcPostFunction(torch.autograd.Function):
    """npu_mhc_post's rule: out = MhcPost(x, h_res, h_out, h_post), differentiable in all four
    (h_res may be None: the identity), backward through MhcPostBackward; grad_x in x's
    dtype, grad_h_res computed only when h_res requires grad."""

    @staticmethod
    def forward(ctx, x, h_res, h_out, h_post):
        check_post_args(x, h_res, h_out, h_post)
        out = run_post_forward(x, h_res, h_out, h_post)
        ctx.save_for_backward(x, h_res, h_out, h_post)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        needs = ctx.needs_input_grad
        if not any(needs):
            return (None,) * 4
        x, h_res, h_out, h_post = ctx.saved_tensors
        grads = run_post_backward(grad_out, x, h_res, h_out, h_post, x.dtype,
                                  with_grad_h_res=needs[1] and h_res is not None)
        return tuple(g if need else None for g, need in zip(grads, needs))


class MhcPreSinkhornFunction(torch.autograd.Function):
    """mhc_pre_sinkhorn's rule (CANN's MhcPreSinkhornFunction): the forward with its caches,
    the backward through MhcPreSinkhornBackward.

    apply(x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, out_flag=False) returns
    (h_in, h_post, h_res), and with out_flag also the caches (h_pre, hc_before_norm, inv_rms,
    sum_out, norm_out): non-differentiable outputs, the backward's saved state. Gradients
    flow from h_in, h_post, h_res into x, phi, alpha and bias.
    """

    @staticmethod
    def forward(ctx, x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, out_flag=False):
        num_iters, hc_eps, norm_eps, out_flag = check_pre_sinkhorn_args(
            x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, out_flag)
        outputs = run_pre_sinkhorn_forward(x, phi, alpha, bias, num_iters, hc_eps, norm_eps,
                                           with_caches=True)
        h_in, h_post, h_res, h_pre, h_mix, inv_rms, sum_out, norm_out = outputs
        ctx.save_for_backward(x, phi, alpha, bias, h_pre, h_mix, inv_rms, sum_out, norm_out)
        ctx.hc_eps = hc_eps
        ctx.shapes = (h_in.shape, h_post.shape, h_res.shape)
        ctx.set_materialize_grads(False)
        if not out_flag:
            return h_in, h_post, h_res
        ctx.mark_non_differentiable(h_pre, h_mix, inv_rms, sum_out, norm_out)
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h_in, grad_h_post, grad_h_res, *grads_of_caches):
        needs = ctx.needs_input_grad
        no_grads_of_options = (None,) * (len(needs) - 4)  # hc_mult, num_iters, hc_eps, norm_eps[, out_flag]
        if not any(needs[:4]):
            return (None,) * 4 + no_grads_of_options
        x, phi, alpha, bias, h_pre, h_mix, inv_rms, sum_out, norm_out = ctx.saved_tensors
        in_shape, post_shape, res_shape = ctx.shapes
        if grad_h_in is None:
            grad_h_in = torch.zeros(in_shape, dtype=x.dtype, device=x.device)
        if grad_h_post is None:
            grad_h_post = torch.zeros(post_shape, dtype=torch.float32, device=x.device)
        if grad_h_res is None:
            grad_h_res = torch.zeros(res_shape, dtype=torch.float32, device=x.device)
        grads = mhc_pre_sinkhorn_backward(grad_h_in, grad_h_post, grad_h_res, x, phi, alpha, bias, h_pre,
                                          h_mix, inv_rms, sum_out, norm_out, hc_eps=ctx.hc_eps)
        return tuple(g if need else None for g, need in zip(grads, needs[:4])) + no_grads_of_options


class MhcPreSinglePassFunction(torch.autograd.Function):
    """mhc_pre_single_pass's rule (SPEC §14): the forward with its caches, the backward through
    the library's MhcPreSinglePass backward (the Sinkhorn's backward inside it).

    apply(x, phi, alpha, bias, pre_mix, gamma, num_iters, hc_eps, norm_eps, sinkhorn_eps)
    returns (h_in, h_pre, h_post, h_res), all four differentiable: h_pre's grad (what the
    next site's collapse sends back) is the backward's grad_h_pre. Gradients flow into x,
    phi, alpha, bias, pre_mix and gamma (pre_mix and gamma may be None).
    """

    @staticmethod
    def forward(ctx, x, phi, alpha, bias, pre_mix, gamma, num_iters, hc_eps, norm_eps, sinkhorn_eps):
        options = check_pre_single_pass_args(x, phi, alpha, bias, pre_mix, gamma, num_iters, hc_eps, norm_eps,
                                             sinkhorn_eps)
        h_in, h_pre, h_post, h_res, inv_rms, h_mix = run_pre_single_pass_forward(x, phi, alpha, bias, pre_mix,
                                                                                  gamma, *options)
        ctx.save_for_backward(x, phi, alpha, bias, pre_mix, gamma, inv_rms, h_mix, h_pre, h_post)
        ctx.options = options  # num_iters, hc_eps, norm_eps, sinkhorn_eps
        ctx.shapes = (h_in.shape, h_res.shape)
        ctx.set_materialize_grads(False)
        return h_in, h_pre, h_post, h_res

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h_in, grad_h_pre, grad_h_post, grad_h_res):
        needs = ctx.needs_input_grad
        no_grads_of_options = (None,) * 4  # num_iters, hc_eps, norm_eps, sinkhorn_eps
        if not any(needs[:6]):
            return (None,) * 6 + no_grads_of_options
        x, phi, alpha, bias, pre_mix, gamma, inv_rms, h_mix, h_pre, h_post = ctx.saved_tensors
        in_shape, res_shape = ctx.shapes
        if grad_h_in is None:
            grad_h_in = torch.zeros(in_shape, dtype=x.dtype, device=x.device)
        if grad_h_post is None:
            grad_h_post = torch.zeros(h_post.shape, dtype=torch.float32, device=x.device)
        if grad_h_res is None:
            grad_h_res = torch.zeros(res_shape, dtype=torch.float32, device=x.device)
        # grad_h_pre None is the library's absent grad_h_pre: zero.
        grad_x, grad_pre_mix, grad_phi, grad_alpha, grad_bias, grad_gamma = run_pre_single_pass_backward(
            x, phi, alpha, bias, pre_mix, gamma, grad_h_in, grad_h_pre, grad_h_post, grad_h_res, inv_rms, h_mix,
            h_pre, h_post, *ctx.options, with_grad_pre_mix=needs[4])
        grads = (grad_x, grad_phi, grad_alpha, grad_bias, grad_pre_mix, grad_gamma)
        return tuple(g if need else None for g, need in zip(grads, needs[:6])) + no_grads_of_options


class MhcCollapseFunction(torch.autograd.Function):
    """mhc_collapse's rule (SPEC §14): h = MhcCollapse(x, pre_mix), differentiable in both,
    backward through the library's MhcCollapse backward (grad_x in x's dtype)."""

    @staticmethod
    def forward(ctx, x, pre_mix):
        check_collapse_args(x, pre_mix)
        h = run_collapse_forward(x, pre_mix)
        ctx.save_for_backward(x, pre_mix)
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        needs = ctx.needs_input_grad
        if not any(needs):
            return None, None
        x, pre_mix = ctx.saved_tensors
        grads = run_collapse_backward(grad_h, x, pre_mix)
        return tuple(g if need else None for g, need in zip(grads, needs))


class MhcPostPreFunction(torch.autograd.Function):
    """mhc_post_pre's rule (SPEC §15): the fused boundary's forward with its caches, the
    backward through the library's MhcPostPre backward.

    apply(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, single_pass, num_iters,
    hc_eps, norm_eps, sinkhorn_eps) returns (x_next, h_in, h_pre, h_post_next, h_res_next), all
    five differentiable: x_next's grad (what it receives elsewhere, e.g. the residual path) is
    the backward's grad_x_next, h_pre's its grad_h_pre (in V4 added to the grad that h_pre
    gets through h_in; in V4.1 h_pre's whole grad). Gradients flow into x, h_res, h_out,
    h_post, phi, alpha, bias, pre_mix and gamma (h_res, pre_mix and gamma may be None).

    Rounding points (the library's, not autograd's): the grad of x_next (site s+1's pre
    backward plus grad_x_next, in fp32) is rounded once to x's dtype, then MhcPostBackward of
    site s runs on it; grad_x comes out in x's dtype.
    """

    @staticmethod
    def forward(ctx, x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, single_pass, num_iters, hc_eps,
                norm_eps, sinkhorn_eps):
        single_pass, *options = check_post_pre_args(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix,
                                                    single_pass, gamma, num_iters, hc_eps, norm_eps, sinkhorn_eps)
        outputs = run_post_pre_forward(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, single_pass,
                                       *options)
        x_next, h_in, h_pre, h_post_next, h_res_next, inv_rms, h_mix = outputs
        ctx.save_for_backward(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, x_next, inv_rms, h_mix,
                              h_pre, h_post_next)
        ctx.options = (single_pass, *options)  # single_pass, num_iters, hc_eps, norm_eps, sinkhorn_eps
        ctx.shapes = (h_in.shape, h_res_next.shape)
        ctx.set_materialize_grads(False)
        return x_next, h_in, h_pre, h_post_next, h_res_next

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_x_next, grad_h_in, grad_h_pre, grad_h_post_next, grad_h_res_next):
        needs = ctx.needs_input_grad
        no_grads_of_options = (None,) * 5  # single_pass, num_iters, hc_eps, norm_eps, sinkhorn_eps
        if not any(needs[:9]):
            return (None,) * 9 + no_grads_of_options
        (x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, x_next, inv_rms, h_mix, h_pre,
         h_post_next) = ctx.saved_tensors
        in_shape, res_shape = ctx.shapes
        if grad_h_in is None:
            grad_h_in = torch.zeros(in_shape, dtype=x.dtype, device=x.device)
        if grad_h_post_next is None:
            grad_h_post_next = torch.zeros(h_post_next.shape, dtype=torch.float32, device=x.device)
        if grad_h_res_next is None:
            grad_h_res_next = torch.zeros(res_shape, dtype=torch.float32, device=x.device)
        # grad_x_next and grad_h_pre None are the library's absent ones: zero.
        (grad_x, grad_h_res, grad_h_out, grad_h_post, grad_pre_mix, grad_phi, grad_alpha, grad_bias,
         grad_gamma) = run_post_pre_backward(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, x_next,
                                             grad_x_next, grad_h_in, grad_h_pre, grad_h_post_next,
                                             grad_h_res_next, inv_rms, h_mix, h_pre, h_post_next, *ctx.options,
                                             with_grad_h_res=needs[1], with_grad_pre_mix=needs[7])
        grads = (grad_x, grad_h_res, grad_h_out, grad_h_post, grad_phi, grad_alpha, grad_bias, grad_pre_mix,
                 grad_gamma)
        return tuple(g if need else None for g, need in zip(grads, needs[:9])) + no_grads_of_options
