"""The inference engines' faces (SPEC §16) through mhc.engines: their bitwise contracts. SGLang's
hc_pre_fused_cpu is MhcPreSinkhorn (§12, eps order (rms_eps, hc_eps)), its hc_post_fused_cpu
MhcPost (§11) and its hc_head_fused_cpu mhc_head (§6); vLLM's mhc_pre_cpu with hc_post_mult_value
2 and one eps is mhc_pre_sinkhorn, with two eps the single pass collapsing with its own h_pre
(§14), whatever n_splits; mhc_pre_delayed is mhc_pre_single_pass; mhc_fused_post_pre is
mhc_post_cpu then mhc_pre_cpu; the fused RMSNorm is mhc_rms_norm on the rounded h_in. Then, for
every op at once: a token alone and inside batches of 2...256 with 1 and 2 threads; leading
dims [T], [B,S], [A,B,S]; strided inputs; T = 0; meta tensors through torch.ops.sgl_kernel and
torch.ops.mhc.mhc_rms_norm; the schemas; register_sgl_kernel() twice. The equalities with the
library's operators run under every kernel family (the single pass's on the fp32 ones). The
float64 oracle tests are in test_engines.py.
"""
import os
import subprocess
import sys
import warnings

import pytest
import torch

import mhc
import mhc.engines
from mhc.engines import sgl_kernel, vllm
from conftest import FAMILIES, QUICK, REPO, assert_same_bits, strided_copy
from test_engines import make_inputs

PER_TOKEN = ("x", "y", "post", "comb", "pre_mix")
EPS = (1e-2, 1e-3, 1e-4, 1e-5)  # (rms_eps, hc_pre_eps, hc_sinkhorn_eps, norm_eps), all distinct
SHAPES = [(2, 141, 7, "bf16", 8), (4, 4096, 5, "fp16", 20), (4, 7168, 3, "bf16", 20), (4, 128, 64, "fp16", 8),
          (2, 128, 1, "fp16", 20)]  # (hc, d, T, dtype, iters)


@pytest.fixture(scope="module", autouse=True)
def sgl_ops():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a False here: another test registered them already
        mhc.engines.register_sgl_kernel()
    return torch.ops.sgl_kernel


def inputs(hc, d, t, dtype, seed, norm="x", lead=None):
    inp = make_inputs({"hc": hc, "d": d, "T": t, "dtype": dtype, "layout": "TND", "norm": norm, "scale": "0d"}, seed)
    if lead is not None:
        inp = {k: v.reshape(lead + v.shape[1:]) if k in PER_TOKEN else v for k, v in inp.items()}
    return inp


def ids(shape):
    return "hc{}-d{}-T{}-{}-I{}".format(*shape)


def run_all(inp, iters=20, eps=EPS, mult=2.5, norm=True):
    """Every engine op on inp: {name: output}."""
    rms, pre_eps, sk_eps, norm_eps = eps
    x, y, post, comb, p = (inp[k] for k in PER_TOKEN)
    w = inp["norm_weight"] if norm else None
    fn, sc, base, n = inp["hc_fn"], inp["hc_scale"], inp["hc_base"], x.shape[-2]
    head = (inp["head_fn"], inp["head_scale"], inp["head_base"])
    ops = torch.ops.sgl_kernel
    out = dict(zip(("sgl_y", "sgl_post", "sgl_comb"), ops.hc_pre_fused_cpu(x, fn, sc, base, n, iters, rms, pre_eps)))
    out["sgl_residual"] = ops.hc_post_fused_cpu(y, x, post, comb)
    out["sgl_head"] = ops.hc_head_fused_cpu(x, *head, pre_eps, rms)
    args = (x, fn, sc, base, rms, pre_eps, sk_eps, mult, iters)
    out.update(zip(("pre_post", "pre_comb", "pre_layer_input"), vllm.mhc_pre_cpu(*args, norm_weight=w,
                                                                                   norm_eps=norm_eps)))
    out["vllm_residual"] = vllm.mhc_post_cpu(y, x, post[..., None], comb)
    out["vllm_head"] = vllm.hc_head_fused_cpu(x, *head, rms, pre_eps)
    out.update(zip(("fused_residual", "fused_post", "fused_comb", "fused_layer_input"), vllm.mhc_fused_post_pre(
        y, x, post[..., None], comb, fn, sc, base, *args[4:], norm_weight=w, norm_eps=norm_eps)))
    out.update(zip(("delayed_post", "delayed_comb", "delayed_layer_input", "delayed_next_pre"), vllm.mhc_pre_delayed(
        *args, pre_mix=p, norm_weight=w, norm_eps=norm_eps)))
    if w is not None and y.dim() <= 3:  # mhc_rms_norm: [T, D] or [B, S, D], as mhc's other operators
        out["rms_norm"] = mhc.mhc_rms_norm(y, w, norm_eps)
    return out


