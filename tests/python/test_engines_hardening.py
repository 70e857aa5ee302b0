"""Hostile inputs through every engine entry point (SPEC §16): torch.ops.sgl_kernel.* and
torch.ops.mhc_engines.* (libmhc_torch.so, src/faces/torch/engine_ops.cpp), mhc.engines.vllm on
them, and the ctypes path (mhc.engines.sgl_kernel's functions, mhc.engines._python_vllm,
mhc.ops.mhc_rms_norm) with the same cases. A rejected call raises ValueError or TypeError whose
message begins with the offending argument's name: the engine's own, or the library's name for
it (phi, alpha, bias, h_post, h_res, h_out, weight, num_iters, ...) where that is not the name
of another argument of the same op. Accepted views (transposed, stride 0, misaligned, requiring
grad) give the bits of the contiguous call, without a graph. No call modifies its inputs.

The whole battery runs once in a child process under RLIMIT_AS (a crash fails the case it
died in, a huge allocation fails instead of swapping the machine); the tests read its log.
Known defects are strict xfails (KNOWN_CPP, KNOWN_AGREE), so a fix shows as XPASS.
"""
import json
import os
import subprocess
import sys
import types

import pytest
import torch

from conftest import HERE, REPO
from mhc.engines import _native

pytestmark = pytest.mark.skipif(_native.ops is None, reason="libmhc_torch.so not built: no C++ path")

T, N, D = 3, 4, 8
F, K = 2 * N + N * N, N * D
PER_TOKEN = ("x", "y", "post", "comb", "pre_mix")
HUGE = 2 ** 40


def inputs():
    g = torch.Generator().manual_seed(5)
    r = lambda *s: torch.randn(s, generator=g)  # noqa: E731
    return {"x": r(T, N, D).bfloat16(), "hc_fn": r(F, K) / 6, "hc_scale": torch.rand(3, generator=g) + .5,
            "hc_base": r(F) / 2, "head_fn": r(N, K) / 6, "head_scale": torch.tensor(.7), "head_base": r(N) / 2,
            "y": r(T, D).bfloat16(), "post": 2 * torch.rand(T, N, generator=g), "comb": torch.softmax(r(T, N, N), -1),
            "pre_mix": .1 + torch.rand(T, N, generator=g), "norm_weight": 1 + r(D) / 4, "hc_mult": N, "iters": 20,
            "rms_eps": 1e-6, "hc_eps": 1e-5, "sk_eps": 1e-4, "norm_eps": 1e-6, "mult": 2.5}


def pre(a):
    return a["hc_fn"], a["hc_scale"], a["hc_base"], a["rms_eps"], a["hc_eps"], a["sk_eps"], a["mult"], a["iters"]


def norm(a):
    return {"norm_weight": a["norm_weight"], "norm_eps": a["norm_eps"]}


PRE = ("x:residual hc_fn:fn hc_scale hc_base rms_eps hc_eps:hc_pre_eps sk_eps:hc_sinkhorn_eps "
       "mult:hc_post_mult_value iters:sinkhorn_repeat norm_weight norm_eps")
