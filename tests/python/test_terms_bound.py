"""Why the suite asserts conftest.COND_TOL bounds and not the terms bound.

The terms bound asks h_in/grad_x to be within max(1 ulp, 1e-6 * sum|terms|) of the
float64 truth. No implementation that takes SPEC's fp32 caches can promise that: the backward
recovers sigma(1-sigma) from the cached fp32 h_pre/h_post, and gu = phi^T G hides
cancellation that sum|terms| does not see. This test computes an *ideal* backward —
SPEC §3 in float64, fed the correctly rounded fp32 caches of the exact forward — and
shows that it already breaks the terms bound for grad_x, while staying inside ours.
"""
import torch

from conftest import COND_TOL, make_inputs, ulp
from oracle import backward_terms64, forward64, grads64, magnitudes64

F64 = torch.float64
# fp32 x; the pre gates saturated (bias 8: sigma ~ 0.9997), as a trained or
# oddly initialised model can have them.
CASE = {"N": 4, "D": 256, "T": 64, "layout": "TND", "dtype": "fp32", "gamma": True,
        "grad_x_post": True, "form": "square"}


def ideal_grad_x_from_fp32_caches(inp):
    """SPEC §3 in float64 on the exact forward's caches rounded to fp32 (as stored)."""
    x, phi, alpha, gamma = inp["x"], inp["phi"], inp["alpha"], inp["gamma"]
    n, d = x.shape[-2], x.shape[-1]
    k, t = n * d, x.shape[0]
    _, h_post, _, r, m, h_pre = forward64(x, phi, alpha, inp["bias"], gamma, 1e-6, 1e-6)
    as_stored = lambda c: c.to(torch.float32).to(F64)  # noqa: E731
    h_post, r, m, h_pre = (as_stored(c).reshape(t, -1) for c in (h_post, r, m, h_pre))
    r = r.reshape(t)
    v = x.to(F64).reshape(t, n, d)
    gh = inp["grad_h_in"].to(F64).reshape(t, d)
    a = alpha.to(F64)
    s = h_pre - 1e-6
    gz = torch.cat([(v * gh[:, None, :]).sum(2) * s * (1 - s),
                    inp["grad_h_post"].to(F64).reshape(t, n) * h_post * (1 - h_post / 2),
                    inp["grad_h_res"].to(F64).reshape(t, -1)], dim=1)
    scale = torch.cat([a[0].expand(n), a[1].expand(n), a[2].expand(gz.shape[1] - 2 * n)])
    gw = gz * scale
    gu = (r[:, None] * gw) @ phi.to(F64)
    c = -(r ** 3) * (gw * m).sum(1) / k
    grad_x = (h_pre[:, :, None] * gh[:, None, :]).reshape(t, k) + gamma.to(F64).reshape(1, k) * gu \
        + c[:, None] * v.reshape(t, k) + inp["grad_x_post"].to(F64).reshape(t, k)
    return grad_x.reshape(x.shape)


def test_ideal_backward_breaks_the_terms_bound_but_not_ours():
    inp = make_inputs(CASE, seed=5)
    inp["bias"][:CASE["N"]] = 8.0
    gargs = (inp["x"], inp["phi"], inp["alpha"], inp["bias"], inp["gamma"], 1e-6, 1e-6,
             inp["grad_h_in"], inp["grad_h_post"], inp["grad_h_res"], inp["grad_x_post"])
    truth = grads64(*gargs)[0]
    terms_abs = sum(term.abs() for term in backward_terms64(*gargs))
    ideal = ideal_grad_x_from_fp32_caches(inp)
    err = (ideal - truth).abs()
    terms_ratio = float((err / torch.maximum(ulp(truth, torch.float32), 1e-6 * terms_abs)).max())
    our_ratio = float((err / (ulp(truth, torch.float32) + COND_TOL * magnitudes64(*gargs)["grad_x"])).max())
    print(f"\nideal backward on fp32 caches: {terms_ratio:.3g} x the terms bound for grad_x, "
          f"{our_ratio:.3g} x ours")
    assert terms_ratio > 1.0, "the terms bound would be attainable here after all"
    assert our_ratio <= 1.0
