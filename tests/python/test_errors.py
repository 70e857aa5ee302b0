"""Errors surface as Python exceptions naming the tensor; the process never aborts."""
import glob
import os
import subprocess
import sys

import pytest
import torch

import mhc
from conftest import REPO


def fwd_inputs(dtype=torch.bfloat16, n=4, d=8, t=3):
    gen = torch.Generator().manual_seed(5)
    f = 2 * n + n * n
    return (torch.randn(t, n, d, generator=gen).to(dtype), torch.randn(f, n * d, generator=gen),
            torch.rand(3, generator=gen), torch.randn(f, generator=gen))


def bwd_inputs(dtype=torch.bfloat16, n=4, d=8, t=3):
    x, phi, alpha, bias = fwd_inputs(dtype, n, d, t)
    h_in, h_post, h_res, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=1)
    return {"x": x, "phi": phi, "alpha": alpha, "grad_h_in": torch.randn(t, d).to(dtype),
            "grad_h_post": torch.randn(t, n), "grad_h_res": torch.randn(t, n, n),
            "inv_rms": inv_rms, "h_mix": h_mix, "h_pre": h_pre, "h_post": h_post}


def call_fwd(**changes):
    x, phi, alpha, bias = fwd_inputs()
    args = dict(x=x, phi=phi, alpha=alpha, bias=bias)
    keywords = ("gamma", "norm_eps", "hc_eps", "out_flag")
    kwargs = {k: changes.pop(k) for k in list(changes) if k in keywords}
    args.update(changes)
    return mhc.npu_mhc_pre(args["x"], args["phi"], args["alpha"], args["bias"], **kwargs)


def call_bwd(**changes):
    args = bwd_inputs()
    args.update(changes)
    return mhc.npu_mhc_pre_backward(**args)


@pytest.mark.parametrize("changes, names", [
    ({"x": torch.zeros(3, 4, 8, dtype=torch.float64)}, ["x", "torch.float64"]),
    ({"x": torch.zeros(3, 4, 8, dtype=torch.int32)}, ["x", "torch.int32"]),
    ({"phi": torch.zeros(24, 32, dtype=torch.float64)}, ["phi"]),
    ({"phi": torch.zeros(24, 32, dtype=torch.bfloat16)}, ["phi"]),  # the library's check
    ({"bias": torch.zeros(24, dtype=torch.float16)}, ["bias"]),
    ({"gamma": torch.ones(4, 8, dtype=torch.bfloat16)}, ["gamma"]),
])
def test_forward_wrong_dtype_is_type_error(changes, names):
    with pytest.raises(TypeError) as info:
        call_fwd(**changes)
    for name in names:
        assert name in str(info.value)


@pytest.mark.parametrize("changes, name", [
    ({"grad_h_in": torch.zeros(3, 8, dtype=torch.float16)}, "grad_h_in"),
    ({"grad_x_post": torch.zeros(3, 4, 8, dtype=torch.float16)}, "grad_x_post"),  # bf16 or fp32 only
    ({"h_mix": torch.zeros(3, 24, dtype=torch.float64)}, "h_mix"),
    ({"grad_h_post": torch.zeros(3, 4, dtype=torch.bfloat16)}, "grad_h_post"),
])
def test_backward_wrong_dtype_is_type_error(changes, name):
    with pytest.raises(TypeError, match=name):
        call_bwd(**changes)


@pytest.mark.parametrize("changes, name", [
    ({"bias": torch.zeros(23)}, "bias"),
    ({"phi": torch.zeros(24, 31)}, "phi"),
    ({"gamma": torch.ones(4, 9)}, "gamma"),
    ({"alpha": torch.ones(4)}, "alpha"),
    ({"x": torch.zeros(3, 32, dtype=torch.bfloat16)}, "x"),
    ({"x": torch.zeros(3, 4, 8, 1, 1, dtype=torch.bfloat16)}, "x"),
])
def test_forward_wrong_shape_is_value_error_naming_tensor(changes, name):
    with pytest.raises(ValueError) as info:
        call_fwd(**changes)
    assert str(info.value).startswith(name + ":"), str(info.value)


