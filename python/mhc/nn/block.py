"""mhc.nn.MhcBlock: one sub-layer of an mHC model (SPEC §13, or DeepSeek-V4.1's single
pass, SPEC §14), every step an operator of this library, forward and backward.

    block = mhc.nn.MhcBlock(4, 512, mlp)       # mlp: any module [.., D] -> [.., D]
    x_next = block(x)                          # x: [.., N, D], bf16/fp16/fp32

    h_in, h_post, z_res = MhcPre(x)            SPEC §2
    H      = MhcSinkhorn(z_res)                SPEC §10
    h_out  = sublayer(h_in)
    x_next = MhcPost(x, H, h_out, h_post)      SPEC §11 (H enters transposed)

    block = mhc.nn.MhcBlock(4, 512, mlp, single_pass=True)
    x_next, h_pre = block(x, pre_mix)          # pre_mix: the previous site's h_pre (None: the first)

    h_in, h_pre, h_post, H = MhcPreSinglePass(x, pre_mix)    SPEC §14 (h_in collapsed with pre_mix)
    x_next = MhcPost(x, H, sublayer(h_in), h_post)

The block is two autograd Functions around the sub-layer, so the sub-layer keeps its own
autograd graph and the engine runs its backward between the two, as for any module (one
Function around the whole block would have to run the sub-layer's backward nested inside
its own, which DDP's reducer and torch's checkpointing do not expect):

    _PreSide   (x, phi, alpha, bias, gamma, pre_mix) -> (h_in, [h_pre,] h_post, H)
               MhcPre + MhcSinkhorn, or MhcPreSinglePass
    _PostSide  (x, H, h_out, h_post)                  -> x_next          MhcPost

The backward is the site backward (SPEC §15) in its two steps: the post side's runs
its prepare (MhcPostBackward without grad_x), the pre side's its finish (the Sinkhorn's
and MhcPreBackward, or the single pass's backward), which forms the post's share of
x's gradient from H and x_next's gradient in its own pass over grad_x: no fp32 grad_x
tensor between them, and no autograd edge from the post side to x (torch would add the
two shares in a separate pass over T*N*D elements). The post side's backward hands H and
x_next's gradient over in a _Handoff object. The pre side's backward always runs after
the post side's: it waits for the grads of h_post and H, which only the post side
produces. mhc.nn.MhcStack (stack.py) reuses these pieces with the boundaries fused.
"""
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from .._core import (_eps, _num_iters, check_pre_args, check_pre_single_pass_args, run_post_forward,
                     run_pre_forward, run_pre_single_pass_forward, run_site_backward_finish,
                     run_site_backward_prepare, run_sinkhorn_forward)
from ..ops import mhc_pre_single_pass, npu_mhc_post, npu_mhc_pre, npu_mhc_sinkhorn
from .pre import MhcParameters


class _Config:
    """A block's options for one call, checked (the Functions' non-tensor argument)."""
    __slots__ = ("norm_eps", "hc_eps", "precision", "sinkhorn_eps", "num_iters", "recompute", "single_pass")

    def __init__(self, block, x, phi, alpha, bias, gamma, pre_mix=None):
        self.single_pass = block.single_pass
        if self.single_pass:
            self.num_iters, self.hc_eps, self.norm_eps, self.sinkhorn_eps = check_pre_single_pass_args(
                x, phi, alpha, bias, pre_mix, gamma, block.num_iters, block.hc_eps, block.norm_eps,
                block.sinkhorn_eps)
            self.precision = None
        else:
            self.norm_eps, self.hc_eps, self.precision = check_pre_args(
                x, phi, alpha, bias, gamma, block.norm_eps, block.hc_eps, 0, 0)
            self.sinkhorn_eps = _eps("sinkhorn_eps", block.sinkhorn_eps)
            self.num_iters = _num_iters(block.num_iters)
        self.recompute = bool(block.recompute)


class _Handoff:
    """What one call's post-side backward hands to its pre-side backward: post, the site's
    H and the gradient of its output x_next (from which the site backward's finish forms the
    post's share of x's gradient), and, with recompute, the recomputed pre forward's caches
    (_pre_forward's second result). Each is taken (and cleared) by the pre side."""
    __slots__ = ("post", "forward")

    def __init__(self):
        self.post = None
        self.forward = None


