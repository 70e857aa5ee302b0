"""mhc.nn.MhcStack: consecutive MhcBlocks run with their boundaries fused (SPEC §15),
forward and backward, to the same bits as the blocks run one by one.

    stack = mhc.nn.MhcStack([MhcBlock(4, 512, attn), MhcBlock(4, 512, mlp), ...], head=MhcHead(4, 512))
    h = stack(x)                               # V4: head(x_L), or x_L without a head

    stack = mhc.nn.MhcStack([MhcBlock(4, 512, f, single_pass=True) for f in sublayers])
    h = stack(x)                               # V4.1: MhcCollapse(x_L, h_pre of the last site)

Between two sites one operator, MhcPostPre, does site s's MhcPost and site s+1's pre; the
backward runs each site's backward as MhcBlock's, in the site backward's two steps (SPEC
§15): at the boundary, site s+1's finish (its pre backward, forming the post's share of
x_{s+1}'s gradient from H_{s+1} and x_{s+2}'s gradient), then site s's prepare (its
MhcPostBackward without grad_x, from x_{s+1}'s gradient). The autograd Functions, for L
sites:

    _PreSide   (block.py)  site 0's pre
    _Boundary              site s's post and site s+1's pre, s = 0 .. L-2
    _PostSide  (block.py)  site L-1's post

with the sub-layers between them, each keeping its own autograd graph, as in MhcBlock.
x_s reaches each post detached; the post's backward hands H_s and x_{s+1}'s gradient to
the backward holding site s's pre (a _Handoff per site), whose finish adds the post's
share in its own pass. A boundary's backward runs after the next one's: it waits for the
grads of site s+1's h_post and H, which only site s+1's post produces.
"""
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from .._core import run_post_forward, run_post_pre_forward, run_site_backward_prepare
from ..ops import mhc_collapse, npu_mhc_post
from .block import (MhcBlock, _Config, _Handoff, _pre_backward, _pre_forward, _PostSide, _PreSide, _take_caches,
                    _take_post)


class _Streams:
    """The streams of one call of a stack with recompute_every=k: x_s kept only where s is a
    multiple of k (x_0 the input); the others rebuilt in the backward by replaying MhcPost
    from the kept one before them, x_{j+1} = MhcPost(x_j, H_j, y_j, h_post_j) (the bits the
    forward's MhcPostPre wrote), with each site's H, y and h_post kept for that. A rebuilt
    stream lives until the boundary before it is done with it, so at most k - 1 of them
    exist at a time."""

    def __init__(self, every):
        self.every = every
        self.kept, self.posts, self.rebuilt = {}, {}, {}

    def keep(self, site, x):
        """x_site if it is a checkpoint (recorded here too), else None: what a Function saves."""
        if site % self.every:
            return None
        self.kept[site] = x.detach()
        return x

    def record_post(self, site, h, h_out, h_post):
        self.posts[site] = (h.detach(), h_out.detach(), h_post.detach())

    def get(self, site):
        if site in self.kept:
            return self.kept[site]
        if site not in self.rebuilt:
            first = site - site % self.every
            x = self.kept[first]
            for j in range(first, site):
                x = run_post_forward(x, *self.posts[j])
                self.rebuilt[j + 1] = x
        return self.rebuilt[site]

    def release(self, site):
        """A rebuilt x_site is needed no more (its boundary's backward and the next are done)."""
        self.rebuilt.pop(site, None)


