#!/usr/bin/python3
"""The mHC part of one sub-layer step, ours against the plain-torch twin.

mhc.nn.MhcBlock (MhcPre + MhcSinkhorn + MhcPost on the library's operators, the backward
through their backwards; also with recompute=True) against mhc.nn.reference.ReferenceMhcBlock (the same layer in
torch ops, autograd), with the same parameters and a sub-layer that costs nothing (the
identity, or "neg": -h), so only the mHC part is timed: forward and backward of
x [T, N, D] -> x_next, through autograd, from fresh leaves each run. Side by side in one
process, alternating ours, ours with recompute and the twin, one warm-up each, the median of --runs;
torch.set_num_threads and mhc.set_num_threads both --threads.

Then the layer step: mhc.nn.MhcStack of 4 blocks around y = 0.5 h, ending in MhcHead (V4)
or the collapse (V4.1), forward + backward from a fresh leaf, at 1 and --threads threads
(the sub-layer's outputs from mhc's output cache, as a caching allocator gives them; V4
also with torch's CPU allocator, whose 32 MiB outputs are mapped afresh at every step),
against its byte bound: T D e (4 (7 N + 5) + 3 N + 2 + 4 4) bytes for element size e (per site
the fused forward's and the site backward's streams and rows, the head's or collapse's,
the sub-layer's four rows; 324 D a token at N = 4 bf16) over the triad bandwidth, a = b +
3 c on three 256 MiB fp32 tensors through torch (best of 5 after a warm-up), measured in
the same run on both thread counts.

Then the example's training step (examples/train_tiny.py at its default sizes, fp32):
ms/step of the mHC model on our operators against the same model on the twin,
alternating, median over --example-steps steps after 3 warm-up steps.

    /usr/bin/python3 bench/block_step.py [--tokens 4096 --streams 4 --hidden 4096
        --dtype bf16 --runs 5 --threads 2] [--skip-layer] [--skip-example] [--json out.json]
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
import mhc  # noqa: E402  (the package of this repository)
from mhc._output_cache import cache as output_cache  # noqa: E402
from mhc.nn.reference import ReferenceMhcBlock  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class Identity(nn.Module):
    def forward(self, h):
        return h


class Neg(nn.Module):
    def forward(self, h):
        return -h


class Half(nn.Module):
    def forward(self, h):
        return 0.5 * h


class _HalfCached(torch.autograd.Function):
    """y = 0.5 h and its backward with their outputs from mhc's output cache, as a caching
    allocator gives them: torch's CPU allocator maps each 32 MiB output afresh (glibc's
    mmap threshold stops at 32 MiB), whose first touch then costs page faults."""

    @staticmethod
    def forward(ctx, h):
        return torch.mul(h, 0.5, out=output_cache.empty(h.shape, h.dtype))

    @staticmethod
    def backward(ctx, grad):
        return torch.mul(grad, 0.5, out=output_cache.empty(grad.shape, grad.dtype))


class HalfCached(nn.Module):
    def forward(self, h):
        return _HalfCached.apply(h)


LAYER_SITES = 4


def move_off_start(module):
    """Parameters away from the near-static start, as after some training."""
    with torch.no_grad():
        module.alpha.fill_(0.5)
        module.bias.add_(0.3 * torch.randn_like(module.bias))


def step_ms(module, x, g):
    """(forward ms, forward + backward ms) of module on a fresh leaf of x, gradient g."""
    leaf = x.detach().requires_grad_()
    module.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    out = module(leaf)
    t1 = time.perf_counter()
    out.backward(g)
    t2 = time.perf_counter()
    return 1e3 * (t1 - t0), 1e3 * (t2 - t0)


def block_rows(args):
    dtype = DTYPES[args.dtype]
    t, n, d = args.tokens, args.streams, args.hidden
    sub = Identity if args.sublayer == "identity" else Neg
    torch.manual_seed(0)
    ours = mhc.nn.MhcBlock(n, d, sub())
    recompute = mhc.nn.MhcBlock(n, d, sub(), recompute=True)
    twin = ReferenceMhcBlock(n, d, sub())
    move_off_start(ours)
    recompute.load_state_dict(ours.state_dict())
    twin.load_state_dict(ours.state_dict())
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(t, n, d, generator=gen).to(dtype)
    g = torch.randn(t, n, d, generator=gen).to(dtype)

    # Agreement first, on a small slice: the two are the same layer.
    xs = x[:64].clone()
    ya, yb = ours(xs), twin(xs)
    agree = float((ya.float() - yb.float()).abs().max() / yb.float().abs().max())

    blocks = {"mhc": ours, "mhc-recompute": recompute, "twin": twin}
    times = {name: {"fwd": [], "total": []} for name in blocks}
    for i in range(args.runs + 1):
        for name, block in blocks.items():
            fwd, total = step_ms(block, x, g)
            if i:  # the first round is the warm-up
                times[name]["fwd"].append(fwd)
                times[name]["total"].append(total)
    med = {name: {k: statistics.median(v) for k, v in ts.items()} for name, ts in times.items()}
    return {"agreement": agree, "median_ms": med, "runs_ms": times}


def triad_gbs(threads, mib=256, runs=5):
    """a = b + 3 c over three fp32 tensors of mib MiB on `threads` torch threads: 3 n 4 bytes
    (read + write, as mhc-bench counts) over the best of `runs` after a warm-up."""
    torch.set_num_threads(threads)
    n = mib << 18
    a, b, c = torch.zeros(n), torch.ones(n), torch.full((n,), 2.0)
    best = float("inf")
    for i in range(runs + 1):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        if i:
            best = min(best, time.perf_counter() - t0)
    if float(a[n // 2]) != 7.0:
        raise RuntimeError("triad check failed")
    return 3.0 * n * 4 / best / 1e9


def layer_bytes(t, n, d, dtype):
    """The layer step's byte bound (module docstring): per site 7 streams and 5 rows, the
    head or collapse 3 streams and 2 rows, the sub-layer 4 rows."""
    e = torch.finfo(dtype).bits // 8
    return t * d * e * (LAYER_SITES * (7 * n + 5) + 3 * n + 2 + 4 * LAYER_SITES)


def layer_rows(args):
    dtype = DTYPES[args.dtype]
    t, n, d = args.tokens, args.streams, args.hidden
    counts = sorted({1, args.threads})
    triad = {k: triad_gbs(k) for k in counts}
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(t, n, d, generator=gen).to(dtype)
    g = torch.randn(t, d, generator=gen).to(dtype)
    stacks = {}
    for variant in ("v4", "v4.1", "v4, torch's allocator"):
        torch.manual_seed(0)
        sub = Half if variant.endswith("allocator") else HalfCached
        blocks = [mhc.nn.MhcBlock(n, d, sub(), single_pass=variant == "v4.1") for _ in range(LAYER_SITES)]
        for block in blocks:
            move_off_start(block)
        stacks[variant] = mhc.nn.MhcStack(blocks, head=None if variant == "v4.1" else mhc.nn.MhcHead(n, d))
    times = {(v, k): [] for v in stacks for k in counts}
    for i in range(args.runs + 1):
        for k in counts:
            torch.set_num_threads(k)
            mhc.set_num_threads(k)
            for variant, stack in stacks.items():
                _, total = step_ms(stack, x, g)
                if i:  # the first round is the warm-up
                    times[(variant, k)].append(total)
    torch.set_num_threads(args.threads)
    mhc.set_num_threads(args.threads)
    nbytes = layer_bytes(t, n, d, dtype)
    rows = []
    for variant in stacks:
        for k in counts:
            ms = statistics.median(times[(variant, k)])
            bound_ms = nbytes / (triad[k] * 1e9) * 1e3
            rows.append({"variant": variant, "threads": k, "ms": ms, "runs_ms": times[(variant, k)],
                         "bound_ms": bound_ms, "of_bound": bound_ms / ms, "triad_gbs": triad[k]})
    return {"bytes": nbytes, "triad_gbs": triad, "rows": rows}


def load_example():
    spec = importlib.util.spec_from_file_location("train_tiny", os.path.join(REPO, "examples", "train_tiny.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def example_rows(args):
    tt = load_example()
    targs = tt.parse_args(["--threads", str(args.threads), "--plot", "none"])
    data = tt.make_corpus(seed=targs.seed)
    trainers = {kind: tt.Trainer(targs, kind) for kind in ("mhc", "reference")}
    warm = 3
    for step in range(warm + args.example_steps):
        for tr in (trainers.values() if step % 2 == 0 else reversed(list(trainers.values()))):
            tr.step(data, step)
    return {"describe": tt.describe(targs),
            "median_ms": {kind: statistics.median(tr.ms[warm:]) for kind, tr in trainers.items()},
            "losses_last": {kind: tr.losses[-1] for kind, tr in trainers.items()}}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--sublayer", choices=("identity", "neg"), default="identity")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--example-steps", type=int, default=20)
    p.add_argument("--skip-layer", action="store_true")
    p.add_argument("--skip-example", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    mhc.set_num_threads(args.threads)

    result = {"args": vars(args), "isa": mhc.isa(), "torch": torch.__version__}
    print(f"# the mHC part of a sub-layer step, x [T={args.tokens}, N={args.streams}, D={args.hidden}] "
          f"{args.dtype}, sub-layer {args.sublayer}, {args.threads} threads (torch and mhc), mhc isa "
          f"{mhc.isa()}, torch {torch.__version__}; median of {args.runs} runs, alternating", flush=True)
    rows = block_rows(args)
    result["block"] = rows
    m = rows["median_ms"]
    print(f"# agreement on 64 tokens: max |ours - twin| / max |twin| = {rows['agreement']:.2e}")
    print(f"{'':<22} {'forward ms':>11} {'fwd+bwd ms':>11}")
    for name, label in (("mhc", "ours (MhcBlock)"), ("mhc-recompute", "ours, recompute=True"),
                        ("twin", "twin (torch ops)")):
        print(f"{label:<22} {m[name]['fwd']:11.1f} {m[name]['total']:11.1f}")
    print(f"{'twin / ours':<22} {m['twin']['fwd'] / m['mhc']['fwd']:10.1f}x "
          f"{m['twin']['total'] / m['mhc']['total']:10.1f}x", flush=True)

    if not args.skip_layer:
        lr = layer_rows(args)
        result["layer"] = lr
        print(f"# the layer step: MhcStack of {LAYER_SITES} blocks around y = 0.5 h, then MhcHead (v4) or the "
              f"collapse (v4.1), forward + backward; byte bound {lr['bytes'] / 2**20:.0f} MiB at the triad "
              + ", ".join(f"{gbs:.1f} GB/s ({k} thread{'s' if k > 1 else ''})" for k, gbs in lr["triad_gbs"].items()))
        print(f"{'':<36} {'threads':>7} {'fwd+bwd ms':>11} {'bound ms':>9} {'of bound':>9}")
        by = {(r["variant"], r["threads"]): r for r in lr["rows"]}
        for r in lr["rows"]:
            print(f"{'layer step ' + r['variant']:<36} {r['threads']:7d} {r['ms']:11.1f} {r['bound_ms']:9.1f} "
                  f"{100 * r['of_bound']:8.1f}%")
        if 1 in lr["triad_gbs"] and args.threads > 1:
            triad_ratio = lr["triad_gbs"][args.threads] / lr["triad_gbs"][1]
            for variant in ("v4", "v4.1"):
                ratio = by[(variant, 1)]["ms"] / by[(variant, args.threads)]["ms"]
                print(f"# {variant}: 1 -> {args.threads} threads {ratio:.2f}x, triad {triad_ratio:.2f}x "
                      f"({ratio / triad_ratio:.2f} of it)")
        sys.stdout.flush()

    if not args.skip_example:
        ex = example_rows(args)
        result["example"] = ex
        e = ex["median_ms"]
        print(f"# examples/train_tiny.py step ({ex['describe']}), median of {args.example_steps} steps: "
              f"mhc {e['mhc']:.1f} ms, reference (twin) {e['reference']:.1f} ms "
              f"({e['reference'] / e['mhc']:.2f}x)", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
