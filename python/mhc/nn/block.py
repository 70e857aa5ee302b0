"""mhc.nn.MhcBlock: one sub-layer of an mHC model (SPEC §13), every step an operator of
this library, forward and backward.

    block = mhc.nn.MhcBlock(4, 512, mlp)       # mlp: any module [.., D] -> [.., D]
    x_next = block(x)                          # x: [.., N, D], bf16/fp16/fp32

    h_in, h_post, z_res = MhcPre(x)            SPEC §2
    H      = MhcSinkhorn(z_res)                SPEC §10
    h_out  = sublayer(h_in)
    x_next = MhcPost(x, H, h_out, h_post)      SPEC §11 (H enters transposed)

The block is two autograd Functions around the sub-layer, so the sub-layer keeps its own
autograd graph and the engine runs its backward between the two, as for any module (one
Function around the whole block would have to run the sub-layer's backward nested inside
its own, which DDP's reducer and torch's checkpointing do not expect):

    _PreSide   (x, phi, alpha, bias, gamma) -> (h_in, h_post, H)   MhcPre + MhcSinkhorn
    _PostSide  (x, H, h_out, h_post)        -> x_next              MhcPost

x reaches the post side detached: its gradient there (MhcPostBackward's grad_x) does not
go through autograd, which would add it to the pre side's grad_x in a separate pass
over T*N*D elements. The post side's backward hands it over in a _Handoff object and the
pre side's backward passes it to MhcPreBackward as grad_x_post, which adds it in its own
pass (SPEC §13). The pre side's backward always runs after the post side's: it waits
for the grads of h_post and H, which only the post side produces.
"""
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from .._core import (_eps, _num_iters, check_pre_args, npu_mhc_pre_backward, run_post_backward,
                     run_post_forward, run_pre_forward, run_sinkhorn_backward, run_sinkhorn_forward)
from ..ops import npu_mhc_post, npu_mhc_pre, npu_mhc_sinkhorn
from .pre import MhcParameters


class _Config:
    """A block's options for one call, checked (the Functions' non-tensor argument)."""
    __slots__ = ("norm_eps", "hc_eps", "precision", "sinkhorn_eps", "num_iters", "recompute")

    def __init__(self, block, x, phi, alpha, bias, gamma):
        self.norm_eps, self.hc_eps, self.precision = check_pre_args(
            x, phi, alpha, bias, gamma, block.norm_eps, block.hc_eps, 0, 0)
        self.sinkhorn_eps = _eps("sinkhorn_eps", block.sinkhorn_eps)
        self.num_iters = _num_iters(block.num_iters)
        self.recompute = bool(block.recompute)


class _Handoff:
    """What one call's post-side backward hands to its pre-side backward: grad_x (for
    grad_x_post) and, with recompute, the recomputed pre forward (z_res, inv_rms, h_mix,
    h_pre, h_post). Each is taken (and cleared) by the pre side."""
    __slots__ = ("grad_x", "forward")

    def __init__(self):
        self.grad_x = None
        self.forward = None


def _pre_forward(x, phi, alpha, bias, gamma, cfg):
    """MhcPre with its caches, then MhcSinkhorn (no caches): (h_in, h_post, H, z_res,
    inv_rms, h_mix, h_pre). The same call in the forward and in a recompute, so the same
    bits (SPEC §5)."""
    h_in, h_post, z_res, inv_rms, h_mix, h_pre = run_pre_forward(
        x, phi, alpha, bias, gamma, cfg.norm_eps, cfg.hc_eps, cfg.precision, with_caches=True)
    h = run_sinkhorn_forward(z_res, cfg.sinkhorn_eps, cfg.num_iters, with_caches=False)[0]
    return h_in, h_post, h, z_res, inv_rms, h_mix, h_pre


