"""The operators registered with torch's dispatcher: torch.ops.mhc.<name>, with the
schemas of SPEC §8 and §10-§12 (torch_npu's names and CANN's cann_ops_transformer pair)
and mhc_head.

Each operator has three kernels:
  CPU       the library (the function of the same name in mhc, run without a graph);
  Meta      the same Python path on meta tensors: the outputs' shapes and dtypes only,
            the library not called (fx, shape propagation; fake tensors take it too);
  Autograd  the function of the same name in mhc, so gradients flow as they do there
            (through the library's backwards).

    h_in, h_post, h_res, *_ = torch.ops.mhc.npu_mhc_pre(x, phi, alpha, bias)
    mhc.register_npu_namespace()   # the same operators as torch.ops.npu.<name>

Registered when mhc is imported. Every output a function of mhc may return as None
(the caches without out_flag, h_res of a two-entry alpha, ...) is `Tensor?` in its
schema; mhc_pre_sinkhorn always returns its eight outputs here (the caches None
without out_flag), since a schema fixes the count.
"""
import sys

import torch
from torch.library import Library

from . import autograd, ops

_EPS = "1e-06"

SCHEMAS = {
    "npu_mhc_pre":
        "npu_mhc_pre(Tensor x, Tensor phi, Tensor alpha, Tensor bias, *, Tensor? gamma=None, "
        f"float norm_eps={_EPS}, float hc_eps={_EPS}, int out_flag=0, int inner_precise=0) "
        "-> (Tensor, Tensor?, Tensor?, Tensor?, Tensor?, Tensor?)",
    "npu_mhc_pre_backward":
        "npu_mhc_pre_backward(Tensor x, Tensor phi, Tensor alpha, Tensor grad_h_in, Tensor? grad_h_post, "
        "Tensor? grad_h_res, Tensor inv_rms, Tensor h_mix, Tensor h_pre, Tensor? h_post, Tensor? gamma=None, "
        f"float hc_eps={_EPS}, Tensor? grad_x_post=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "mhc_head":
        "mhc_head(Tensor x, Tensor phi, Tensor alpha, Tensor bias, Tensor? gamma=None, *, "
        f"float norm_eps={_EPS}, float hc_eps={_EPS}, int inner_precise=0) -> Tensor",
    "npu_mhc_sinkhorn":
        f"npu_mhc_sinkhorn(Tensor x, *, float eps={_EPS}, int num_iters=20, int out_flag=0) "
        "-> (Tensor, Tensor?, Tensor?)",
    "npu_mhc_sinkhorn_backward":
        "npu_mhc_sinkhorn_backward(Tensor grad_y, Tensor norm_out, Tensor sum_out) -> Tensor",
    "npu_mhc_post":
        "npu_mhc_post(Tensor x, Tensor? h_res, Tensor h_out, Tensor h_post) -> Tensor",
    "npu_mhc_post_backward":
        "npu_mhc_post_backward(Tensor grad_y, Tensor x, Tensor? h_res, Tensor h_out, Tensor h_post, *, "
        "ScalarType? grad_x_dtype=None) -> (Tensor, Tensor, Tensor, Tensor)",
    "mhc_pre_sinkhorn":
        "mhc_pre_sinkhorn(Tensor x, Tensor phi, Tensor alpha, Tensor bias, int hc_mult, int num_iters=20, "
        f"float hc_eps={_EPS}, float norm_eps={_EPS}, *, bool out_flag=False) "
        "-> (Tensor, Tensor, Tensor, Tensor?, Tensor?, Tensor?, Tensor?, Tensor?)",
    "mhc_pre_sinkhorn_backward":
        "mhc_pre_sinkhorn_backward(Tensor grad_hin, Tensor grad_h_post, Tensor grad_h_res, Tensor x, "
        "Tensor phi, Tensor alpha, Tensor bias, Tensor h_pre, Tensor hc_before_norm, Tensor inv_rms, "
        f"Tensor sum_out, Tensor norm_out, float hc_eps={_EPS}) -> (Tensor, Tensor, Tensor, Tensor)",
}


def _mhc_pre_sinkhorn(*args, out_flag=False, **kwargs):
    """mhc_pre_sinkhorn with its schema's eight outputs (the caches None without out_flag)."""
    outputs = ops.mhc_pre_sinkhorn(*args, out_flag=out_flag, **kwargs)
    return tuple(outputs) + (None,) * (8 - len(outputs))


FUNCTIONS = {
    "npu_mhc_pre": ops.npu_mhc_pre,
    "npu_mhc_pre_backward": ops.npu_mhc_pre_backward,
    "mhc_head": autograd.mhc_head,
    "npu_mhc_sinkhorn": ops.npu_mhc_sinkhorn,
    "npu_mhc_sinkhorn_backward": ops.npu_mhc_sinkhorn_backward,
    "npu_mhc_post": ops.npu_mhc_post,
    "npu_mhc_post_backward": ops.npu_mhc_post_backward,
    "mhc_pre_sinkhorn": _mhc_pre_sinkhorn,
    "mhc_pre_sinkhorn_backward": ops.mhc_pre_sinkhorn_backward,
}


def _without_graph(function):
    """The CPU and Meta kernel: the function with grad mode off, so it calls the library
    (or, on meta tensors, only sizes the outputs) and records nothing; the Autograd kernel
    above it (the function itself) records the graph."""
    def kernel(*args, **kwargs):
        with torch.no_grad():
            return function(*args, **kwargs)
    kernel.__name__ = function.__name__
    return kernel


def _register(namespace):
    library = Library(namespace, "DEF")
    for name, schema in SCHEMAS.items():
        library.define(schema)
        function = FUNCTIONS[name]
        library.impl(name, _without_graph(function), "CPU")
        library.impl(name, _without_graph(function), "Meta")
        library.impl(name, function, "Autograd")
    return library


# The Library objects own the registrations: kept for the life of the process.
_libraries = {"mhc": _register("mhc")}


def register_npu_namespace():
    """Registers the same operators as torch.ops.npu.<name> (npu_mhc_pre, ..., mhc_head),
    for code written against torch_npu; calling it again does nothing. Refused (RuntimeError)
    when torch_npu is loaded: its torch.ops.npu operators are the real ones."""
    if "npu" in _libraries:
        return
    if "torch_npu" in sys.modules:
        raise RuntimeError("mhc.register_npu_namespace: torch_npu is loaded and owns torch.ops.npu; "
                           "use torch.ops.mhc.<name> (or mhc.<name>) alongside it")
    try:
        _libraries["npu"] = _register("npu")
    except RuntimeError as error:
        raise RuntimeError(f"mhc.register_npu_namespace: cannot define torch.ops.npu ({error})") from error


__all__ = ["register_npu_namespace", "SCHEMAS"]
