"""Constant pre weights prepared once: mhc.prepare_pre(phi, alpha, bias, gamma=None).

The handle keeps the forms the kernel families make of phi, alpha, bias and gamma at
every call (phi rounded to HF32 for inner_precise=1, phi copied out of a strided view,
the AMX family's packed phi·gamma for calls of more than 64 tokens), made at a call's
first use. npu_mhc_pre, mhc_pre_sinkhorn, mhc_pre_single_pass and mhc_post_pre take it
as prepared=, with the very tensors it was made from; their outputs are bitwise those of
the call without it. It holds the tensors (not copies): one changed in place since
(its version counter moved: an optimizer's step) makes the next call a ValueError
naming it; prepare again. A call that records an autograd graph checks the handle the
same way and runs as without it (the same bits).
"""
import ctypes

import torch

from . import _lib
from ._core import _check, _ptr, _raise_on_error, _view

_lib.lib.mhc_prepare_pre.argtypes = [ctypes.POINTER(_lib.MhcTensor)] * 4 + [ctypes.POINTER(ctypes.c_void_p)]
_lib.lib.mhc_prepare_pre.restype = ctypes.c_int
_lib.lib.mhc_prepared_free.argtypes = [ctypes.c_void_p]
_lib.lib.mhc_prepared_free.restype = None

_WEIGHTS = ("phi", "alpha", "bias", "gamma")


class PreparedPre:
    """Weights prepared once (see the module's text). Attributes phi, alpha, bias, gamma:
    the tensors it was made from; handle: the library's (for options.prepared)."""

    __slots__ = ("phi", "alpha", "bias", "gamma", "_versions", "handle", "_free")

    def __init__(self, phi, alpha, bias, gamma=None):
        self.handle = None
        self._free = _lib.lib.mhc_prepared_free
        for name, t in zip(_WEIGHTS, (phi, alpha, bias, gamma)):
            _check(name, t, "fp32", optional=name == "gamma")
            if t is not None and t.device.type != "cpu":
                raise ValueError(f"{name}: expected a CPU tensor with data, got device {t.device}")
        self.phi, self.alpha, self.bias, self.gamma = phi, alpha, bias, gamma
        self._versions = tuple(None if t is None else t._version for t in (phi, alpha, bias, gamma))
        handle = ctypes.c_void_p()
        views = [_view(t) for t in (phi, alpha, bias, gamma)]
        _raise_on_error(_lib.lib.mhc_prepare_pre(*(_ptr(v) for v in views), ctypes.byref(handle)))
        self.handle = handle.value

    def __del__(self):
        if getattr(self, "handle", None):
            self._free(self.handle)
            self.handle = None

    def __repr__(self):
        return (f"mhc.PreparedPre(phi {list(self.phi.shape)}, alpha {list(self.alpha.shape)}, "
                f"gamma {'None' if self.gamma is None else list(self.gamma.shape)})")

    def current(self):
        """Whether none of the tensors changed in place since it was made."""
        return self._versions == tuple(None if t is None else t._version
                                       for t in (self.phi, self.alpha, self.bias, self.gamma))

    def check(self, phi, alpha, bias, gamma):
        """A call's weights against the handle: the same tensors, unchanged; else a
        ValueError (TypeError for a handle that is not a PreparedPre) naming the tensor."""
        for name, given, held, version in zip(_WEIGHTS, (phi, alpha, bias, gamma),
                                              (self.phi, self.alpha, self.bias, self.gamma), self._versions):
            if (given is None) != (held is None):
                raise ValueError(f"{name}: expected {'none' if held is None else 'the tensor'} as "
                                 f"prepared was made, got {'none' if given is None else 'one'}")
            if given is None:
                continue
            if given is not held and not _same_view(given, held):
                raise ValueError(f"{name}: expected the tensor prepared was made from, got another")
            if held._version != version:
                raise ValueError(f"{name}: changed in place since prepare_pre (version {version} -> "
                                 f"{held._version}); prepare the weights again")


def _same_view(a, b):
    return (isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.device == b.device and
            a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride())


def prepare_pre(phi, alpha, bias, gamma=None):
    """Constant pre weights prepared once (SPEC §2's phi [F, N*D], alpha, bias [F], gamma
    [N, D] or None, fp32 CPU tensors): a PreparedPre for the prepared= argument."""
    return PreparedPre(phi, alpha, bias, gamma)


def handle_of(prepared, phi, alpha, bias, gamma):
    """The library's handle for a call given prepared= (None: none), after checking it."""
    if prepared is None:
        return None
    if not isinstance(prepared, PreparedPre):
        raise TypeError(f"prepared: expected an mhc.PreparedPre (mhc.prepare_pre), got {type(prepared).__name__}")
    prepared.check(phi, alpha, bias, gamma)
    return prepared.handle
