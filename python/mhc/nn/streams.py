"""mhc.nn.expand_streams: the start of an mHC model, x_0 = the embedding copied to N
residual streams (SPEC §13)."""
import numbers

import torch


def expand_streams(h, n):
    """h [.., D] -> [.., N, D], every stream a copy of h; differentiable (the gradient of
    h is the sum over the streams).

    The result is a view of h (stride 0 along N), so the first block keeps no N-fold
    copy of the embedding; the operators read any strides.
    """
    if not isinstance(h, torch.Tensor):
        raise TypeError(f"h: expected a torch.Tensor, got {type(h).__name__}")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"n: expected an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n: expected a stream count >= 1, got {n}")
    if h.dim() < 1:
        raise ValueError("h: expected a tensor [.., D] of rank >= 1, got a scalar")
    return h.unsqueeze(-2).expand(*h.shape[:-1], int(n), h.shape[-1])


__all__ = ["expand_streams"]