def expected(lead, n, d, dtype):
    """{name: (shape, dtype)} of run_all's outputs."""
    f32, lead = torch.float32, tuple(lead)
    vec, stream, streams, mix = (lead + (d,), dtype), (lead + (n,), f32), (lead + (n, d), dtype), (lead + (n, n), f32)
    col = (lead + (n, 1), f32)
    return {"sgl_y": vec, "sgl_post": stream, "sgl_comb": mix, "sgl_residual": streams, "sgl_head": vec,
            "pre_post": col, "pre_comb": mix, "pre_layer_input": vec, "vllm_residual": streams, "vllm_head": vec,
            "fused_residual": streams, "fused_post": col, "fused_comb": mix, "fused_layer_input": vec,
            "delayed_post": col, "delayed_comb": mix, "delayed_layer_input": vec, "delayed_next_pre": stream,
            "rms_norm": vec}


def check_types(out, lead, n, d, dtype, device="cpu"):
    want = expected(lead, n, d, dtype)
    for name, t in out.items():
        assert (tuple(t.shape), t.dtype) == want[name], f"{name}: {tuple(t.shape)} {t.dtype} != {want[name]}"
        assert t.device.type == device, f"{name}: on {t.device}"


# The library's own operators, bit for bit.

@pytest.mark.parametrize("shape", SHAPES, ids=ids)
@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
def test_sgl_ops_are_the_librarys(isa_family, shape):
    hc, d, t, dtype, iters = shape
    inp = inputs(hc, d, t, dtype, seed=20000 + d)
    x, fn, sc, base = inp["x"], inp["hc_fn"], inp["hc_scale"], inp["hc_base"]
    rms_eps, hc_eps = 1e-2, 1e-3  # (rms_eps, hc_eps) here, (hc_eps, norm_eps) in mhc_pre_sinkhorn
    got = torch.ops.sgl_kernel.hc_pre_fused_cpu(x, fn, sc, base, hc, iters, rms_eps, hc_eps)
    h_in, h_post, h_res = mhc.mhc_pre_sinkhorn(x, fn, sc, base, hc, iters, hc_eps, rms_eps)
    for name, a, b in zip(("y", "post", "comb"), got, (h_in, h_post, h_res.reshape(t, hc, hc))):
        assert_same_bits(name, b, a, "mhc_pre_sinkhorn vs hc_pre_fused_cpu")
    assert_same_bits("out", mhc.npu_mhc_post(x, inp["comb"], inp["y"], inp["post"]),
                     torch.ops.sgl_kernel.hc_post_fused_cpu(inp["y"], x, inp["post"], inp["comb"]),
                     "npu_mhc_post vs hc_post_fused_cpu")
    for scale in (inp["head_scale"], inp["head_scale"].reshape(1)):
        want = mhc.mhc_head(x, inp["head_fn"], scale.reshape(1), inp["head_base"], norm_eps=rms_eps, hc_eps=hc_eps)
        got = torch.ops.sgl_kernel.hc_head_fused_cpu(x, inp["head_fn"], scale, inp["head_base"], hc_eps, rms_eps)
        assert_same_bits("y", want, got, f"mhc_head vs hc_head_fused_cpu (scale {tuple(scale.shape)})")


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
@pytest.mark.parametrize("isa_family", [f for f in FAMILIES if f != "reference"], indirect=True)
def test_vllm_pre_is_the_librarys(isa_family, shape):
    """One eps and mult 2: mhc_pre_sinkhorn's bits; two eps: the single pass with its own h_pre;
    mhc_pre_delayed: mhc_pre_single_pass (pre_mix None and given); n_splits changes nothing. On
    the fp32 kernel families (SPEC §14: the float64 reference family forms h_pre in float64)."""
    hc, d, t, dtype, iters = shape
    inp = inputs(hc, d, t, dtype, seed=20100 + d)
    x, fn, sc, base = inp["x"], inp["hc_fn"], inp["hc_scale"], inp["hc_base"]
    rms_eps, eps = 1e-2, 1e-3
    post, comb, layer_input = vllm.mhc_pre_cpu(x, fn, sc, base, rms_eps, eps, eps, 2.0, iters)
    h_in, h_post, h_res = mhc.mhc_pre_sinkhorn(x, fn, sc, base, hc, iters, eps, rms_eps)
    what = "mhc_pre_sinkhorn vs mhc_pre_cpu (hc_pre_eps = hc_sinkhorn_eps, mult 2)"
    assert_same_bits("post", h_post, post[..., 0], what)
    assert_same_bits("comb", h_res.reshape(t, hc, hc), comb, what)
    assert_same_bits("layer_input", h_in, layer_input, what)
    for pre_eps, sk_eps in ((1e-3, 1e-4), (1e-4, 1e-2)):
        own = mhc.mhc_pre_single_pass(x, fn, sc, base, None, num_iters=1, hc_eps=pre_eps, norm_eps=rms_eps)[1]
        want = mhc.mhc_pre_single_pass(x, fn, sc, base, own, num_iters=iters, hc_eps=pre_eps, norm_eps=rms_eps,
                                       sinkhorn_eps=sk_eps)
        for n_splits in (1, 4, 16):
            got = vllm.mhc_pre_cpu(x, fn, sc, base, rms_eps, pre_eps, sk_eps, 2.0, iters, n_splits)
            what = f"single pass with its own h_pre vs mhc_pre_cpu (eps {pre_eps:g}, {sk_eps:g}; n_splits {n_splits})"
            for name, a, b in (("post", want[2], got[0][..., 0]), ("comb", want[3], got[1]),
                               ("layer_input", want[0], got[2])):
                assert_same_bits(name, a, b, what)
        for p in (None, inp["pre_mix"]):
            want = mhc.mhc_pre_single_pass(x, fn, sc, base, p, num_iters=iters, hc_eps=pre_eps, norm_eps=rms_eps,
                                           sinkhorn_eps=sk_eps)
            got = vllm.mhc_pre_delayed(x, fn, sc, base, rms_eps, pre_eps, sk_eps, 2.0, iters, pre_mix=p)
            what = f"mhc_pre_single_pass vs mhc_pre_delayed ({'pre_mix' if p is not None else 'first site'})"
            for name, a, b in (("post", want[2], got[0][..., 0]), ("comb", want[3], got[1]),
                               ("layer_input", want[0], got[2]), ("next_pre", want[1], got[3])):
                assert_same_bits(name, a, b, what)


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
@pytest.mark.parametrize("norm", ["none", "x", "fp32"])
def test_fused_post_pre_is_post_then_pre(shape, norm):
    hc, d, t, dtype, iters = shape
    inp = inputs(hc, d, t, dtype, seed=20200 + d, norm=norm)
    w = None if norm == "none" else inp["norm_weight"]
    x, y, post, comb = inp["x"], inp["y"], inp["post"], inp["comb"]
    weights = (inp["hc_fn"], inp["hc_scale"], inp["hc_base"])
    for mult, eps, post_mix in ((2.0, EPS, post[..., None]), (2.5, (1e-6, 1e-6, 1e-6, 1e-6), post)):
        got = vllm.mhc_fused_post_pre(y, x, post_mix, comb, *weights, *eps[:3], mult, iters, norm_weight=w,
                                      norm_eps=eps[3])
        residual = vllm.mhc_post_cpu(y, x, post_mix, comb)
        want = (residual,) + tuple(vllm.mhc_pre_cpu(residual, *weights, *eps[:3], mult, iters, norm_weight=w,
                                                    norm_eps=eps[3]))
        assert len(got) == 4
        for name, a, b in zip(("residual_cur", "post_cur", "comb_cur", "layer_input_cur"), want, got):
            assert_same_bits(name, a, b, f"mhc_post_cpu then mhc_pre_cpu vs mhc_fused_post_pre (mult {mult})")
    if w is not None:  # its norm_eps defaults to 1e-6 (mhc_pre_cpu's to 0.0)
        got = vllm.mhc_fused_post_pre(y, x, post, comb, *weights, *EPS[:3], 2.0, iters, norm_weight=w)
        want = vllm.mhc_pre_cpu(got[0], *weights, *EPS[:3], 2.0, iters, norm_weight=w, norm_eps=1e-6)
        assert_same_bits("layer_input_cur", want[2], got[3], "mhc_fused_post_pre's default norm_eps = 1e-6")


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_the_fused_norm_is_mhc_rms_norm_on_the_rounded_h_in(shape):
    """layer_input with norm_weight = mhc_rms_norm(layer_input without, norm_weight, norm_eps), for a
    weight in x's dtype and in fp32 (the same values: the same bits)."""
    hc, d, t, dtype, iters = shape
    inp = inputs(hc, d, t, dtype, seed=20300 + d, norm="x")
    args = (inp["x"], inp["hc_fn"], inp["hc_scale"], inp["hc_base"], *EPS[:3], 2.0, iters)
    plain = vllm.mhc_pre_cpu(*args)[2]
    first = vllm.mhc_pre_delayed(*args, pre_mix=inp["pre_mix"])[2]
    for w in (inp["norm_weight"], inp["norm_weight"].float()):
        what = f"mhc_rms_norm vs the fused norm (weight {w.dtype})"
        assert_same_bits("layer_input", mhc.mhc_rms_norm(plain, w, EPS[3]),
                         vllm.mhc_pre_cpu(*args, norm_weight=w, norm_eps=EPS[3])[2], what + ", mhc_pre_cpu")
        assert_same_bits("layer_input", mhc.mhc_rms_norm(first, w, EPS[3]),
                         vllm.mhc_pre_delayed(*args, pre_mix=inp["pre_mix"], norm_weight=w, norm_eps=EPS[3])[2],
                         what + ", mhc_pre_delayed")
    assert_same_bits("layer_input", vllm.mhc_pre_cpu(*args, norm_weight=inp["norm_weight"], norm_eps=0.0)[2],
                     vllm.mhc_pre_cpu(*args, norm_weight=inp["norm_weight"])[2], "mhc_pre_cpu's default norm_eps 0")


