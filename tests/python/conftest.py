"""Shared helpers of the Python oracle tests: tolerances, the error log, quick mode.

The largest error seen per output is logged and printed at the end of the session
(and per case with pytest -s), since those numbers go into the project's notes.
"""
import math
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
if os.path.join(REPO, "python") not in sys.path:  # so a bare `pytest tests/python` works too
    sys.path.insert(0, os.path.join(REPO, "python"))

QUICK = os.environ.get("MHC_TEST_QUICK", "") not in ("", "0")

# The terms bound, logged for every output (and asserted with MHC_TEST_TERMS_BOUND=1):
TERMS_NORMWISE_TOL = 1e-5  # fp32 outputs: ||ours - truth|| / ||truth||
TERMS_TOL = 1e-6  # h_in, grad_x: elementwise max(1 ulp, 1e-6 * sum|terms|)
TERMS_BOUND = os.environ.get("MHC_TEST_TERMS_BOUND", "") not in ("", "0")
# The asserted bound, every output elementwise: 1 ulp of its dtype at |truth| plus
# COND_TOL times its condition magnitude (oracle.magnitudes64). The terms bound
# miss inherent effects: cancellation inside the sums behind each term, sigma'
# recovered from the cached fp32 h_pre/h_post, and the max (not the sum) of the
# cast's rounding and the fp32 error before it. COND_TOL is ~84 fp32 eps: room for
# rounding growth in fp32 sums of up to ~32768 terms (a lane-parallel sum of K=32768
# squares already shows 15 eps); a blunder is off by O(1), far above it.
COND_TOL = 1e-5

DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


class ErrorLog:
    """The largest value of each (output, metric) and the case where it was seen."""

    def __init__(self):
        self.worst = {}

    def record(self, output, metric, value, case):
        value = float(value)
        key = (output, metric)
        if key not in self.worst or value > self.worst[key][0]:
            self.worst[key] = (value, case)

    def lines(self):
        out = [f"{'output':<14} {'metric':<28} {'largest':>10}  case"]
        for (output, metric), (value, case) in sorted(self.worst.items()):
            out.append(f"{output:<14} {metric:<28} {value:10.4g}  {case}")
        return out


ERROR_LOG = ErrorLog()


def ulp(truth64, dtype):
    """One ulp of `dtype` at |truth| (subnormal spacing below the smallest normal)."""
    info = torch.finfo(dtype)
    mag = truth64.abs().clamp(min=info.tiny)
    _, exponent = torch.frexp(mag)  # mag = m * 2**exponent, m in [0.5, 1)
    return info.eps * torch.ldexp(torch.ones_like(mag), exponent - 1)


