"""The library calls under the Python face: argument checks, tensor views, options,
errors, the process settings (threads, kernel family), the forward on checked
arguments and npu_mhc_pre_backward. ops.py (npu_mhc_pre) and autograd.py
(MhcPreFunction) are built on this module; it imports neither.

Inputs are handed to the C library as views with their real strides (no copies);
outputs are allocated here, contiguous, by _output_cache (which reuses the buffers
of large outputs whose tensors are gone). All validation of shapes,
strides and dtypes is the library's; this side only checks what ctypes cannot
express (Python types, devices, torch dtypes without an mhc equivalent) and, before
allocating outputs, the library's size limits on the dims they are sized from.
"""
import ctypes
import numbers

import torch

from . import _lib
from ._output_cache import cache as _outputs

_MHC_DTYPE = {torch.bfloat16: _lib.BF16, torch.float16: _lib.FP16, torch.float32: _lib.FP32}
_X_DTYPES = "bf16, fp16 or fp32"

_num_threads = 0  # 0: the library's default (MHC_NUM_THREADS or all hardware threads)

# The library's operand limit (MHC_MAX_ELEMENTS).
_MAX_ELEMENTS = _lib.MAX_ELEMENTS
_LIMIT_TEXT = "2^44 elements, more than any machine's memory"


def set_num_threads(n):
    """Threads used by later calls; 0 restores the library default."""
    global _num_threads
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"num_threads: expected an int, got {type(n).__name__}")
    if n < 0 or n > 2**31 - 1:
        raise ValueError(f"num_threads: expected 0 (default) or a positive count, got {n}")
    _num_threads = int(n)


def get_num_threads():
    return _num_threads