POST = " y:x post:post_layer_mix comb:comb_res_mix"
# op: (family, "key[:engine name] ...", call(namespace, inputs))
OPS = {
    "sgl_pre": ("sgl", "x hc_fn hc_scale hc_base hc_mult iters:sinkhorn_iters rms_eps hc_eps", lambda m, a: m.hc_pre_fused_cpu(
        a["x"], a["hc_fn"], a["hc_scale"], a["hc_base"], a["hc_mult"], a["iters"], a["rms_eps"], a["hc_eps"])),
    "sgl_post": ("sgl", "y:x x:residual post comb", lambda m, a: m.hc_post_fused_cpu(a["y"], a["x"], a["post"], a["comb"])),
    "sgl_head": ("sgl", "x head_fn:hc_fn head_scale:hc_scale head_base:hc_base hc_eps rms_eps:norm_eps",
                 lambda m, a: m.hc_head_fused_cpu(a["x"], a["head_fn"], a["head_scale"], a["head_base"], a["hc_eps"],
                                                  a["rms_eps"])),
    "vllm_pre": ("vllm", PRE, lambda m, a: m.mhc_pre_cpu(a["x"], *pre(a), **norm(a))),
    "vllm_delayed": ("vllm", PRE + " pre_mix", lambda m, a: m.mhc_pre_delayed(a["x"], *pre(a), pre_mix=a["pre_mix"],
                                                                              **norm(a))),
    "vllm_fused": ("vllm", PRE + POST, lambda m, a: m.mhc_fused_post_pre(a["y"], a["x"], a["post"], a["comb"], *pre(a),
                                                                          **norm(a))),
    "vllm_post": ("vllm", "x:residual" + POST, lambda m, a: m.mhc_post_cpu(a["y"], a["x"], a["post"], a["comb"])),
    "vllm_head": ("vllm", "x:hidden_states head_fn:hc_fn head_scale:hc_scale head_base:hc_base rms_eps:rms_norm_eps "
                  "hc_eps", lambda m, a: m.hc_head_fused_cpu(a["x"], a["head_fn"], a["head_scale"], a["head_base"],
                                                             a["rms_eps"], a["hc_eps"])),
    "rms_norm": ("norm", "y:x norm_weight:weight norm_eps:eps", lambda m, a: m.rms_norm(a["y"], a["norm_weight"],
                                                                                        a["norm_eps"])),
}
NAMES = {op: dict((w.split(":") * 2)[:2] for w in spec.split()) for op, (_, spec, _) in OPS.items()}
# The library's own names (its operators' messages) for the engines' arguments.
ALIAS = {"x": {"x"}, "y": {"h_out"}, "hc_fn": {"phi"}, "head_fn": {"phi"}, "hc_scale": {"alpha"},
         "head_scale": {"alpha"}, "hc_base": {"bias"}, "head_base": {"bias"}, "post": {"h_post"}, "comb": {"h_res"},
         "norm_weight": {"weight"}, "iters": {"num_iters"}, "rms_eps": {"norm_eps"}, "sk_eps": {"sinkhorn_eps", "eps"},
         "norm_eps": {"eps"}}


def names_for(op, keys):
    """What a message about keys may begin with: their engine names, and the library's names
    for them that name no other argument of op."""
    keys = [k for k in keys if k in NAMES[op]]
    others = {NAMES[op][k] for k in NAMES[op] if k not in keys}
    return {NAMES[op][k] for k in keys} | {n for k in keys for n in ALIAS.get(k, ()) if n not in others}


def per_token(f):
    return lambda a: {**a, **{k: f(a[k]) for k in PER_TOKEN}}


def both(keys, f):
    return lambda a: {**a, **{k: f(a[k]) for k in keys}}


def meta(a):
    return {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in a.items()}


def misaligned(t):
    out = torch.empty(t.numel() + 1, dtype=t.dtype)[1:].view(t.shape)
    return out.copy_(t)


def transposed(t):
    return t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.dim() >= 2 else t


def expanded(t):  # stride 0 along the first dim
    return t[:1].expand(t.shape) if t.dim() >= 1 else t


def tensors(f):
    return lambda a: {k: f(v) if isinstance(v, torch.Tensor) else v for k, v in a.items()}


def huge_wrap(a):  # fp32 streams of D = 1 whose byte count wraps a 64-bit size_t to 4 MiB
    z, t = torch.zeros(()), 2 ** 62 + 2 ** 20
    return {**a, "x": z.expand(t, 1, 1), "y": z.expand(t, 1), "post": z.expand(t, 1), "comb": z.expand(t, 1, 1),
            "norm_weight": torch.ones(1)}


