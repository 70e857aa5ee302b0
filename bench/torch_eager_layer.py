#!/usr/bin/python3
"""PyTorch eager vs mhc's Python face for the layer operators (MhcSinkhorn, MhcPost).

Times, side by side in one process, with torch.set_num_threads(2) and mhc at 2 threads:
  - eager: SPEC sections 10 and 11 in plain torch as a user would write them (fp32
    compute; post's inputs in bf16), forward and backward through autograd;
  - ours: mhc.npu_mhc_sinkhorn / mhc.npu_mhc_post forward and backward through
    autograd (the Sinkhorn with out_flag=0, its backward recomputing from z, and with
    out_flag=1, from the caches).
Shapes: the Sinkhorn at T=65536 N=4, 20 iterations; the post at T=4096 N=4 D=4096 bf16.

    /usr/bin/python3 bench/torch_eager_layer.py [--json bench-results.json]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mhc  # noqa: E402  (the package of this repository)
from mhc.nn.reference import sinkhorn_torch  # noqa: E402

EPS = 1e-6


def eager_sinkhorn(z, num_iters):
    """SPEC section 10 in plain torch (the twin mhc.nn.reference holds)."""
    return sinkhorn_torch(z, EPS, num_iters)


def eager_post(x, h_res, h_out, h_post):
    """SPEC section 11 in plain torch: H transposed, fp32 compute, x's dtype out."""
    out = h_post.unsqueeze(-1) * h_out.float().unsqueeze(-2) + torch.einsum("tij,tid->tjd", h_res, x.float())
    return out.to(x.dtype)


def time_runs(step, runs, min_seconds):
    step()  # warm-up
    times = []
    while len(times) < runs or (sum(times) < min_seconds and len(times) < 200):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), times


def sinkhorn_rows(runs, min_seconds):
    T, N, I = 65536, 4, 20
    gen = torch.Generator().manual_seed(0)
    z = (torch.rand(T, N, N, generator=gen) * 4 - 2).requires_grad_()
    g = torch.rand(T, N, N, generator=gen) * 2 - 1

    def eager():
        z.grad = None
        eager_sinkhorn(z, I).backward(g)

    def ours(out_flag):
        def step():
            z.grad = None
            y, _, _ = mhc.npu_mhc_sinkhorn(z, num_iters=I, out_flag=out_flag)
            y.backward(g)
        return step

    shape = f"T={T} N={N} I={I}"
    rows = [("sinkhorn fwd+bwd", shape, "torch eager (autograd)", *time_runs(eager, runs, min_seconds))]
    rows.append(("sinkhorn fwd+bwd", shape, "mhc, out_flag=0 (recompute)", *time_runs(ours(0), runs, min_seconds)))
    rows.append(("sinkhorn fwd+bwd", shape, "mhc, out_flag=1 (caches)", *time_runs(ours(1), runs, min_seconds)))
    return rows


def post_rows(runs, min_seconds):
    T, N, D = 4096, 4, 4096
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(T, N, D, generator=gen).bfloat16().requires_grad_()
    h_res = (torch.rand(T, N, N, generator=gen) * 0.5).requires_grad_()
    h_out = torch.randn(T, D, generator=gen).bfloat16().requires_grad_()
    h_post = (torch.rand(T, N, generator=gen) * 2).requires_grad_()
    g = torch.randn(T, N, D, generator=gen).bfloat16()
    leaves = (x, h_res, h_out, h_post)

    def step(fn):
        def run():
            for leaf in leaves:
                leaf.grad = None
            fn(*leaves).backward(g)
        return run

    shape = f"T={T} N={N} D={D} bf16"
    return [("post fwd+bwd", shape, "torch eager (autograd)", *time_runs(step(eager_post), runs, min_seconds)),
            ("post fwd+bwd", shape, "mhc (autograd)", *time_runs(step(mhc.npu_mhc_post), runs, min_seconds))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, help="mhc-bench's results file to merge into (key torch_eager_layer)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-seconds", type=float, default=0.5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    mhc.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; mhc {mhc.__version__}, kernels {mhc.isa()}")
    rows = sinkhorn_rows(args.runs, args.min_seconds) + post_rows(args.runs, args.min_seconds)
    report = []
    eager_ms = {}
    print(f"{'case':<17} {'shape':<24} {'implementation':<30} {'ms':>10} {'eager/this':>11}")
    for case, shape, impl, ms, times in rows:
        if impl.startswith("torch eager"):
            eager_ms[case] = ms
        ratio = eager_ms[case] / ms
        print(f"{case:<17} {shape:<24} {impl:<30} {ms:10.2f} {ratio:10.1f}x")
        report.append({"case": case, "shape": shape, "implementation": impl, "median_ms": ms,
                       "all_ms": times, "eager_over_this": ratio})
    if args.json:
        data = {}
        if os.path.exists(args.json):
            with open(args.json) as f:
                data = json.load(f)
        data["torch_eager_layer"] = {"torch_version": torch.__version__, "threads": torch.get_num_threads(),
                                     "mhc_isa": mhc.isa(), "rows": report}
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
        print(f"merged into {args.json}")


if __name__ == "__main__":
    main()
