"""ctypes binding of the mhc C API (include/mhc/mhc.h).

Only the C ABI is used: no torch C++ extension, so the package works with any
torch build. Nothing of the header is copied here: the constants, the layouts of
mhc_tensor and mhc_options, and every operator's prototype are read from the
library itself (mhc_constants, mhc_struct_fields, mhc_operators), which makes them
from the same description as its functions. The library is looked up in this order:
  1. the path in the environment variable MHC_LIBRARY (an error if it fails),
  2. libmhc.so next to this file (an installed wheel, or a build with MHC_PYTHON_COPY=ON),
  3. build/src/libmhc.so of the repository this file is in (scripts/build.sh's build),
  4. ctypes.util.find_library("mhc") (an installed library).
"""
import ctypes
import ctypes.util
import os

_BUILD_HINT = (
    "build it from the repository root with `bash scripts/build.sh` (into build/src/), "
    "or point the environment variable MHC_LIBRARY at libmhc.so"
)


def _load():
    explicit = os.environ.get("MHC_LIBRARY")
    if explicit:
        try:
            return ctypes.CDLL(explicit)
        except OSError as exc:
            # An explicit choice must not silently fall back to another library.
            raise ImportError(f"mhc: cannot load MHC_LIBRARY={explicit!r}: {exc}") from exc
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.join(here, "libmhc.so")
    in_repository = os.path.normpath(os.path.join(here, "..", "..", "build", "src", "libmhc.so"))
    for path in (p for p in (beside, in_repository) if os.path.exists(p)):
        try:
            return ctypes.CDLL(path)
        except OSError as exc:
            raise ImportError(f"mhc: cannot load {path}: {exc}; {_BUILD_HINT}") from exc
    found = ctypes.util.find_library("mhc")
    if found:
        try:
            return ctypes.CDLL(found)
        except OSError as exc:
            raise ImportError(f"mhc: cannot load {found}: {exc}; {_BUILD_HINT}") from exc
    raise ImportError(f"mhc: the native library libmhc.so was not found; {_BUILD_HINT}")


lib = _load()


# The description structs themselves (mhc.h): the one layout this side states.
class _Constant(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_int64)]


class _Field(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int32), ("count", ctypes.c_int32),
                ("offset", ctypes.c_int64)]


class _Arg(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int32), ("nullable", ctypes.c_int32),
                ("dtypes", ctypes.c_char_p), ("shape", ctypes.c_char_p)]


class _Operator(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("spec", ctypes.c_char_p), ("cann", ctypes.c_char_p),
                ("torch_npu", ctypes.c_char_p), ("num_args", ctypes.c_int32), ("args", ctypes.POINTER(_Arg))]


def _table(function, restype, *extra):
    function.restype = ctypes.POINTER(restype)
    count = ctypes.c_int32()
    rows = function(*extra, ctypes.byref(count))
    return [rows[i] for i in range(count.value)]


# Every constant of mhc.h by its name without MHC_ (BF16, ERR_INVALID, ISA_AVX2, MAX_RANK, ...).
lib.mhc_constants.argtypes = [ctypes.POINTER(ctypes.c_int32)]
CONSTANTS = {c.name.decode(): int(c.value) for c in _table(lib.mhc_constants, _Constant)}
globals().update(CONSTANTS)

# The kernel families by id (ISA_NAMES[i] is the family of id i + 1).
ISA_NAMES = tuple(name[4:].lower() for name, value in sorted(CONSTANTS.items(), key=lambda c: c[1])
                  if name.startswith("ISA_") and value > 0)


lib.mhc_struct_fields.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64)]
lib.mhc_struct_fields.restype = ctypes.POINTER(_Field)