FN, SCALE, BASE = ("hc_fn", "head_fn"), ("hc_scale", "head_scale"), ("hc_base", "head_base")
# (id, expect, offending keys, mutation, keys the op must use: default the offending ones)
CASES = [
    ("x_fp64", "reject", ("x",), both(["x"], torch.Tensor.double), None),
    ("x_int32", "reject", ("x",), both(["x"], torch.Tensor.int), None),
    ("x_bool", "reject", ("x",), both(["x"], torch.Tensor.bool), None),
    ("y_int32", "reject", ("y",), both(["y"], torch.Tensor.int), None),
    ("y_fp16_x_bf16", "reject", ("y",), both(["y"], torch.Tensor.half), ("x", "y")),
    ("fn_bf16", "reject", FN, both(FN, torch.Tensor.bfloat16), None),
    ("scale_fp64", "reject", SCALE, both(SCALE, torch.Tensor.double), None),
    ("base_fp16", "reject", BASE, both(BASE, torch.Tensor.half), None),
    ("post_bf16", "reject", ("post",), both(["post"], torch.Tensor.bfloat16), None),
    ("comb_fp64", "reject", ("comb",), both(["comb"], torch.Tensor.double), None),
    ("pre_mix_fp64", "reject", ("pre_mix",), both(["pre_mix"], torch.Tensor.double), None),
    ("norm_weight_fp64", "reject", ("norm_weight",), both(["norm_weight"], torch.Tensor.double), None),
    ("fn_rows", "reject", FN, both(FN, lambda t: t[:-1]), None),
    ("fn_K", "reject", FN, both(FN, lambda t: t[:, :-1]), None),
    ("fn_rank3", "reject", FN, both(FN, lambda t: t[None]), None),
    ("fn_0d", "reject", FN, both(FN, lambda t: t[0, 0]), None),
    ("scale_2", "reject", SCALE, both(SCALE, lambda t: torch.rand(2)), None),
    ("scale_4", "reject", SCALE, both(SCALE, lambda t: torch.rand(4)), None),
    ("base_len", "reject", BASE, both(BASE, lambda t: t[:-1]), None),
    ("post_N", "reject", ("post",), both(["post"], lambda t: t[:, :-1]), None),
    ("post_T", "reject", ("post",), both(["post"], lambda t: t[:-1]), None),
    ("comb_N_by_N-1", "reject", ("comb",), both(["comb"], lambda t: t[..., :-1]), None),
    ("comb_N-1_square", "reject", ("comb",), both(["comb"], lambda t: t[:, :-1, :-1]), None),
    ("y_D", "reject", ("y",), both(["y"], lambda t: t[:, :-1]), None),
    ("residual_D", "reject", ("x", "y"), both(["x"], lambda t: t[..., :-1]), ("x", "y")),
    ("norm_weight_len", "reject", ("norm_weight",), both(["norm_weight"], lambda t: t[:-1]), None),
    ("pre_mix_N", "reject", ("pre_mix",), both(["pre_mix"], lambda t: t[:, :-1]), None),
    ("pre_mix_T", "reject", ("pre_mix",), both(["pre_mix"], lambda t: t[:-1]), None),
    ("x_rank1", "reject", ("x",), both(["x"], lambda t: t[0, 0]), None),
    ("y_rank0", "reject", ("y",), both(["y"], lambda t: t[0, 0]), None),
    ("hc_mult_N+1", "reject", ("hc_mult",), lambda a: {**a, "hc_mult": N + 1}, None),
    ("hc_mult_0", "reject", ("hc_mult",), lambda a: {**a, "hc_mult": 0}, None),
    ("iters_0", "reject", ("iters",), lambda a: {**a, "iters": 0}, None),
    ("iters_-1", "reject", ("iters",), lambda a: {**a, "iters": -1}, None),
    ("iters_2^40", "reject", ("iters",), lambda a: {**a, "iters": HUGE}, None),
    ("rms_eps_neg", "reject", ("rms_eps",), lambda a: {**a, "rms_eps": -1e-6}, None),
    ("rms_eps_nan", "reject", ("rms_eps",), lambda a: {**a, "rms_eps": float("nan")}, None),
    ("hc_eps_neg", "reject", ("hc_eps",), lambda a: {**a, "hc_eps": -1e-6}, None),
    ("hc_eps_nan", "reject", ("hc_eps",), lambda a: {**a, "hc_eps": float("nan")}, None),
    ("sk_eps_nan", "reject", ("sk_eps",), lambda a: {**a, "sk_eps": float("nan")}, None),
    ("sk_eps_inf", "reject", ("sk_eps",), lambda a: {**a, "sk_eps": float("inf")}, None),
    ("norm_eps_neg", "reject", ("norm_eps",), lambda a: {**a, "norm_eps": -1.0}, None),
    ("mult_nan", "reject", ("mult",), lambda a: {**a, "mult": float("nan")}, None),
    ("mult_inf", "reject", ("mult",), lambda a: {**a, "mult": float("inf")}, None),
    ("N0", "reject", ("x",), lambda a: {**a, "x": a["x"][:, :0], "hc_fn": a["hc_fn"][:0, :0], "hc_base": a["hc_base"][:0],
                                         "head_fn": a["head_fn"][:0, :0], "head_base": a["head_base"][:0],
                                         "post": a["post"][:, :0], "comb": a["comb"][:, :0, :0],
                                         "pre_mix": a["pre_mix"][:, :0]}, None),
    ("D0", "reject", ("x", "y"), lambda a: {**a, "x": a["x"][..., :0], "y": a["y"][:, :0], "hc_fn": a["hc_fn"][:, :0],
                                             "head_fn": a["head_fn"][:, :0], "norm_weight": a["norm_weight"][:0]}, None),
    ("T0_fn_rows", "reject", FN, lambda a: both(FN, lambda t: t[:-1])(per_token(lambda t: t[:0])(a)), None),
    ("T0_post_N", "reject", ("post",), lambda a: both(["post"], lambda t: t[:, :-1])(per_token(lambda t: t[:0])(a)), None),
    ("transposed", "same", (), tensors(transposed), ()),
    ("stride0", "same", (), tensors(expanded), ()),
    ("misaligned", "same", (), tensors(misaligned), ()),
    ("requires_grad", "same", (), tensors(lambda t: t.clone().requires_grad_()), ()),
    ("meta_x", "reject", ("x",), both(["x"], lambda t: t.to("meta")), None),
    ("meta_y", "reject", ("y",), both(["y"], lambda t: t.to("meta")), None),
    ("meta_fn", "reject", FN, both(FN, lambda t: t.to("meta")), None),
    ("meta_norm_weight", "reject", ("norm_weight",), both(["norm_weight"], lambda t: t.to("meta")), None),
    ("all_meta_fn_rows", "reject", FN, lambda a: meta(both(FN, lambda t: t[:-1])(a)), None),
    ("none_x", "reject", ("x",), both(["x"], lambda t: None), None),
    ("none_fn", "reject", FN, both(FN, lambda t: None), None),
    ("none_scale", "reject", SCALE, both(SCALE, lambda t: None), None),
    ("none_post", "reject", ("post",), both(["post"], lambda t: None), None),
    ("list_fn", "reject", FN, both(FN, lambda t: t.tolist()), None),
    ("huge_T", "reject", ("x",), per_token(lambda t: t[:1].expand((HUGE,) + t.shape[1:])), None),
    ("huge_fn_rows", "reject", FN, both(FN, lambda t: t[:1].expand(HUGE, t.shape[1])), None),
    ("huge_wrap", "reject", ("x", "y"), huge_wrap, ("y",)),
]
PAIRS = [(c[0], op) for c in CASES for op in OPS
         if all(k in NAMES[op] for k in (c[4] if c[4] is not None else ())) and
         (c[4] is not None or any(k in NAMES[op] for k in c[2]))]