def check_output(output, ours, truth64, mag64, case, terms_abs64=None):
    """Assert |ours - truth| <= ulp(truth) + COND_TOL * magnitude elementwise; log the
    terms bound's metrics too (normwise for fp32 outputs; ulps and sum|terms| for h_in/grad_x).

    Returns (our-bound ratio, terms-bound ratio); a ratio <= 1 passes."""
    assert ours.shape == truth64.shape, f"{output}: shape {tuple(ours.shape)} != {tuple(truth64.shape)}"
    dtype = ours.dtype
    key = output if terms_abs64 is None else f"{output}[{DTYPE_NAMES[dtype]}]"
    err = (ours.to(torch.float64) - truth64).abs()
    one_ulp = ulp(truth64, dtype)
    bound = one_ulp + COND_TOL * mag64
    ratio = float((err / bound).max())
    ERROR_LOG.record(key, "err / asserted bound", ratio, case)
    if terms_abs64 is None:
        scale = torch.linalg.vector_norm(truth64)
        rel = float(torch.linalg.vector_norm(err) / scale) if scale > 0 else float(err.max())
        ERROR_LOG.record(key, "normwise rel (terms bound 1e-5)", rel, case)
        terms = rel / TERMS_NORMWISE_TOL
    else:
        # In ulps where the terms bound is the ulp, in sum|terms| where it is that.
        by_ulp = one_ulp >= TERMS_TOL * terms_abs64
        terms = terms_abs64.clamp(min=torch.finfo(torch.float64).tiny)
        if bool(by_ulp.any()):
            in_ulps = float((err / one_ulp)[by_ulp].max())
            ERROR_LOG.record(key, "err / ulp (ulp-bound elts)", in_ulps, case)
        if not bool(by_ulp.all()):
            ERROR_LOG.record(key, "err / sum|terms| (others)", float((err / terms)[~by_ulp].max()), case)
        terms = float((err / torch.maximum(one_ulp, TERMS_TOL * terms_abs64)).max())
        ERROR_LOG.record(key, "err / terms bound", terms, case)
    if ratio > 1:
        i = int((err / bound).flatten().argmax())
        raise AssertionError(
            f"{output}: {int((err > bound).sum())} of {err.numel()} elements out of bound ({case}); "
            f"worst at flat {i}: ours {float(ours.flatten()[i].float())!r} truth "
            f"{float(truth64.flatten()[i])!r} err {float(err.flatten()[i]):.3g} ulp "
            f"{float(one_ulp.flatten()[i]):.3g} magnitude {float(mag64.flatten()[i]):.3g}")
    assert not TERMS_BOUND or terms <= 1, f"{output}: {terms:.3g} x the terms bound ({case})"
    return ratio, terms


@pytest.fixture(autouse=True)
def _default_threads():
    """Every test starts and ends with the library's default thread count."""
    import mhc

    mhc.set_num_threads(0)
    yield
    mhc.set_num_threads(0)


SKIP_RETURN_CODE = 77  # tests/CMakeLists.txt: ctest reports the run as skipped


def pytest_sessionstart(session):
    """MHC_ISA naming a family this build or CPU cannot run would fail every call: the run
    stops at once as skipped, as the C++ suites skip theirs."""
    want = os.environ.get("MHC_ISA", "")
    if not want:
        return
    try:
        import mhc
    except ImportError:  # the tests then fail at import, saying why
        return
    if want not in mhc.available_isas():
        pytest.exit(f"MHC_ISA={want}: not a kernel family this build and CPU run "
                    f"(available: {', '.join(mhc.available_isas())})", returncode=SKIP_RETURN_CODE)


def pytest_report_header(config):
    try:
        import mhc

        return f"mhc {mhc.__version__}, isa {mhc.isa()}, quick={QUICK}"
    except ImportError as exc:  # the tests then fail at import with the same message
        return f"mhc not importable: {exc}"


def pytest_terminal_summary(terminalreporter):
    if not ERROR_LOG.worst:
        return
    terminalreporter.section("mhc: largest error per output against the float64 truth")
    terminalreporter.write_line(
        "asserted: |err| <= 1 ulp + 1e-5 * condition magnitude (ratio <= 1 passes); terms bound: "
        "normwise <= 1e-5 (fp32 outputs), max(1 ulp, 1e-6 * sum|terms|) (h_in, grad_x)")
    for line in ERROR_LOG.lines():
        terminalreporter.write_line(line)


def strided_copy(t, style):
    """A non-contiguous tensor with t's values.

    "step": every other element of a bigger buffer, starting at offset 1 (strides
    doubled, non-zero storage offset); "reversed": dims laid out in reverse memory
    order, the transpose-like view."""
    if t is None:
        return None
    view = None
    if style == "reversed" and t.dim() >= 2:
        base = torch.zeros(tuple(reversed(t.shape)), dtype=t.dtype)
        view = base.permute(tuple(reversed(range(t.dim()))))
        if view.is_contiguous():  # size-1 dims can make it contiguous after all
            view = None
    if view is None:
        base = torch.zeros(tuple(2 * s + 1 for s in t.shape), dtype=t.dtype)
        view = base[tuple(slice(1, 1 + 2 * s, 2) for s in t.shape)]
    view.copy_(t)
    assert torch.equal(view, t) and (t.numel() <= 1 or not view.is_contiguous())
    return view


