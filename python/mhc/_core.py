"""The library calls under the Python face: argument checks, tensor views, options,
errors, the process settings (threads, kernel family), each operator's forward on
checked arguments (and the backwards on checked arguments that the autograd rules
call), and the backwards torch_npu / CANN expose as functions
(npu_mhc_pre_backward, npu_mhc_sinkhorn_backward, npu_mhc_post_backward,
mhc_pre_sinkhorn_backward), mhc_post_pre_backward and the site backward's two steps
(mhc_site_backward_prepare, mhc_site_backward_finish). ops.py (the npu_* forwards,
mhc_pre_sinkhorn, mhc_pre_single_pass, mhc_collapse, mhc_post_pre, mhc_rms_norm) and autograd.py (their
autograd.Functions) are built on this module; it imports neither.

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

try:  # torch.compile's shape-only tensors
    from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor
except ImportError:  # a torch without them: nothing is one
    class _FakeTensor:
        pass

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
    """Sets the process default kernel family: "amx", "avx512", "avx2" (x86-64), "sve2",
    "sve", "neon" (aarch64), "portable" or "reference" (see available_isas()); None or ""
    goes back to MHC_ISA / the best this
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
    return _lib.available_isas()


def _check(name, t, expected=_X_DTYPES, optional=False):
    """Python-side checks, so torch-level mistakes get clear exceptions."""
    if t is None:
        if optional:
            return None
        raise TypeError(f"{name}: expected a torch.Tensor, got None")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in ("cpu", "meta"):
        raise ValueError(f"{name}: expected a CPU tensor, got device {t.device}")
    if t.layout != torch.strided:
        raise ValueError(f"{name}: expected a dense (strided) tensor, got layout {t.layout}")
    if t.dtype not in _MHC_DTYPE:
        raise TypeError(f"{name}: expected dtype {expected}, got {t.dtype}")
    if t.dim() > _lib.MAX_RANK:
        raise ValueError(f"{name}: rank {t.dim()} exceeds the maximum {_lib.MAX_RANK}")
    return t


def _check_described(op, **tensors):
    """_check of each tensor argument as the operator's description (operators.def) gives
    it: fp32 or x's dtypes, None allowed where it is nullable. The tensors, in order."""
    described = {a["name"]: a for a in _lib.OPERATORS[op]["args"]}
    return tuple(_check(name, t, "fp32" if described[name]["dtypes"] == "fp32" else _X_DTYPES,
                        optional=described[name]["nullable"]) for name, t in tensors.items())


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


def _has_data(t):
    """False for a meta tensor or a FakeTensor (shapes and dtypes without memory)."""
    return t.device.type != "meta" and not isinstance(t, _FakeTensor)


def _allocator(**tensors):
    """(empty, shape_only) for one call, given its tensors by name: with CPU tensors, the
    output cache's empty and False; with meta or fake ones only (torch's shape
    propagation: the meta kernels of torch.ops.mhc, torch.compile's fake tensors) outputs
    made like them, and True: the library is then not called, only the outputs' shapes
    and dtypes are computed. A meta or fake tensor among CPU ones is a ValueError naming it."""
    present = [(name, t) for name, t in tensors.items() if t is not None]
    shapes_only = [(name, t) for name, t in present if not _has_data(t)]
    if not shapes_only:
        return _outputs.empty, False
    if len(shapes_only) == len(present):
        device = present[0][1].device
        return (lambda shape, dtype: torch.empty(shape, dtype=dtype, device=device)), True
    name, t = shapes_only[0]
    what = "device meta" if t.device.type == "meta" else "a fake tensor"
    raise ValueError(f"{name}: expected a CPU tensor, got {what} (with meta or fake tensors, every input is one)")


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


def _options(norm_eps, hc_eps, matmul_precision=_lib.MATMUL_FP32, prepared=None):
    """The call's mhc_options; prepared: a PreparedPre's library handle, or None."""
    options = _lib.lib.mhc_default_options()
    options.prepared = prepared
    if norm_eps is not None:  # the backward has no norm_eps: keep the default
        options.norm_eps = norm_eps
    options.hc_eps = hc_eps
    options.num_threads = _num_threads
    options.matmul_precision = matmul_precision
    return options


def _raise_on_error(status, names=None):
    """The library's failure as TypeError (a dtype) or ValueError (anything else), with its
    message. `names` maps the library's name of a tensor to the face's, for the operators
    whose torch arguments are named otherwise (Sinkhorn's z is npu_mhc_sinkhorn's x): the
    message's leading "name:" is then the argument's name as the caller wrote it."""
    if status == _lib.OK:
        return
    message, kind = _lib.last_error()
    message = message or f"mhc: call failed with status {status}"
    if names:
        head, sep, rest = message.partition(":")
        if sep and head in names:
            message = names[head] + sep + rest
    raise (TypeError if kind == _lib.ERROR_DTYPE else ValueError)(message)


_TENSOR_KINDS = (_lib.ARG_TENSOR_IN, _lib.ARG_TENSOR_OUT)
# Per operator, its arguments as (name, is a tensor), in its C function's order.
_ARGUMENTS = {op: tuple((a["name"], a["kind"] in _TENSOR_KINDS) for a in d["args"])
              for op, d in _lib.OPERATORS.items()}
_ARGUMENT_NAMES = {op: frozenset(name for name, _ in arguments) for op, arguments in _ARGUMENTS.items()}


def _call(op, options, names=None, **arguments):
    """The library's operator `op` on its arguments by their names in its description
    (operators.def): tensors (a missing or None one is NULL) and scalars; raises its
    error (see _raise_on_error for `names`)."""
    unknown = arguments.keys() - _ARGUMENT_NAMES[op]
    if unknown:
        raise TypeError(f"mhc: {op} has no argument {sorted(unknown)[0]!r}")
    views = [(_view(arguments.get(name)) if tensor else arguments[name]) for name, tensor in _ARGUMENTS[op]]
    args = [(_ptr(v) if tensor else v) for v, (_, tensor) in zip(views, _ARGUMENTS[op])]
    _raise_on_error(getattr(_lib, op)(*args, ctypes.byref(options)), names)


