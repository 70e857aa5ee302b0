#!/usr/bin/python3
"""Two builds of libmhc.so side by side in one process: which is faster, and by how much.

On a shared host the speed drifts by tens of percent between runs of one binary (see
docs/performance.md, "Running it"), so two builds timed in separate runs cannot be told
apart. This tool loads both libraries into one process and calls one operator through
each in turn, alternating which goes first, on the same inputs; it prints the median time
of each and the median of the per-pair ratios B/A (with their range), and whether the two
builds' outputs are bitwise equal (a change that means to keep the bits must show True).

    /usr/bin/python3 bench/ab_builds.py OLD/libmhc.so NEW/libmhc.so \\
        [--op pre_backward[,post_backward...]] [--tokens 4096] [--hidden 4096] [--streams 4] [--threads 2] [--pairs 15]
        [--isa-a FAMILY] [--isa-b FAMILY]

--op: one or more (comma-separated) of pre_forward, pre_backward, post_forward,
post_backward, site_backward_prepare and site_backward_finish (V4: MhcSinkhornBackward and
MhcPreBackward with the post's grad_x formed in the rows), bf16, with gamma and h_res. The
Python face (python/mhc) runs on its own library (MHC_LIBRARY, else build/src); only the
operator's entry point is switched between A and B, with the face's argument types.
--isa-a / --isa-b set each library's default kernel family (mhc_set_isa), so one build's
families can be compared the same way (give the same path twice: B is then loaded from a
copy, a library of its own). Each library has its own thread pool, whose workers poll for
a while after a call: the calls are spaced by PAUSE_SECONDS, past that budget, so that one
build's pollers never share the cores with the other's call.
"""
import argparse
import ctypes
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mhc  # noqa: E402
from mhc import _lib  # noqa: E402
from torch_eager import make_inputs  # noqa: E402  (bench/, the script's own directory)

PAUSE_SECONDS = 0.005  # past the pools' polling budget (MHC_SPIN_US, runtime/thread_pool.cpp)
OPERATORS = ("pre_forward", "pre_backward", "post_forward", "post_backward", "site_backward_prepare",
             "site_backward_finish")


def inputs(T, N, D):
    """A site's tensors, bf16 with gamma and h_res: the pre's inputs and grads as
    torch_eager.py makes them, the caches of one forward, and grad_out of the post."""
    t = make_inputs(T, N, D, torch.bfloat16, with_gamma=True, with_gxp=True)
    h_in, h_post, h_res, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(t["x"], t["phi"], t["alpha"], t["bias"],
                                                                 gamma=t["gamma"], out_flag=1)
    return dict(x=t["x"], phi=t["phi"], alpha=t["alpha"], bias=t["bias"], gamma=t["gamma"], h_in=h_in,
                h_post=h_post, h_res=h_res, inv_rms=inv_rms, h_mix=h_mix, h_pre=h_pre, grad_h_in=t["g_in"],
                grad_h_post=t["g_post"], grad_h_res=t["g_res"], grad_x_post=t["gxp"],
                grad_x_next=t["gxp"].roll(1, 0))  # grad_x_post's values a token over: another site's, no new draw


def call(op, t):
    """The operator through the Python face; returns its outputs."""
    if op == "pre_forward":
        return mhc.npu_mhc_pre(t["x"], t["phi"], t["alpha"], t["bias"], gamma=t["gamma"], out_flag=1)
    if op == "pre_backward":
        return mhc.npu_mhc_pre_backward(t["x"], t["phi"], t["alpha"], t["grad_h_in"], t["grad_h_post"],
                                        t["grad_h_res"], t["inv_rms"], t["h_mix"], t["h_pre"], t["h_post"],
                                        gamma=t["gamma"], grad_x_post=t["grad_x_post"])
    if op == "post_forward":
        return (mhc.npu_mhc_post(t["x"], t["h_res"], t["h_in"], t["h_post"]),)
    if op == "post_backward":
        return mhc.npu_mhc_post_backward(t["grad_x_next"], t["x"], t["h_res"], t["h_in"], t["h_post"])
    if op == "site_backward_prepare":
        return mhc.mhc_site_backward_prepare(t["grad_x_next"], t["x"], t["h_res"], t["h_in"], t["h_post"])
    return mhc.mhc_site_backward_finish(t["x"], t["phi"], t["alpha"], t["bias"], None, t["gamma"], t["h_res"],
                                        t["grad_x_next"], t["grad_h_in"], None, t["grad_h_post"], t["grad_h_res"],
                                        t["inv_rms"], t["h_mix"], t["h_pre"], t["h_post"])