def bitwise_equal(a, b):
    """Same dtype, shape and bits (NaN-safe)."""
    if a is None or b is None:
        return a is None and b is None
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    int_type = {2: torch.int16, 4: torch.int32}[a.element_size()]
    return torch.equal(a.contiguous().view(int_type), b.contiguous().view(int_type))


def assert_same_bits(name, a, b, what):
    """bitwise_equal, with how far apart the two are when they are not."""
    if bitwise_equal(a, b):
        return
    if a is None or b is None or a.shape != b.shape or a.dtype != b.dtype:
        raise AssertionError(f"{name}: {what}: {a!r:.80} vs {b!r:.80}")
    diff = (a.double() - b.double()).abs()
    raise AssertionError(
        f"{name}: {what}: {int((diff > 0).sum())} of {diff.numel()} elements differ, max |diff| "
        f"{float(diff.max()):.3g} (max |value| {float(a.double().abs().max()):.3g})")


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FWD_NAMES = ("h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre")
BWD_NAMES = ("grad_x", "grad_phi", "grad_alpha", "grad_bias", "grad_gamma")


def residual_count(n, form):
    return {"square": n * n, "factorial": math.factorial(n), "two_entry": 0, "head": 0}[form]


def fusion_size(n, form):
    """F, the rows of phi: 2N + R, or N for the head (one-entry alpha, SPEC §6)."""
    return n if form == "head" else 2 * n + residual_count(n, form)


ALPHA_ENTRIES = {"square": 3, "factorial": 3, "two_entry": 2, "head": 1}


def token_lead(case):
    t = case["T"]
    if case["layout"] == "TND":
        return (t,)
    return {1: (1, 1), 3: (3, 1), 1000: (8, 125)}.get(t, (2, t // 2) if t % 2 == 0 else (t, 1))


def make_inputs(case, seed):
    """Inputs in the test dtype (the oracle upcasts the very same values)."""
    gen = torch.Generator().manual_seed(seed)
    n, d, dtype = case["N"], case["D"], DTYPES[case["dtype"]]
    lead = token_lead(case)
    r = residual_count(n, case["form"])
    f, k = fusion_size(n, case["form"]), n * d
    head = case["form"] == "head"

    def randn(*shape):
        return torch.randn(shape, generator=gen)

    inp = {
        "x": randn(*lead, n, d).to(dtype),
        "phi": randn(f, k) / math.sqrt(k),  # keeps w = r*phi*u of order one
        "alpha": 0.5 + torch.rand(ALPHA_ENTRIES[case["form"]], generator=gen),
        "bias": 0.5 * randn(f),
        "gamma": 1.0 + 0.5 * randn(n, d) if case["gamma"] else None,
        "grad_h_in": randn(*lead, d).to(dtype),
        "grad_h_post": None if head else randn(*lead, n),  # the head has no h_post
        "grad_h_res": None,
        "grad_x_post": randn(*lead, n, d).to(dtype) if case["grad_x_post"] else None,
    }
    if r:
        inp["grad_h_res"] = randn(*lead, n, n) if r == n * n else randn(*lead, r)
    return inp


def run_ours(inp, caches_style=None):
    """Forward with caches, then our backward on our own caches (as a user would)."""
    import mhc

    fwd = mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], gamma=inp["gamma"],
                          out_flag=1)
    h_in, h_post, h_res, inv_rms, h_mix, h_pre = fwd
    grads = {k: inp[k] for k in ("grad_h_in", "grad_h_post", "grad_h_res", "grad_x_post")}
    caches = {"inv_rms": inv_rms, "h_mix": h_mix, "h_pre": h_pre, "h_post": h_post}
    if caches_style:  # the backward's incoming tensors as strided views
        grads = {k: strided_copy(v, caches_style[k]) for k, v in grads.items()}
        caches = {k: strided_copy(v, caches_style[k]) for k, v in caches.items()}
    bwd = mhc.npu_mhc_pre_backward(
        inp["x"], inp["phi"], inp["alpha"], grads["grad_h_in"], grads["grad_h_post"],
        grads["grad_h_res"], caches["inv_rms"], caches["h_mix"], caches["h_pre"],
        caches["h_post"], gamma=inp["gamma"], grad_x_post=grads["grad_x_post"])
    return fwd, bwd


