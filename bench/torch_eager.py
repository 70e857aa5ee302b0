#!/usr/bin/python3
"""PyTorch eager vs mhc's Python face, on mhc-bench's shapes; merged into its JSON.

Times, with torch.set_num_threads(2) (and mhc at 2 threads):
  - eager: a plain torch implementation of SPEC section 2 (inputs in the shape's
    dtype, fp32 compute, as a user would write it): forward, and backward through
    autograd of loss = sum(h_in*g_in) + sum(h_post*g_post) + sum(h_res*g_res), with
    grad_x_post accumulated into x.grad (as the post block's branch would);
  - ours, functional: mhc.npu_mhc_pre(out_flag=1) + mhc.npu_mhc_pre_backward(...,
    grad_x_post=...), end to end from Python, allocation of outputs included (from
    the face's output cache, as in a loop; "cold": the same with the cache off);
  - ours, autograd: mhc.mhc_pre forward + backward through autograd, same loss.
Decode shapes (forward only) run under torch.inference_mode, ours with out_flag=0.

Run with Debian's Python, with OpenBLAS as the BLAS (scripts/bench.sh sets
LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread), after mhc-bench:
    /usr/bin/python3 bench/torch_eager.py --json bench-results.json
"""
import argparse
import ctypes
import gc
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mhc  # noqa: E402  (the package of this repository)

# Same letters as mhc-bench (bench/operator_cases.cpp): T, N, D, dtype, gamma, grad_x_post, backward
SHAPES = {
    "a": (4096, 4, 4096, torch.bfloat16, True, True, True),
    "b": (16384, 4, 7168, torch.bfloat16, True, True, True),
    "c": (2048, 8, 2048, torch.float16, False, False, True),
    "d": (1024, 4, 512, torch.bfloat16, True, True, True),
    "e": (1, 4, 7168, torch.bfloat16, True, False, False),
}
# Timed runs after one warm-up. Shape b moves ~10 GB per eager iteration (each
# fresh fp32 [T, N*D] temporary is 1.9 GB and costs page faults): 2 runs and no
# warm-up (shape a, run before it, has already warmed every code path; every
# iteration of b allocates afresh, so a warm-up would change nothing).
RUNS_LARGE_SHAPES = {"b": 2}
WARMUP_RUNS = {"b": 0}
NORM_EPS = HC_EPS = 1e-6


def eager_mhc_pre(x, phi, alpha, bias, gamma=None, norm_eps=NORM_EPS, hc_eps=HC_EPS):
    """SPEC section 2 in plain torch: x [T,N,D] (bf16/fp16), fp32 compute."""
    T, N, D = x.shape
    v = x.float().reshape(T, N * D)
    inv_rms = torch.rsqrt(v.square().mean(dim=-1, keepdim=True) + norm_eps)
    u = v * gamma.reshape(1, N * D) if gamma is not None else v
    w = (u @ phi.t()) * inv_rms  # h_mix scaled by inv_rms, [T, F]
    z = torch.cat([alpha[0] * w[:, :N], alpha[1] * w[:, N:2 * N], alpha[2] * w[:, 2 * N:]], dim=1) + bias
    h_pre = torch.sigmoid(z[:, :N]) + hc_eps
    h_post = 2 * torch.sigmoid(z[:, N:2 * N])
    h_res = z[:, 2 * N:].reshape(T, N, N)
    h_in = (h_pre.unsqueeze(-1) * v.reshape(T, N, D)).sum(dim=1).to(x.dtype)
    return h_in, h_post, h_res


def make_inputs(T, N, D, dtype, with_gamma, with_gxp, seed=0):
    g = torch.Generator().manual_seed(seed)
    K, F = N * D, 2 * N + N * N

    def uniform(*shape, scale=1.0, offset=0.0):
        return (torch.rand(*shape, generator=g) * 2 - 1) * scale + offset

    x = uniform(T, N, D, scale=2.0).to(dtype)
    return dict(
        x=x, phi=uniform(F, K, scale=K ** -0.5), alpha=torch.tensor([0.9, 0.6, 0.4]),
        bias=uniform(F, scale=0.5), gamma=uniform(N, D, scale=0.5, offset=1.0) if with_gamma else None,
        g_in=uniform(T, D).to(dtype), g_post=uniform(T, N), g_res=uniform(T, N, N),
        gxp=uniform(T, N, D, scale=0.5).to(dtype) if with_gxp else None)


