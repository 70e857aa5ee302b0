"""What the engines' faces share: token-major views of any leading dims, and running a
function of mhc without recording a graph."""
import functools

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
    return tokens(x, 2)


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
