"""ctypes binding of the mhc C API (include/mhc/mhc.h).

Only the C ABI is used: no torch C++ extension, so the package works with any
torch build. The library is looked up in this order:
  1. the path in the environment variable MHC_LIBRARY (an error if it fails),
  2. libmhc.so next to this file (the CMake build copies it here),
  3. ctypes.util.find_library("mhc") (an installed library).
"""
import ctypes
import ctypes.util
import os

MAX_RANK = 8
MAX_ELEMENTS = 17592186044416  # 2^44

# mhc_dtype
BF16 = 0
FP16 = 1
FP32 = 2

# status codes
OK = 0
ERR_NULLPTR = 161001
ERR_INVALID = 161002
ERR_RUNTIME = 361001
ERR_INTERNAL = 561001

# mhc_error_kind
ERROR_NONE = 0
ERROR_NULL = 1
ERROR_DTYPE = 2
ERROR_SHAPE = 3
ERROR_LAYOUT = 4
ERROR_VALUE = 5
ERROR_RUNTIME = 6

# mhc_isa_id: the kernel families (ISA_NAMES[i] is the family of id i + 1; the Arm
# families' ids follow)
ISA_DEFAULT = 0
ISA_AMX = 1
ISA_AVX512 = 2
ISA_AVX2 = 3
ISA_PORTABLE = 4
ISA_REFERENCE = 5
ISA_SVE2 = 6
ISA_SVE = 7
ISA_NEON = 8
ISA_NAMES = ("amx", "avx512", "avx2", "portable", "reference", "sve2", "sve", "neon")
# Best first, as the registry orders them (x86-64's, then aarch64's, then the portable ones).
ISA_BEST_FIRST = ("amx", "avx512", "avx2", "sve2", "sve", "neon", "portable", "reference")

# enum mhc_matmul_precision
MATMUL_FP32 = 0
MATMUL_HF32 = 1


class MhcTensor(ctypes.Structure):
    """struct mhc_tensor: a non-owning view, shape and strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_RANK),
        ("strides", ctypes.c_int64 * MAX_RANK),
    ]


class MhcOptions(ctypes.Structure):
    """struct mhc_options."""

    _fields_ = [
        ("norm_eps", ctypes.c_double),
        ("hc_eps", ctypes.c_double),
        ("num_threads", ctypes.c_int32),
        ("isa", ctypes.c_int32),  # mhc_isa_id; ISA_DEFAULT: the process default (set_isa)
        ("matmul_precision", ctypes.c_int32),  # MATMUL_FP32 or MATMUL_HF32 (inner_precise)
    ]


_BUILD_HINT = (
    "build it from the repository root with "
    "`cmake -S . -B build -G Ninja && ninja -C build` (this copies libmhc.so into "
    "python/mhc/), or point the environment variable MHC_LIBRARY at libmhc.so"
)


def _load():
    explicit = os.environ.get("MHC_LIBRARY")
    if explicit:
        try:
            return ctypes.CDLL(explicit)
        except OSError as exc:
            # An explicit choice must not silently fall back to another library.
            raise ImportError(f"mhc: cannot load MHC_LIBRARY={explicit!r}: {exc}") from exc
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libmhc.so")
    if os.path.exists(beside):
        try:
            return ctypes.CDLL(beside)
        except OSError as exc:
            raise ImportError(f"mhc: cannot load {beside}: {exc}; {_BUILD_HINT}") from exc
    found = ctypes.util.find_library("mhc")
    if found:
        try:
            return ctypes.CDLL(found)
        except OSError as exc:
            raise ImportError(f"mhc: cannot load {found}: {exc}; {_BUILD_HINT}") from exc
    raise ImportError(f"mhc: the native library libmhc.so was not found; {_BUILD_HINT}")


lib = _load()

_T = ctypes.POINTER(MhcTensor)
_O = ctypes.POINTER(MhcOptions)

lib.mhc_default_options.argtypes = []
lib.mhc_default_options.restype = MhcOptions

# x, phi, alpha, bias, gamma, h_in, h_post, h_res, inv_rms, h_mix, h_pre, options
lib.mhc_pre_forward.argtypes = [_T] * 11 + [_O]
lib.mhc_pre_forward.restype = ctypes.c_int

# x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix, h_pre, h_post,
# gamma, grad_x_post, grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma, options
lib.mhc_pre_backward.argtypes = [_T] * 17 + [_O]
lib.mhc_pre_backward.restype = ctypes.c_int


class _Missing:
    """Stands in for a function the loaded library does not export (a libmhc.so built
    before that operator existed): calling it is an ImportError naming it, while the
    operators the library has keep working."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args):
        raise ImportError(f"mhc: the loaded native library has no {self.name} (it predates that "
                          f"operator); {_BUILD_HINT}")


def _bind(name, argtypes):
    """lib.<name> with its prototype, or a _Missing stand-in."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        return _Missing(name)
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


# The layer's other operators (SPEC §10-§12).
# z, eps, num_iters, h_res, norm_out, sum_out, options
sinkhorn_forward = _bind("mhc_sinkhorn_forward", [_T, ctypes.c_double, ctypes.c_int64, _T, _T, _T, _O])
# grad_h_res, norm_out, sum_out, z, eps, num_iters, grad_z, options
sinkhorn_backward = _bind("mhc_sinkhorn_backward",
                          [_T, _T, _T, _T, ctypes.c_double, ctypes.c_int64, _T, _O])
# x, h_res, h_out, h_post, out, options
post_forward = _bind("mhc_post_forward", [_T] * 5 + [_O])
# grad_out, x, h_res, h_out, h_post, grad_x, grad_h_res, grad_h_out, grad_h_post, options
post_backward = _bind("mhc_post_backward", [_T] * 9 + [_O])
# x, phi, alpha, bias, num_iters, h_in, h_post, h_res, inv_rms, h_mix, h_pre, norm_out,
# sum_out, options
pre_sinkhorn_forward = _bind("mhc_pre_sinkhorn_forward", [_T] * 4 + [ctypes.c_int64] + [_T] * 8 + [_O])
# grad_h_in, grad_h_post, grad_h_res, x, phi, alpha, bias, h_pre, h_mix, inv_rms, sum_out,
# norm_out, grad_x, grad_phi, grad_alpha, grad_bias, options
pre_sinkhorn_backward = _bind("mhc_pre_sinkhorn_backward", [_T] * 16 + [_O])

lib.mhc_last_error.argtypes = []
lib.mhc_last_error.restype = ctypes.c_char_p
lib.mhc_last_error_kind.argtypes = []
lib.mhc_last_error_kind.restype = ctypes.c_int
lib.mhc_isa.argtypes = []
lib.mhc_isa.restype = ctypes.c_char_p
lib.mhc_set_isa.argtypes = [ctypes.c_char_p]
lib.mhc_set_isa.restype = ctypes.c_int
lib.mhc_isa_available.argtypes = [ctypes.c_char_p]
lib.mhc_isa_available.restype = ctypes.c_int
lib.mhc_version.argtypes = []
lib.mhc_version.restype = ctypes.c_char_p


def last_error():
    """(message, kind) of the last failure on this thread."""
    msg = lib.mhc_last_error()
    return (msg.decode("utf-8", "replace") if msg else ""), int(lib.mhc_last_error_kind())


def isa():
    return lib.mhc_isa().decode()


def version():
    return lib.mhc_version().decode()