def leaves(inp):
    """Fresh leaves that require grad (x, phi, alpha, bias, gamma), as parameters would."""
    out = {k: inp[k].detach().requires_grad_() for k in ("x", "phi", "alpha", "bias")}
    out["gamma"] = inp["gamma"].detach().requires_grad_() if inp["gamma"] is not None else None
    return out


def backward_roots(outputs, p, inp):
    """Roots and grads of the loss; x itself is a root carrying grad_x_post."""
    h_in, h_post, h_res = outputs
    roots, grads = [h_in, h_post, h_res], [inp["g_in"], inp["g_post"], inp["g_res"]]
    if inp["gxp"] is not None:
        roots.append(p["x"])
        grads.append(inp["gxp"])
    return roots, grads


class ForeignCpuMeter:
    """CPUs other processes used since start (as in mhc-bench): a busy machine skews timings."""

    def __init__(self):
        self.busy0, self.own0, self.wall0 = self._busy(), self._own(), time.perf_counter()

    @staticmethod
    def _busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")  # all but idle, iowait

    @staticmethod
    def _own():
        t = os.times()
        return t.user + t.system

    def cpus(self):
        wall = time.perf_counter() - self.wall0
        foreign = (self._busy() - self.busy0) - (self._own() - self.own0)
        return max(0.0, foreign / wall) if wall > 0 else 0.0


def time_runs(step, runs, min_seconds, warmup=1, max_runs=1000):
    """step() -> (forward_s, backward_s); warm-up calls, then >= runs (until min_seconds)."""
    busy = ForeignCpuMeter()
    for _ in range(warmup):
        step()
    fwd, bwd = [], []
    t_start = time.perf_counter()
    while len(fwd) < runs or (time.perf_counter() - t_start < min_seconds and len(fwd) < max_runs):
        f, b = step()
        fwd.append(f * 1e3)
        bwd.append(b * 1e3)
    return dict(forward_ms=statistics.median(fwd), backward_ms=statistics.median(bwd) if bwd[0] else None,
                runs=len(fwd), warmup=warmup, other_processes_cpus=busy.cpus(),
                all_forward_ms=fwd, all_backward_ms=bwd)


def eager_step(inp, training):
    def step():
        if not training:
            with torch.inference_mode():
                t0 = time.perf_counter()
                eager_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], inp["gamma"])
                return time.perf_counter() - t0, 0.0
        p = leaves(inp)  # grads start as None each run (zero_grad(set_to_none=True))
        t0 = time.perf_counter()
        out = eager_mhc_pre(p["x"], p["phi"], p["alpha"], p["bias"], p["gamma"])
        t1 = time.perf_counter()
        torch.autograd.backward(*backward_roots(out, p, inp))
        return t1 - t0, time.perf_counter() - t1
    return step


def ours_functional_step(inp, training):
    def step():
        if not training:
            with torch.inference_mode():
                t0 = time.perf_counter()
                mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], gamma=inp["gamma"])
                return time.perf_counter() - t0, 0.0
        t0 = time.perf_counter()
        h_in, h_post, h_res, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(
            inp["x"], inp["phi"], inp["alpha"], inp["bias"], gamma=inp["gamma"], out_flag=1)
        t1 = time.perf_counter()
        mhc.npu_mhc_pre_backward(inp["x"], inp["phi"], inp["alpha"], inp["g_in"], inp["g_post"],
                                 inp["g_res"], inv_rms, h_mix, h_pre, h_post, gamma=inp["gamma"],
                                 grad_x_post=inp["gxp"])
        return t1 - t0, time.perf_counter() - t1
    return step