class _PreSide(torch.autograd.Function):
    """(x, phi, alpha, bias, gamma) -> (h_in, h_post, H). Keeps x, phi, alpha, gamma and,
    without recompute, the pre caches, h_post and z_res (the Sinkhorn's backward
    recomputes from its logits: N*N floats a token); with recompute nothing else."""

    @staticmethod
    def forward(ctx, x, phi, alpha, bias, gamma, handoff, cfg):
        h_in, h_post, h, z_res, inv_rms, h_mix, h_pre = _pre_forward(x, phi, alpha, bias, gamma, cfg)
        ctx.cfg, ctx.handoff = cfg, handoff
        ctx.h_in_shape = h_in.shape
        ctx.set_materialize_grads(False)
        if cfg.recompute:
            ctx.save_for_backward(x, phi, alpha, bias, gamma)
        else:
            ctx.save_for_backward(x, phi, alpha, bias, gamma, z_res, inv_rms, h_mix, h_pre, h_post)
        return h_in, h_post, h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h_in, grad_h_post, grad_h):
        cfg, handoff = ctx.cfg, ctx.handoff
        grad_x_post, handoff.grad_x = handoff.grad_x, None
        saved = ctx.saved_tensors
        x, phi, alpha, bias, gamma = saved[:5]
        if not cfg.recompute:
            forward = saved[5:]
        elif handoff.forward is not None:  # recomputed by the post side's backward
            forward, handoff.forward = handoff.forward, None
        else:  # the post side's backward did not run (no grad reached x_next)
            _, h_post, _, z_res, inv_rms, h_mix, h_pre = _pre_forward(x, phi, alpha, bias, gamma, cfg)
            forward = (z_res, inv_rms, h_mix, h_pre, h_post)
        z_res, inv_rms, h_mix, h_pre, h_post = forward
        f32 = torch.float32
        if grad_h_in is None:
            grad_h_in = torch.zeros(ctx.h_in_shape, dtype=x.dtype)
        if grad_h_post is None:
            grad_h_post = torch.zeros(h_post.shape, dtype=f32)
        if grad_h is None:
            grad_z = torch.zeros(z_res.shape, dtype=f32)
        else:
            grad_z = run_sinkhorn_backward(grad_h, None, None, z_res, cfg.sinkhorn_eps, cfg.num_iters)
        grads = npu_mhc_pre_backward(x, phi, alpha, grad_h_in, grad_h_post, grad_z, inv_rms, h_mix,
                                     h_pre, h_post, gamma=gamma, hc_eps=cfg.hc_eps,
                                     grad_x_post=grad_x_post)
        needs = ctx.needs_input_grad
        return tuple(g if need else None for g, need in zip(grads, needs[:5])) + (None, None)


class _PostSide(torch.autograd.Function):
    """(x, H, h_out, h_post) -> x_next, x detached by the caller. Keeps x and h_out and,
    without recompute, H and h_post; with recompute the parameters instead (phi, alpha,
    bias, gamma: given only then), from which its backward recomputes the pre forward and
    the Sinkhorn, and hands them on to the pre side's backward."""

    @staticmethod
    def forward(ctx, x, h, h_out, h_post, phi, alpha, bias, gamma, handoff, cfg):
        out = run_post_forward(x, h, h_out, h_post)
        ctx.cfg, ctx.handoff = cfg, handoff
        ctx.set_materialize_grads(False)
        if cfg.recompute:
            ctx.save_for_backward(x, h_out, phi, alpha, bias, gamma)
        else:
            ctx.save_for_backward(x, h_out, h, h_post)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        none = (None,) * 6  # phi, alpha, bias, gamma (theirs come from the pre side), handoff, cfg
        if grad_out is None:
            return (None, None, None, None) + none
        cfg, handoff = ctx.cfg, ctx.handoff
        if cfg.recompute:
            x, h_out, phi, alpha, bias, gamma = ctx.saved_tensors
            _, h_post, h, z_res, inv_rms, h_mix, h_pre = _pre_forward(x, phi, alpha, bias, gamma, cfg)
            handoff.forward = (z_res, inv_rms, h_mix, h_pre, h_post)
        else:
            x, h_out, h, h_post = ctx.saved_tensors
        grad_x, grad_h, grad_h_out, grad_h_post = run_post_backward(
            grad_out, x, h, h_out, h_post, torch.float32, with_grad_h_res=True)
        handoff.grad_x = grad_x
        return (None, grad_h, grad_h_out, grad_h_post) + none