def _pre_forward(x, phi, alpha, bias, gamma, pre_mix, cfg):
    """The pre side's forward with its caches: (outputs, caches). V4: MhcPre, then
    MhcSinkhorn (no caches), outputs (h_in, h_post, H); V4.1: MhcPreSinglePass, outputs
    (h_in, h_pre, h_post, H); caches (inv_rms, h_mix, h_pre, h_post) (the site backward
    forms z_res again from them). The same call in the forward and in a recompute, so the
    same bits (SPEC §5)."""
    if cfg.single_pass:
        h_in, h_pre, h_post, h, inv_rms, h_mix = run_pre_single_pass_forward(
            x, phi, alpha, bias, pre_mix, gamma, cfg.num_iters, cfg.hc_eps, cfg.norm_eps, cfg.sinkhorn_eps)
        return (h_in, h_pre, h_post, h), (inv_rms, h_mix, h_pre, h_post)
    h_in, h_post, z_res, inv_rms, h_mix, h_pre = run_pre_forward(
        x, phi, alpha, bias, gamma, cfg.norm_eps, cfg.hc_eps, cfg.precision, with_caches=True)
    h = run_sinkhorn_forward(z_res, cfg.sinkhorn_eps, cfg.num_iters, with_caches=False)[0]
    return (h_in, h_post, h), (inv_rms, h_mix, h_pre, h_post)


def _pre_backward(cfg, x, phi, alpha, bias, gamma, pre_mix, caches, grads, post, h_in_shape, with_grad_pre_mix):
    """The pre side's backward from its outputs' grads (None: zero): (grad_x, grad_phi,
    grad_alpha, grad_bias, grad_gamma, grad_pre_mix). The site backward's finish: V4's
    MhcSinkhornBackward and MhcPreBackward, or V4.1's single pass backward (h_pre's grad
    its grad_h_pre), with post = (H, the grad of x_next) of the site's post (None: no grad
    reached x_next) forming the post's share of grad_x in its pass."""
    f32 = torch.float32
    inv_rms, h_mix, h_pre, h_post = caches
    if cfg.single_pass:
        grad_h_in, grad_h_pre, grad_h_post, grad_h = grads
    else:
        (grad_h_in, grad_h_post, grad_h), grad_h_pre = grads, None
    if grad_h_in is None:
        grad_h_in = torch.zeros(h_in_shape, dtype=x.dtype)
    if grad_h_post is None:
        grad_h_post = torch.zeros(h_post.shape, dtype=f32)
    if grad_h is None:
        grad_h = torch.zeros(h_post.shape + h_post.shape[-1:], dtype=f32)
    h, grad_x_next = post if post is not None else (None, None)
    grad_x, grad_pre_mix, grad_phi, grad_alpha, grad_bias, grad_gamma = run_site_backward_finish(
        x, phi, alpha, bias, pre_mix, gamma, h, grad_x_next, grad_h_in, grad_h_pre, grad_h_post, grad_h, inv_rms,
        h_mix, h_pre, h_post, int(cfg.single_pass), cfg.num_iters, cfg.hc_eps, cfg.norm_eps, cfg.sinkhorn_eps,
        with_grad_pre_mix=with_grad_pre_mix)
    return grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma, grad_pre_mix


def _take_post(handoff, grads):
    """The site post's (H, grad of x_next) its backward handed over in this backward pass,
    taken (and cleared). None when the grads of h_post and H (the pre side's last two
    outputs, which only the post side gives grads) are both absent: then the post side did
    not run in this pass, and what an earlier partial pass (autograd.grad to the sub-layer's
    weights, say) left is not this pass's."""
    post, handoff.post = handoff.post, None
    return post if grads[-1] is not None or grads[-2] is not None else None


def _take_caches(handoff, cfg, x, phi, alpha, bias, gamma, pre_mix, saved):
    """A pre side's caches in its backward: kept (saved), recomputed by its post side's
    backward (handed over), or, when that did not run (no grad reached x_next), recomputed
    here."""
    if not cfg.recompute:
        return saved
    if handoff.forward is not None:
        caches, handoff.forward = handoff.forward, None
        return caches
    return _pre_forward(x, phi, alpha, bias, gamma, pre_mix, cfg)[1]


class _PreSide(torch.autograd.Function):
    """(x, phi, alpha, bias, gamma, pre_mix) -> V4: (h_in, h_post, H); V4.1: (h_in, h_pre,
    h_post, H). Keeps x, the parameters, pre_mix and, without recompute, the caches
    (_pre_forward's); with recompute nothing else."""

    @staticmethod
    def forward(ctx, x, phi, alpha, bias, gamma, pre_mix, handoff, cfg):
        outputs, caches = _pre_forward(x, phi, alpha, bias, gamma, pre_mix, cfg)
        ctx.cfg, ctx.handoff = cfg, handoff
        ctx.h_in_shape = outputs[0].shape
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, phi, alpha, bias, gamma, pre_mix, *(() if cfg.recompute else caches))
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        cfg, handoff = ctx.cfg, ctx.handoff
        post = _take_post(handoff, grads)
        saved = ctx.saved_tensors
        inputs = saved[:6]
        caches = _take_caches(handoff, cfg, *inputs, saved[6:])
        needs = ctx.needs_input_grad
        result = _pre_backward(cfg, *inputs, caches, grads, post, ctx.h_in_shape, needs[5])
        return tuple(g if need else None for g, need in zip(result, needs[:6])) + (None, None)