def ours_autograd_step(inp):
    def step():
        p = leaves(inp)
        t0 = time.perf_counter()
        out = mhc.mhc_pre(p["x"], p["phi"], p["alpha"], p["bias"], p["gamma"])
        t1 = time.perf_counter()
        torch.autograd.backward(*backward_roots(out, p, inp))
        return t1 - t0, time.perf_counter() - t1
    return step


def check_eager_matches_mhc():
    """Small fp32 case: eager and mhc give the same outputs and grads (1e-4 relative)."""
    inp = make_inputs(8, 4, 64, torch.float32, True, True, seed=1)
    worst = 0.0
    results = []
    for fn in (eager_mhc_pre, mhc.mhc_pre):
        p = leaves(inp)
        out = fn(p["x"], p["phi"], p["alpha"], p["bias"], p["gamma"])
        torch.autograd.backward(*backward_roots(out, p, inp))
        results.append([t.detach() for t in out] + [p[k].grad for k in ("x", "phi", "alpha", "bias", "gamma")])
    for a, b in zip(*results):
        worst = max(worst, ((a - b).norm() / b.norm().clamp_min(1e-30)).item())
    return worst


def blas_report():
    """Which BLAS library is loaded (from /proc/self/maps), its config, and a matmul timing."""
    a = torch.rand(1024, 1024)
    a @ a  # load the BLAS
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps if "blas" in line or "lapack" in line})
    report = dict(libraries=[os.path.realpath(p) for p in libs if p.startswith("/")],
                  LD_LIBRARY_PATH=os.environ.get("LD_LIBRARY_PATH"),
                  OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE"),
                  OPENBLAS_L2_SIZE=os.environ.get("OPENBLAS_L2_SIZE"))
    openblas = [p for p in report["libraries"] if "openblas" in p]
    if openblas:
        lib = ctypes.CDLL(openblas[0])
        for name in ("openblas_get_config", "openblas_get_corename"):
            fn = getattr(lib, name, None)
            if fn:
                fn.restype = ctypes.c_char_p
                report[name.replace("openblas_get_", "openblas_")] = fn().decode()
        if hasattr(lib, "openblas_get_num_threads"):
            report["openblas_threads"] = lib.openblas_get_num_threads()
    report["name"] = "OpenBLAS" if openblas else ("reference BLAS" if report["libraries"] else "none found")
    n, best = 2048, float("inf")
    a, b = torch.rand(n, n), torch.rand(n, n)
    for _ in range(3):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    report["sgemm_2048_gflops"] = 2 * n ** 3 / best * 1e-9
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default="bench-results.json", help="mhc-bench's results file (merged into)")
    ap.add_argument("--shapes", default=None, help="e.g. a,c,d (default: those in the JSON, else all)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs after one warm-up (shape b: 2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-seconds", type=float, default=0.5, help="keep timing small shapes this long")
    args = ap.parse_args()

    results = {}
    if os.path.exists(args.json):
        with open(args.json) as f:
            results = json.load(f)
    if args.shapes:
        names = [s for s in args.shapes.split(",") if s]
    elif results.get("cases"):
        names = [c["shape"] for c in results["cases"]]
    else:
        names = list(SHAPES)
    for n in names:
        if n not in SHAPES:
            sys.exit(f"torch_eager.py: unknown shape {n!r}")

    torch.set_num_threads(args.threads)
    mhc.set_num_threads(args.threads)
    blas = blas_report()
    check = check_eager_matches_mhc()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; BLAS: {blas['name']} "
          f"{blas.get('openblas_config', '')} core {blas.get('openblas_corename', '?')}, "
          f"sgemm 2048^3 {blas['sgemm_2048_gflops']:.1f} GFLOP/s")
    print(f"mhc {mhc.__version__}, kernels {mhc.isa()}, {args.threads} threads; "
          f"eager vs mhc (fp32, small): worst relative difference {check:.2e}")
    if check > 1e-4:
        sys.exit("torch_eager.py: the eager implementation and mhc disagree; not timing")

    header = (f"{'shape':5} {'eager fwd':>10} {'eager bwd':>10} {'ours fwd':>9} {'ours bwd':>9} "
              f"{'autograd f':>10} {'autograd b':>10} {'eager/ours':>10} {'eager/autograd':>14} "
              f"{'cold f+b':>9} {'eager/cold':>10} {'busy':>5}"
              "  (ms; cold: ours without the output cache; busy: CPUs other processes used)")
    print(header)
    cases = []
    for name in names:
        T, N, D, dtype, with_gamma, with_gxp, training = SHAPES[name]
        runs = min(args.runs, RUNS_LARGE_SHAPES.get(name, args.runs))
        warmup = WARMUP_RUNS.get(name, 1)
        inp = make_inputs(T, N, D, dtype, with_gamma, with_gxp)
        case = dict(shape=name, T=T, N=N, D=D, dtype=str(dtype).replace("torch.", ""), runs=runs,
                    eager=time_runs(eager_step(inp, training), runs, args.min_seconds, warmup))
        gc.collect()
        case["ours_functional"] = time_runs(ours_functional_step(inp, training), runs, args.min_seconds,
                                            warmup)
        # The same without the Python face's output cache: every output on fresh pages.
        capacity, _ = mhc.get_output_cache()
        mhc.set_output_cache(0)
        case["ours_functional_cold"] = time_runs(ours_functional_step(inp, training), runs, args.min_seconds,
                                                 warmup)
        mhc.set_output_cache(capacity)
        if training:
            case["ours_autograd"] = time_runs(ours_autograd_step(inp), runs, args.min_seconds, warmup)
        total = {k: case[k]["forward_ms"] + (case[k]["backward_ms"] or 0)
                 for k in ("eager", "ours_functional", "ours_functional_cold", "ours_autograd") if k in case}
        case["ours_functional_cold_total_ms"] = total["ours_functional_cold"]
        case["ratio_eager_over_ours_cold"] = total["eager"] / total["ours_functional_cold"]
        case["ratio_eager_over_ours"] = total["eager"] / total["ours_functional"]
        case["ratio_eager_over_ours_autograd"] = (total["eager"] / total["ours_autograd"]
                                                  if "ours_autograd" in total else None)
        cases.append(case)
        e, o, a = case["eager"], case["ours_functional"], case.get("ours_autograd")

        def ms(v):
            return f"{v:10.2f}" if v is not None else f"{'-':>10}"
        print(f"{name:5} {ms(e['forward_ms'])} {ms(e['backward_ms'])} {ms(o['forward_ms'])[1:]} "
              f"{ms(o['backward_ms'])[1:]} {ms(a and a['forward_ms'])} {ms(a and a['backward_ms'])} "
              f"{case['ratio_eager_over_ours']:9.2f}x "
              f"{'' if a is None else format(case['ratio_eager_over_ours_autograd'], '13.2f') + 'x':>14} "
              f"{case['ours_functional_cold_total_ms']:9.2f} {case['ratio_eager_over_ours_cold']:9.2f}x "
              f"{max(r['other_processes_cpus'] for r in (e, o, a, case['ours_functional_cold']) if r):5.2f}",
              flush=True)
        del inp
        gc.collect()

    results["pytorch"] = dict(
        torch_version=torch.__version__, threads=torch.get_num_threads(), mhc_isa=mhc.isa(),
        mhc_threads=args.threads, blas=blas, eager_vs_mhc_relative_difference=check,
        runs=args.runs, runs_large_shapes=RUNS_LARGE_SHAPES, warmup_runs=1,
        warmup_runs_large_shapes=WARMUP_RUNS, cases=cases,
        note="eager/ours = (eager forward + backward) / (ours forward + backward); ours "
             "functional includes allocating outputs (from the face's output cache; "
             "ours_functional_cold: every output on fresh pages), mhc-bench's figures do not")
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    print(f"merged into {args.json}")


if __name__ == "__main__":
    main()