class MhcBlock(MhcParameters):
    """One sub-layer wrapped in manifold-constrained hyper-connections (SPEC §13):
    x [.., N, D] -> x_next [.., N, D] = MhcPost(x, MhcSinkhorn(h_res), sublayer(h_in), h_post).

    Args:
        n_streams, hidden: N and D.
        sublayer: any module [.., D] -> [.., D] (attention, MLP, ...), held as .sublayer;
            it gets h_in in x's dtype with x's leading dims; its output is cast to x's
            dtype if it returns another.
        gamma, hc_eps, norm_eps: MhcPre's (SPEC §2); the parameters phi [2N + N*N, N*D],
            alpha [3], bias [2N + N*N], gamma [N, D] are fp32 with MhcPre's initialisation
            (mhc.nn.MhcParameters; alpha_init, phi_std and res_diag as MhcPre's).
        num_iters, sinkhorn_eps: MhcSinkhorn's (SPEC §10).
        recompute: keep only x and the sub-layer's output (and what the sub-layer's own
            autograd keeps) per block, and recompute MhcPre's forward and the Sinkhorn in
            the backward (the paper's §4.3.2); the gradients are bitwise those of
            recompute=False.

    Backward: MhcPostBackward (grad_x in fp32, handed unrounded to MhcPreBackward's
    grad_x_post), the sub-layer's backward, MhcSinkhornBackward recomputing from
    the logits, MhcPreBackward with grad_x_post = the post's grad_x. Without grad mode (or
    with nothing requiring grad) the operators are called directly, keeping nothing.
    """

    def __init__(self, n_streams, hidden, sublayer, *, gamma=True, num_iters=20, hc_eps=1e-6,
                 norm_eps=1e-6, sinkhorn_eps=1e-6, recompute=False, alpha_init=0.01, phi_std=None,
                 res_diag=1.0):
        super().__init__(n_streams, hidden, branches=3, gamma=gamma, norm_eps=norm_eps, hc_eps=hc_eps,
                         alpha_init=alpha_init, phi_std=phi_std, res_diag=res_diag)
        if not isinstance(sublayer, nn.Module):
            raise TypeError(f"sublayer: expected a torch.nn.Module, got {type(sublayer).__name__}")
        self.sublayer = sublayer
        self.num_iters = _num_iters(num_iters)
        self.sinkhorn_eps = _eps("sinkhorn_eps", sinkhorn_eps)
        self.recompute = bool(recompute)

    def run_sublayer(self, h_in, dtype):
        h_out = self.sublayer(h_in)
        if not isinstance(h_out, torch.Tensor) or h_out.shape != h_in.shape:
            got = list(h_out.shape) if isinstance(h_out, torch.Tensor) else type(h_out).__name__
            raise ValueError(f"MhcBlock: the sublayer must return h_in's shape {list(h_in.shape)}, got {got}")
        return h_out if h_out.dtype == dtype else h_out.to(dtype)

    def forward(self, x):
        xt = self.token_view(x)
        lead = x.shape[:-2]
        params = self.fp32_parameters()
        if not (torch.is_grad_enabled()
                and any(t is not None and t.requires_grad for t in (xt,) + params)):
            out = self._forward_direct(xt, lead, params)
            return out if xt is x else out.view(x.shape)
        cfg = _Config(self, xt, *params)
        handoff = _Handoff()
        h_in, h_post, h = _PreSide.apply(xt, *params, handoff, cfg)
        h_out = self._sublayer_tokens(h_in, lead, xt.dtype)
        kept = params if cfg.recompute else (None,) * 4
        out = _PostSide.apply(xt.detach(), h, h_out, h_post, *kept, handoff, cfg)
        return out if xt is x else out.view(x.shape)

    def _forward_direct(self, xt, lead, params):
        """No graph for the mHC steps (inference, or nothing of them requires grad): the
        operators without caches; the post still differentiable in h_out if the sub-layer's
        output requires grad."""
        phi, alpha, bias, gamma = params
        h_in, h_post, z_res = npu_mhc_pre(xt, phi, alpha, bias, gamma=gamma, norm_eps=self.norm_eps,
                                          hc_eps=self.hc_eps)[:3]
        h = npu_mhc_sinkhorn(z_res, eps=self.sinkhorn_eps, num_iters=self.num_iters)[0]
        return npu_mhc_post(xt, h, self._sublayer_tokens(h_in, lead, xt.dtype), h_post)

    def _sublayer_tokens(self, h_in, lead, dtype):
        """The sub-layer on h_in with x's leading dims; its output in h_in's shape."""
        if h_in.shape[:-1] == lead:
            return self.run_sublayer(h_in, dtype)
        return self.run_sublayer(h_in.view(lead + (self.hidden,)), dtype).reshape(h_in.shape)

    def extra_repr(self):
        return (super().extra_repr() + f", num_iters={self.num_iters}, sinkhorn_eps={self.sinkhorn_eps:g}, "
                f"recompute={self.recompute}")


__all__ = ["MhcBlock"]