# The strided views of the oracle suites: inputs, or the backward's incoming tensors.
INPUT_STYLES = {"x": "reversed", "phi": "step", "alpha": "step", "bias": "step", "gamma": "reversed"}
GRAD_STYLES = {"grad_h_in": "step", "grad_h_post": "reversed", "grad_h_res": "step",
               "grad_x_post": "reversed", "inv_rms": "step", "h_mix": "reversed",
               "h_pre": "step", "h_post": "step"}


def run_ours_strided(inp, noncontig, fwd, bwd):
    """run_ours on strided views of the inputs ("inputs") or of the backward's incoming
    tensors ("grads"); ("none") the contiguous results fwd, bwd themselves."""
    if noncontig == "inputs":
        return run_ours(dict(inp, **{k: strided_copy(inp[k], s) for k, s in INPUT_STYLES.items()}))
    if noncontig == "grads":
        return run_ours(inp, caches_style=GRAD_STYLES)
    return fwd, bwd


def expanded(shape, dtype=None):
    """A tensor of any dims in one element (stride 0): fp32 unless dtype says."""
    import torch

    return torch.zeros((), dtype=dtype or torch.float32).expand(shape)


@pytest.fixture
def allocations(monkeypatch):
    """The shapes of the outputs the face allocates."""
    import mhc

    requested = []
    real_empty = mhc._output_cache.cache.empty
    monkeypatch.setattr(mhc._output_cache.cache, "empty",
                        lambda shape, dtype: requested.append(tuple(shape)) or real_empty(shape, dtype))
    return requested




def compare_with_oracle(inp, outputs, case, norm_eps=1e-6, hc_eps=1e-6, also=()):
    """Check each given output (name -> tensor or None) against the float64 truth:
    the oracle forward, autograd through it for the grads. Returns {name: ratios}.
    `also`: (outputs, case) pairs checked against the same truth."""
    from oracle import backward_terms64, forward64, grads64, magnitudes64

    args = (inp["x"], inp["phi"], inp["alpha"], inp["bias"], inp["gamma"], norm_eps, hc_eps)
    gargs = args + (inp["grad_h_in"], inp["grad_h_post"], inp["grad_h_res"], inp["grad_x_post"])
    truth = dict(zip(FWD_NAMES, forward64(*args)))
    if any(name in outputs for name in BWD_NAMES):
        truth.update(zip(BWD_NAMES, grads64(*gargs)))
        terms = backward_terms64(*gargs)
        # SPEC §3 (the terms) agrees with autograd through SPEC §2: guards the oracle.
        assert torch.allclose(sum(terms), truth["grad_x"], rtol=1e-9,
                              atol=1e-12 * float(truth["grad_x"].abs().max()))
        terms_abs = {"grad_x": sum(t.abs() for t in terms)}
    else:
        terms_abs = {}
    v64 = inp["x"].to(torch.float64)
    terms_abs["h_in"] = (truth["h_pre"][..., :, None] * v64).abs().sum(dim=-2)
    mags = magnitudes64(*gargs)
    for other, other_case in also:
        for name, ours in other.items():
            if truth[name] is not None:
                check_output(name, ours, truth[name], mags[name], other_case, terms_abs.get(name))
    errs = {}
    for name, ours in outputs.items():
        if truth[name] is None:  # h_res/h_post of a 2/1-entry alpha, grad_gamma without gamma
            if name == "grad_gamma" and ours is not None:  # npu_mhc_pre_backward's (SPEC §8)
                assert_zero_grad_gamma(ours, inp["x"])
            else:
                assert ours is None, f"{name}: expected None"
            continue
        assert ours is not None, f"{name}: missing"
        errs[name] = check_output(name, ours, truth[name], mags[name], case, terms_abs.get(name))
    return errs