# Every op at once: batches, threads, layouts, strides, no tokens, meta tensors.

BATCH_SIZES = (2, 3, 64, 256) if QUICK else (2, 3, 7, 16, 63, 64, 128, 255, 256)


@pytest.mark.parametrize("shape", [(4, 4096, "bf16"), (2, 141, "fp16")], ids=lambda s: "hc{}-d{}-{}".format(*s))
def test_token_alone_equals_token_in_batch(shape):
    hc, d, dtype = shape
    inp = inputs(hc, d, max(BATCH_SIZES), dtype, seed=20400 + d, norm="fp32")
    picks = sorted({0, 1} | {b - 1 for b in BATCH_SIZES})

    def token(i, source):
        return {k: v[i:i + 1] if k in PER_TOKEN else v for k, v in source.items()}

    def set_threads(n):  # the ctypes path's (mhc's) and the C++ ops' (torch's intra-op threads)
        mhc.set_num_threads(n)
        torch.set_num_threads(n)

    torch_threads = torch.get_num_threads()
    try:
        set_threads(1)
        alone = {i: run_all(token(i, inp)) for i in picks}
        for threads in (1, 2):
            set_threads(threads)
            for b in BATCH_SIZES:
                batch = run_all({k: v[:b] if k in PER_TOKEN else v for k, v in inp.items()})
                for i in (0, b - 1):
                    for name, t in batch.items():
                        assert_same_bits(name, alone[i][name], t[i:i + 1],
                                         f"token {i} alone (1 thread) vs in a batch of {b} ({threads} threads)")
    finally:
        torch.set_num_threads(torch_threads)