def compare(op, libraries, t, args):
    """One operator through builds A and B in turn; prints the line described above."""
    face_entry = getattr(_lib, op)
    entries = {}
    for name, library in libraries.items():
        entry = getattr(library, "mhc_" + op)
        entry.argtypes, entry.restype = face_entry.argtypes, face_entry.restype
        entries[name] = entry
    outputs, times = {}, {"A": [], "B": []}
    try:
        for name in "ABAB":  # warm-up calls (workspaces, the face's output buffers)
            setattr(_lib, op, entries[name])
            outputs[name] = call(op, t)
        for i in range(args.pairs):
            for name in ("AB" if i % 2 == 0 else "BA"):
                setattr(_lib, op, entries[name])
                time.sleep(PAUSE_SECONDS)
                start = time.perf_counter()
                call(op, t)
                times[name].append(time.perf_counter() - start)
    finally:
        setattr(_lib, op, face_entry)
    same = all((a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
               for a, b in zip(outputs["A"], outputs["B"]))
    ratios = [b / a for a, b in zip(times["A"], times["B"])]
    family = {name: library.mhc_isa().decode() for name, library in libraries.items()}
    print(f"{op} T={args.tokens} N={args.streams} D={args.hidden} bf16, {args.threads} thread(s), "
          f"{args.pairs} pairs: A ({family['A']}) {1e3 * statistics.median(times['A']):.3f} ms, "
          f"B ({family['B']}) {1e3 * statistics.median(times['B']):.3f} ms; B/A {statistics.median(ratios):.3f} "
          f"(pairs {min(ratios):.3f}-{max(ratios):.3f}); outputs bitwise equal: {same}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", help="build A's libmhc.so")
    p.add_argument("b", help="build B's libmhc.so")
    p.add_argument("--op", default="pre_backward")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pairs", type=int, default=15)
    p.add_argument("--isa-a", default=None, help="A's kernel family (default: its library's default)")
    p.add_argument("--isa-b", default=None, help="B's kernel family")
    args = p.parse_args()
    ops = args.op.split(",")
    unknown = [op for op in ops if op not in OPERATORS]
    if unknown or args.pairs < 1:
        p.error(f"--op: expected some of {', '.join(OPERATORS)}" if unknown else "--pairs: at least 1")

    mhc.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    copies = tempfile.TemporaryDirectory()
    b_path = args.b
    if os.path.samefile(args.a, args.b):  # dlopen would hand back A's library, defaults and all
        b_path = shutil.copy(args.b, os.path.join(copies.name, "libmhc_b.so"))
    libraries = {}
    for name, path, isa in (("A", args.a, args.isa_a), ("B", b_path, args.isa_b)):
        library = ctypes.CDLL(os.path.abspath(path))
        library.mhc_isa.restype = library.mhc_last_error.restype = ctypes.c_char_p
        if isa is not None and library.mhc_set_isa(isa.encode()) != 0:
            p.error(f"--isa-{name.lower()}: {library.mhc_last_error().decode()}")
        libraries[name] = library
    t = inputs(args.tokens, args.streams, args.hidden)
    for op in ops:
        compare(op, libraries, t, args)


if __name__ == "__main__":
    main()