class _Boundary(torch.autograd.Function):
    """(x_s, H_s, y_s, h_post_s; site s's pre inputs (phi_s, alpha_s, bias_s, gamma_s,
    pre_mix_s: given only with its recompute); site s+1's phi, alpha, bias, gamma, pre_mix)
    -> (x_{s+1}, site s+1's h_in, [h_pre,] h_post, H), x_s detached by the caller and
    x_{s+1} not differentiable (its grad comes as a handoff).

    Keeps x_s, y_s, x_{s+1} and site s+1's inputs; without site s's recompute H_s and
    h_post_s, with it site s's pre inputs, from which its backward recomputes site s's pre
    forward (handing its caches on); without site s+1's recompute its pre caches (inv_rms,
    h_mix, h_pre, h_post: no z_res, which the fused backward forms again from them).
    With streams (recompute_every) x_s is kept only at a checkpoint and x_{s+1} not at all;
    H_s and h_post_s are kept then whatever site s's recompute, for the replay."""

    @staticmethod
    def forward(ctx, x, h, h_out, h_post, phi_s, alpha_s, bias_s, gamma_s, pre_mix_s, phi, alpha, bias, gamma,
                pre_mix, handoff_s, handoff, cfg_s, cfg, streams, site):
        x_next, h_in, h_pre, h_post_next, h_next, inv_rms, h_mix = run_post_pre_forward(
            x, h, h_out, h_post, phi, alpha, bias, pre_mix, gamma, int(cfg.single_pass), cfg.num_iters, cfg.hc_eps,
            cfg.norm_eps, cfg.sinkhorn_eps)
        ctx.cfgs, ctx.handoffs, ctx.streams, ctx.site = (cfg_s, cfg), (handoff_s, handoff), streams, site
        ctx.h_in_shape = h_in.shape
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(x_next)
        post = (phi_s, alpha_s, bias_s, gamma_s, pre_mix_s) if cfg_s.recompute else (h, h_post)
        caches = () if cfg.recompute else (inv_rms, h_mix, h_pre, h_post_next)
        kept_x, kept_x_next, replay = x, x_next, ()
        if streams is not None:
            kept_x, kept_x_next = streams.keep(site, x), None
            streams.record_post(site, h, h_out, h_post)
            replay = (h, h_post) if cfg_s.recompute else ()  # saved with the rest: counted as kept
        ctx.save_for_backward(kept_x, h_out, kept_x_next, phi, alpha, bias, gamma, pre_mix, *post, *caches, *replay)
        ctx.replayed = len(replay)
        if cfg.single_pass:
            return x_next, h_in, h_pre, h_post_next, h_next
        return x_next, h_in, h_post_next, h_next

    @staticmethod
    @once_differentiable
    def backward(ctx, _, *grads):
        (cfg_s, cfg), (handoff_s, handoff) = ctx.cfgs, ctx.handoffs
        needs = ctx.needs_input_grad
        saved = ctx.saved_tensors
        post = _take_post(handoff, grads)  # site s+1's H and x_{s+2}'s gradient
        if post is None and all(g is None for g in grads):
            handoff.forward = None
            if ctx.streams is not None:
                ctx.streams.release(ctx.site + 1)
            return (None,) * len(needs)
        saved = saved[:len(saved) - ctx.replayed]
        x, h_out, x_next = saved[:3]
        if ctx.streams is not None:
            x, x_next = ctx.streams.get(ctx.site), ctx.streams.get(ctx.site + 1)
        inputs = saved[3:8]  # site s+1's phi, alpha, bias, gamma, pre_mix
        if cfg_s.recompute:
            outputs, handoff_s.forward = _pre_forward(x, *saved[8:13], cfg_s)
            h_post, h = outputs[-2:]
            saved_caches = saved[13:]
        else:
            h, h_post = saved[8:10]
            saved_caches = saved[10:]
        caches = _take_caches(handoff, cfg, x_next, *inputs, saved_caches)
        # site s+1's finish, as the block's pre side runs it
        grad_x_next, grad_phi, grad_alpha, grad_bias, grad_gamma, grad_pre_mix = _pre_backward(
            cfg, x_next, *inputs, caches, grads, post, ctx.h_in_shape, needs[13])
        grad_h_s, grad_h_out, grad_h_post_s = run_site_backward_prepare(grad_x_next, x, h, h_out, h_post,
                                                                        with_grad_h_res=needs[1])
        handoff_s.post = (h, grad_x_next)
        if ctx.streams is not None:
            ctx.streams.release(ctx.site + 1)
        grads = (None, grad_h_s, grad_h_out, grad_h_post_s) + (None,) * 5 + (
            grad_phi, grad_alpha, grad_bias, grad_gamma, grad_pre_mix)
        return tuple(g if need else None for g, need in zip(grads, needs)) + (None,) * 6