CASE = {c[0]: c for c in CASES}


def namespaces(family):
    """{path: namespace of the family's functions}; the C++ paths first, "ctypes" last."""
    from mhc import ops
    from mhc.engines import _python_vllm, sgl_kernel, vllm
    return {"sgl": {"sgl_kernel": torch.ops.sgl_kernel, "mhc_engines": torch.ops.mhc_engines, "ctypes": sgl_kernel},
            "vllm": {"vllm": vllm, "ctypes": _python_vllm},
            "norm": {"mhc_engines": torch.ops.mhc_engines,
                     "ctypes": types.SimpleNamespace(rms_norm=ops.mhc_rms_norm)}}[family]


def storage_copy(v):
    """The input's whole storage (a stride-0 view's one element, not its claimed size)."""
    if not isinstance(v, torch.Tensor) or v.is_meta:
        return None
    with torch.no_grad():
        return torch.as_strided(v.detach(), (v.storage().size(),), (1,), 0).clone()


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and (a.numel() == 0 or torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)))


def flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def battery():
    """Every pair on every path: one JSON line announcing the call, one with its outcome."""
    import resource
    import warnings
    import mhc.engines
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mhc.engines.register_sgl_kernel()
    vm = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (4 << 30), resource.RLIM_INFINITY))
    for case, op in PAIRS:
        family, _, call = OPS[op]
        _, expect, _, mutate, _ = CASE[case]
        for path, ns in namespaces(family).items():
            args = mutate(inputs())
            print(json.dumps({"start": [case, op, path]}), flush=True)
            before = {k: storage_copy(v) for k, v in args.items()}
            res = {"key": [case, op, path]}
            try:
                out = flat(call(ns, args))
                res.update(ok=True, grad_fn=any(t.grad_fn is not None for t in out))
                if expect == "same":
                    plain = {k: v.detach().contiguous() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
                    res["same"] = all(same_bits(a, b) for a, b in zip(out, flat(call(ns, plain))))
            except Exception as exc:  # noqa: BLE001 (every kind is recorded, and judged by the tests)
                res.update(ok=False, exc=type(exc).__name__, msg=(str(exc).splitlines() or [""])[0][:300])
            res["modified"] = [k for k, v in before.items() if v is not None and not same_bits(v, storage_copy(args[k]))]
            print(json.dumps(res), flush=True)
    print(json.dumps({"done": True}), flush=True)


@pytest.fixture(scope="module")
def log():
    code = f"import sys; sys.path[:0] = [{HERE!r}]; import test_engines_hardening as t; t.battery()"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = {tuple(r["key"]): r for r in lines if "key" in r}
    started = [tuple(r["start"]) for r in lines if "start" in r]
    died = None if any("done" in r for r in lines) else (started[-1] if started else None, proc.returncode,
                                                           proc.stderr[-2000:])
    return results, died


def result(log, case, op, path):
    results, died = log
    r = results.get((case, op, path))
    assert r is not None, f"the battery died (exit {died[1]}) in {died[0]}: no result for {path}\n{died[2]}"
    return r


def rejected_properly(r, op, keys):
    """ValueError/TypeError naming the argument, or torch's own schema check (RuntimeError in
    torch 1.13) naming it in its way."""
    if r["exc"] == "RuntimeError" and "Expected a value of type" in r["msg"]:
        return any(f"for argument '{NAMES[op][k]}'" in r["msg"] for k in keys if k in NAMES[op])
    return r["exc"] in ("ValueError", "TypeError") and r["msg"].split(":")[0] in names_for(op, keys)


def cpp_paths(op):
    return [p for p in {"sgl": ("sgl_kernel", "mhc_engines"), "vllm": ("vllm",), "norm": ("mhc_engines",)}[OPS[op][0]]]


KNOWN_CPP = {}
KNOWN_AGREE = {}


def params(known):
    return [pytest.param(c, op, id=f"{c}-{op}", marks=[pytest.mark.xfail(strict=True, reason=known[(c, op)])]
                         if (c, op) in known else []) for c, op in PAIRS]


@pytest.mark.parametrize("case, op", params(KNOWN_CPP))
def test_cpp_path(log, case, op):
    _, expect, offending, _, _ = CASE[case]
    first = None
    for path in cpp_paths(op):
        r = result(log, case, op, path)
        assert not r["modified"], f"{path}: modified its inputs {r['modified']}"
        if first is not None:  # torch.ops.sgl_kernel.* and torch.ops.mhc_engines.*: the same kernels
            assert (r["ok"], r.get("msg")) == (first["ok"], first.get("msg")), f"{path} vs {cpp_paths(op)[0]}"
        first = r
        if expect == "reject":
            assert not r["ok"], f"{path}: accepted"
            want = sorted(names_for(op, [k for k in offending if k in NAMES[op]]))
            assert rejected_properly(r, op, offending), f"{path}: {r['exc']}: {r['msg']} (wanted a name in {want})"
        else:
            assert r["ok"], f"{path}: {r.get('exc')}: {r.get('msg')}"
            assert not r["grad_fn"], f"{path}: an output has a grad_fn"
            assert r["same"], f"{path}: not the bits of the contiguous call"


@pytest.mark.parametrize("case, op", params(KNOWN_AGREE))
def test_paths_agree(log, case, op):
    """The ctypes path accepts and rejects what the C++ path does, with the same kind of error,
    and leaves its inputs alone too."""
    cpp, ctypes_ = result(log, case, op, cpp_paths(op)[0]), result(log, case, op, "ctypes")
    assert not ctypes_["modified"], f"ctypes: modified its inputs {ctypes_['modified']}"
    assert ctypes_["ok"] == cpp["ok"], (f"C++ {'accepts' if cpp['ok'] else 'rejects'} ({cpp.get('msg')}), "
                                        f"ctypes {'accepts' if ctypes_['ok'] else 'rejects'} ({ctypes_.get('msg')})")
    if not cpp["ok"]:
        assert ctypes_["exc"] in ("ValueError", "TypeError"), f"ctypes: {ctypes_['exc']}: {ctypes_['msg']}"
