"""mhc.nn: the mHC layer as torch.nn modules.

    streams = mhc.nn.expand_streams(embedding, 4)        # [.., D] -> [.., N, D]
    block = mhc.nn.MhcBlock(4, 512, sublayer)            # MhcPre, MhcSinkhorn, sublayer, MhcPost
    streams = block(streams)                             # [.., N, D]
    h = mhc.nn.MhcHead(4, 512)(streams)                  # [.., D], before the final norm

    pre = mhc.nn.MhcPre(n_streams=4, hidden=512)         # the pre block alone
    h_in, h_post, h_res = pre(x)

One module per concept: pre.py (MhcParameters, the parameters and their initialisation
that MhcPre, MhcBlock and MhcHead share; MhcPre), block.py (MhcBlock), head.py (MhcHead),
streams.py (expand_streams), reference.py (the same layer in plain torch ops:
ReferenceMhcBlock, ReferenceMhcHead).
"""
from . import reference
from .block import MhcBlock
from .head import MhcHead
from .pre import MhcParameters, MhcPre
from .streams import expand_streams

__all__ = ["MhcParameters", "MhcPre", "MhcBlock", "MhcHead", "expand_streams", "reference"]
