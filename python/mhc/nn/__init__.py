"""mhc.nn: the mHC layer as torch.nn modules.

    streams = mhc.nn.expand_streams(embedding, 4)        # [.., D] -> [.., N, D]
    block = mhc.nn.MhcBlock(4, 512, sublayer)            # MhcPre, MhcSinkhorn, sublayer, MhcPost
    streams = block(streams)                             # [.., N, D]
    h = mhc.nn.MhcHead(4, 512)(streams)                  # [.., D], before the final norm

    stack = mhc.nn.MhcStack(blocks, head=mhc.nn.MhcHead(4, 512))   # the blocks' bits, boundaries fused
    h = stack(streams)

    block = mhc.nn.MhcBlock(4, 512, sublayer, single_pass=True)    # DeepSeek-V4.1 (SPEC §14)
    streams, h_pre = block(streams, pre_mix)             # pre_mix: the previous site's h_pre
    h = mhc.nn.MhcStack(v41_blocks)(streams)             # ... ending with MhcCollapse

    pre = mhc.nn.MhcPre(n_streams=4, hidden=512)         # the pre block alone
    h_in, h_post, h_res = pre(x)

One module per concept: pre.py (MhcParameters, the parameters and their initialisation
that MhcPre, MhcBlock and MhcHead share; MhcPre), block.py (MhcBlock), stack.py (MhcStack),
head.py (MhcHead), streams.py (expand_streams), reference.py (the same layer in plain torch ops:
ReferenceMhcBlock, ReferenceMhcHead).
"""
from . import reference
from .block import MhcBlock
from .head import MhcHead
from .pre import MhcParameters, MhcPre
from .stack import MhcStack
from .streams import expand_streams

__all__ = ["MhcParameters", "MhcPre", "MhcBlock", "MhcStack", "MhcHead", "expand_streams", "reference"]