def set_isa(name=None):
    """Sets the process default kernel family: "amx", "avx512", "avx2", "portable" or
    "reference" (see available_isas()); None or "" goes back to MHC_ISA / the best this
    CPU runs. A family this build or CPU cannot run is a ValueError, default unchanged."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name: expected a str or None, got {type(name).__name__}")
    if name is not None and "\0" in name:
        raise ValueError(f"name: unknown kernel family {name!r}")
    if _lib.lib.mhc_set_isa(None if name is None else name.encode()) == _lib.OK:
        return
    raise ValueError(_lib.last_error()[0])  # names the family and lists the available ones


def isa():
    """The process default kernel family's name: set_isa's, else MHC_ISA's (even one
    this CPU cannot run: calls then fail naming it), else the best available."""
    return _lib.isa()


def available_isas():
    """The kernel families this build and CPU run, best first."""
    return [name for name in _lib.ISA_NAMES if _lib.lib.mhc_isa_available(name.encode()) == 1]


def _check(name, t, expected=_X_DTYPES, optional=False):
    """Python-side checks, so torch-level mistakes get clear exceptions."""
    if t is None:
        if optional:
            return None
        raise TypeError(f"{name}: expected a torch.Tensor, got None")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{name}: expected a CPU tensor, got device {t.device}")
    if t.layout != torch.strided:
        raise ValueError(f"{name}: expected a dense (strided) tensor, got layout {t.layout}")
    if t.dtype not in _MHC_DTYPE:
        raise TypeError(f"{name}: expected dtype {expected}, got {t.dtype}")
    if t.dim() > _lib.MAX_RANK:
        raise ValueError(f"{name}: rank {t.dim()} exceeds the maximum {_lib.MAX_RANK}")
    return t


def _view(t):
    """The mhc_tensor view of a checked tensor, or None (-> NULL) for an absent one."""
    if t is None:
        return None
    view = _lib.MhcTensor()
    view.data = t.data_ptr()  # already includes the storage offset
    view.dtype = _MHC_DTYPE[t.dtype]
    view.rank = t.dim()
    for i, (extent, stride) in enumerate(zip(t.shape, t.stride())):
        view.shape[i] = extent
        view.strides[i] = stride
    return view


def _ptr(view):
    return None if view is None else ctypes.byref(view)


def _eps(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
    return float(value)


def _matmul_precision(inner_precise):
    """torch_npu's inner_precise (the int 0 or 1) as the library's matmul_precision."""
    if (isinstance(inner_precise, numbers.Integral) and not isinstance(inner_precise, bool)
            and inner_precise in (0, 1)):
        return _lib.MATMUL_HF32 if inner_precise == 1 else _lib.MATMUL_FP32
    raise ValueError(f"inner_precise: expected the int 0 (fp32) or 1 (HF32), got {inner_precise!r}")


def _options(norm_eps, hc_eps, matmul_precision=_lib.MATMUL_FP32):
    options = _lib.lib.mhc_default_options()
    if norm_eps is not None:  # the backward has no norm_eps: keep the default
        options.norm_eps = norm_eps
    options.hc_eps = hc_eps
    options.num_threads = _num_threads
    options.matmul_precision = matmul_precision
    return options


def _raise_on_error(status):
    if status == _lib.OK:
        return
    message, kind = _lib.last_error()
    message = message or f"mhc: call failed with status {status}"
    raise (TypeError if kind == _lib.ERROR_DTYPE else ValueError)(message)


def _token_dims(x):
    """Leading per-token dims and (N, D) from x: [B,S,N,D] -> (B,S), [T,N,D] -> (T,)."""
    if x.dim() not in (3, 4):
        raise ValueError(f"x: expected shape [B,S,N,D] or [T,N,D], got {list(x.shape)}")
    return tuple(x.shape[:-2]), x.shape[-2], x.shape[-1]


def _branches(alpha):
    """The branches alpha's entries scale (SPEC §6): 1 the head (pre only), 2 pre and
    post, 3 pre, post and res; an impossible count (the library rejects alpha) counts
    as 3, so every output is sized as for the standard form."""
    entries = alpha.numel()
    return entries if entries in (1, 2) else 3


def _dims(shape):
    return "[" + ",".join(str(s) for s in shape) + "]"


def _output_dims(x, phi):
    """(lead, N, D, F) that size the outputs, after the library's size limits on x and
    phi (which bound every output) are checked, so no allocation can exceed them.
    F is 0 when phi is not [F, N*D]: the library then rejects phi before it looks at
    any output, so none is sized from phi's dims."""
    lead, n, d = _token_dims(x)
    if n < 1 or d < 1:
        raise ValueError(f"x: expected N >= 1 and D >= 1 in [B,S,N,D] or [T,N,D], got {_dims(x.shape)}")
    t = 1
    for extent in lead:
        t *= extent
    k = n * d
    if k > _MAX_ELEMENTS or t * k > _MAX_ELEMENTS:
        raise ValueError(f"x: expected N*D and T*N*D of at most {_LIMIT_TEXT}, got {_dims(x.shape)}")
    f = phi.shape[0] if phi.dim() == 2 and phi.shape[1] == k else 0
    if f * k > _MAX_ELEMENTS or t * f > _MAX_ELEMENTS:
        raise ValueError(f"phi: expected F*K and T*F of at most {_LIMIT_TEXT}, got {_dims(phi.shape)}")
    return lead, n, d, f


def check_pre_args(x, phi, alpha, bias, gamma, norm_eps, hc_eps, out_flag, inner_precise):
    """npu_mhc_pre's Python-side checks, in argument order; returns (norm_eps, hc_eps,
    matmul_precision)."""
    _check("x", x)
    _check("phi", phi, "fp32")
    _check("alpha", alpha, "fp32")
    _check("bias", bias, "fp32")
    _check("gamma", gamma, "fp32", optional=True)
    norm_eps = _eps("norm_eps", norm_eps)
    hc_eps = _eps("hc_eps", hc_eps)
    if isinstance(out_flag, bool) or not isinstance(out_flag, numbers.Integral):
        raise TypeError(f"out_flag: expected 0 or 1, got {type(out_flag).__name__}")
    if out_flag not in (0, 1):
        raise ValueError(f"out_flag: expected 0 or 1, got {out_flag}")
    return norm_eps, hc_eps, _matmul_precision(inner_precise)


