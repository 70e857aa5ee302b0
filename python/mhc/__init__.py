"""mhc: the mHC pre-block operators (MhcPre, MhcPreBackward) on CPU torch tensors.

    h_in, h_post, h_res, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=1)
    # inner_precise=1: h_mix's product on HF32-rounded operands (SPEC §7)
    grads = mhc.npu_mhc_pre_backward(x, phi, alpha, g_h_in, g_h_post, g_h_res,
                                     inv_rms, h_mix, h_pre, h_post)
    h_in, h_post, h_res = mhc.mhc_pre(x, phi, alpha, bias)   # differentiable
    h_in = mhc.mhc_head(x, phi_n, alpha_1, bias_n)           # the head: alpha [1], phi [N, K]

npu_mhc_pre is differentiable as well (the same autograd rule, MhcPreFunction) when an
input requires grad; its caches inv_rms, h_mix, h_pre are non-differentiable outputs.

    mhc.set_isa("portable")   # the kernel family of later calls (None: back to the default)
    mhc.isa(), mhc.available_isas()

The native library is bound through its C ABI with ctypes (see _lib.py).
"""
from . import _lib
from ._core import available_isas, isa, set_isa
from .autograd import MhcPreFunction, mhc_head, mhc_pre
from .ops import get_num_threads, npu_mhc_pre, npu_mhc_pre_backward, set_num_threads
from ._output_cache import get_output_cache, set_output_cache
from . import nn  # mhc.nn.MhcPre, the pre block as a torch.nn.Module

__version__ = _lib.version()

__all__ = [
    "npu_mhc_pre", "npu_mhc_pre_backward", "mhc_pre", "mhc_head", "MhcPreFunction",
    "set_num_threads", "get_num_threads", "set_output_cache", "get_output_cache",
    "set_isa", "isa", "available_isas", "__version__",
]