class _PostSide(torch.autograd.Function):
    """(x, H, h_out, h_post) -> x_next, x detached by the caller. Keeps x and h_out and,
    without recompute, H and h_post; with recompute the pre side's inputs instead (phi,
    alpha, bias, gamma, pre_mix: given only then), from which its backward recomputes the
    pre forward and hands its caches on to the pre side's backward. streams, site: MhcStack's
    _Streams with recompute_every and the site's index (x kept only at its checkpoints;
    None, None: x kept)."""

    @staticmethod
    def forward(ctx, x, h, h_out, h_post, phi, alpha, bias, gamma, pre_mix, handoff, cfg, streams, site):
        out = run_post_forward(x, h, h_out, h_post)
        ctx.cfg, ctx.handoff, ctx.streams, ctx.site = cfg, handoff, streams, site
        ctx.set_materialize_grads(False)
        kept_x = x if streams is None else streams.keep(site, x)  # MhcStack's recompute_every
        if cfg.recompute:
            ctx.save_for_backward(kept_x, h_out, phi, alpha, bias, gamma, pre_mix)
        else:
            ctx.save_for_backward(kept_x, h_out, h, h_post)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        # phi, alpha, bias, gamma, pre_mix (theirs come from the pre side), handoff, cfg, streams, site
        none = (None,) * 9
        if grad_out is None:
            return (None, None, None, None) + none
        cfg, handoff = ctx.cfg, ctx.handoff
        if cfg.recompute:
            x, h_out, *inputs = ctx.saved_tensors
        else:
            x, h_out, h, h_post = ctx.saved_tensors
        if x is None:
            x = ctx.streams.get(ctx.site)
        if cfg.recompute:
            outputs, handoff.forward = _pre_forward(x, *inputs, cfg)
            h_post, h = outputs[-2:]
        grad_h, grad_h_out, grad_h_post = run_site_backward_prepare(grad_out, x, h, h_out, h_post)
        handoff.post = (h, grad_out)
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
            (mhc.nn.MhcParameters; alpha_init, phi_std and res_diag as MhcPre's). gamma
            None: True, or False with single_pass (V4.1 has none).
        num_iters, sinkhorn_eps: MhcSinkhorn's (SPEC §10).
        recompute: keep only x and the sub-layer's output (and what the sub-layer's own
            autograd keeps) per block, and recompute the pre forward and the Sinkhorn in
            the backward (the paper's §4.3.2); the gradients are bitwise those of
            recompute=False.
        single_pass: DeepSeek-V4.1's site (SPEC §14): forward(x, pre_mix=None) ->
            (x_next, h_pre), h_in collapsed with pre_mix [.., N] fp32 (the previous site's
            h_pre; None at the model's first site: stream 0), h_pre this site's (the next
            site's pre_mix). Gradients flow to pre_mix. A V4.1 model ends with
            mhc.mhc_collapse(x, h_pre) of the last site.

    Backward: the site backward (SPEC §15): its prepare (MhcPostBackward without grad_x),
    the sub-layer's backward, then its finish: MhcSinkhornBackward recomputing from the
    logits and MhcPreBackward, or the single pass's backward (h_pre's grad as its
    grad_h_pre), forming the post's share of grad_x in its pass. The bits of the chain
    with MhcPostBackward's grad_x in fp32 as MhcPreBackward's grad_x_post. Without grad
    mode (or with nothing requiring grad) the operators are called directly, keeping
    nothing.
    """

    def __init__(self, n_streams, hidden, sublayer, *, gamma=None, num_iters=20, hc_eps=1e-6,
                 norm_eps=1e-6, sinkhorn_eps=1e-6, recompute=False, single_pass=False, alpha_init=0.01,
                 phi_std=None, res_diag=1.0):
        single_pass = bool(single_pass)
        if gamma is None:
            gamma = not single_pass
        super().__init__(n_streams, hidden, branches=3, gamma=gamma, norm_eps=norm_eps, hc_eps=hc_eps,
                         alpha_init=alpha_init, phi_std=phi_std, res_diag=res_diag)
        if not isinstance(sublayer, nn.Module):
            raise TypeError(f"sublayer: expected a torch.nn.Module, got {type(sublayer).__name__}")
        self.sublayer = sublayer
        self.num_iters = _num_iters(num_iters)
        self.sinkhorn_eps = _eps("sinkhorn_eps", sinkhorn_eps)
        self.recompute = bool(recompute)
        self.single_pass = single_pass

    def run_sublayer(self, h_in, dtype):
        h_out = self.sublayer(h_in)
        if not isinstance(h_out, torch.Tensor) or h_out.shape != h_in.shape:
            got = list(h_out.shape) if isinstance(h_out, torch.Tensor) else type(h_out).__name__
            raise ValueError(f"MhcBlock: the sublayer must return h_in's shape {list(h_in.shape)}, got {got}")
        return h_out if h_out.dtype == dtype else h_out.to(dtype)

    def forward(self, x, pre_mix=None):
        xt = self.token_view(x)
        pm = self.pre_mix_view(x, xt, pre_mix)
        lead = x.shape[:-2]
        params = self.fp32_parameters()
        if not (torch.is_grad_enabled()
                and any(t is not None and t.requires_grad for t in (xt, pm) + params)):
            out, h_pre = self._forward_direct(xt, pm, lead, params)
        else:
            cfg = _Config(self, xt, *params, pm)
            handoff = _Handoff()
            outputs = _PreSide.apply(xt, *params, pm, handoff, cfg)
            h_post, h = outputs[-2:]
            h_out = self._sublayer_tokens(outputs[0], lead, xt.dtype)
            kept = params + (pm,) if cfg.recompute else (None,) * 5
            out = _PostSide.apply(xt.detach(), h, h_out, h_post, *kept, handoff, cfg, None, None)
            h_pre = outputs[1] if self.single_pass else None
        out = out if xt is x else out.view(x.shape)
        if not self.single_pass:
            return out
        return out, (h_pre if xt is x else h_pre.view(x.shape[:-1]))

    def pre_mix_view(self, x, xt, pre_mix):
        """pre_mix [.., N] as the operators take it (None stays None); refused for V4."""
        if pre_mix is None:
            return None
        if not self.single_pass:
            raise ValueError("pre_mix: given to a V4 block (single_pass=False), which collapses with its own h_pre")
        if not isinstance(pre_mix, torch.Tensor) or tuple(pre_mix.shape) != tuple(x.shape[:-1]):
            got = list(pre_mix.shape) if isinstance(pre_mix, torch.Tensor) else type(pre_mix).__name__
            raise ValueError(f"pre_mix: expected x's leading dims and N, {list(x.shape[:-1])}, got {got}")
        return pre_mix if xt is x else pre_mix.reshape(xt.shape[:-1])

    def _forward_direct(self, xt, pre_mix, lead, params):
        """No graph for the mHC steps (inference, or nothing of them requires grad): the
        operators without caches; the post still differentiable in h_out if the sub-layer's
        output requires grad. (x_next, h_pre), h_pre None for V4."""
        phi, alpha, bias, gamma = params
        if self.single_pass:
            h_in, h_pre, h_post, h = mhc_pre_single_pass(
                xt, phi, alpha, bias, pre_mix, gamma=gamma, num_iters=self.num_iters, hc_eps=self.hc_eps,
                norm_eps=self.norm_eps, sinkhorn_eps=self.sinkhorn_eps)
        else:
            h_in, h_post, z_res = npu_mhc_pre(xt, phi, alpha, bias, gamma=gamma, norm_eps=self.norm_eps,
                                              hc_eps=self.hc_eps)[:3]
            h = npu_mhc_sinkhorn(z_res, eps=self.sinkhorn_eps, num_iters=self.num_iters)[0]
            h_pre = None
        return npu_mhc_post(xt, h, self._sublayer_tokens(h_in, lead, xt.dtype), h_post), h_pre

    def _sublayer_tokens(self, h_in, lead, dtype):
        """The sub-layer on h_in with x's leading dims; its output in h_in's shape."""
        if h_in.shape[:-1] == lead:
            return self.run_sublayer(h_in, dtype)
        return self.run_sublayer(h_in.view(lead + (self.hidden,)), dtype).reshape(h_in.shape)

    def extra_repr(self):
        return (super().extra_repr() + f", num_iters={self.num_iters}, sinkhorn_eps={self.sinkhorn_eps:g}, "
                f"recompute={self.recompute}" + (", single_pass=True" if self.single_pass else ""))


__all__ = ["MhcBlock"]
