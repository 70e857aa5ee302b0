"""SGLang's CPU mHC ops (SPEC §16) as torch.ops.sgl_kernel.*, on mhc's operators:

    hc_pre_fused_cpu(x, hc_fn, hc_scale, hc_base, hc_mult, sinkhorn_iters, rms_eps, hc_eps)
        -> (y [T, D], post [T, N], comb [T, N, N])          MhcPreSinkhorn (§12), no gamma
    hc_post_fused_cpu(x, residual, post, comb) -> [T, N, D]  MhcPost (§11) of the streams
    hc_head_fused_cpu(x, hc_fn, hc_scale, hc_base, hc_eps, norm_eps) -> [T, D]   the head (§6)

With libmhc_torch.so built the ops are its C++ kernels (a call costs the dispatcher's
few microseconds); without it, the Python functions below (the same bits).

Mind the eps orders: (rms_eps, hc_eps) for the pre, (hc_eps, norm_eps) for the head. x and
residual are [..., N, D] bf16 or fp16 (any leading dims; T = 0 gives empty outputs), hc_scale
may be 0-d for the head; one hc_eps serves the gate and the Sinkhorn, as SGLang's kernel has it.
"""
import warnings

import torch
from torch.library import Library

from .. import autograd, ops
from . import _native
from .common import inference, one_entry, post_rows, streams, tokens

SCHEMAS = {
    "hc_pre_fused_cpu": "hc_pre_fused_cpu(Tensor x, Tensor hc_fn, Tensor hc_scale, Tensor hc_base, int hc_mult, "
                        "int sinkhorn_iters, float rms_eps, float hc_eps) -> (Tensor, Tensor, Tensor)",
    "hc_post_fused_cpu": "hc_post_fused_cpu(Tensor x, Tensor residual, Tensor post, Tensor comb) -> Tensor",
    "hc_head_fused_cpu": "hc_head_fused_cpu(Tensor x, Tensor hc_fn, Tensor hc_scale, Tensor hc_base, float hc_eps, "
                         "float norm_eps) -> Tensor",
}


@inference
def hc_pre_fused_cpu(x, hc_fn, hc_scale, hc_base, hc_mult, sinkhorn_iters, rms_eps, hc_eps):
    """The site's pre and Sinkhorn: (y = h_in, post = h_post, comb = H) with norm_eps = rms_eps
    and hc_eps for the gate and the Sinkhorn."""
    flat, lead = streams(x, "x")
    y, post, comb = ops.mhc_pre_sinkhorn(flat, hc_fn, hc_scale, hc_base, hc_mult, sinkhorn_iters, hc_eps=hc_eps,
                                         norm_eps=rms_eps)[:3]
    n, d = flat.shape[-2], flat.shape[-1]
    return y.reshape(lead + (d,)), post.reshape(lead + (n,)), comb.reshape(lead + (n, n))


@inference
def hc_post_fused_cpu(x, residual, post, comb):
    """The residual update: out[j] = post[j]·x + Σ_i comb[i, j]·residual[i], rounded once
    (post [..., N] or vLLM's [..., N, 1])."""
    flat, lead = streams(residual, "residual")
    n, d = flat.shape[-2], flat.shape[-1]
    out = ops.npu_mhc_post(flat, tokens(comb, 2)[0], tokens(x, 1)[0], post_rows(post, residual.dim()))
    return out.reshape(lead + (n, d))


@inference
def hc_head_fused_cpu(x, hc_fn, hc_scale, hc_base, hc_eps, norm_eps):
    """The model's end: h = Σ_n h_pre[n]·x[n] with h_pre = σ(hc_scale·r·(hc_fn·x) + hc_base) + hc_eps."""
    flat, lead = streams(x, "x")
    h = autograd.mhc_head(flat, hc_fn, one_entry(hc_scale, "hc_scale"), hc_base, norm_eps=norm_eps, hc_eps=hc_eps)
    return h.reshape(lead + (flat.shape[-1],))


FUNCTIONS = {"hc_pre_fused_cpu": hc_pre_fused_cpu, "hc_post_fused_cpu": hc_post_fused_cpu,
             "hc_head_fused_cpu": hc_head_fused_cpu}
_library = None  # owns the registrations for the life of the process


def _defined(name):
    try:
        getattr(torch.ops.sgl_kernel, name)
        return True
    except (AttributeError, RuntimeError):
        return False


def register_sgl_kernel():
    """Defines torch.ops.sgl_kernel.hc_pre_fused_cpu, hc_post_fused_cpu and hc_head_fused_cpu
    (CPU and Meta kernels; no backward) on mhc. Returns True when it defined them; when the namespace
    already holds them (a real sgl-kernel build, or an earlier call) it leaves them, warns
    and returns False."""
    global _library
    present = [name for name in SCHEMAS if _defined(name)]
    if present:
        warnings.warn(f"mhc.engines: torch.ops.sgl_kernel already defines {', '.join(present)}; left as they are",
                      stacklevel=2)
        return False
    if _native.ops is not None:  # the C++ kernels, registered from C++
        return bool(_native.ops.register_sgl_kernel())
    _library = Library("sgl_kernel", "DEF")
    for name, schema in SCHEMAS.items():
        _library.define(schema)
        _library.impl(name, FUNCTIONS[name], "CPU")
        _library.impl(name, FUNCTIONS[name], "Meta")
        _library.impl(name, FUNCTIONS[name], "Autograd")  # no backward: the function runs without a graph
    return True
