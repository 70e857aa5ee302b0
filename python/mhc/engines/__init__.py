"""The inference engines' faces (SPEC §16): the ops SGLang's and vLLM's CPU backends call
for DeepSeek-V4's mHC, by their own names, argument orders and output layouts, on mhc's
operators — exact, and the same bits for a token whatever its batch.

    import mhc.engines
    mhc.engines.register_sgl_kernel()          # torch.ops.sgl_kernel.hc_{pre,post,head}_fused_cpu
    from mhc.engines import vllm               # vLLM's wrappers: mhc_pre_cpu, mhc_post_cpu, ...
    post, comb, layer_input = vllm.mhc_pre_cpu(residual, fn, hc_scale, hc_base, 1e-6, 1e-6, 1e-6, 2.0, 20)

Inference only: every function here runs without recording a graph (train through mhc's
own operators and mhc.nn). docs/engines.md shows how the engines' model code reaches them.
"""
from . import sgl_kernel, vllm
from .sgl_kernel import register_sgl_kernel

__all__ = ["register_sgl_kernel", "sgl_kernel", "vllm"]