@pytest.mark.parametrize("shape", SHAPES[:3], ids=ids)
def test_leading_dims(shape):
    """[T, ...], [B, S, ...] and [A, B, S, ...]: the same bits, the outputs' leading dims x's."""
    hc, d, _, dtype, iters = shape
    inp = inputs(hc, d, 12, dtype, seed=20500 + d)
    flat = run_all(inp, iters)
    check_types(flat, (12,), hc, d, inp["x"].dtype)
    for lead in ((3, 4), (2, 3, 2), (12, 1)):
        out = run_all(inputs(hc, d, 12, dtype, seed=20500 + d, lead=lead), iters)
        check_types(out, lead, hc, d, inp["x"].dtype)
        for name, t in out.items():
            assert_same_bits(name, flat[name], t.reshape(flat[name].shape), f"[T, ...] vs {list(lead)} leading dims")


@pytest.mark.parametrize("shape", SHAPES[:3], ids=ids)
@pytest.mark.parametrize("style", ["reversed", "step"])
def test_strided_inputs_give_the_same_bits(shape, style):
    hc, d, t, dtype, iters = shape
    inp = inputs(hc, d, t, dtype, seed=20600 + d)
    want = run_all(inp, iters)
    strided = {k: strided_copy(v, style) for k, v in inp.items()}
    assert not strided["x"].is_contiguous() and not strided["comb"].is_contiguous()
    got = run_all(strided, iters)
    for name, t in got.items():
        assert_same_bits(name, want[name], t, f"contiguous vs {style} strided inputs")
        assert t.is_contiguous(), name
    post_col = strided_copy(inp["post"][..., None], style)  # post_layer_mix [.., N, 1] strided
    assert_same_bits("residual", want["vllm_residual"], vllm.mhc_post_cpu(inp["y"], inp["x"], post_col, inp["comb"]),
                     "contiguous vs strided post_layer_mix")


