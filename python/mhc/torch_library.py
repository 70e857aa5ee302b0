"""The operators registered with torch's dispatcher: torch.ops.mhc.<name>, with the
schemas of SPEC §8 and §10-§12 (torch_npu's names and CANN's cann_ops_transformer pair),
mhc_head, SPEC §14's mhc_pre_single_pass and mhc_collapse, SPEC §15's mhc_post_pre and
SPEC §16's mhc_rms_norm.

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

from . import _lib, autograd, ops

# Each operator's schema, from the library's description of its operators (mhc_torch_ops).
SCHEMAS = {name: schema for name, (_, schema) in _lib.TORCH_OPS.items()}


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
    "mhc_pre_single_pass": ops.mhc_pre_single_pass,
    "mhc_collapse": ops.mhc_collapse,
    "mhc_post_pre": ops.mhc_post_pre,
    "mhc_rms_norm": ops.mhc_rms_norm,
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
    if sorted(SCHEMAS) != sorted(FUNCTIONS):
        raise ImportError(f"mhc: torch operators described {sorted(SCHEMAS)} != with a function {sorted(FUNCTIONS)}")
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