def _struct(c_name):
    """The ctypes Structure of mhc.h's struct c_name, from the library's field list."""
    count, size = ctypes.c_int32(), ctypes.c_int64()
    rows = lib.mhc_struct_fields(c_name.encode(), ctypes.byref(count), ctypes.byref(size))
    fields = [rows[i] for i in range(count.value)]
    kinds = {CONSTANTS["FIELD_POINTER"]: ctypes.c_void_p, CONSTANTS["FIELD_INT32"]: ctypes.c_int32,
             CONSTANTS["FIELD_UINT32"]: ctypes.c_uint32, CONSTANTS["FIELD_INT64"]: ctypes.c_int64,
             CONSTANTS["FIELD_DOUBLE"]: ctypes.c_double}
    layout = [(f.name.decode(), kinds[f.kind] * f.count if f.count > 1 else kinds[f.kind]) for f in fields]
    struct = type(c_name, (ctypes.Structure,), {"_fields_": layout})
    if ([getattr(struct, name).offset for name, _ in layout] != [f.offset for f in fields]
            or ctypes.sizeof(struct) != size.value):
        raise ImportError(f"mhc: {c_name} as ctypes lays it out differs from the library's")
    return struct


MhcTensor = _struct("mhc_tensor")    # a non-owning view: shape and strides in elements
MhcOptions = _struct("mhc_options")  # start from lib.mhc_default_options() (it sets struct_size)

_T = ctypes.POINTER(MhcTensor)
_O = ctypes.POINTER(MhcOptions)
lib.mhc_default_options.argtypes = []
lib.mhc_default_options.restype = MhcOptions

# Each operator's function, its prototype from its description: lib.mhc_<name>, also as
# <name> here (pre_forward, sinkhorn_backward, ...). OPERATORS: name -> its description.
_ARG_TYPES = {CONSTANTS["ARG_TENSOR_IN"]: _T, CONSTANTS["ARG_TENSOR_OUT"]: _T,
              CONSTANTS["ARG_DOUBLE"]: ctypes.c_double, CONSTANTS["ARG_INT64"]: ctypes.c_int64}
lib.mhc_operators.argtypes = [ctypes.POINTER(ctypes.c_int32)]
OPERATORS = {}
for _op in _table(lib.mhc_operators, _Operator):
    _name = _op.name.decode()
    _args = [_op.args[i] for i in range(_op.num_args)]
    OPERATORS[_name] = {
        "spec": _op.spec.decode(), "cann": _op.cann.decode(), "torch_npu": _op.torch_npu.decode(),
        "args": [{"name": a.name.decode(), "kind": int(a.kind), "nullable": bool(a.nullable),
                  "dtypes": a.dtypes.decode(), "shape": a.shape.decode()} for a in _args]}
    _fn = getattr(lib, "mhc_" + _name)
    _fn.argtypes = [_ARG_TYPES[a.kind] for a in _args] + [_O]
    _fn.restype = ctypes.c_int
    globals()[_name] = _fn
del _op, _name, _args, _fn


class _TorchOp(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("op", ctypes.c_char_p), ("schema", ctypes.c_char_p)]


# The torch.library operators: name -> (the operator above it runs on, its schema).
lib.mhc_torch_ops.argtypes = [ctypes.POINTER(ctypes.c_int32)]
TORCH_OPS = {t.name.decode(): (t.op.decode(), t.schema.decode()) for t in _table(lib.mhc_torch_ops, _TorchOp)}

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
lib.mhc_available_isas.argtypes = []
lib.mhc_available_isas.restype = ctypes.c_char_p
lib.mhc_version.argtypes = []
lib.mhc_version.restype = ctypes.c_char_p


def last_error():
    """(message, kind) of the last failure on this thread."""
    msg = lib.mhc_last_error()
    return (msg.decode("utf-8", "replace") if msg else ""), int(lib.mhc_last_error_kind())


def isa():
    return lib.mhc_isa().decode()


def available_isas():
    """The kernel families this build and CPU run, best first."""
    return lib.mhc_available_isas().decode().split(",")


def version():
    return lib.mhc_version().decode()