@pytest.mark.parametrize("changes, name", [
    ({"grad_h_in": torch.zeros(3, 7, dtype=torch.bfloat16)}, "grad_h_in"),
    ({"grad_h_res": None}, "grad_h_res"),
    ({"grad_h_res": torch.zeros(3, 15)}, "grad_h_res"),
    ({"h_mix": torch.zeros(3, 23)}, "h_mix"),
    ({"inv_rms": torch.zeros(4)}, "inv_rms"),
    ({"h_pre": torch.zeros(3, 5)}, "h_pre"),
    ({"grad_x_post": torch.zeros(3, 4, 7, dtype=torch.bfloat16)}, "grad_x_post"),
    ({"gamma": torch.ones(5, 8)}, "gamma"),
])
def test_backward_wrong_shape_is_value_error_naming_tensor(changes, name):
    with pytest.raises(ValueError) as info:
        call_bwd(**changes)
    assert str(info.value).startswith(name + ":"), str(info.value)


@pytest.mark.parametrize("changes, name", [
    ({"x": [[1.0]]}, "x"),
    ({"phi": None}, "phi"),
    ({"bias": torch.zeros(24).numpy()}, "bias"),
    ({"gamma": 1.0}, "gamma"),
    ({"norm_eps": "1e-6"}, "norm_eps"),
    ({"out_flag": 1.0}, "out_flag"),
])
def test_non_tensor_is_type_error(changes, name):
    with pytest.raises(TypeError, match=name):
        call_fwd(**changes)


def test_transposed_phi_is_rejected_before_outputs_sized_from_it(monkeypatch):
    """phi given as [K, F] gets the library's error naming phi, and the face does not
    first allocate h_mix and h_res from K (T x K floats each: far more than the call's
    own tensors when K >> F, and a MemoryError instead of our message at scale)."""
    t, n, d = 3, 4, 64
    x, phi, alpha, bias = fwd_inputs(n=n, d=d, t=t)
    requested = []
    real_empty = mhc._output_cache.cache.empty
    monkeypatch.setattr(mhc._output_cache.cache, "empty",
                        lambda shape, dtype: requested.append(tuple(shape)) or real_empty(shape, dtype))
    with pytest.raises(ValueError) as info:
        mhc.npu_mhc_pre(x, phi.t().contiguous(), alpha, bias, out_flag=1)
    assert str(info.value).startswith("phi:"), str(info.value)
    assert requested, "the face allocates its outputs before the call"
    largest = max(torch.Size(shape).numel() for shape in requested)
    assert largest <= t * max(d, 2 * n + n * n), requested


def test_meta_device_is_value_error_naming_tensor():
    x, phi, alpha, bias = fwd_inputs()
    with pytest.raises(ValueError, match="^x: .*meta"):
        mhc.npu_mhc_pre(x.to("meta"), phi, alpha, bias)
    with pytest.raises(ValueError, match="^phi: .*meta"):
        mhc.npu_mhc_pre(x, phi.to("meta"), alpha, bias)
    with pytest.raises(ValueError, match="^h_mix: .*meta"):
        call_bwd(h_mix=torch.zeros(3, 24, device="meta"))


def test_bad_scalars_are_value_errors():
    with pytest.raises(ValueError, match="out_flag"):
        call_fwd(out_flag=2)
    for eps in (-1.0, float("nan"), float("inf")):  # the library validates the values
        with pytest.raises(ValueError, match="norm_eps"):
            call_fwd(norm_eps=eps)
        with pytest.raises(ValueError, match="hc_eps"):
            call_bwd(hc_eps=eps)
    with pytest.raises(ValueError):
        mhc.set_num_threads(-1)
    with pytest.raises(TypeError):
        mhc.set_num_threads("2")


