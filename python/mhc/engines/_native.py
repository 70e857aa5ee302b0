"""libmhc_torch.so, the engines' ops registered with torch's dispatcher from C++
(src/faces/torch/engine_ops.cpp): torch.ops.mhc_engines.*, a call costing the dispatcher's
few microseconds instead of the ctypes path's tens. Looked for beside this package, then in
the repository's build/src/; MHC_TORCH_LIBRARY names it explicitly, and MHC_TORCH_LIBRARY=
"" (empty) keeps the ctypes path. `ops` is torch.ops.mhc_engines, or None without it."""
import os

import torch

from .. import _lib  # libmhc.so first: libmhc_torch.so links against the same library


def _candidates():
    explicit = os.environ.get("MHC_TORCH_LIBRARY")
    if explicit is not None:
        return [explicit] if explicit else []
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.normpath(os.path.join(here, "..", "libmhc_torch.so"))
    in_repository = os.path.normpath(os.path.join(here, "..", "..", "..", "build", "src", "libmhc_torch.so"))
    return [p for p in (beside, in_repository) if os.path.exists(p)]


def _load():
    for path in _candidates():
        try:
            torch.ops.load_library(path)
        except (OSError, RuntimeError) as exc:
            if os.environ.get("MHC_TORCH_LIBRARY"):
                raise ImportError(f"mhc.engines: cannot load MHC_TORCH_LIBRARY={path!r}: {exc}") from exc
            continue
        return torch.ops.mhc_engines, path
    return None, None


del _lib
ops, path = _load()