def _check_out_flag(out_flag):
    """torch_npu's out_flag: the int 0 or 1 (a bool is refused, as torch's int arguments do)."""
    if isinstance(out_flag, bool) or not isinstance(out_flag, numbers.Integral):
        raise TypeError(f"out_flag: expected 0 or 1, got {type(out_flag).__name__}")
    if out_flag not in (0, 1):
        raise ValueError(f"out_flag: expected 0 or 1, got {out_flag}")


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
    _check_out_flag(out_flag)
    return norm_eps, hc_eps, _matmul_precision(inner_precise)


def run_pre_forward(x, phi, alpha, bias, gamma, norm_eps, hc_eps, matmul_precision, with_caches, prepared=None):
    """The library's forward on checked arguments: (h_in, h_post, h_res, inv_rms, h_mix,
    h_pre), the last three None unless with_caches."""
    empty, shape_only = _allocator(x=x, phi=phi, alpha=alpha, bias=bias, gamma=gamma)
    # Shapes of the outputs follow the inputs; the library checks they agree.
    lead, n, d, f = _output_dims(x, phi)
    r = max(f - 2 * n, 0)
    f32 = torch.float32
    branches = _branches(alpha)
    h_in = empty(lead + (d,), x.dtype)
    h_post = h_res = None  # the head has neither, a two-entry alpha no h_res (SPEC §6)
    if branches >= 2:
        h_post = empty(lead + (n,), f32)
    if branches == 3:
        h_res = empty(lead + ((n, n) if r == n * n else (r,)), f32)
    inv_rms = h_mix = h_pre = None
    if with_caches:
        inv_rms = empty(lead, f32)
        h_mix = empty(lead + (f,), f32)
        h_pre = empty(lead + (n,), f32)

    if shape_only:
        return h_in, h_post, h_res, inv_rms, h_mix, h_pre
    _call("pre_forward", _options(norm_eps, hc_eps, matmul_precision, prepared), x=x, phi=phi, alpha=alpha, bias=bias,
          gamma=gamma, h_in=h_in, h_post=h_post, h_res=h_res, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre)
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
    empty, shape_only = _allocator(x=x, phi=phi, alpha=alpha, grad_h_in=grad_h_in, grad_h_post=grad_h_post,
                                   grad_h_res=grad_h_res, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre,
                                   h_post=h_post, gamma=gamma, grad_x_post=grad_x_post)
    grad_x = empty(x.shape, x.dtype)
    grad_phi = empty((f, n * d), f32)
    # alpha's own shape unless it is impossible: the library then rejects alpha first.
    grad_alpha = empty(alpha.shape if alpha.numel() <= 3 else (3,), f32)
    grad_bias = empty((f,), f32)
    grad_gamma = empty((n, d), f32) if gamma is not None else None

    if shape_only:
        return grad_x, grad_phi, grad_alpha, grad_bias, empty((n, d), f32) if gamma is None else grad_gamma
    _call("pre_backward", _options(None, hc_eps), x=x, phi=phi, alpha=alpha, grad_h_in=grad_h_in,
          grad_h_post=grad_h_post, grad_h_res=grad_h_res, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre, h_post=h_post,
          gamma=gamma, grad_x_post=grad_x_post, grad_x=grad_x, grad_phi=grad_phi, grad_alpha=grad_alpha,
          grad_bias=grad_bias, grad_gamma=grad_gamma)
    if grad_gamma is None:
        grad_gamma = torch.zeros((n, d), dtype=f32)
    return grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma


# Shared by the layer's other operators (SPEC §10-§12).

_INT64_MAX = 2**63 - 1


def _count(shape):
    total = 1
    for extent in shape:
        total *= extent
    return total


def _num_iters(num_iters):
    """The Sinkhorn's iteration count I: an int >= 1 (a bool is refused)."""
    if isinstance(num_iters, bool) or not isinstance(num_iters, numbers.Integral):
        raise TypeError(f"num_iters: expected an int, got {type(num_iters).__name__}")
    if num_iters < 1 or num_iters > _INT64_MAX:
        raise ValueError(f"num_iters: expected an int >= 1, got {num_iters}")
    return int(num_iters)


def _check_limit(name, what, count, given):
    if count > _MAX_ELEMENTS:
        raise ValueError(f"{name}: expected {what} of at most {_LIMIT_TEXT}, got {given}")


def _square_token_dims(x):
    """Leading per-token dims and N of a Sinkhorn operand [B,S,N,N] / [T,N,N] (rank only:
    the library checks that the last two dims agree), after the size limit on it."""
    if x.dim() not in (3, 4):
        raise ValueError(f"x: expected shape [B,S,N,N] or [T,N,N], got {_dims(x.shape)}")
    lead = tuple(x.shape[:-2])
    _check_limit("x", "T*N*N", x.numel(), _dims(x.shape))
    return lead, x.shape[-2], x.shape[-1]


# MhcSinkhorn (SPEC §10).

# The library's tensor names -> npu_mhc_sinkhorn's and npu_mhc_sinkhorn_backward's.
_SINKHORN_NAMES = {"z": "x", "h_res": "y", "grad_h_res": "grad_y", "grad_z": "grad_x"}