class MhcStack(nn.Module):
    """Consecutive MhcBlocks, all V4 or all V4.1 (single_pass), run as one: the forward
    fuses each boundary (MhcPostPre: site s's MhcPost and site s+1's pre, SPEC §15), the
    backward runs each site's as MhcBlock's, so the output and every gradient are bitwise
    those of the blocks called one by one.

    Args:
        blocks: MhcBlock instances (not subclasses that override forward), one N and D,
            all with single_pass or all without (else ValueError); each keeps its own
            options, recompute included. Held as children "0", "1", ..., so the state_dict
            reads like an nn.ModuleList of them; len(), iteration and indexing are the
            blocks'.
        head: V4 only (ValueError for V4.1): a module applied to x_L, e.g. mhc.nn.MhcHead;
            None returns x_L.
        recompute_every: k (an int >= 1) keeps for the backward the streams entering every
            k-th block only (x_0, x_k, x_2k, ...) and rebuilds the others in the backward by
            replaying the post chain x_{s+1} = MhcPost(x_s, H_s, y_s, h_post_s) from the one
            kept before them (no sub-layer runs again); H_s, h_post_s and the sub-layer's
            output y_s are kept per site. At most k - 1 rebuilt streams exist at a time.
            Gradients are bitwise those without it. None (or 1): every stream kept.

    forward(x [.., N, D]) -> V4: head(x_L) or x_L; V4.1: mhc.mhc_collapse(x_L, h_pre of
    the last site) [.., D] (the first site collapses stream 0). Without grad mode (or with
    nothing in the stack and x requiring grad) the operators run without caches.
    """

    def __init__(self, blocks, head=None, recompute_every=None):
        super().__init__()
        if recompute_every is not None and (isinstance(recompute_every, bool) or not isinstance(recompute_every, int)
                                            or recompute_every < 1):
            raise ValueError(f"recompute_every: expected None or an int >= 1, got {recompute_every!r}")
        self.recompute_every = recompute_every
        blocks = list(blocks)
        if not blocks:
            raise ValueError("MhcStack: expected at least one MhcBlock")
        for i, block in enumerate(blocks):
            if not isinstance(block, MhcBlock) or type(block).forward is not MhcBlock.forward:
                raise TypeError(f"blocks[{i}]: expected an mhc.nn.MhcBlock, got {type(block).__name__}")
        first = blocks[0]
        for i, block in enumerate(blocks):
            if block.single_pass != first.single_pass:
                raise ValueError(f"blocks[{i}]: single_pass={block.single_pass} among blocks[0]'s "
                                 f"{first.single_pass}: a stack is all V4 or all V4.1")
            if (block.n_streams, block.hidden) != (first.n_streams, first.hidden):
                raise ValueError(f"blocks[{i}]: n_streams, hidden = {block.n_streams}, {block.hidden}, "
                                 f"blocks[0]'s {first.n_streams}, {first.hidden}")
        if head is not None and first.single_pass:
            raise ValueError("head: a V4.1 stack (single_pass) ends with MhcCollapse by the last site's h_pre, "
                             "not a head")
        if head is not None and not isinstance(head, nn.Module):
            raise TypeError(f"head: expected a torch.nn.Module or None, got {type(head).__name__}")
        for i, block in enumerate(blocks):
            self.add_module(str(i), block)
        self.head = head
        self.single_pass = first.single_pass
        self.n_streams, self.hidden = first.n_streams, first.hidden

    def __len__(self):
        return sum(1 for name in self._modules if name.isdigit())

    def __iter__(self):
        return (self._modules[str(i)] for i in range(len(self)))

    def __getitem__(self, i):
        return list(self)[i]

    def forward(self, x):
        blocks = list(self)
        xt = blocks[0].token_view(x)
        lead = x.shape[:-2]
        params = [b.fp32_parameters() for b in blocks]
        if not (torch.is_grad_enabled() and (xt.requires_grad or any(p.requires_grad for p in self.parameters()))):
            x_last, h_pre = self._forward_direct(blocks, xt, lead, params)
        else:
            x_last, h_pre = self._forward_graph(blocks, xt, lead, params)
        if self.single_pass:
            h = mhc_collapse(x_last, h_pre)
            return h if xt is x else h.view(lead + (self.hidden,))
        x_last = x_last if xt is x else x_last.view(x.shape)
        return x_last if self.head is None else self.head(x_last)

    def _forward_graph(self, blocks, xt, lead, params):
        """The Functions of the module docstring: (x_L, the last site's h_pre or None)."""
        cfgs = [_Config(b, xt, *p) for b, p in zip(blocks, params)]
        handoffs = [_Handoff() for _ in blocks]
        streams = _Streams(self.recompute_every) if (self.recompute_every or 1) > 1 else None
        outputs = _PreSide.apply(xt, *params[0], None, handoffs[0], cfgs[0])
        x, pre_mix = xt.detach(), None
        for s in range(len(blocks) - 1):
            h_post, h = outputs[-2:]
            h_out = blocks[s]._sublayer_tokens(outputs[0], lead, xt.dtype)
            own = params[s] + (pre_mix,) if cfgs[s].recompute else (None,) * 5
            pre_mix = outputs[1] if self.single_pass else None
            x, *outputs = _Boundary.apply(x, h, h_out, h_post, *own, *params[s + 1], pre_mix, handoffs[s],
                                          handoffs[s + 1], cfgs[s], cfgs[s + 1], streams, s)
        h_post, h = outputs[-2:]
        h_out = blocks[-1]._sublayer_tokens(outputs[0], lead, xt.dtype)
        own = params[-1] + (pre_mix,) if cfgs[-1].recompute else (None,) * 5
        x_last = _PostSide.apply(x, h, h_out, h_post, *own, handoffs[-1], cfgs[-1], streams, len(blocks) - 1)
        return x_last, (outputs[1] if self.single_pass else None)

    def _forward_direct(self, blocks, xt, lead, params):
        """No graph: site 0's pre, MhcPostPre per boundary, the last MhcPost; nothing kept."""
        cfgs = [_Config(b, xt, *p) for b, p in zip(blocks, params)]
        outputs = _pre_forward(xt, *params[0], None, cfgs[0])[0]
        x = xt
        for s in range(len(blocks) - 1):
            h_post, h = outputs[-2:]
            h_out = blocks[s]._sublayer_tokens(outputs[0], lead, xt.dtype)
            pre_mix = outputs[1] if self.single_pass else None
            cfg = cfgs[s + 1]
            phi, alpha, bias, gamma = params[s + 1]
            x, h_in, h_pre, h_post, h = run_post_pre_forward(
                x, h, h_out, h_post, phi, alpha, bias, pre_mix, gamma, int(cfg.single_pass), cfg.num_iters, cfg.hc_eps,
                cfg.norm_eps, cfg.sinkhorn_eps)[:5]
            outputs = (h_in, h_pre, h_post, h) if self.single_pass else (h_in, h_post, h)
        h_post, h = outputs[-2:]
        h_out = blocks[-1]._sublayer_tokens(outputs[0], lead, xt.dtype)
        return npu_mhc_post(x, h, h_out, h_post), (outputs[1] if self.single_pass else None)

    def extra_repr(self):
        every = f", recompute_every={self.recompute_every}" if self.recompute_every else ""
        return f"{len(self)} sites, {'V4.1 (single_pass)' if self.single_pass else 'V4'}{every}"


__all__ = ["MhcStack"]