# Bad calls that must end as exceptions (or a clean result), never as an abort.
BATTERY = r"""
import torch, mhc
x = torch.randn(3, 4, 8).bfloat16(); phi = torch.randn(24, 32); a = torch.rand(3); b = torch.randn(24)
h = mhc.npu_mhc_pre(x, phi, a, b, out_flag=1)
gi = torch.randn(3, 8).bfloat16(); gp = torch.randn(3, 4); gr = torch.randn(3, 4, 4)
c = (h[3], h[4], h[5], h[1])  # caches and h_post
c0 = tuple(t[:0] for t in c)
calls = [
    lambda: mhc.npu_mhc_pre(x[:0], phi, a, b, out_flag=1),
    lambda: mhc.npu_mhc_pre(x[:, :0], phi[:8, :0], a, b[:8]),
    lambda: mhc.npu_mhc_pre(x[:, :, :0], phi[:, :0], a, b),
    lambda: mhc.npu_mhc_pre(x, phi[:0], a, b[:0]),
    lambda: mhc.npu_mhc_pre(x, phi, a[:0], b),
    lambda: mhc.npu_mhc_pre(x, phi, a, b, gamma=torch.ones(0)),
    lambda: mhc.npu_mhc_pre(x, phi.reshape(24, 32, 1), a, b),
    lambda: mhc.npu_mhc_pre(x, phi, a.reshape(1, 3), b),
    lambda: mhc.npu_mhc_pre(x.reshape(1, 1, 1, 1, 3, 4, 8), phi, a, b),
    lambda: mhc.npu_mhc_pre(x, phi.t(), a, b),
    lambda: mhc.npu_mhc_pre(x, torch.randn(40336, 32), a, torch.randn(40336)),
    lambda: mhc.npu_mhc_pre(x, phi, a, b, norm_eps=1e308, hc_eps=1e308),
    lambda: mhc.npu_mhc_pre_backward(x[:0], phi, a, gi[:0], gp[:0], gr[:0], *c0),
    lambda: mhc.npu_mhc_pre_backward(x, phi, a, gi, gp, gr, *c, gamma=torch.ones(4, 8)[:, :0]),
    lambda: mhc.npu_mhc_pre_backward(x, phi, torch.rand(2), gi, gp, gr, *c),
    lambda: mhc.npu_mhc_pre_backward(x, phi, a, gi, gp, gr.reshape(3, 16), *c),
    lambda: mhc.npu_mhc_pre_backward(x, phi, a, gi, gp, gr, h[3].reshape(3, 1), h[4], h[5], h[1]),
    lambda: mhc.npu_mhc_pre_backward(x, phi, a, gi, gp, gr, *c, grad_x_post=x[:, :, :0]),
]
for i, call in enumerate(calls):
    try:
        call()
        print(i, "ok")
    except (TypeError, ValueError) as exc:
        print(i, type(exc).__name__, exc)
print("battery done")
"""


def run_python(code, **env):
    environ = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, timeout=120)


def test_bad_calls_never_abort_the_process():
    proc = run_python(BATTERY)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "battery done" in proc.stdout, proc.stdout + proc.stderr
    print("\n" + proc.stdout)


def test_library_lookup_honours_mhc_library():
    proc = run_python("import mhc", MHC_LIBRARY="/nonexistent/libmhc.so")
    assert proc.returncode != 0 and "ImportError" in proc.stderr
    assert "MHC_LIBRARY" in proc.stderr
    chosen = os.environ.get("MHC_LIBRARY")
    if chosen and os.path.exists(chosen):
        proc = run_python("import mhc; print(mhc._lib.lib._name)", MHC_LIBRARY=chosen)
        assert proc.returncode == 0 and proc.stdout.strip() == chosen, proc.stderr


def test_a_checkout_finds_its_own_build():
    """Without MHC_LIBRARY, python/mhc of a checkout loads build/src/libmhc.so (nothing is
    copied into the source tree)."""
    built = os.path.join(REPO, "build", "src", "libmhc.so")
    if os.path.exists(os.path.join(REPO, "python", "mhc", "libmhc.so")) or not os.path.exists(built):
        pytest.skip("a library beside the package, or no build/ in this checkout")
    environ = {k: v for k, v in os.environ.items() if k != "MHC_LIBRARY"}
    environ["PYTHONPATH"] = os.path.join(REPO, "python")
    proc = subprocess.run([sys.executable, "-c", "import mhc; print(mhc._lib.lib._name)"], capture_output=True,
                          text=True, env=environ, timeout=120, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert os.path.realpath(proc.stdout.strip()) == os.path.realpath(built)


def test_missing_library_is_a_clear_import_error(tmp_path):
    """The package without a library beside it (and none installed) says how to build."""
    import ctypes.util
    import shutil

    if ctypes.util.find_library("mhc"):
        pytest.skip("a libmhc is installed system-wide")
    package = tmp_path / "mhc"
    package.mkdir()
    for path in glob.glob(os.path.join(REPO, "python", "mhc", "*.py")):
        shutil.copy(path, package / os.path.basename(path))
    environ = {k: v for k, v in os.environ.items() if k != "MHC_LIBRARY"}
    environ["PYTHONPATH"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", "import mhc"], capture_output=True, text=True,
                          env=environ, timeout=120)
    assert proc.returncode != 0 and "ImportError" in proc.stderr, proc.stderr
    assert "libmhc.so was not found" in proc.stderr and "scripts/build.sh" in proc.stderr, proc.stderr
