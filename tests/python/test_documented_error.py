"""The one error in the CANN documentation (SPEC §3): its inv_rms gradient term uses
x*gamma instead of x. With gamma != 1 the documented grad_x is far off the truth,
which a float64 finite difference confirms; the library's grad_x is not."""
import torch

import mhc
from conftest import COND_TOL, check_output, make_inputs, run_ours, ulp
from oracle import backward_terms64, forward64, grads64, magnitudes64

F64 = torch.float64
CASE = {"N": 4, "D": 64, "T": 5, "layout": "TND", "dtype": "fp32", "gamma": True,
        "grad_x_post": False, "form": "square"}


def loss64(inp, x64):
    h_in, h_post, h_res, _, _, _ = forward64(x64, inp["phi"], inp["alpha"], inp["bias"],
                                             inp["gamma"], 1e-6, 1e-6)
    return ((h_in * inp["grad_h_in"].to(F64)).sum() + (h_post * inp["grad_h_post"].to(F64)).sum()
            + (h_res * inp["grad_h_res"].to(F64)).sum())


def test_documented_inv_rms_term_is_wrong_and_ours_is_right():
    inp = make_inputs(CASE, seed=7)
    inp["gamma"] = 1.0 + 0.5 * torch.randn(4, 64, generator=torch.Generator().manual_seed(8))
    gargs = (inp["x"], inp["phi"], inp["alpha"], inp["bias"], inp["gamma"], 1e-6, 1e-6,
             inp["grad_h_in"], inp["grad_h_post"], inp["grad_h_res"], None)
    truth = grads64(*gargs)[0]
    t_in, t_gu, t_cv, t_post = backward_terms64(*gargs)
    # Documented: c * (x*gamma) in place of c * x.
    documented = t_in + t_gu + t_cv * inp["gamma"].to(F64) + t_post
    mag = magnitudes64(*gargs)["grad_x"]
    bound = ulp(truth, torch.float32) + COND_TOL * mag

    ours = run_ours(inp)[1][0]
    terms_abs = sum(t.abs() for t in (t_in, t_gu, t_cv, t_post))
    ours_ratio, _ = check_output("grad_x", ours, truth, mag, "documented-error", terms_abs)
    doc_ratio = float(((documented - truth).abs() / bound).max())
    doc_terms = float(((documented - truth).abs()
                       / torch.maximum(ulp(truth, torch.float32), 1e-6 * terms_abs)).max())
    print(f"\ndocumented grad_x: {doc_ratio:.3g} x our bound, {doc_terms:.3g} x the terms bound; "
          f"ours: {ours_ratio:.3g} x our bound")
    assert doc_ratio > 100 and doc_terms > 100, (doc_ratio, doc_terms)

    # A float64 central difference along a random direction settles which is right.
    x64 = inp["x"].to(F64)
    direction = torch.randn(x64.shape, generator=torch.Generator().manual_seed(9), dtype=F64)
    h = 1e-6
    with torch.no_grad():
        numeric = (loss64(inp, x64 + h * direction) - loss64(inp, x64 - h * direction)) / (2 * h)
    along = {name: float((g * direction).sum()) for name, g in
             (("truth", truth), ("documented", documented), ("ours", ours.to(F64)))}
    scale = abs(float(numeric))
    assert abs(along["truth"] - float(numeric)) < 1e-7 * scale, (along, float(numeric))
    assert abs(along["ours"] - float(numeric)) < 1e-5 * scale, (along, float(numeric))
    assert abs(along["documented"] - float(numeric)) > 1e-2 * scale, (along, float(numeric))


def test_documented_form_agrees_when_gamma_is_one():
    """With gamma all ones both forms coincide: the error only shows for gamma != 1."""
    inp = make_inputs(CASE, seed=11)
    inp["gamma"] = torch.ones(4, 64)
    gargs = (inp["x"], inp["phi"], inp["alpha"], inp["bias"], inp["gamma"], 1e-6, 1e-6,
             inp["grad_h_in"], inp["grad_h_post"], inp["grad_h_res"], None)
    t_in, t_gu, t_cv, t_post = backward_terms64(*gargs)
    assert torch.equal(t_cv * inp["gamma"].to(F64), t_cv)
    with_gamma = run_ours(inp)[1]
    without = run_ours(dict(inp, gamma=None))[1]
    # The same grads with gamma = 1 as without gamma (grad_gamma aside).
    for name, a, b in zip(("grad_x", "grad_phi", "grad_alpha", "grad_bias"), with_gamma, without):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), name
    assert mhc.get_num_threads() == 0
