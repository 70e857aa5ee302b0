"""The mHC layer in plain torch ops (SPEC §2, §6, §10, §11, §13), differentiated by
autograd: a twin of MhcBlock and MhcHead with the same parameters, for checks and
comparisons (examples/train_tiny.py --reference, bench/block_step.py).

The arithmetic is fp32 for bf16/fp16/fp32 inputs and float64 when x or the parameters
are float64 (a float64 copy of a model is then its float64 truth); outputs are rounded
to x's dtype where the operators round them (h_in, x_next). Sums run in torch's order,
not SPEC's, so the results agree with the operators to rounding, not bitwise.
"""
import torch

from .block import MhcBlock
from .head import MhcHead


def _work_dtype(x, phi):
    return torch.promote_types(torch.promote_types(x.dtype, torch.float32), phi.dtype)


def pre_torch(x, phi, alpha, bias, gamma=None, norm_eps=1e-6, hc_eps=1e-6):
    """MhcPre (SPEC §2): with alpha [3], x [.., N, D] -> (h_in [.., D] in x's dtype, h_post
    [.., N], z_res [.., N, N]); with alpha [1], the head (SPEC §6): h_in alone."""
    n, d = x.shape[-2], x.shape[-1]
    wt = _work_dtype(x, phi)
    v = x.to(wt).flatten(-2)                                        # [.., K]
    r = torch.rsqrt(v.square().mean(-1, keepdim=True) + norm_eps)  # inv_rms, from raw x
    u = v if gamma is None else v * gamma.to(wt).flatten()
    w = r * torch.matmul(u, phi.to(wt).t())                         # r * h_mix, [.., F]
    alpha, bias = alpha.to(wt), bias.to(wt)
    if alpha.numel() == 1:
        h_pre = torch.sigmoid(alpha[0] * w + bias) + hc_eps
        return (h_pre.unsqueeze(-1) * v.unflatten(-1, (n, d))).sum(-2).to(x.dtype)
    scale = torch.cat([alpha[0].expand(n), alpha[1].expand(n), alpha[2].expand(n * n)])
    z = w * scale + bias
    h_pre = torch.sigmoid(z[..., :n]) + hc_eps
    h_post = 2.0 * torch.sigmoid(z[..., n:2 * n])
    z_res = z[..., 2 * n:].unflatten(-1, (n, n))
    h_in = (h_pre.unsqueeze(-1) * v.unflatten(-1, (n, d))).sum(-2).to(x.dtype)
    return h_in, h_post, z_res


def sinkhorn_torch(z, eps=1e-6, num_iters=20):
    """MhcSinkhorn (SPEC §10): a row softmax plus eps, then columns, then num_iters - 1
    times rows and columns, every divisor plus eps."""
    p = torch.softmax(z, dim=-1) + eps
    p = p / (p.sum(dim=-2, keepdim=True) + eps)
    for _ in range(num_iters - 1):
        p = p / (p.sum(dim=-1, keepdim=True) + eps)
        p = p / (p.sum(dim=-2, keepdim=True) + eps)
    return p


def post_torch(x, h, h_out, h_post):
    """MhcPost (SPEC §11): out[j] = h_post[j] * h_out + sum_i H[i, j] * x[i] -- H
    TRANSPOSED -- in x's dtype."""
    wt = _work_dtype(x, h)
    mixed = torch.einsum("...ij,...id->...jd", h.to(wt), x.to(wt))
    return (h_post.to(wt).unsqueeze(-1) * h_out.to(wt).unsqueeze(-2) + mixed).to(x.dtype)


class ReferenceMhcBlock(MhcBlock):
    """MhcBlock in torch ops: the same parameters, initialisation and sub-layer handling."""

    def forward(self, x):
        self.token_view(x)  # the shape check
        h_in, h_post, z_res = pre_torch(x, self.phi, self.alpha, self.bias, self.gamma,
                                        self.norm_eps, self.hc_eps)
        h = sinkhorn_torch(z_res, self.sinkhorn_eps, self.num_iters)
        return post_torch(x, h, self.run_sublayer(h_in, x.dtype), h_post)


class ReferenceMhcHead(MhcHead):
    """MhcHead in torch ops: the same parameters and initialisation."""

    def forward(self, x):
        self.token_view(x)
        return pre_torch(x, self.phi, self.alpha, self.bias, self.gamma, self.norm_eps, self.hc_eps)


__all__ = ["pre_torch", "sinkhorn_torch", "post_torch", "ReferenceMhcBlock", "ReferenceMhcHead"]
