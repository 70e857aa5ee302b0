"""The learnable tensors of an mHC pre step and their initialisation (MhcParameters),
and the pre block as a module (MhcPre).

    pre = mhc.nn.MhcPre(n_streams=4, hidden=512)
    h_in, h_post, h_res = pre(x)          # x: [B,S,N,D] or [T,N,D], bf16/fp16/fp32

MhcPre owns the four learnable tensors of SPEC §2 -- phi [F, N*D], alpha [3], bias [F]
and (optionally) gamma [N, D], F = 2N + N*N -- and calls the differentiable
mhc.mhc_pre, so loss.backward() runs the library's MhcPreBackward. MhcBlock (block.py)
and MhcHead (head.py) hold theirs through the same MhcParameters.
"""
import math

import torch
from torch import nn

from ..autograd import mhc_pre


class MhcParameters(nn.Module):
    """phi, alpha, bias and gamma of one mHC pre step, fp32, with the paper's start.

    branches=3: the pre block's (SPEC §2): phi [2N + N*N, N*D], alpha [3], bias [2N + N*N];
    branches=1: the head's (SPEC §6): phi [N, N*D], alpha [1], bias [N]. gamma [N, D] (or
    no gamma) in both.

    Initialisation (the static part, i.e. the biases, sets the start):
        bias_pre  = logit(1/N)   -> h_pre  = sigmoid(bias_pre) + hc_eps ~= 1/N
                                    (h_in starts as the mean of the streams)
        bias_post = 0            -> h_post = 2 * sigmoid(0) = 1
        bias_res  = res_diag * I -> residual logits ~= res_diag * I
        alpha     = alpha_init (the paper: 0.01) for every entry
        phi       ~ normal(0, phi_std), phi_std None meaning 1/sqrt(N*D): each dynamic
                    logit w = r * phi_f . (x*gamma) is of order one, so alpha alone sets
                    how dynamic the step starts (0.01: almost static)
        gamma     = 1
    """

    def __init__(self, n_streams, hidden, *, branches, gamma=True, norm_eps=1e-6, hc_eps=1e-6,
                 alpha_init=0.01, phi_std=None, res_diag=1.0):
        super().__init__()
        n, d = int(n_streams), int(hidden)
        if n < 1 or d < 1:
            raise ValueError(f"{type(self).__name__}: n_streams and hidden must be >= 1, "
                             f"got {n_streams}, {hidden}")
        if branches not in (1, 3):
            raise ValueError(f"branches: expected 1 (the head) or 3 (the pre block), got {branches!r}")
        self.n_streams = n
        self.hidden = d
        self.branches = branches
        self.norm_eps = float(norm_eps)
        self.hc_eps = float(hc_eps)
        self.alpha_init = alpha_init
        self.phi_std = phi_std
        self.res_diag = float(res_diag)
        f32 = torch.float32
        self.phi = nn.Parameter(torch.empty(self.fusion_size, n * d, dtype=f32))
        self.alpha = nn.Parameter(torch.empty(branches, dtype=f32))
        self.bias = nn.Parameter(torch.empty(self.fusion_size, dtype=f32))
        if gamma:
            self.gamma = nn.Parameter(torch.empty(n, d, dtype=f32))
        else:
            self.register_parameter("gamma", None)
        self.reset_parameters()

    @property
    def fusion_size(self):
        """F, the rows of phi: 2N + N*N for the pre block, N for the head."""
        n = self.n_streams
        return n if self.branches == 1 else 2 * n + n * n

    def reset_parameters(self):
        n, k = self.n_streams, self.n_streams * self.hidden
        std = self.phi_std if self.phi_std is not None else 1.0 / math.sqrt(k)
        with torch.no_grad():
            self.phi.normal_(0.0, std)
            self.alpha.copy_(torch.as_tensor(self.alpha_init, dtype=torch.float32).expand(self.branches))
            self.bias.zero_()
            # h_pre = sigmoid(b) + hc_eps = 1/N  =>  b = logit(1/N - hc_eps)
            p = min(max(1.0 / n - self.hc_eps, 1e-6), 1.0 - 1e-6)  # clamped for extreme hc_eps
            self.bias[:n] = math.log(p / (1.0 - p))
            if self.branches == 3:
                self.bias[2 * n:].view(n, n).fill_diagonal_(self.res_diag)
            if self.gamma is not None:
                self.gamma.fill_(1.0)

    @staticmethod
    def _fp32(p):
        return p if p is None or p.dtype == torch.float32 else p.float()

    def fp32_parameters(self):
        """(phi, alpha, bias, gamma) as the operators take them: fp32 (upcast, differentiably,
        if the module was cast to another dtype); gamma None without gamma."""
        return tuple(self._fp32(p) for p in (self.phi, self.alpha, self.bias, self.gamma))

    def token_view(self, x):
        """x [.., N, D] (any number of leading dims) as the operators take it: itself for
        [B,S,N,D] or [T,N,D], else [T,N,D] with T the product of the leading dims."""
        n, d = self.n_streams, self.hidden
        if x.dim() < 2 or tuple(x.shape[-2:]) != (n, d):
            raise ValueError(f"{type(self).__name__}: expected x of shape [.., {n}, {d}] "
                             f"(e.g. [B,S,{n},{d}] or [T,{n},{d}]), got {list(x.shape)}")
        return x if x.dim() in (3, 4) else x.reshape(-1, n, d)

    def extra_repr(self):
        return (f"n_streams={self.n_streams}, hidden={self.hidden}, gamma={self.gamma is not None}, "
                f"norm_eps={self.norm_eps:g}, hc_eps={self.hc_eps:g}")