def sinkhorn_pitch(n):
    """The row pitch of npu_mhc_sinkhorn's caches: Na = 8*ceil(N/8), CANN's sizes (SPEC §10)."""
    return 8 * ((n + 7) // 8)


def check_sinkhorn_args(x, eps, num_iters, out_flag):
    """npu_mhc_sinkhorn's Python-side checks, in argument order; returns (eps, num_iters)."""
    _check("x", x, "fp32")
    eps = _eps("eps", eps)
    num_iters = _num_iters(num_iters)
    _check_out_flag(out_flag)
    return eps, num_iters


def run_sinkhorn_forward(x, eps, num_iters, with_caches):
    """The library's MhcSinkhorn on checked arguments: (y, norm_out, sum_out), the caches
    None unless with_caches (then [2I, *lead, N, Na] and [2I, *lead, Na])."""
    empty, shape_only = _allocator(x=x)
    lead, rows, n = _square_token_dims(x)
    f32 = torch.float32
    norm_out = sum_out = None
    if with_caches:
        pitch = sinkhorn_pitch(n)
        slots = 2 * num_iters
        _check_limit("num_iters", f"the caches' 2*num_iters*T*N*Na (Na = {pitch})",
                     slots * _count(lead) * rows * pitch, f"num_iters={num_iters} with x {_dims(x.shape)}")
    y = empty(x.shape, f32)
    if with_caches:
        norm_out = empty((slots,) + lead + (rows, pitch), f32)
        sum_out = empty((slots,) + lead + (pitch,), f32)
    if shape_only:
        return y, norm_out, sum_out
    _call("sinkhorn_forward", _options(None, 1e-6), _SINKHORN_NAMES, z=x, eps=eps, num_iters=num_iters, h_res=y,
          norm_out=norm_out, sum_out=sum_out)
    return y, norm_out, sum_out


def run_sinkhorn_backward(grad_y, norm_out, sum_out, x, eps, num_iters):
    """The library's MhcSinkhornBackward on checked arguments, from the caches (x None) or
    from x, eps and num_iters alone (the caches None); the two give the same bits."""
    empty, shape_only = _allocator(grad_y=grad_y, norm_out=norm_out, sum_out=sum_out, x=x)
    if grad_y.dim() not in (3, 4):
        raise ValueError(f"grad_y: expected shape [B,S,N,N] or [T,N,N], got {_dims(grad_y.shape)}")
    _check_limit("grad_y", "T*N*N", grad_y.numel(), _dims(grad_y.shape))
    grad_x = empty(grad_y.shape, torch.float32)
    if shape_only:
        return grad_x
    _call("sinkhorn_backward", _options(None, 1e-6), _SINKHORN_NAMES, grad_h_res=grad_y, norm_out=norm_out,
          sum_out=sum_out, z=x, eps=eps, num_iters=num_iters, grad_z=grad_x)
    return grad_x


def npu_mhc_sinkhorn_backward(grad_y, norm_out, sum_out):
    """MhcSinkhornBackward (SPEC §10) from the caches of npu_mhc_sinkhorn(out_flag=1):
    grad_x [B,S,N,N] / [T,N,N] fp32, the grad of x given grad_y, the grad of y. The number
    of iterations is the caches' (2I slots); their row pitch is theirs too."""
    grad_y = _check("grad_y", grad_y, "fp32")
    norm_out = _check("norm_out", norm_out, "fp32")
    sum_out = _check("sum_out", sum_out, "fp32")
    # The caches carry I (2I slots); eps is not used in the backward from caches.
    slots = norm_out.shape[0] if norm_out.dim() > 0 else 0
    num_iters = max(slots // 2, 1)
    return run_sinkhorn_backward(grad_y, norm_out, sum_out, None, 1e-6, num_iters)


# MhcPost (SPEC §11).

_POST_NAMES = {"grad_out": "grad_y"}


def check_post_args(x, h_res, h_out, h_post):
    """npu_mhc_post's Python-side checks, in argument order."""
    _check("x", x)
    _check("h_res", h_res, "fp32", optional=True)
    _check("h_out", h_out)
    _check("h_post", h_post, "fp32")


def _post_dims(x):
    """(lead, N, D) of MhcPost's x, after the size limits on every output sized from it."""
    lead, n, d = _token_dims(x)
    t = _count(lead)
    _check_limit("x", "T*N*D, T*N*N and T*D", max(t * n * d, t * n * n, t * d), _dims(x.shape))
    return lead, n, d


def run_post_forward(x, h_res, h_out, h_post):
    """The library's MhcPost on checked arguments: out, x's shape and dtype."""
    empty, shape_only = _allocator(x=x, h_res=h_res, h_out=h_out, h_post=h_post)
    _post_dims(x)
    out = empty(x.shape, x.dtype)
    if shape_only:
        return out
    _call("post_forward", _options(None, 1e-6), _POST_NAMES, x=x, h_res=h_res, h_out=h_out, h_post=h_post, out=out)
    return out


def _grad_x_dtype(grad_x_dtype, x):
    if grad_x_dtype is None:
        return x.dtype
    if grad_x_dtype not in (x.dtype, torch.float32):
        raise TypeError(f"grad_x_dtype: expected None, x's dtype ({x.dtype}) or torch.float32, "
                        f"got {grad_x_dtype!r}")
    return grad_x_dtype


def run_post_backward(grad_y, x, h_res, h_out, h_post, grad_x_dtype, with_grad_h_res=True):
    """The library's MhcPostBackward on checked arguments: (grad_x, grad_h_res, grad_h_out,
    grad_h_post); grad_h_res None unless with_grad_h_res."""
    empty, shape_only = _allocator(grad_y=grad_y, x=x, h_res=h_res, h_out=h_out, h_post=h_post)
    lead, n, d = _post_dims(x)
    f32 = torch.float32
    grad_x = empty(x.shape, grad_x_dtype)
    grad_h_res = empty(lead + (n, n), f32) if with_grad_h_res else None
    grad_h_out = empty(lead + (d,), x.dtype)
    grad_h_post = empty(lead + (n,), f32)
    if shape_only:
        return grad_x, grad_h_res, grad_h_out, grad_h_post
    _call("post_backward", _options(None, 1e-6), _POST_NAMES, grad_out=grad_y, x=x, h_res=h_res, h_out=h_out,
          h_post=h_post, grad_x=grad_x, grad_h_res=grad_h_res, grad_h_out=grad_h_out, grad_h_post=grad_h_post)
    return grad_x, grad_h_res, grad_h_out, grad_h_post


def npu_mhc_post_backward(grad_y, x, h_res, h_out, h_post, *, grad_x_dtype=None):
    """MhcPostBackward (SPEC §11): (grad_x, grad_h_res, grad_h_out, grad_h_post).

    grad_y is the grad of npu_mhc_post's out (x's shape and dtype); h_res None is the
    identity. grad_h_res [.., N, N] fp32 is Σ_d x[i,d]·g[j,d], returned with or without h_res
    (SPEC: "given even without h_res"). grad_x_dtype (our extension, keyword-only): None
    for x's dtype, or torch.float32 for grad_x unrounded, to feed npu_mhc_pre_backward's
    grad_x_post; rounded to x's dtype it is the default grad_x, bit for bit.
    """
    grad_y = _check("grad_y", grad_y)
    x = _check("x", x)
    h_res = _check("h_res", h_res, "fp32", optional=True)
    h_out = _check("h_out", h_out)
    h_post = _check("h_post", h_post, "fp32")
    dtype = _grad_x_dtype(grad_x_dtype, x)
    return run_post_backward(grad_y, x, h_res, h_out, h_post, dtype)


# MhcPreSinkhorn (SPEC §12), CANN's fused pair.

# The library's tensor names -> mhc_pre_sinkhorn_backward's (CANN's cann_ops_transformer).
_PRE_SINKHORN_NAMES = {"grad_h_in": "grad_hin", "h_mix": "hc_before_norm"}


def _check_bool_flag(name, value):
    """CANN's bool out_flag: True/False, or the int 0/1."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise (ValueError if isinstance(value, numbers.Integral) else TypeError)(
        f"{name}: expected a bool (or 0/1), got {value!r}")


def check_pre_sinkhorn_args(x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, out_flag):
    """mhc_pre_sinkhorn's Python-side checks, in argument order; returns (num_iters, hc_eps,
    norm_eps, out_flag)."""
    _check("x", x)
    _check("phi", phi, "fp32")
    _check("alpha", alpha, "fp32")
    _check("bias", bias, "fp32")
    if isinstance(hc_mult, bool) or not isinstance(hc_mult, numbers.Integral):
        raise TypeError(f"hc_mult: expected an int, got {type(hc_mult).__name__}")
    _, n, _ = _token_dims(x)
    if hc_mult != n:
        raise ValueError(f"hc_mult: expected x's N = {n} (x {_dims(x.shape)}), got {hc_mult}")
    num_iters = _num_iters(num_iters)
    hc_eps = _eps("hc_eps", hc_eps)
    norm_eps = _eps("norm_eps", norm_eps)
    return num_iters, hc_eps, norm_eps, _check_bool_flag("out_flag", out_flag)


def _inv_rms_view(inv_rms, x):
    """CANN's inv_rms [.., 1] as the library's per-token [..] (a view of the same memory);
    any other shape as given, for the library to judge."""
    if inv_rms is not None and inv_rms.dim() == x.dim() - 1 and inv_rms.shape[-1] == 1:
        return inv_rms[..., 0]
    return inv_rms


def run_pre_sinkhorn_forward(x, phi, alpha, bias, num_iters, hc_eps, norm_eps, with_caches, prepared=None):
    """The library's MhcPreSinkhorn on checked arguments, in CANN's order and shapes:
    (h_in, h_post, h_res, h_pre, hc_before_norm, inv_rms, sum_out, norm_out), the last five
    None unless with_caches. h_res [.., N*N]; h_pre [.., N]; hc_before_norm = h_mix [.., F];
    inv_rms [.., 1]; sum_out [2I, .., N]; norm_out [2I, .., N, N]."""
    empty, shape_only = _allocator(x=x, phi=phi, alpha=alpha, bias=bias)
    lead, n, d, f = _output_dims(x, phi)
    f32 = torch.float32
    tokens = _count(lead)
    slots = 2 * num_iters
    if with_caches:
        _check_limit("num_iters", "the caches' 2*num_iters*T*N*N", slots * tokens * n * n,
                     f"num_iters={num_iters} with x {_dims(x.shape)}")
    h_in = empty(lead + (d,), x.dtype)
    h_post = empty(lead + (n,), f32)
    h_res = empty(lead + (n * n,), f32)
    h_pre = h_mix = inv_rms = sum_out = norm_out = None
    if with_caches:
        h_pre = empty(lead + (n,), f32)
        h_mix = empty(lead + (f,), f32)
        inv_rms = empty(lead + (1,), f32)
        sum_out = empty((slots,) + lead + (n,), f32)
        norm_out = empty((slots,) + lead + (n, n), f32)
    if shape_only:
        return h_in, h_post, h_res, h_pre, h_mix, inv_rms, sum_out, norm_out
    _call("pre_sinkhorn_forward", _options(norm_eps, hc_eps, prepared=prepared), _PRE_SINKHORN_NAMES, x=x, phi=phi, alpha=alpha,
          bias=bias, num_iters=num_iters, h_in=h_in, h_post=h_post, h_res=h_res,
          inv_rms=_inv_rms_view(inv_rms, x), h_mix=h_mix, h_pre=h_pre, norm_out=norm_out, sum_out=sum_out)
    return h_in, h_post, h_res, h_pre, h_mix, inv_rms, sum_out, norm_out


def mhc_pre_sinkhorn_backward(grad_hin, grad_h_post, grad_h_res, x, phi, alpha, bias, h_pre,
                              hc_before_norm, inv_rms, sum_out, norm_out, hc_eps=1e-6):
    """MhcPreSinkhornBackward (SPEC §12), CANN's cann_ops_transformer signature, fed the
    caches of mhc_pre_sinkhorn(..., out_flag=True): MhcSinkhornBackward from the caches,
    then MhcPreBackward (no gamma, no grad_x_post). Returns (grad_x, grad_phi, grad_alpha,
    grad_bias). hc_eps must be the forward's (it recovers σ from h_pre, SPEC §3)."""
    grad_hin = _check("grad_hin", grad_hin)
    grad_h_post = _check("grad_h_post", grad_h_post, "fp32")
    grad_h_res = _check("grad_h_res", grad_h_res, "fp32")
    x = _check("x", x)
    phi = _check("phi", phi, "fp32")
    alpha = _check("alpha", alpha, "fp32")
    bias = _check("bias", bias, "fp32")
    h_pre = _check("h_pre", h_pre, "fp32")
    hc_before_norm = _check("hc_before_norm", hc_before_norm, "fp32")
    inv_rms = _check("inv_rms", inv_rms, "fp32")
    sum_out = _check("sum_out", sum_out, "fp32")
    norm_out = _check("norm_out", norm_out, "fp32")
    hc_eps = _eps("hc_eps", hc_eps)

    f32 = torch.float32
    _, n, d, f = _output_dims(x, phi)
    empty, shape_only = _allocator(grad_hin=grad_hin, grad_h_post=grad_h_post, grad_h_res=grad_h_res, x=x,
                                   phi=phi, alpha=alpha, bias=bias, h_pre=h_pre, hc_before_norm=hc_before_norm,
                                   inv_rms=inv_rms, sum_out=sum_out, norm_out=norm_out)
    grad_x = empty(x.shape, x.dtype)
    grad_phi = empty((f, n * d), f32)
    grad_alpha = empty(alpha.shape if alpha.numel() <= 3 else (3,), f32)
    grad_bias = empty((f,), f32)
    if shape_only:
        return grad_x, grad_phi, grad_alpha, grad_bias
    _call("pre_sinkhorn_backward", _options(None, hc_eps), _PRE_SINKHORN_NAMES, grad_h_in=grad_hin,
          grad_h_post=grad_h_post, grad_h_res=grad_h_res, x=x, phi=phi, alpha=alpha, bias=bias, h_pre=h_pre,
          h_mix=hc_before_norm, inv_rms=_inv_rms_view(inv_rms, x), sum_out=sum_out, norm_out=norm_out,
          grad_x=grad_x, grad_phi=grad_phi, grad_alpha=grad_alpha, grad_bias=grad_bias)
    return grad_x, grad_phi, grad_alpha, grad_bias


# MhcPreSinglePass and MhcCollapse (SPEC §14), DeepSeek-V4.1's carried pre-mix.

def check_pre_single_pass_args(x, phi, alpha, bias, pre_mix, gamma, num_iters, hc_eps, norm_eps, sinkhorn_eps):
    """mhc_pre_single_pass's Python-side checks, in argument order; returns (num_iters, hc_eps,
    norm_eps, sinkhorn_eps), sinkhorn_eps None taken as hc_eps."""
    _check("x", x)
    _check("phi", phi, "fp32")
    _check("alpha", alpha, "fp32")
    _check("bias", bias, "fp32")
    _check("pre_mix", pre_mix, "fp32", optional=True)
    _check("gamma", gamma, "fp32", optional=True)
    num_iters = _num_iters(num_iters)
    hc_eps = _eps("hc_eps", hc_eps)
    norm_eps = _eps("norm_eps", norm_eps)
    sinkhorn_eps = hc_eps if sinkhorn_eps is None else _eps("sinkhorn_eps", sinkhorn_eps)
    return num_iters, hc_eps, norm_eps, sinkhorn_eps


def run_pre_single_pass_forward(x, phi, alpha, bias, pre_mix, gamma, num_iters, hc_eps, norm_eps, sinkhorn_eps,
                                prepared=None):
    """The library's MhcPreSinglePass on checked arguments: (h_in, h_pre, h_post, h_res,
    inv_rms, h_mix); h_res [.., N, N] is the Sinkhorn's H, inv_rms and h_mix the backward's
    caches."""
    empty, shape_only = _allocator(x=x, phi=phi, alpha=alpha, bias=bias, pre_mix=pre_mix, gamma=gamma)
    lead, n, d, f = _output_dims(x, phi)
    f32 = torch.float32
    h_in = empty(lead + (d,), x.dtype)
    h_pre = empty(lead + (n,), f32)
    h_post = empty(lead + (n,), f32)
    h_res = empty(lead + (n, n), f32)
    inv_rms = empty(lead, f32)
    h_mix = empty(lead + (f,), f32)
    if shape_only:
        return h_in, h_pre, h_post, h_res, inv_rms, h_mix
    _call("pre_single_pass_forward", _options(norm_eps, hc_eps, prepared=prepared), x=x, phi=phi, alpha=alpha, bias=bias,
          gamma=gamma, pre_mix=pre_mix, sinkhorn_eps=sinkhorn_eps, num_iters=num_iters, h_in=h_in, h_pre=h_pre,
          h_post=h_post, h_res=h_res, inv_rms=inv_rms, h_mix=h_mix)
    return h_in, h_pre, h_post, h_res, inv_rms, h_mix


def _single_pass_grads(empty, x, phi, pre_mix, gamma, with_grad_pre_mix):
    """The single pass's (and the site backward finish's) gradients, allocated by `empty`:
    (grad_x, grad_pre_mix, grad_phi, grad_alpha, grad_bias, grad_gamma), grad_pre_mix None
    without pre_mix or with_grad_pre_mix, grad_gamma None without gamma."""
    lead, n, d, f = _output_dims(x, phi)
    f32 = torch.float32
    return (empty(x.shape, x.dtype), empty(lead + (n,), f32) if pre_mix is not None and with_grad_pre_mix else None,
            empty((f, n * d), f32), empty((3,), f32), empty((f,), f32),
            empty((n, d), f32) if gamma is not None else None)


def run_pre_single_pass_backward(x, phi, alpha, bias, pre_mix, gamma, grad_h_in, grad_h_pre, grad_h_post,
                                 grad_h_res, inv_rms, h_mix, h_pre, h_post, num_iters, hc_eps, norm_eps,
                                 sinkhorn_eps, grad_x_post=None, with_grad_pre_mix=True):
    """The library's MhcPreSinglePass backward on checked arguments and the forward's caches:
    (grad_x, grad_pre_mix, grad_phi, grad_alpha, grad_bias, grad_gamma); grad_pre_mix None
    without pre_mix or with_grad_pre_mix, grad_gamma None without gamma. grad_h_res is the
    grad of H; grad_h_pre (None: 0) the grad of h_pre."""
    empty, shape_only = _allocator(x=x, phi=phi, alpha=alpha, bias=bias, pre_mix=pre_mix, gamma=gamma,
                                   grad_h_in=grad_h_in, grad_h_pre=grad_h_pre, grad_h_post=grad_h_post,
                                   grad_h_res=grad_h_res, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre,
                                   h_post=h_post, grad_x_post=grad_x_post)
    grad_x, grad_pre_mix, grad_phi, grad_alpha, grad_bias, grad_gamma = grads = _single_pass_grads(
        empty, x, phi, pre_mix, gamma, with_grad_pre_mix)
    if shape_only:
        return grads
    _call("pre_single_pass_backward", _options(norm_eps, hc_eps), x=x, phi=phi, alpha=alpha, bias=bias,
          gamma=gamma, pre_mix=pre_mix, grad_h_in=grad_h_in, grad_h_pre=grad_h_pre, grad_h_post=grad_h_post,
          grad_h_res=grad_h_res, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre, h_post=h_post,
          grad_x_post=grad_x_post, sinkhorn_eps=sinkhorn_eps, num_iters=num_iters, grad_x=grad_x,
          grad_pre_mix=grad_pre_mix, grad_phi=grad_phi, grad_alpha=grad_alpha, grad_bias=grad_bias,
          grad_gamma=grad_gamma)
    return grad_x, grad_pre_mix, grad_phi, grad_alpha, grad_bias, grad_gamma


def check_collapse_args(x, pre_mix):
    """mhc_collapse's Python-side checks, in argument order."""
    _check("x", x)
    _check("pre_mix", pre_mix, "fp32")


def _collapse_dims(x):
    """(lead, N, D) of MhcCollapse's x, after the size limit on the outputs sized from it."""
    lead, n, d = _token_dims(x)
    _check_limit("x", "T*N*D", _count(lead) * n * d, _dims(x.shape))
    return lead, n, d


def run_collapse_forward(x, pre_mix):
    """The library's MhcCollapse on checked arguments: h [.., D] in x's dtype."""
    empty, shape_only = _allocator(x=x, pre_mix=pre_mix)
    lead, _, d = _collapse_dims(x)
    h = empty(lead + (d,), x.dtype)
    if shape_only:
        return h
    _call("collapse_forward", _options(None, 1e-6), x=x, pre_mix=pre_mix, h=h)
    return h


def run_rms_norm(x, weight, eps):
    """The library's MhcRmsNorm (SPEC §16) after the Python-side checks: y [.., D] in x's
    dtype. x [B,S,D] or [T,D]; weight [D] in x's dtype or fp32."""
    _check("x", x)
    _check("weight", weight)
    _eps("eps", eps)
    empty, shape_only = _allocator(x=x, weight=weight)
    if x.dim() not in (2, 3):
        raise ValueError(f"x: expected shape [B,S,D] or [T,D], got {list(x.shape)}")
    _check_limit("x", "T*D", x.numel(), _dims(x.shape))
    y = empty(tuple(x.shape), x.dtype)
    if shape_only:
        return y
    _call("rms_norm_forward", _options(None, 1e-6), x=x, weight=weight, eps=eps, y=y)
    return y


def run_collapse_backward(grad_h, x, pre_mix):
    """The library's MhcCollapse backward on checked arguments: (grad_x in x's dtype,
    grad_pre_mix [.., N] fp32)."""
    empty, shape_only = _allocator(grad_h=grad_h, x=x, pre_mix=pre_mix)
    lead, n, _ = _collapse_dims(x)
    grad_x = empty(x.shape, x.dtype)
    grad_pre_mix = empty(lead + (n,), torch.float32)
    if shape_only:
        return grad_x, grad_pre_mix
    _call("collapse_backward", _options(None, 1e-6), grad_h=grad_h, x=x, pre_mix=pre_mix, grad_x=grad_x,
          grad_pre_mix=grad_pre_mix)
    return grad_x, grad_pre_mix


# MhcPostPre (SPEC §15): the layer boundary fused, MhcPost of site s then site s+1's pre.

def _single_pass_flag(single_pass):
    """mhc_post_pre's single_pass: a bool (or the int 0/1), as the library's 0 (V4) / 1 (V4.1)."""
    return int(_check_bool_flag("single_pass", single_pass))


def check_post_pre_args(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, single_pass, gamma, num_iters, hc_eps,
                        norm_eps, sinkhorn_eps):
    """mhc_post_pre's Python-side checks, in argument order (V4 with a pre_mix is refused
    where single_pass is read); returns (single_pass 0/1, num_iters, hc_eps, norm_eps,
    sinkhorn_eps), sinkhorn_eps None taken as hc_eps."""
    _check("x", x)
    _check("h_res", h_res, "fp32", optional=True)
    _check("h_out", h_out)
    _check("h_post", h_post, "fp32")
    _check("phi", phi, "fp32")
    _check("alpha", alpha, "fp32")
    _check("bias", bias, "fp32")
    _check("pre_mix", pre_mix, "fp32", optional=True)
    single_pass = _single_pass_flag(single_pass)
    if not single_pass and pre_mix is not None:
        raise ValueError("pre_mix: expected None with single_pass=False (V4 collapses x_next with the site's own "
                         "h_pre); the carried pre-mix is V4.1's (single_pass=True)")
    _check("gamma", gamma, "fp32", optional=True)
    num_iters = _num_iters(num_iters)
    hc_eps = _eps("hc_eps", hc_eps)
    norm_eps = _eps("norm_eps", norm_eps)
    sinkhorn_eps = hc_eps if sinkhorn_eps is None else _eps("sinkhorn_eps", sinkhorn_eps)
    return single_pass, num_iters, hc_eps, norm_eps, sinkhorn_eps


def _post_pre_dims(x, phi):
    """(lead, N, D, F) that size MhcPostPre's outputs, after the size limits of both halves."""
    _post_dims(x)
    return _output_dims(x, phi)


def run_post_pre_forward(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, single_pass, num_iters, hc_eps,
                         norm_eps, sinkhorn_eps, prepared=None):
    """The library's MhcPostPre on checked arguments: (x_next, h_in, h_pre, h_post_next,
    h_res_next, inv_rms, h_mix); x_next has x's shape and dtype, h_res_next [.., N, N] is site
    s+1's H, inv_rms and h_mix the backward's caches."""
    empty, shape_only = _allocator(x=x, h_res=h_res, h_out=h_out, h_post=h_post, phi=phi, alpha=alpha, bias=bias,
                                   pre_mix=pre_mix, gamma=gamma)
    lead, n, d, f = _post_pre_dims(x, phi)
    f32 = torch.float32
    x_next = empty(x.shape, x.dtype)
    h_in = empty(lead + (d,), x.dtype)
    h_pre = empty(lead + (n,), f32)
    h_post_next = empty(lead + (n,), f32)
    h_res_next = empty(lead + (n, n), f32)
    inv_rms = empty(lead, f32)
    h_mix = empty(lead + (f,), f32)
    outputs = x_next, h_in, h_pre, h_post_next, h_res_next, inv_rms, h_mix
    if shape_only:
        return outputs
    _call("post_pre_forward", _options(norm_eps, hc_eps, prepared=prepared), x=x, h_res=h_res, h_out=h_out, h_post=h_post, phi=phi,
          alpha=alpha, bias=bias, gamma=gamma, pre_mix=pre_mix, single_pass=single_pass, sinkhorn_eps=sinkhorn_eps,
          num_iters=num_iters, x_next=x_next, h_in=h_in, h_pre=h_pre, h_post_next=h_post_next,
          h_res_next=h_res_next, inv_rms=inv_rms, h_mix=h_mix)
    return outputs


def run_post_pre_backward(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, x_next, grad_x_next, grad_h_in,
                          grad_h_pre, grad_h_post_next, grad_h_res_next, inv_rms, h_mix, h_pre, h_post_next,
                          single_pass, num_iters, hc_eps, norm_eps, sinkhorn_eps, grad_x_dtype=None,
                          with_grad_h_res=True, with_grad_pre_mix=True):
    """The library's MhcPostPre backward on checked arguments and the forward's outputs:
    (grad_x, grad_h_res, grad_h_out, grad_h_post, grad_pre_mix, grad_phi, grad_alpha,
    grad_bias, grad_gamma). grad_h_res None without h_res or with_grad_h_res, grad_pre_mix
    None without pre_mix or with_grad_pre_mix, grad_gamma None without gamma; grad_x in
    grad_x_dtype (None: x's dtype; or torch.float32). grad_x_next (None: 0) and grad_h_pre
    (None: 0) are the grads x_next and h_pre receive."""
    empty, shape_only = _allocator(x=x, h_res=h_res, h_out=h_out, h_post=h_post, phi=phi, alpha=alpha, bias=bias,
                                   pre_mix=pre_mix, gamma=gamma, x_next=x_next, grad_x_next=grad_x_next,
                                   grad_h_in=grad_h_in, grad_h_pre=grad_h_pre, grad_h_post_next=grad_h_post_next,
                                   grad_h_res_next=grad_h_res_next, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre,
                                   h_post_next=h_post_next)
    lead, n, d, f = _post_pre_dims(x, phi)
    f32 = torch.float32
    grad_x = empty(x.shape, _grad_x_dtype(grad_x_dtype, x))
    grad_h_res = empty(lead + (n, n), f32) if h_res is not None and with_grad_h_res else None
    grad_h_out = empty(lead + (d,), x.dtype)
    grad_h_post = empty(lead + (n,), f32)
    grad_pre_mix = empty(lead + (n,), f32) if pre_mix is not None and with_grad_pre_mix else None
    grad_phi = empty((f, n * d), f32)
    grad_alpha = empty((3,), f32)
    grad_bias = empty((f,), f32)
    grad_gamma = empty((n, d), f32) if gamma is not None else None
    grads = grad_x, grad_h_res, grad_h_out, grad_h_post, grad_pre_mix, grad_phi, grad_alpha, grad_bias, grad_gamma
    if shape_only:
        return grads
    _call("post_pre_backward", _options(norm_eps, hc_eps), x=x, h_res=h_res, h_out=h_out, h_post=h_post, phi=phi,
          alpha=alpha, bias=bias, gamma=gamma, pre_mix=pre_mix, x_next=x_next, grad_x_next=grad_x_next,
          grad_h_in=grad_h_in, grad_h_pre=grad_h_pre, grad_h_post_next=grad_h_post_next,
          grad_h_res_next=grad_h_res_next, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre, h_post_next=h_post_next,
          single_pass=single_pass, sinkhorn_eps=sinkhorn_eps, num_iters=num_iters, grad_x=grad_x,
          grad_h_res=grad_h_res, grad_h_out=grad_h_out, grad_h_post=grad_h_post, grad_pre_mix=grad_pre_mix,
          grad_phi=grad_phi, grad_alpha=grad_alpha, grad_bias=grad_bias, grad_gamma=grad_gamma)
    return grads


def run_site_backward_prepare(grad_x_next, x, h_res, h_out, h_post, with_grad_h_res=True):
    """The site backward's prepare (SPEC §15) on checked arguments: MhcPostBackward without
    grad_x, (grad_h_res, grad_h_out, grad_h_post); grad_h_res None unless with_grad_h_res."""
    empty, shape_only = _allocator(grad_x_next=grad_x_next, x=x, h_res=h_res, h_out=h_out, h_post=h_post)
    lead, n, d = _post_dims(x)
    f32 = torch.float32
    grad_h_res = empty(lead + (n, n), f32) if with_grad_h_res else None
    grad_h_out = empty(lead + (d,), x.dtype)
    grad_h_post = empty(lead + (n,), f32)
    if not shape_only:
        _call("site_backward_prepare", _options(None, 1e-6), grad_x_next=grad_x_next, x=x, h_res=h_res, h_out=h_out,
              h_post=h_post, grad_h_res=grad_h_res, grad_h_out=grad_h_out, grad_h_post=grad_h_post)
    return grad_h_res, grad_h_out, grad_h_post


def run_site_backward_finish(x, phi, alpha, bias, pre_mix, gamma, h_res, grad_x_next, grad_h_in, grad_h_pre,
                             grad_h_post, grad_h_res, inv_rms, h_mix, h_pre, h_post, single_pass, num_iters, hc_eps,
                             norm_eps, sinkhorn_eps, with_grad_pre_mix=True):
    """The site backward's finish (SPEC §15) on checked arguments and the forward's caches:
    the site's pre backward (V4 or V4.1) with the post's grad_x formed from h_res and
    grad_x_next (None: none). Returns (grad_x, grad_pre_mix, grad_phi, grad_alpha, grad_bias,
    grad_gamma) as run_pre_single_pass_backward."""
    empty, shape_only = _allocator(x=x, phi=phi, alpha=alpha, bias=bias, pre_mix=pre_mix, gamma=gamma, h_res=h_res,
                                   grad_x_next=grad_x_next, grad_h_in=grad_h_in, grad_h_pre=grad_h_pre,
                                   grad_h_post=grad_h_post, grad_h_res=grad_h_res, inv_rms=inv_rms, h_mix=h_mix,
                                   h_pre=h_pre, h_post=h_post)
    grad_x, grad_pre_mix, grad_phi, grad_alpha, grad_bias, grad_gamma = grads = _single_pass_grads(
        empty, x, phi, pre_mix, gamma, with_grad_pre_mix)
    if not shape_only:
        _call("site_backward_finish", _options(norm_eps, hc_eps), x=x, phi=phi, alpha=alpha, bias=bias, gamma=gamma,
              pre_mix=pre_mix, h_res=h_res, grad_x_next=grad_x_next, grad_h_in=grad_h_in, grad_h_pre=grad_h_pre,
              grad_h_post=grad_h_post, grad_h_res=grad_h_res, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre,
              h_post=h_post, single_pass=single_pass, sinkhorn_eps=sinkhorn_eps, num_iters=num_iters, grad_x=grad_x,
              grad_pre_mix=grad_pre_mix, grad_phi=grad_phi, grad_alpha=grad_alpha, grad_bias=grad_bias,
              grad_gamma=grad_gamma)
    return grads


def mhc_site_backward_prepare(grad_x_next, x, h_res, h_out, h_post):
    """The site backward's first step (SPEC §15), every argument checked in order: the
    site's MhcPostBackward without grad_x, from grad_x_next (the grad of the site's output
    x_next) -> (grad_h_res, grad_h_out, grad_h_post); grad_h_res None without h_res. Its
    grad_x comes from mhc_site_backward_finish, which forms it again instead of reading it."""
    grad_x_next, x, h_res, h_out, h_post = _check_described(
        "site_backward_prepare", grad_x_next=grad_x_next, x=x, h_res=h_res, h_out=h_out, h_post=h_post)
    return run_site_backward_prepare(grad_x_next, x, h_res, h_out, h_post, with_grad_h_res=h_res is not None)


def mhc_site_backward_finish(x, phi, alpha, bias, pre_mix, gamma, h_res, grad_x_next, grad_h_in, grad_h_pre,
                             grad_h_post, grad_h_res, inv_rms, h_mix, h_pre, h_post, *, single_pass=False,
                             num_iters=20, hc_eps=1e-6, norm_eps=1e-6, sinkhorn_eps=None):
    """The site backward's second step (SPEC §15), every argument checked in order: the
    site's pre backward (single_pass False: MhcSinkhornBackward and MhcPreBackward, h_in
    collapsed with its own h_pre; True: MhcPreSinglePass's), from the forward's caches
    (inv_rms, h_mix, h_pre, h_post), the grads of the pre's outputs (grad_h_in, grad_h_pre
    (None: 0), grad_h_post, grad_h_res = the grad of H) and the site's post (h_res = its H,
    grad_x_next; None: no post grad), with grad_x_post formed as MhcPostBackward's fp32
    grad_x. Returns (grad_x, grad_pre_mix, grad_phi, grad_alpha, grad_bias, grad_gamma): the
    bits of mhc_post_backward (grad_x in fp32) then the pre backward with it as grad_x_post."""
    (x, phi, alpha, bias, pre_mix, gamma, h_res, grad_x_next, grad_h_in, grad_h_pre, grad_h_post, grad_h_res, inv_rms,
     h_mix, h_pre, h_post) = _check_described(
        "site_backward_finish", x=x, phi=phi, alpha=alpha, bias=bias, pre_mix=pre_mix, gamma=gamma, h_res=h_res,
        grad_x_next=grad_x_next, grad_h_in=grad_h_in, grad_h_pre=grad_h_pre, grad_h_post=grad_h_post,
        grad_h_res=grad_h_res, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre, h_post=h_post)
    single_pass = _single_pass_flag(single_pass)
    num_iters = _num_iters(num_iters)
    hc_eps = _eps("hc_eps", hc_eps)
    norm_eps = _eps("norm_eps", norm_eps)
    sinkhorn_eps = hc_eps if sinkhorn_eps is None else _eps("sinkhorn_eps", sinkhorn_eps)
    return run_site_backward_finish(x, phi, alpha, bias, pre_mix, gamma, h_res, grad_x_next, grad_h_in, grad_h_pre,
                                    grad_h_post, grad_h_res, inv_rms, h_mix, h_pre, h_post, single_pass, num_iters,
                                    hc_eps, norm_eps, sinkhorn_eps)


def mhc_post_pre_backward(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, x_next, grad_x_next, grad_h_in,
                          grad_h_pre, grad_h_post_next, grad_h_res_next, inv_rms, h_mix, h_pre, h_post_next, *,
                          single_pass=False, num_iters=20, hc_eps=1e-6, norm_eps=1e-6, sinkhorn_eps=None,
                          grad_x_dtype=None):
    """MhcPostPre's backward (SPEC §15) as a function, every argument checked in order: the
    forward's inputs and outputs (x_next, h_pre, h_post_next) and caches (inv_rms, h_mix, from
    run_post_pre_forward), and the grads of its outputs (grad_x_next and grad_h_pre may be
    None: 0). Returns run_post_pre_backward's nine gradients. MhcPostPreFunction's backward
    is this computation; it is here for the callers that keep the caches themselves."""
    (x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, x_next, grad_x_next, grad_h_in, grad_h_pre,
     grad_h_post_next, grad_h_res_next, inv_rms, h_mix, h_pre, h_post_next) = _check_described(
        "post_pre_backward", x=x, h_res=h_res, h_out=h_out, h_post=h_post, phi=phi, alpha=alpha, bias=bias,
        pre_mix=pre_mix, gamma=gamma, x_next=x_next, grad_x_next=grad_x_next, grad_h_in=grad_h_in,
        grad_h_pre=grad_h_pre, grad_h_post_next=grad_h_post_next, grad_h_res_next=grad_h_res_next, inv_rms=inv_rms,
        h_mix=h_mix, h_pre=h_pre, h_post_next=h_post_next)
    single_pass = _single_pass_flag(single_pass)
    num_iters = _num_iters(num_iters)
    hc_eps = _eps("hc_eps", hc_eps)
    norm_eps = _eps("norm_eps", norm_eps)
    sinkhorn_eps = hc_eps if sinkhorn_eps is None else _eps("sinkhorn_eps", sinkhorn_eps)
    dtype = _grad_x_dtype(grad_x_dtype, x)
    return run_post_pre_backward(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, gamma, x_next, grad_x_next,
                                 grad_h_in, grad_h_pre, grad_h_post_next, grad_h_res_next, inv_rms, h_mix, h_pre,
                                 h_post_next, single_pass, num_iters, hc_eps, norm_eps, sinkhorn_eps, dtype)