@pytest.mark.parametrize("lead", [(0,), (2, 0), (0, 3)], ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_no_tokens(lead, dtype):
    inp = inputs(4, 128, 0, dtype, seed=20700, lead=lead)
    for norm in (True, False):
        out = run_all(inp, norm=norm)
        check_types(out, lead, 4, 128, inp["x"].dtype)
        assert all(t.numel() == 0 for t in out.values())


@pytest.mark.parametrize("lead", [(5,), (2, 3), (0,)], ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_meta_tensors(lead, dtype):
    """torch.ops.sgl_kernel.* and torch.ops.mhc.mhc_rms_norm on meta tensors: the CPU outputs'
    shapes and dtypes; the head's scale 0-d or [1]."""
    hc, d = 4, 64
    t = 1
    for s in lead:
        t *= s
    inp = inputs(hc, d, t, dtype, seed=20800, lead=lead)
    m = {k: v.to("meta") for k, v in inp.items()}
    ops = torch.ops.sgl_kernel
    out = dict(zip(("sgl_y", "sgl_post", "sgl_comb"),
                   ops.hc_pre_fused_cpu(m["x"], m["hc_fn"], m["hc_scale"], m["hc_base"], hc, 20, 1e-6, 1e-6)))
    out["sgl_residual"] = ops.hc_post_fused_cpu(m["y"], m["x"], m["post"], m["comb"])
    out["sgl_head"] = ops.hc_head_fused_cpu(m["x"], m["head_fn"], m["head_scale"], m["head_base"], 1e-6, 1e-6)
    out["rms_norm"] = torch.ops.mhc.mhc_rms_norm(m["y"], m["norm_weight"], 1e-6)
    check_types(out, lead, hc, d, inp["x"].dtype, device="meta")
    head = ops.hc_head_fused_cpu(m["x"], m["head_fn"], m["head_scale"].reshape(1), m["head_base"], 1e-6, 1e-6)
    check_types({"sgl_head": head}, lead, hc, d, inp["x"].dtype, device="meta")
    check_types({"rms_norm": torch.ops.mhc.mhc_rms_norm(m["y"], m["norm_weight"].float())}, lead, hc, d,
                inp["x"].dtype, device="meta")


SCHEMAS = {  # SPEC §16
    "hc_pre_fused_cpu": ("x: Tensor", "hc_fn: Tensor", "hc_scale: Tensor", "hc_base: Tensor", "hc_mult: int",
                         "sinkhorn_iters: int", "rms_eps: float", "hc_eps: float"),
    "hc_post_fused_cpu": ("x: Tensor", "residual: Tensor", "post: Tensor", "comb: Tensor"),
    "hc_head_fused_cpu": ("x: Tensor", "hc_fn: Tensor", "hc_scale: Tensor", "hc_base: Tensor", "hc_eps: float",
                          "norm_eps: float"),
}


def test_the_sgl_schemas():
    for name, want in SCHEMAS.items():
        schema = getattr(torch.ops.sgl_kernel, name).default._schema
        got = tuple(f"{a.name}: {a.type}" for a in schema.arguments)
        assert got == want, f"{name}: {schema}"
        assert len(schema.returns) == (3 if name == "hc_pre_fused_cpu" else 1), f"{name}: {schema}"
        assert all(str(r.type) == "Tensor" for r in schema.returns), f"{name}: {schema}"
        assert getattr(sgl_kernel, name) is not None


def test_register_twice_warns_and_returns_false():
    with pytest.warns(Warning):
        assert mhc.engines.register_sgl_kernel() is False
    for name in SCHEMAS:  # still there, still the same
        assert hasattr(torch.ops.sgl_kernel, name), name


FRESH = """
import warnings, torch, mhc.engines
with warnings.catch_warnings(record=True) as first:
    warnings.simplefilter("always")
    assert mhc.engines.register_sgl_kernel() is True
assert not first, [str(w.message) for w in first]
with warnings.catch_warnings(record=True) as second:
    warnings.simplefilter("always")
    assert mhc.engines.register_sgl_kernel() is False
assert len(second) == 1, [str(w.message) for w in second]
x = torch.randn(3, 2, 8).bfloat16()
y = torch.ops.sgl_kernel.hc_head_fused_cpu(x, torch.randn(2, 16), torch.tensor(0.5), torch.zeros(2), 1e-6, 1e-6)
assert y.shape == (3, 8) and y.dtype == torch.bfloat16
print("ok")
"""


def test_register_in_a_fresh_process():
    """The first registration of a process returns True and says nothing; the second False, with
    one warning."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(REPO, "python")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-c", FRESH], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