class MhcPre(MhcParameters):
    """The mHC pre block: residual streams x -> (h_in, h_post, h_res).

    Args:
        n_streams: N, the number of residual streams (the paper's expansion rate).
        hidden: D, the hidden size of one stream.
        gamma: hold a learnable RMS-norm weight gamma [N, D] (initialised to ones);
            False passes no gamma (the operators then use all ones, not learnable).
        norm_eps, hc_eps: the operators' epsilons (SPEC §2).
        alpha_init: initial (alpha_pre, alpha_post, alpha_res); the paper uses 0.01.
        phi_std: std of the normal initialisation of phi; None means 1/sqrt(N*D).
        res_diag: initial bias of the diagonal residual logits (off-diagonal: 0).

    The initialisation is MhcParameters': h_pre ~= 1/N (h_in starts as the mean of the
    streams), h_post ~= 1, h_res ~= res_diag * I; with res_diag = 1 a consumer mixing
    the streams by h_res as a plain matrix starts from the identity; a row-softmax
    consumer starts from e^c/(e^c + N - 1) on the diagonal (choose c to taste). The
    alphas scale the dynamic part: h_* deviate from the above by O(alpha).

    Parameters are fp32 (SPEC: phi, alpha, bias, gamma are fp32) whatever x's dtype;
    the activations x (and h_in) may be bf16, fp16 or fp32. If the module is cast
    with .to(dtype) / .bfloat16() anyway, forward upcasts the parameters to fp32 for
    the call (gradients still reach the cast parameters); keeping them fp32 is the
    recommended setup for mixed precision.

    Returns from forward(x): h_in [.., D] in x's dtype, h_post [.., N] fp32,
    h_res [.., N, N] fp32 (the residual logits: no Sinkhorn/softmax applied).
    """

    def __init__(self, n_streams, hidden, gamma=True, norm_eps=1e-6, hc_eps=1e-6,
                 alpha_init=0.01, phi_std=None, res_diag=1.0):
        super().__init__(n_streams, hidden, branches=3, gamma=gamma, norm_eps=norm_eps, hc_eps=hc_eps,
                         alpha_init=alpha_init, phi_std=phi_std, res_diag=res_diag)

    def forward(self, x):
        if x.dim() not in (3, 4) or tuple(x.shape[-2:]) != (self.n_streams, self.hidden):
            raise ValueError(
                f"MhcPre: expected x of shape [B,S,{self.n_streams},{self.hidden}] or "
                f"[T,{self.n_streams},{self.hidden}], got {list(x.shape)}")
        return mhc_pre(x, *self.fp32_parameters(), self.norm_eps, self.hc_eps)


__all__ = ["MhcParameters", "MhcPre"]