def run_pre_forward(x, phi, alpha, bias, gamma, norm_eps, hc_eps, matmul_precision, with_caches):
    """The library's forward on checked arguments: (h_in, h_post, h_res, inv_rms, h_mix,
    h_pre), the last three None unless with_caches."""
    # Shapes of the outputs follow the inputs; the library checks they agree.
    lead, n, d, f = _output_dims(x, phi)
    r = max(f - 2 * n, 0)
    f32 = torch.float32
    branches = _branches(alpha)
    h_in = _outputs.empty(lead + (d,), x.dtype)
    h_post = h_res = None  # the head has neither, a two-entry alpha no h_res (SPEC §6)
    if branches >= 2:
        h_post = _outputs.empty(lead + (n,), f32)
    if branches == 3:
        h_res = _outputs.empty(lead + ((n, n) if r == n * n else (r,)), f32)
    inv_rms = h_mix = h_pre = None
    if with_caches:
        inv_rms = _outputs.empty(lead, f32)
        h_mix = _outputs.empty(lead + (f,), f32)
        h_pre = _outputs.empty(lead + (n,), f32)

    views = [_view(t) for t in (x, phi, alpha, bias, gamma, h_in, h_post, h_res, inv_rms, h_mix, h_pre)]
    options = _options(norm_eps, hc_eps, matmul_precision)
    status = _lib.lib.mhc_pre_forward(*[_ptr(v) for v in views], ctypes.byref(options))
    _raise_on_error(status)
    return h_in, h_post, h_res, inv_rms, h_mix, h_pre


def npu_mhc_pre_backward(x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix,
                         h_pre, h_post, gamma=None, hc_eps=1e-6, grad_x_post=None):
    """mHC pre-block backward (SPEC §3), fed the caches of npu_mhc_pre(out_flag=1); its
    matrix products run in fp32 (torch_npu's backward has no inner_precise).

    Returns (grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma); without gamma,
    grad_gamma is a zero-filled [N, D] fp32 tensor, as torch_npu's. With a two-entry
    alpha, grad_h_res is not read (it may be anything, None included); with a one-entry
    alpha (the head, SPEC §6) neither are grad_h_post and h_post, and grad_alpha is [1].
    """
    x = _check("x", x)
    phi = _check("phi", phi, "fp32")
    alpha = _check("alpha", alpha, "fp32")
    branches = _branches(alpha)
    if branches < 3:
        grad_h_res = None  # no residual branch (SPEC §6)
    if branches < 2:
        grad_h_post = h_post = None  # the head: no post branch either
    grad_h_in = _check("grad_h_in", grad_h_in)
    grad_h_post = _check("grad_h_post", grad_h_post, "fp32", optional=branches < 2)
    grad_h_res = _check("grad_h_res", grad_h_res, "fp32", optional=True)
    inv_rms = _check("inv_rms", inv_rms, "fp32")
    h_mix = _check("h_mix", h_mix, "fp32")
    h_pre = _check("h_pre", h_pre, "fp32")
    h_post = _check("h_post", h_post, "fp32", optional=branches < 2)
    gamma = _check("gamma", gamma, "fp32", optional=True)
    hc_eps = _eps("hc_eps", hc_eps)
    grad_x_post = _check("grad_x_post", grad_x_post, optional=True)

    f32 = torch.float32
    _, n, d, f = _output_dims(x, phi)
    grad_x = _outputs.empty(x.shape, x.dtype)
    grad_phi = _outputs.empty((f, n * d), f32)
    # alpha's own shape unless it is impossible: the library then rejects alpha first.
    grad_alpha = _outputs.empty(alpha.shape if alpha.numel() <= 3 else (3,), f32)
    grad_bias = _outputs.empty((f,), f32)
    grad_gamma = _outputs.empty((n, d), f32) if gamma is not None else None

    tensors = (x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix, h_pre, h_post,
               gamma, grad_x_post, grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma)
    views = [_view(t) for t in tensors]
    options = _options(None, hc_eps)
    status = _lib.lib.mhc_pre_backward(*[_ptr(v) for v in views], ctypes.byref(options))
    _raise_on_error(status)
    if grad_gamma is None:
        grad_gamma = torch.zeros((n, d), dtype=f32)
    return grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma
