"""mhc.nn.MhcHead: the head that ends an mHC model (SPEC §6, one-entry alpha), the
weighted sum of the N streams with weights computed from the token itself
(DeepSeek-V4's hc_head), through mhc.mhc_head."""
from ..autograd import mhc_head
from .pre import MhcParameters


class MhcHead(MhcParameters):
    """x [.., N, D] -> h [.., D] in x's dtype: h[d] = sum_n h_pre[n] x[n, d], h_pre =
    sigmoid(alpha[0] * r * (phi . x*gamma) + bias) + hc_eps (SPEC §6).

    Parameters (fp32): phi [N, N*D], alpha [1], bias [N], gamma [N, D] (gamma=False: none),
    initialised as MhcParameters' pre branch: h_pre ~= 1/N, so the head starts as the mean
    of the streams, alpha = alpha_init (0.01) scaling the dynamic part. loss.backward()
    runs the library's MhcPreBackward (one-entry form). A model ends with it before its
    final norm (SPEC §13).
    """

    def __init__(self, n_streams, hidden, *, gamma=True, hc_eps=1e-6, norm_eps=1e-6,
                 alpha_init=0.01, phi_std=None):
        super().__init__(n_streams, hidden, branches=1, gamma=gamma, norm_eps=norm_eps, hc_eps=hc_eps,
                         alpha_init=alpha_init, phi_std=phi_std)

    def forward(self, x):
        xt = self.token_view(x)
        h = mhc_head(xt, *self.fp32_parameters(), norm_eps=self.norm_eps, hc_eps=self.hc_eps)
        return h if xt is x else h.view(x.shape[:-2] + (self.hidden,))


__all__ = ["MhcHead"]
