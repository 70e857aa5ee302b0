#!/usr/bin/python3
"""What a stack of mhc.nn.MhcBlocks keeps for the backward, with and without recompute,
as mhc.nn.MhcStack (fused boundaries) with and without recompute_every, and the torch-ops
twin's (mhc.nn.reference.ReferenceMhcBlock) for comparison.

Two measures, each configuration in a fresh subprocess:
  - saved: the bytes of the distinct storages autograd keeps after the forward
    (torch.autograd.graph.saved_tensors_hooks; the parameters excluded), exact;
  - peak: the peak resident set of one forward + backward above the resident set
    before it (resource.getrusage ru_maxrss against /proc/self/statm), with glibc's
    mmap threshold fixed at 128 KiB (MALLOC_MMAP_THRESHOLD_) and mhc's output cache off
    (MHC_OUTPUT_CACHE_MB=0), so freed tensors leave the resident set; it includes
    the input, the gradients and the backward's transients, not the parameters.
Times are bench/block_step.py's: here every allocation is a fresh mapping, its pages
faulted in on first touch, which a timing would mostly measure.

The sub-layer is a fixed op, so the figures are the mHC part's: "neg" (-h, keeps
nothing), "tanh" (keeps its output, T*D in x's dtype) or "linear" (a D x D bf16 linear
layer, keeps its input). x is [T, N, D].

    /usr/bin/python3 bench/block_memory.py [--blocks 8 --tokens 4096 --streams 4
        --hidden 1024 --dtype bf16 --sublayer neg --threads 2 --every 4] [--json out.json]
"""
import argparse
import json
import os
import resource
import subprocess
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mhc  # noqa: E402  (the package of this repository)
from mhc.nn.reference import ReferenceMhcBlock  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
CONFIGS = ("mhc", "mhc-recompute", "stack", "stack-every", "reference")  # stack-every: recompute_every=--every
MIB = 1 << 20


class Neg(nn.Module):
    def forward(self, h):
        return -h


class Tanh(nn.Module):
    def forward(self, h):
        return torch.tanh(h)


def sublayer(kind, d, dtype):
    if kind == "neg":
        return Neg()
    if kind == "tanh":
        return Tanh()
    return nn.Linear(d, d, bias=False).to(dtype)


def build(args, config):
    torch.manual_seed(0)
    dtype = DTYPES[args.dtype]
    cls = ReferenceMhcBlock if config == "reference" else mhc.nn.MhcBlock
    blocks = [cls(args.streams, args.hidden, sublayer(args.sublayer, args.hidden, dtype),
                  recompute=config == "mhc-recompute") for _ in range(args.blocks)]
    if config.startswith("stack"):
        blocks = mhc.nn.MhcStack(blocks, recompute_every=args.every if config == "stack-every" else None)
    else:
        blocks = nn.Sequential(*blocks)
    x = torch.randn(args.tokens, args.streams, args.hidden).to(dtype).requires_grad_()
    return blocks, x


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(args, config):
    """One configuration, in this process: {saved, peak} of one forward + backward."""
    torch.set_num_threads(args.threads)
    mhc.set_num_threads(args.threads)
    blocks, x = build(args, config)
    params = {p.data_ptr() for p in blocks.parameters()}
    saved = {}

    def pack(t):
        storage = t.storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    base = rss_bytes()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = blocks(x)
    out.backward(torch.ones_like(out))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"saved": sum(saved.values()), "peak": peak}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--sublayer", choices=("neg", "tanh", "linear"), default="neg")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--every", type=int, default=4, help="stack-every's recompute_every")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ",".join(CONFIGS))
    p.add_argument("--json", default=None)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the subprocess's configuration
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure(args, args.one)))
        return 0

    t, n, d = args.tokens, args.streams, args.hidden
    elt = torch.empty((), dtype=DTYPES[args.dtype]).element_size()
    f = 2 * n + n * n
    print(f"# {args.blocks} blocks, x [T={t}, N={n}, D={d}] {args.dtype}, sub-layer {args.sublayer}, "
          f"{args.threads} threads; per block x is {t * n * d * elt / MIB:.2f} MiB, h_out "
          f"{t * d * elt / MIB:.2f} MiB, the pre caches + h_post + H "
          f"{t * (1 + f + 2 * n + n * n) * 4 / MIB:.2f} MiB", flush=True)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", MHC_OUTPUT_CACHE_MB="0")
    rows = {}
    for config in args.configs.split(","):
        argv = [sys.executable, os.path.abspath(__file__), "--one", config] + [
            f"--{k}={v}" for k, v in (("blocks", args.blocks), ("tokens", t), ("streams", n), ("hidden", d),
                                      ("dtype", args.dtype), ("sublayer", args.sublayer),
                                      ("threads", args.threads), ("every", args.every))]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        rows[config] = json.loads(proc.stdout.strip().splitlines()[-1])
        r = rows[config]
        print(f"{config:<14} saved {r['saved'] / MIB:9.1f} MiB ({r['saved'] / MIB / args.blocks:7.2f} per block)"
              f" | peak above start {r['peak'] / MIB:9.1f} MiB", flush=True)
    if "mhc" in rows and "mhc-recompute" in rows:
        a, b = rows["mhc"], rows["mhc-recompute"]
        print(f"# recompute keeps {(a['saved'] - b['saved']) / MIB:.1f} MiB less "
              f"({100 * (1 - b['saved'] / a['saved']):.1f} %); its peak is {(a['peak'] - b['peak']) / MIB:.1f} MiB "
              f"lower")
    if "stack" in rows and "stack-every" in rows:
        a, b = rows["stack"], rows["stack-every"]
        print(f"# recompute_every={args.every} keeps {(a['saved'] - b['saved']) / MIB:.1f} MiB less than the stack "
              f"({100 * (1 - b['saved'] / a['saved']):.1f} %); its peak is {(a['peak'] - b['peak']) / MIB:.1f} MiB "
              f"lower")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