def assert_zero_grad_gamma(grad_gamma, x):
    """npu_mhc_pre_backward's grad_gamma without gamma: zeros, [N, D], fp32 (SPEC §8)."""
    assert grad_gamma is not None, "grad_gamma: expected zeros without gamma, got None"
    assert grad_gamma.dtype == torch.float32, grad_gamma.dtype
    assert tuple(grad_gamma.shape) == tuple(x.shape[-2:]), tuple(grad_gamma.shape)
    assert not bool(grad_gamma.ne(0).any()), "grad_gamma: not all zeros without gamma"


# Autograd tests (mhc_pre and npu_mhc_pre): fresh leaves and a loss whose incoming grads
# are the test's grad tensors.
LEAVES = ("x", "phi", "alpha", "bias", "gamma")


def leaves_of(inp, requires=LEAVES):
    out = {}
    for name in LEAVES:
        t = inp[name]
        out[name] = None if t is None else t.clone().requires_grad_(name in requires)
    return out


def weighted_loss(h_in, h_post, h_res, inp):
    """sum(h_in*g_h_in) + sum(h_post*g_h_post) + sum(h_res*g_h_res): the incoming grads
    of the outputs are then exactly the test's grad tensors (h_post, h_res: those given)."""
    loss = (h_in.float() * inp["grad_h_in"].float()).sum()
    if h_post is not None:
        loss = loss + (h_post * inp["grad_h_post"]).sum()
    if h_res is not None:
        loss = loss + (h_res * inp["grad_h_res"]).sum()
    return loss


# The layer's other operators (SPEC §10-§12): kernel families, token-scaled bounds.

def _families():
    import mhc  # after sys.path is set above
    return tuple(mhc.available_isas())


FAMILIES = _families()  # the families this build and CPU run, best first, as the library lists them

# MhcSinkhorn's stated bounds, elementwise, as fractions of the largest |truth| of the
# element's token (its matrix, or its divisor vector), for logits of order one:
SINKHORN_FWD_TOL = 2e-6    # y, norm_out, sum_out: ~17 fp32 eps (measured <= 3 eps)
SINKHORN_GRAD_TOL = 1e-4   # grad_x (measured <= 2e-6)


@pytest.fixture
def isa_family(request):
    """Runs the test under the kernel family of its parameter (skipped where this build or
    CPU has none); back to the process default after."""
    import mhc

    name = request.param
    if name not in mhc.available_isas():
        pytest.skip(f"{name}: not run by this build or CPU")
    mhc.set_isa(name)
    yield name
    mhc.set_isa(None)


def check_token_scaled(output, ours, truth64, tol, token_dims, case):
    """Assert |ours - truth| <= tol * (max |truth| over one token's matrix or vector, the
    dims token_dims) elementwise, and log err / that max. Returns the ratio to the bound."""
    assert ours.shape == truth64.shape, f"{output}: shape {tuple(ours.shape)} != {tuple(truth64.shape)}"
    if truth64.numel() == 0:
        return 0.0
    err = (ours.to(torch.float64) - truth64).abs()
    scale = truth64.abs().amax(dim=token_dims, keepdim=True).clamp(min=torch.finfo(torch.float64).tiny)
    rel = err / scale
    worst = float(rel.max())
    ERROR_LOG.record(output, "err / token max |truth|", worst, case)
    if worst > tol:
        i = int(rel.flatten().argmax())
        raise AssertionError(
            f"{output}: {int((rel > tol).sum())} of {rel.numel()} elements off by more than {tol:g} x their "
            f"token's max |truth| ({case}); worst at flat {i}: ours {float(ours.flatten()[i])!r} truth "
            f"{float(truth64.flatten()[i])!r} (err / token max {worst:.3g})")
    return worst / tol
