"""The torch_npu-style functions npu_mhc_pre / npu_mhc_pre_backward on CPU tensors
(npu_mhc_pre's autograd rule is autograd.MhcPreFunction).

The library calls, argument checks and npu_mhc_pre_backward itself are in _core.py;
imports go one way: _lib <- _core <- autograd <- ops.
"""
import torch

from ._core import (check_pre_args, get_num_threads, npu_mhc_pre_backward, run_pre_forward,
                    set_num_threads)
from .autograd import MhcPreFunction


def _builds_graph(*inputs):
    """True when autograd would record a call on these inputs (grad mode on and one of
    them requires grad)."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)


def npu_mhc_pre(x, phi, alpha, bias, *, gamma=None, norm_eps=1e-6, hc_eps=1e-6, out_flag=0,
                inner_precise=0):
    """mHC pre-block forward (SPEC §2), differentiable (SPEC §8).

    Returns (h_in, h_post, h_res, inv_rms, h_mix, h_pre); the last three are None
    unless out_flag=1, h_res is None for a two-entry alpha (F = 2N), h_post and h_res
    for a one-entry alpha (the head, F = N: h_mix is [.., N]; see also mhc_head).

    inner_precise is torch_npu's int: 0 computes h_mix = phi · u in fp32, 1 rounds
    both operands to HF32 first (SPEC §7); anything else (a bool, 1.0, "1", 2) is a
    ValueError.

    When grad mode is on and x, phi, alpha, bias or gamma requires grad, the call goes
    through autograd.MhcPreFunction: h_in, h_post and h_res (those returned) get a
    grad_fn whose backward is npu_mhc_pre_backward. The caches inv_rms, h_mix, h_pre are
    non-differentiable outputs (requires_grad False): they are the backward's saved
    state, not values to train through, so gradients flow from h_in, h_post and h_res
    only. Otherwise (no input requires grad, torch.no_grad, inference_mode) the library
    is called directly.
    """
    if _builds_graph(x, phi, alpha, bias, gamma):
        outputs = MhcPreFunction.apply(x, phi, alpha, bias, gamma, norm_eps, hc_eps, out_flag,
                                       inner_precise)
        return outputs if out_flag else outputs + (None, None, None)
    norm_eps, hc_eps, precision = check_pre_args(x, phi, alpha, bias, gamma, norm_eps, hc_eps,
                                                 out_flag, inner_precise)
    return run_pre_forward(x, phi, alpha, bias, gamma, norm_eps, hc_eps, precision,
                           with_caches=bool(out_flag))


__all__ = ["npu_mhc_pre", "npu_mhc_pre_backward", "set_num_threads", "get_num_threads"]
