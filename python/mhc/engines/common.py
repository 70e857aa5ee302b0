"""What the engines' faces share: token-major views of any leading dims, and running a
function of mhc without recording a graph."""
import functools
import math
import numbers

import torch


def tokens(x, inner):
    """x [..., *inner] as [T, *inner] (a view where strides allow, else a copy), with the
    leading dims to restore."""
    lead = tuple(x.shape[:x.dim() - inner])
    return x.reshape((-1,) + tuple(x.shape[x.dim() - inner:])), lead


def streams(x, name):
    """The streams [..., N, D] as [T, N, D], with the leading dims."""
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(f"{name}: expected a tensor [..., N, D], got "
                         f"{list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    if x.shape[-2] < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name}: expected N >= 1 and D >= 1 in [..., N, D], got {list(x.shape)}")
    return tokens(x, 2)


def tensor(t, name):
    """t, which must be a tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    return t


def one_entry(scale, name):
    """The head's scale (0-d or [1]) as [1]."""
    if tensor(scale, name).numel() != 1 or scale.dim() > 1:
        raise ValueError(f"{name}: expected 1 entry (0-d or [1]), got {list(scale.shape)}")
    return scale.reshape(1)


def check_site_scalars(rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, norm_weight, norm_eps):
    """vLLM's pre's eps (finite, >= 0) and multiplier (finite), each in its own name."""
    eps = dict(rms_eps=rms_eps, hc_pre_eps=hc_pre_eps, hc_sinkhorn_eps=hc_sinkhorn_eps)
    if norm_weight is not None:
        eps["norm_eps"] = norm_eps
    for name, value in eps.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name}: expected a finite value >= 0, got {value}")
    if isinstance(hc_post_mult_value, bool) or not isinstance(hc_post_mult_value, numbers.Real):
        raise TypeError(f"hc_post_mult_value: expected a float, got {type(hc_post_mult_value).__name__}")
    if not math.isfinite(hc_post_mult_value):
        raise ValueError(f"hc_post_mult_value: expected a finite value, got {hc_post_mult_value}")


def inference(function):
    """function run under torch.no_grad(): the engines' ops have no backward."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with torch.no_grad():
            return function(*args, **kwargs)
    return wrapper


def scaled_post(h_post, mult):
    """h_post = mult·σ(z_post) from mhc's 2·σ(z_post): 2σ is exact, so (2σ)·(mult/2) is
    mult·σ rounded once, the same bits as the product formed directly; mult = 2 is SPEC §2
    itself."""
    mult = float(mult)
    return h_post if mult == 2.0 else h_post * (mult / 2.0)


def post_rows(post, streams_dims):
    """post [..., N, 1] (vLLM's layout) or [..., N], as [T, N]."""
    if tensor(post, "post").dim() == streams_dims and post.shape[-1] == 1:
        post = post.reshape(post.shape[:-1])
    return tokens(post, 1)[0]
