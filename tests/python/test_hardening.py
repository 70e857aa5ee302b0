"""Hardening of the Python face (docs/reliability.md): every argument, every kind of
mistake (dtype, device, layout, shape, non-tensor, scalars, autograd misuse) gives
TypeError or ValueError with the library's message naming the argument, or torch's
own autograd error; concurrent Python threads get the bits of serial calls; no
call aborts the process. Complements test_errors.py."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import mhc
from conftest import REPO

T, N, D = 3, 4, 8
F, K = 2 * N + N * N, N * D

FWD_ARGS = ["x", "phi", "alpha", "bias", "gamma"]
BWD_ARGS = ["x", "phi", "alpha", "grad_h_in", "grad_h_post", "grad_h_res", "inv_rms", "h_mix", "h_pre",
            "h_post", "gamma", "grad_x_post"]
X_DTYPE_ARGS = {"x", "grad_h_in", "grad_x_post"}


def fwd_args():
    gen = torch.Generator().manual_seed(11)
    return {"x": torch.randn(T, N, D, generator=gen).bfloat16(), "phi": torch.randn(F, K, generator=gen) / 6,
            "alpha": torch.rand(3, generator=gen), "bias": torch.randn(F, generator=gen),
            "gamma": torch.rand(N, D, generator=gen) + 0.5}


def bwd_args():
    a = fwd_args()
    h_in, h_post, h_res, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(a["x"], a["phi"], a["alpha"], a["bias"],
                                                                 gamma=a["gamma"], out_flag=1)
    gen = torch.Generator().manual_seed(12)
    return {"x": a["x"], "phi": a["phi"], "alpha": a["alpha"], "grad_h_in": torch.randn(T, D, generator=gen).bfloat16(),
            "grad_h_post": torch.randn(T, N, generator=gen), "grad_h_res": torch.randn(T, N, N, generator=gen),
            "inv_rms": inv_rms, "h_mix": h_mix, "h_pre": h_pre, "h_post": h_post, "gamma": a["gamma"],
            "grad_x_post": torch.randn(T, N, D, generator=gen).bfloat16()}


def call_fwd(args):
    a = dict(args)
    return mhc.npu_mhc_pre(a.pop("x"), a.pop("phi"), a.pop("alpha"), a.pop("bias"), out_flag=1, **a)


def call_bwd(args):
    return mhc.npu_mhc_pre_backward(**args)


CALLS = {"forward": (fwd_args, call_fwd, FWD_ARGS), "backward": (bwd_args, call_bwd, BWD_ARGS)}
CASES = [(op, name) for op, (_, _, names) in CALLS.items() for name in names]


def replaced(op, name, value):
    make, call, _ = CALLS[op]
    args = make()
    args[name] = value(args[name]) if callable(value) else value
    return lambda: call(args)


@pytest.mark.parametrize("op, name", CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bool, torch.complex64, torch.uint8])
def test_every_argument_with_a_wrong_dtype_is_a_type_error(op, name, dtype):
    with pytest.raises(TypeError) as info:
        replaced(op, name, lambda t: t.to(dtype))()
    assert str(info.value).startswith(name + ":"), str(info.value)


@pytest.mark.parametrize("op, name", [c for c in CASES if c[1] != "x"])  # x's dtype sets the others'
def test_every_argument_in_the_other_float_dtype_is_a_type_error_from_the_library(op, name):
    other = torch.float16 if name in X_DTYPE_ARGS else torch.bfloat16
    with pytest.raises(TypeError) as info:
        replaced(op, name, lambda t: t.to(other))()
    message = str(info.value)
    assert message.startswith(name + ": expected dtype"), message


@pytest.mark.parametrize("op, name", CASES)
def test_every_argument_on_the_meta_device_is_a_value_error(op, name):
    with pytest.raises(ValueError, match=f"^{name}: expected a CPU tensor, got device meta"):
        replaced(op, name, lambda t: t.to("meta"))()


class OnAnotherDevice(torch.Tensor):
    """A CPU tensor that says it lives on a GPU (no GPU is needed to test the check)."""

    @property
    def device(self):
        return torch.device("cuda", 0)


@pytest.mark.parametrize("op, name", CASES)
def test_every_argument_on_a_non_cpu_device_is_a_value_error(op, name):
    with pytest.raises(ValueError, match=f"^{name}: expected a CPU tensor, got device cuda:0"):
        replaced(op, name, lambda t: t.as_subclass(OnAnotherDevice))()


@pytest.mark.parametrize("op, name", CASES)
def test_every_argument_as_a_sparse_tensor_is_a_value_error(op, name):
    with pytest.raises(ValueError, match=f"^{name}: expected a dense"):
        replaced(op, name, lambda t: t.to_sparse())()


@pytest.mark.parametrize("op, name", CASES)
@pytest.mark.parametrize("how", ["extra_dim", "one_short", "empty_dim", "flattened"])
def test_every_argument_with_a_wrong_shape_is_a_value_error_from_the_library(op, name, how):
    def reshape(t):
        if how == "extra_dim":
            return t.unsqueeze(-1)
        if how == "one_short":
            return t[..., :-1] if t.shape[-1] > 1 else t[:0]
        if how == "empty_dim":
            return t.narrow(t.dim() - 1, 0, 0)
        return t.reshape(-1)
    make, call, _ = CALLS[op]
    args = make()
    if how == "flattened" and args[name].dim() == 1:
        pytest.skip(f"{name} is flat already")
    args[name] = reshape(args[name])
    with pytest.raises(ValueError) as info:
        call(args)
    message = str(info.value)
    # x's shape fixes T, N, D: a wrong x is reported as x or, when it still has a
    # valid shape, as the first tensor that disagrees with it.
    if name != "x":
        assert message.startswith(name + ":"), message
    assert "expected" in message, message


@pytest.mark.parametrize("op, name", CASES)
@pytest.mark.parametrize("value", [[[1.0]], 1.0, "x", np.zeros((2, 2), dtype=np.float32), object()])
def test_every_argument_as_a_non_tensor_is_a_type_error(op, name, value):
    with pytest.raises(TypeError, match=f"^{name}: expected a torch.Tensor"):
        replaced(op, name, value)()


@pytest.mark.parametrize("op, name", [c for c in CASES if c[1] not in ("gamma", "grad_x_post", "grad_h_res")])
def test_every_required_argument_as_none_is_a_type_error(op, name):
    with pytest.raises(TypeError, match=f"^{name}: expected a torch.Tensor, got None"):
        replaced(op, name, None)()


def test_bad_scalars():
    a = fwd_args()
    x, phi, alpha, bias = a["x"], a["phi"], a["alpha"], a["bias"]
    for value in (True, torch.tensor(1e-6), "1e-6", None, [1e-6]):
        with pytest.raises(TypeError, match="^norm_eps"):
            mhc.npu_mhc_pre(x, phi, alpha, bias, norm_eps=value)
        with pytest.raises(TypeError, match="^hc_eps"):
            mhc.npu_mhc_pre(x, phi, alpha, bias, hc_eps=value)
    for value in (-1e-6, float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="^norm_eps: expected a finite value >= 0"):
            mhc.npu_mhc_pre(x, phi, alpha, bias, norm_eps=value)
        with pytest.raises(ValueError, match="^hc_eps: expected a finite value >= 0"):
            call_bwd(dict(bwd_args(), hc_eps=value))
    for flag in (True, 1.0, "1", None):
        with pytest.raises(TypeError, match="^out_flag"):
            mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=flag)
    for flag in (-1, 2, 2**40):
        with pytest.raises(ValueError, match="^out_flag"):
            mhc.npu_mhc_pre(x, phi, alpha, bias, out_flag=flag)
    for threads in (True, 2.0, "2", None):
        with pytest.raises(TypeError, match="^num_threads"):
            mhc.set_num_threads(threads)
    for threads in (-1, 2**31):
        with pytest.raises(ValueError, match="^num_threads"):
            mhc.set_num_threads(threads)
    assert mhc.get_num_threads() == 0


def test_absurd_thread_counts_run_and_give_the_same_bits():
    a = fwd_args()
    want = call_fwd(a)
    try:
        for threads in (1, 2**31 - 1):
            mhc.set_num_threads(threads)
            got = call_fwd(a)
            for w, g in zip(want, got):
                assert torch.equal(w.view(torch.uint8) if w.dtype == torch.bfloat16 else w,
                                   g.view(torch.uint8) if g.dtype == torch.bfloat16 else g)
    finally:
        mhc.set_num_threads(0)


# ---------------------------------------------------------------- autograd misuse

def grad_inputs(dtype=torch.float32):
    a = fwd_args()
    return (a["x"].to(dtype).requires_grad_(), a["phi"].requires_grad_(), a["alpha"].requires_grad_(),
            a["bias"].requires_grad_(), a["gamma"].requires_grad_())


def test_mhc_pre_with_a_wrong_dtype_requiring_grad_is_the_library_type_error():
    x, phi, alpha, bias, gamma = grad_inputs()
    with pytest.raises(TypeError, match="^x: expected dtype bf16, fp16 or fp32, got torch.float64"):
        mhc.mhc_pre(x.detach().double().requires_grad_(), phi, alpha, bias, gamma)
    with pytest.raises(TypeError, match="^phi: expected dtype fp32"):
        mhc.mhc_pre(x, phi.detach().bfloat16().requires_grad_(), alpha, bias, gamma)
    with pytest.raises(ValueError, match="^gamma: expected a CPU tensor"):
        mhc.mhc_pre(x, phi, alpha, bias, gamma.detach().to("meta").requires_grad_())


def test_backward_twice_through_freed_buffers_is_torchs_runtime_error():
    x, phi, alpha, bias, gamma = grad_inputs()
    h_in, h_post, h_res = mhc.mhc_pre(x, phi, alpha, bias, gamma)
    loss = h_in.sum() + h_post.sum() + h_res.sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_backward_twice_with_retained_graph_accumulates_twice():
    x, phi, alpha, bias, gamma = grad_inputs()
    h_in, h_post, h_res = mhc.mhc_pre(x, phi, alpha, bias, gamma)
    loss = h_in.sum() + h_post.sum() + h_res.sum()
    loss.backward(retain_graph=True)
    once = x.grad.clone()
    loss.backward()
    assert torch.equal(x.grad, 2 * once)


def test_double_backward_is_an_error_not_a_wrong_gradient():
    x, phi, alpha, bias, gamma = grad_inputs()
    h_in, _, _ = mhc.mhc_pre(x, phi, alpha, bias, gamma)
    (g,) = torch.autograd.grad(h_in.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(g.sum(), x)


def test_inputs_modified_in_place_after_the_forward_are_torchs_runtime_error():
    x, phi, alpha, bias, gamma = grad_inputs()
    y = x * 1.0
    h_in, _, _ = mhc.mhc_pre(y, phi, alpha, bias, gamma)
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        h_in.sum().backward()


def test_inference_tensors_cannot_be_saved_for_backward():
    x, phi, alpha, bias, gamma = grad_inputs()
    with torch.inference_mode():
        xi = x.detach().clone()
    with pytest.raises(RuntimeError, match="Inference tensors"):
        mhc.mhc_pre(xi, phi, alpha, bias, gamma)


def test_no_grad_and_inference_mode_give_outputs_without_a_graph():
    x, phi, alpha, bias, gamma = grad_inputs()
    with torch.no_grad():
        outs = mhc.mhc_pre(x, phi, alpha, bias, gamma)
    assert all(o.grad_fn is None and not o.requires_grad for o in outs)
    with torch.inference_mode():
        outs = mhc.mhc_pre(x.detach(), phi.detach(), alpha.detach(), bias.detach(), gamma.detach())
    assert all(o.grad_fn is None for o in outs)


def test_torch_npu_functions_take_tensors_that_require_grad_and_give_their_values():
    """Tensors that require grad give the values of their detached copies: through
    npu_mhc_pre's autograd rule (SPEC §8, test_npu_autograd.py) and through
    npu_mhc_pre_backward, which reads them as plain data."""
    x, phi, alpha, bias, gamma = grad_inputs(torch.bfloat16)
    got = mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma, out_flag=1)
    want = mhc.npu_mhc_pre(x.detach(), phi.detach(), alpha.detach(), bias.detach(), gamma=gamma.detach(), out_flag=1)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    args = bwd_args()
    plain = call_bwd(args)
    with_grad = call_bwd({k: (v.clone().requires_grad_() if v.is_floating_point() else v) for k, v in args.items()})
    for g, w in zip(with_grad, plain):
        assert torch.equal(g, w)


# ---------------------------------------------------------------- threads

def test_concurrent_python_threads_get_the_bits_of_serial_calls():
    args = [dict(bwd_args(), hc_eps=1e-6 * (i + 1)) for i in range(6)]
    serial = [call_bwd(a) for a in args]
    results = [None] * (len(args) * 3)
    errors = []

    def work(i):
        try:
            results[i] = call_bwd(args[i % len(args)])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, got in enumerate(results):
        for g, w in zip(got, serial[i % len(args)]):
            if w is None:
                assert g is None
            else:
                assert torch.equal(g.view(torch.uint8) if g.dtype == torch.bfloat16 else g,
                                   w.view(torch.uint8) if w.dtype == torch.bfloat16 else w)


# ---------------------------------------------------------------- never an abort

BATTERY = r"""
import torch, mhc
x = torch.randn(3, 4, 8).bfloat16(); phi = torch.randn(24, 32); a = torch.rand(3); b = torch.randn(24)
one = torch.zeros(1, dtype=torch.bfloat16)
calls = [
    lambda: mhc.npu_mhc_pre(one.as_strided((2**40, 4, 8), (0, 0, 0)), phi, a, b),      # 16 TiB of outputs
    lambda: mhc.npu_mhc_pre(one.as_strided((2**20, 4, 8), (0, 0, 0)), phi, a, b),      # broadcast x: fine
    lambda: mhc.npu_mhc_pre(one.as_strided((3, 2**22, 2**22), (0, 0, 0)), phi, a, b),  # K past the limit
    lambda: mhc.npu_mhc_pre(x, phi.as_strided((24, 32), (0, 0)), a, b),
    lambda: mhc.npu_mhc_pre(x, torch.zeros(1).as_strided((2**22 * 2**22 + 24, 32), (0, 0)), a, b),
    lambda: mhc.npu_mhc_pre(x.reshape(1, 1, 1, 1, 1, 1, 1, 1, 3, 4, 8), phi, a, b),
    lambda: mhc.npu_mhc_pre(x, phi, a, b, norm_eps=1e308, hc_eps=0.0),
    lambda: mhc.npu_mhc_pre(x.float().fill_(float("nan")), phi, a, b),
    lambda: mhc.npu_mhc_pre(x, phi.fill_(float("inf")), a, b),
    lambda: mhc.npu_mhc_pre(x[:, :, ::2], phi[:8, :16], a, b[:8]),
    lambda: mhc.npu_mhc_pre(x.to("meta"), phi, a, b),
]
for i, call in enumerate(calls):
    try:
        call()
        print(i, "ok")
    except (TypeError, ValueError, RuntimeError, MemoryError) as exc:
        print(i, type(exc).__name__, str(exc)[:120])
print("battery done")
"""


def test_nasty_calls_never_abort_the_process():
    environ = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    proc = subprocess.run([sys.executable, "-c", BATTERY], capture_output=True, text=True, env=environ,
                          timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "battery done" in proc.stdout, proc.stdout + proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line[:1].isdigit())
    assert lines["1"] == "ok"
    assert lines["2"].startswith("ValueError x: expected N*D and T*N*D of at most 2^44"), lines["2"]
    assert lines["5"].startswith("ValueError x: rank 11 exceeds"), lines["5"]
    assert lines["10"].startswith("ValueError x: expected a CPU tensor"), lines["10"]
