"""mhc.nn: the mHC pre block as a torch.nn.Module.

    pre = mhc.nn.MhcPre(n_streams=4, hidden=512)
    h_in, h_post, h_res = pre(x)          # x: [B,S,N,D] or [T,N,D], bf16/fp16/fp32

The module owns the four learnable tensors of SPEC §2 -- phi [F, N*D], alpha [3],
bias [F] and (optionally) gamma [N, D], F = 2N + N*N -- and calls the differentiable
mhc.mhc_pre, so loss.backward() runs the library's MhcPreBackward.
"""
import math

import torch
from torch import nn

from .autograd import mhc_pre


class MhcPre(nn.Module):
    """The mHC pre block: residual streams x -> (h_in, h_post, h_res).

    Args:
        n_streams: N, the number of residual streams (the paper's expansion rate).
        hidden: D, the hidden size of one stream.
        gamma: hold a learnable RMS-norm weight gamma [N, D] (initialised to ones);
            False passes no gamma (the operators then use all ones, not learnable).
        norm_eps, hc_eps: the operators' epsilons (SPEC §2).
        alpha_init: initial (alpha_pre, alpha_post, alpha_res); the paper uses 0.01.
        phi_std: std of the normal initialisation of phi; None means 1/sqrt(N*D),
            which makes each dynamic logit w = r * phi_f . (x*gamma) of order one, so
            alpha alone sets how dynamic the block starts (0.01: almost static).
        res_diag: initial bias of the diagonal residual logits (off-diagonal: 0).

    Initialisation (the static part, i.e. the biases, sets the start):
        bias_pre  = logit(1/N)   -> h_pre  = sigmoid(bias_pre) + hc_eps ~= 1/N
                                    (h_in starts as the mean of the streams)
        bias_post = 0            -> h_post = 2 * sigmoid(0) = 1
        bias_res  = res_diag * I -> h_res ~= res_diag * I; with res_diag = 1 a consumer
                                    mixing the streams by h_res as a plain matrix starts
                                    from the identity; a row-softmax consumer starts from
                                    e^c/(e^c + N - 1) on the diagonal (choose c to taste)
    The alphas scale the dynamic part: h_* deviate from the above by O(alpha).

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
        super().__init__()
        n, d = int(n_streams), int(hidden)
        if n < 1 or d < 1:
            raise ValueError(f"MhcPre: n_streams and hidden must be >= 1, got {n_streams}, {hidden}")
        self.n_streams = n
        self.hidden = d
        self.norm_eps = float(norm_eps)
        self.hc_eps = float(hc_eps)
        self.alpha_init = alpha_init
        self.phi_std = phi_std
        self.res_diag = float(res_diag)
        f, k = 2 * n + n * n, n * d
        f32 = torch.float32
        self.phi = nn.Parameter(torch.empty(f, k, dtype=f32))
        self.alpha = nn.Parameter(torch.empty(3, dtype=f32))
        self.bias = nn.Parameter(torch.empty(f, dtype=f32))
        if gamma:
            self.gamma = nn.Parameter(torch.empty(n, d, dtype=f32))
        else:
            self.register_parameter("gamma", None)
        self.reset_parameters()

    @property
    def fusion_size(self):
        """F = 2N + N*N, the rows of phi."""
        return 2 * self.n_streams + self.n_streams ** 2

    def reset_parameters(self):
        n, k = self.n_streams, self.n_streams * self.hidden
        std = self.phi_std if self.phi_std is not None else 1.0 / math.sqrt(k)
        with torch.no_grad():
            self.phi.normal_(0.0, std)
            self.alpha.copy_(torch.as_tensor(self.alpha_init, dtype=torch.float32).expand(3))
            self.bias.zero_()
            # h_pre = sigmoid(b) + hc_eps = 1/N  =>  b = logit(1/N - hc_eps)
            p = min(max(1.0 / n - self.hc_eps, 1e-6), 1.0 - 1e-6)  # clamped for extreme hc_eps
            self.bias[:n] = math.log(p / (1.0 - p))
            self.bias[2 * n:].view(n, n).fill_diagonal_(self.res_diag)
            if self.gamma is not None:
                self.gamma.fill_(1.0)

    @staticmethod
    def _fp32(p):
        return p if p is None or p.dtype == torch.float32 else p.float()

    def forward(self, x):
        if x.dim() not in (3, 4) or tuple(x.shape[-2:]) != (self.n_streams, self.hidden):
            raise ValueError(
                f"MhcPre: expected x of shape [B,S,{self.n_streams},{self.hidden}] or "
                f"[T,{self.n_streams},{self.hidden}], got {list(x.shape)}")
        return mhc_pre(x, self._fp32(self.phi), self._fp32(self.alpha), self._fp32(self.bias),
                       self._fp32(self.gamma), self.norm_eps, self.hc_eps)

    def extra_repr(self):
        return (f"n_streams={self.n_streams}, hidden={self.hidden}, gamma={self.gamma is not None}, "
                f"norm_eps={self.norm_eps:g}, hc_eps={self.hc_eps:g}")


__all__ = ["MhcPre"]
