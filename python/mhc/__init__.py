"""mhc: the operators of an mHC layer on CPU torch tensors: MhcPre, MhcSinkhorn, MhcPost,
CANN's fused MhcPreSinkhorn, DeepSeek-V4.1's MhcPreSinglePass and MhcCollapse, the fused
layer boundary MhcPostPre, and their backwards; the site backward's two steps
(mhc_site_backward_prepare, mhc_site_backward_finish), which mhc.nn's blocks run.

    h_in, h_post, h_res, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=1)
    # inner_precise=1: h_mix's product on HF32-rounded operands (SPEC §7)
    grads = mhc.npu_mhc_pre_backward(x, phi, alpha, g_h_in, g_h_post, g_h_res,
                                     inv_rms, h_mix, h_pre, h_post)
    h_in, h_post, h_res = mhc.mhc_pre(x, phi, alpha, bias)   # differentiable
    h_in = mhc.mhc_head(x, phi_n, alpha_1, bias_n)           # the head: alpha [1], phi [N, K]

npu_mhc_pre is differentiable as well (the same autograd rule, MhcPreFunction) when an
input requires grad; its caches inv_rms, h_mix, h_pre are non-differentiable outputs.

The rest of the layer (SPEC §10-§13), each forward differentiable too:

    H, norm_out, sum_out = mhc.npu_mhc_sinkhorn(h_res, num_iters=20, out_flag=1)
    grad_z = mhc.npu_mhc_sinkhorn_backward(grad_H, norm_out, sum_out)
    x_next = mhc.npu_mhc_post(x, H, h_out, h_post)           # H enters transposed
    grad_x, grad_H, grad_h_out, grad_h_post = mhc.npu_mhc_post_backward(g, x, H, h_out, h_post)
    h_in, h_post, H = mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, hc_mult=N)   # CANN's fused pair

DeepSeek-V4.1's single pass (SPEC §14): each site collapses its streams with the previous
site's h_pre (None at the first site: stream 0), differentiable in every input:

    h_in, h_pre, h_post, H = mhc.mhc_pre_single_pass(x, phi, alpha, bias, pre_mix)
    h = mhc.mhc_collapse(x_last, h_pre_last)                  # the model's end

The layer boundary fused (SPEC §15): site s's MhcPost, then site s+1's pre (V4, or V4.1 with
single_pass=True and its carried pre_mix), differentiable in every input:

    x_next, h_in, h_pre, h_post, H = mhc.mhc_post_pre(x, H_s, y_s, h_post_s, phi, alpha, bias,
                                                      pre_mix, single_pass=True)

    torch.ops.mhc.npu_mhc_pre(x, phi, alpha, bias)   # every operator, with meta kernels
    mhc.register_npu_namespace()                     # the same as torch.ops.npu.* (torch_npu's)

    w = mhc.prepare_pre(phi, alpha, bias)            # constant weights prepared once (inference)
    mhc.npu_mhc_pre(x, phi, alpha, bias, prepared=w)  # the same bits, without re-forming them

    mhc.set_isa("portable")   # the kernel family of later calls (None: back to the default)
    mhc.isa(), mhc.available_isas()

Outputs of 1 MiB or more are allocated from an output cache that keeps their buffers
for reuse once no tensor uses them: at most 2 GiB of idle buffers by default. Set the
size with MHC_OUTPUT_CACHE_MB (MiB, read at import) or mhc.set_output_cache(nbytes);
mhc.set_output_cache(0) (or MHC_OUTPUT_CACHE_MB=0) turns it off and releases what it
holds; mhc.get_output_cache() returns (capacity, idle bytes held).

The native library is bound through its C ABI with ctypes (see _lib.py): its
prototypes and constants come from the library's own description of its operators.
"""
from . import _lib
from ._core import available_isas, isa, mhc_site_backward_finish, mhc_site_backward_prepare, set_isa
from .autograd import (MhcCollapseFunction, MhcPostFunction, MhcPostPreFunction, MhcPreFunction,
                       MhcPreSinglePassFunction, MhcPreSinkhornFunction, MhcSinkhornFunction, mhc_head, mhc_pre)
from .ops import (get_num_threads, mhc_collapse, mhc_post_pre, mhc_pre_single_pass, mhc_pre_sinkhorn, mhc_rms_norm,
                  mhc_pre_sinkhorn_backward, npu_mhc_post, npu_mhc_post_backward, npu_mhc_pre,
                  npu_mhc_pre_backward, npu_mhc_sinkhorn, npu_mhc_sinkhorn_backward, set_num_threads)
from ._output_cache import get_output_cache, set_output_cache
from .prepared import PreparedPre, prepare_pre
from .torch_library import register_npu_namespace  # defines torch.ops.mhc.*
from . import nn  # mhc.nn: MhcBlock, MhcHead, expand_streams, MhcPre as torch.nn modules

__version__ = _lib.version()

__all__ = [
    "npu_mhc_pre", "npu_mhc_pre_backward", "mhc_pre", "mhc_head", "MhcPreFunction",
    "npu_mhc_sinkhorn", "npu_mhc_sinkhorn_backward", "MhcSinkhornFunction",
    "npu_mhc_post", "npu_mhc_post_backward", "MhcPostFunction",
    "mhc_pre_sinkhorn", "mhc_pre_sinkhorn_backward", "MhcPreSinkhornFunction",
    "mhc_pre_single_pass", "MhcPreSinglePassFunction", "mhc_collapse", "MhcCollapseFunction",
    "mhc_post_pre", "MhcPostPreFunction", "mhc_site_backward_prepare", "mhc_site_backward_finish", "mhc_rms_norm",
    "set_num_threads", "get_num_threads", "set_output_cache", "get_output_cache",
    "set_isa", "isa", "available_isas", "register_npu_namespace", "prepare_pre", "PreparedPre", "__version__",
]
