#!/usr/bin/python3
"""The inference engines' ops (SPEC §16) at decode sizes, through torch, side by side.

For each D in 4096, 7168 and T in 1, 4, 16, 64, 128, 1024 (N = 4, bf16), timed in turn in
one process with torch and mhc on the same thread count:
  - torch.ops.sgl_kernel.hc_pre_fused_cpu / hc_post_fused_cpu / hc_head_fused_cpu, which are
    libmhc_torch.so's C++ kernels when it is built (the engines' path);
  - the same ops on the ctypes path (mhc.engines.sgl_kernel's Python functions);
  - the C API's own time for the pre: mhc_pre_sinkhorn_forward called through ctypes with
    its arguments marshalled once, less a no-op ctypes call's cost (so: the library's time
    for the call, without any face);
  - torch.mv (T = 1) / torch.mm of phi on the same tokens (fp32): what the one product of
    the pre costs in torch;
and, the engines' threading question, a decode loop of the three ops interleaved with
torch.mv of phi's size against (the ops alone + the matmul alone), the median of --rounds
rounds of the three timings side by side, beside the same for
torch's own torch.add, and the ops beside a partner with threads and no bytes (torch.mv
of [F, 64]) and one with bytes and no product (a copy of phi's size). Through torch.ops
the ops run on torch's intra-op threads (mhc::Executor), not on mhc's own pool.

    /usr/bin/python3 bench/engine_decode.py [--quick] [--threads 2] [--json out.json]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mhc  # noqa: E402
import mhc.engines  # noqa: E402
from mhc import _core, _lib  # noqa: E402
from mhc.engines import _native, sgl_kernel  # noqa: E402

N = 4
F = 2 * N + N * N


def median_us(step, min_seconds, min_runs=20):
    """Median of per-call times in blocks of calls sized to about 2 ms, after a pause that
    lets every pool's threads stop polling (torch's OpenBLAS threads poll long after a
    product: a call made then shares the cores with them)."""
    time.sleep(0.1)
    step()
    t0 = time.perf_counter()
    step()
    once = max(time.perf_counter() - t0, 1e-7)
    block = max(1, int(2e-3 / once))
    times, spent = [], 0.0
    while len(times) < min_runs or spent < min_seconds:
        t0 = time.perf_counter()
        for _ in range(block):
            step()
        elapsed = time.perf_counter() - t0
        spent += elapsed
        times.append(elapsed / block * 1e6)
    return statistics.median(times)


def inputs(T, D, gen):
    x = torch.randn(T, N, D, generator=gen).bfloat16()
    return dict(
        x=x, fn=torch.randn(F, N * D, generator=gen) * 0.01, scale=torch.tensor([0.5, 0.7, 0.9]),
        base=torch.randn(F, generator=gen) * 0.1, y=torch.randn(T, D, generator=gen).bfloat16(),
        post=torch.rand(T, N, generator=gen) * 2, comb=torch.softmax(torch.randn(T, N, N, generator=gen), -1),
        head_fn=torch.randn(N, N * D, generator=gen) * 0.01, head_scale=torch.tensor(0.6),
        head_base=torch.randn(N, generator=gen) * 0.1)


def c_api_pre(a, I):
    """mhc_pre_sinkhorn_forward with its arguments marshalled once: a closure calling the C API."""
    T, D = a["x"].shape[0], a["x"].shape[2]
    h_in, h_post, h_res = torch.empty(T, D, dtype=torch.bfloat16), torch.empty(T, N), torch.empty(T, N, N)
    tensors = dict(x=a["x"], phi=a["fn"], alpha=a["scale"], bias=a["base"], h_in=h_in, h_post=h_post, h_res=h_res)
    views = [_core._view(tensors.get(name)) if is_tensor else I
             for name, is_tensor in _core._ARGUMENTS["pre_sinkhorn_forward"]]
    args = [(_core._ptr(v) if is_tensor else v) for v, (_, is_tensor) in zip(views, _core._ARGUMENTS["pre_sinkhorn_forward"])]
    options = _core._options(1e-6, 1e-6)
    options.num_threads = torch.get_num_threads()
    function, opts = _lib.lib.mhc_pre_sinkhorn_forward, ctypes.byref(options)

    def call():
        if function(*args, opts) != 0:
            raise RuntimeError(_lib.lib.mhc_last_error())
    call.keep = (tensors, views, options)
    return call


def rows(args):
    gen = torch.Generator().manual_seed(0)
    I = 20
    noop = _lib.lib.mhc_default_options
    noop_us = median_us(lambda: noop(), args.seconds)
    out = []
    for D in args.hidden:
        for T in args.tokens:
            a = inputs(T, D, gen)
            u = a["x"].float().reshape(T, N * D)
            fn_t = a["fn"].t()
            ops = torch.ops.sgl_kernel
            row = dict(T=T, D=D)
            row["pre_torch_ops_us"] = median_us(
                lambda: ops.hc_pre_fused_cpu(a["x"], a["fn"], a["scale"], a["base"], N, I, 1e-6, 1e-6), args.seconds)
            row["pre_ctypes_path_us"] = median_us(
                lambda: sgl_kernel.hc_pre_fused_cpu(a["x"], a["fn"], a["scale"], a["base"], N, I, 1e-6, 1e-6),
                args.seconds)
            row["pre_c_api_us"] = median_us(c_api_pre(a, I), args.seconds) - noop_us
            row["post_torch_ops_us"] = median_us(lambda: ops.hc_post_fused_cpu(a["y"], a["x"], a["post"], a["comb"]),
                                                 args.seconds)
            row["post_ctypes_path_us"] = median_us(
                lambda: sgl_kernel.hc_post_fused_cpu(a["y"], a["x"], a["post"], a["comb"]), args.seconds)
            row["head_torch_ops_us"] = median_us(
                lambda: ops.hc_head_fused_cpu(a["x"], a["head_fn"], a["head_scale"], a["head_base"], 1e-6, 1e-6),
                args.seconds)
            row["head_ctypes_path_us"] = median_us(
                lambda: sgl_kernel.hc_head_fused_cpu(a["x"], a["head_fn"], a["head_scale"], a["head_base"], 1e-6,
                                                     1e-6), args.seconds)
            if T == 1:
                v = u[0]
                row["torch_phi_product_us"] = median_us(lambda: torch.mv(a["fn"], v), args.seconds)
            else:
                row["torch_phi_product_us"] = median_us(lambda: torch.mm(u, fn_t), args.seconds)
            row["pre_face_cost_us"] = row["pre_torch_ops_us"] - row["pre_c_api_us"]
            out.append(row)
            print(f"D={D:5d} T={T:5d}  pre: torch.ops {row['pre_torch_ops_us']:9.1f} us  ctypes path "
                  f"{row['pre_ctypes_path_us']:9.1f}  C API {row['pre_c_api_us']:9.1f}  (torch.ops - C API "
                  f"{row['pre_face_cost_us']:5.1f})  | post {row['post_torch_ops_us']:8.1f} / "
                  f"{row['post_ctypes_path_us']:8.1f}  | head {row['head_torch_ops_us']:8.1f} / "
                  f"{row['head_ctypes_path_us']:8.1f}  | torch phi product {row['torch_phi_product_us']:8.1f}",
                  flush=True)
    return out, noop_us


def interleaved(args):
    """A decode step: the three ops, then torch.mv of phi's size (fp32, one token). Ratio of
    the loop to (the ops alone + the matmul alone), beside the same ratio for a torch op of
    the library's own (torch.add, on torch's OpenMP threads) in the ops' place: Debian's
    torch multiplies on OpenBLAS, whose pthreads pool polls after each product beside
    torch's threads, so that control says what any OpenMP op pays there
    (OPENBLAS_NUM_THREADS=1 at start keeps that pool out). Two more partners for the ops
    tell threads from caches: torch.mv of a [F, 64] matrix (a torch call and its threads,
    no bytes to speak of) and a copy of a tensor of phi's size (bytes that take the
    caches, one torch op): timed alone, each op finds its weights in cache, which a
    partner that streams as many bytes evicts."""
    gen = torch.Generator().manual_seed(1)
    results = []
    for D in args.hidden:
        a = inputs(1, D, gen)
        ops = torch.ops.sgl_kernel
        w = torch.randn(F, N * D, generator=gen)
        v = torch.randn(N * D, generator=gen)
        w_small, v_small = torch.randn(F, 64, generator=gen), torch.randn(64, generator=gen)
        left, right = torch.randn(64 * D, generator=gen), torch.randn(64 * D, generator=gen)

        def mhc_ops():
            y, post, comb = ops.hc_pre_fused_cpu(a["x"], a["fn"], a["scale"], a["base"], N, 20, 1e-6, 1e-6)
            ops.hc_post_fused_cpu(y, a["x"], post, comb)
            ops.hc_head_fused_cpu(a["x"], a["head_fn"], a["head_scale"], a["head_base"], 1e-6, 1e-6)

        def matmul():
            torch.mv(w, v)

        cases = (("mhc's three ops", mhc_ops, "torch.mv", matmul),
                 ("control: torch.add", lambda: torch.add(left, right), "torch.mv", matmul),
                 ("mhc's three ops", mhc_ops, "torch.mv [F, 64]", lambda: torch.mv(w_small, v_small)),
                 ("mhc's three ops", mhc_ops, "copy of phi's size", lambda: w.clone()))
        for name, step, partner_name, partner in cases:
            # Rounds of the three timings side by side: the host's speed drifts over
            # seconds, a round's ratio much less; the median round is reported.
            rounds = []
            for _ in range(args.rounds):
                alone = median_us(step, args.seconds)
                alone_partner = median_us(partner, args.seconds)
                loop = median_us(lambda: (step(), partner()), args.seconds)
                rounds.append((loop / (alone + alone_partner), alone, alone_partner, loop))
            rounds.sort()
            ratios = [r[0] for r in rounds]
            ratio, alone, alone_partner, loop = rounds[len(rounds) // 2]
            results.append(dict(D=D, step=name, partner=partner_name, step_us=alone, partner_us=alone_partner,
                                interleaved_us=loop, ratio=ratio, round_ratios=ratios))
            print(f"interleaved D={D}, {name}: {alone:.1f} us + {partner_name} {alone_partner:.1f} us alone; "
                  f"together {loop:.1f} us = {ratio:.3f} x the sum (median of {len(rounds)} rounds, "
                  f"{ratios[0]:.3f}-{ratios[-1]:.3f})", flush=True)
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", default="1,4,16,64,128,1024")
    p.add_argument("--hidden", default="4096,7168")
    p.add_argument("--seconds", type=float, default=0.3, help="least time per measurement")
    p.add_argument("--rounds", type=int, default=5, help="rounds of the interleaved loop's three timings")
    p.add_argument("--quick", action="store_true", help="T = 1, 64 at D = 4096 only, briefly")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.hidden = [int(d) for d in args.hidden.split(",")]
    if args.quick:
        args.tokens, args.hidden, args.seconds, args.rounds = [1, 64], [4096], 0.05, 1
    torch.set_num_threads(args.threads)
    mhc.set_num_threads(args.threads)
    mhc.engines.register_sgl_kernel()
    print(f"engine_decode: torch {torch.__version__}, {args.threads} threads, mhc family {mhc.isa()}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
          f"torch.ops path: {'libmhc_torch.so (' + _native.path + ')' if _native.ops else 'ctypes (no libmhc_torch.so)'}")
    table, noop_us = rows(args)
    print(f"(a no-op ctypes call, subtracted from the C API rows: {noop_us:.2f} us)")
    loop = interleaved(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(threads=args.threads, isa=mhc.isa(), native=_native.path, noop_ctypes_us=noop_us,
                           rows=table, interleaved=loop), f, indent=1)


if __name__ == "__main__":
    main()
