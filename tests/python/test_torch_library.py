"""torch.ops.mhc: every operator registered with torch's dispatcher, called through it on
CPU tensors (the same bits as mhc.<name>), on meta tensors (the same shapes and dtypes,
nothing computed), with autograd (the same gradients), through torch.fx.symbolic_trace
and TorchScript, and as torch.ops.npu.* after mhc.register_npu_namespace().

Self-contained (no conftest helpers): the pip-install test runs this file against the
installed package, from another directory.
"""
import os
import subprocess
import sys

import pytest
import torch

import mhc
from mhc.torch_library import SCHEMAS

N, D, I = 4, 64, 3
F = 2 * N + N * N


def pre_inputs(lead=(2, 3), dtype=torch.bfloat16, seed=0, alpha_entries=3):
    g = torch.Generator().manual_seed(seed)
    f = {1: N, 2: 2 * N, 3: F}[alpha_entries]
    x = torch.randn(*lead, N, D, generator=g).to(dtype)
    phi = torch.randn(f, N * D, generator=g) / (N * D) ** 0.5
    alpha = torch.rand(alpha_entries, generator=g) * 0.5 + 0.1
    bias = torch.randn(f, generator=g) * 0.1
    gamma = torch.rand(N, D, generator=g) + 0.5
    return x, phi, alpha, bias, gamma


def pre_mix_of(lead=(2, 3), seed=2):
    """A carried pre-mix for pre_inputs' x: [.., N] fp32 (SPEC §14)."""
    return torch.rand(*lead, N, generator=torch.Generator().manual_seed(seed)) + 0.5


def layer_inputs(seed=1, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, N, D, generator=g).to(dtype)
    z = torch.randn(5, N, N, generator=g)
    h_out = torch.randn(5, D, generator=g).to(dtype)
    h_post = torch.rand(5, N, generator=g) * 2
    return x, z, h_out, h_post


def calls():
    """(name, args, kwargs) of one call of every registered operator, on CPU tensors."""
    x, phi, alpha, bias, gamma = pre_inputs()
    h_in, h_post, h_res, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma, out_flag=1)
    g = torch.Generator().manual_seed(7)
    grad_h_in = torch.randn(h_in.shape, generator=g).to(h_in.dtype)
    grad_h_post = torch.randn(h_post.shape, generator=g)
    grad_h_res = torch.randn(h_res.shape, generator=g)
    lx, z, h_out, lh_post = layer_inputs()
    y, norm_out, sum_out = mhc.npu_mhc_sinkhorn(z, num_iters=I, out_flag=1)
    grad_y = torch.randn(y.shape, generator=g)
    grad_out = torch.randn(lx.shape, generator=g).to(lx.dtype)
    ps = mhc.mhc_pre_sinkhorn(x, phi, alpha, bias, N, I, out_flag=True)
    hx, hphi, halpha, hbias, hgamma = pre_inputs(alpha_entries=1)
    pre_mix = pre_mix_of()
    return [
        ("npu_mhc_pre", (x, phi, alpha, bias), dict(gamma=gamma, out_flag=1)),
        ("npu_mhc_pre", (x, phi, alpha, bias), dict(inner_precise=1)),
        ("npu_mhc_pre_backward", (x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix, h_pre,
                                  h_post, gamma), {}),
        ("mhc_head", (hx, hphi, halpha, hbias, hgamma), {}),
        ("npu_mhc_sinkhorn", (z,), dict(num_iters=I, out_flag=1)),
        ("npu_mhc_sinkhorn", (z,), dict(eps=1e-4)),
        ("npu_mhc_sinkhorn_backward", (grad_y, norm_out, sum_out), {}),
        ("npu_mhc_post", (lx, y, h_out, lh_post), {}),
        ("npu_mhc_post", (lx, None, h_out, lh_post), {}),
        ("npu_mhc_post_backward", (grad_out, lx, y, h_out, lh_post), {}),
        ("npu_mhc_post_backward", (grad_out, lx, y, h_out, lh_post), dict(grad_x_dtype=torch.float32)),
        ("mhc_pre_sinkhorn", (x, phi, alpha, bias, N, I), {}),
        ("mhc_pre_sinkhorn", (x, phi, alpha, bias, N, I), dict(out_flag=True)),
        ("mhc_pre_sinkhorn_backward", (grad_h_in, grad_h_post, grad_h_res.reshape(ps[2].shape), x, phi, alpha,
                                       bias) + tuple(ps[3:]), {}),
        ("mhc_pre_single_pass", (x, phi, alpha, bias, pre_mix), dict(gamma=gamma, num_iters=I)),
        ("mhc_pre_single_pass", (x, phi, alpha, bias), dict(hc_eps=1e-3, sinkhorn_eps=1e-4)),
        ("mhc_collapse", (x, pre_mix), {}),
        ("mhc_post_pre", (lx, y, h_out, lh_post, phi, alpha, bias, pre_mix_of(lead=(5,))),
         dict(single_pass=True, gamma=gamma, num_iters=I)),
        ("mhc_post_pre", (lx, None, h_out, lh_post, phi, alpha, bias), dict(hc_eps=1e-3, sinkhorn_eps=1e-4)),
        ("mhc_rms_norm", (h_out, torch.rand(h_out.shape[-1]) + 0.5), dict(eps=1e-5)),
    ]


def as_tuple(result):
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def direct(name, args, kwargs):
    """mhc.<name>'s result, with the schema's output count (mhc_pre_sinkhorn: eight)."""
    result = as_tuple(getattr(mhc, name)(*args, **kwargs))
    if name == "mhc_pre_sinkhorn":
        result = result + (None,) * (8 - len(result))
    return result


def to_meta(value):
    return value.to("meta") if isinstance(value, torch.Tensor) else value


CALLS = calls()
IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(CALLS)]


def test_every_operator_is_registered():
    assert sorted(SCHEMAS) == sorted({name for name, _, _ in CALLS})
    for name, schema in SCHEMAS.items():
        op = getattr(torch.ops.mhc, name)
        assert str(op.default._schema) == str(torch._C.parse_schema("mhc::" + schema)), name


def test_the_package_in_use():
    """Which mhc this run tests (the pip-install test checks it is the installed one)."""
    print("mhc from", os.path.dirname(mhc.__file__), "version", mhc.__version__)
    assert mhc.__version__


@pytest.mark.parametrize("index", range(len(CALLS)), ids=IDS)
def test_cpu_kernel_gives_the_functions_bits(index):
    name, args, kwargs = CALLS[index]
    ours = as_tuple(getattr(torch.ops.mhc, name)(*args, **kwargs))
    expected = direct(name, args, kwargs)
    assert len(ours) == len(expected)
    for k, (a, b) in enumerate(zip(ours, expected)):
        assert (a is None) == (b is None), (name, k)
        if a is not None:
            assert a.dtype == b.dtype and a.shape == b.shape, (name, k)
            assert torch.equal(a, b), (name, k)


@pytest.mark.parametrize("index", range(len(CALLS)), ids=IDS)
def test_meta_kernel_gives_shapes_and_dtypes(index):
    name, args, kwargs = CALLS[index]
    meta_args = tuple(to_meta(a) for a in args)
    meta_kwargs = {key: to_meta(value) for key, value in kwargs.items()}
    ours = as_tuple(getattr(torch.ops.mhc, name)(*meta_args, **meta_kwargs))
    expected = direct(name, args, kwargs)
    assert len(ours) == len(expected)
    for k, (a, b) in enumerate(zip(ours, expected)):
        assert (a is None) == (b is None), (name, k)
        if a is not None:
            assert a.device.type == "meta", (name, k)
            assert (a.shape, a.dtype) == (b.shape, b.dtype), (name, k)


def test_meta_and_cpu_tensors_do_not_mix():
    x, phi, alpha, bias, _ = pre_inputs()
    with pytest.raises(ValueError, match="^phi: expected a CPU tensor, got device meta"):
        torch.ops.mhc.npu_mhc_pre(x, phi.to("meta"), alpha, bias)


def test_errors_are_the_functions():
    x, phi, alpha, bias, _ = pre_inputs()
    with pytest.raises(TypeError) as through_dispatcher:
        torch.ops.mhc.npu_mhc_pre(x, phi.double(), alpha, bias)
    with pytest.raises(TypeError) as direct_call:
        mhc.npu_mhc_pre(x, phi.double(), alpha, bias)
    assert str(through_dispatcher.value) == str(direct_call.value)
    assert "phi" in str(through_dispatcher.value)


def grads_of(run, inputs):
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    outputs = [o for o in as_tuple(run(*leaves)) if o is not None and o.requires_grad]
    g = torch.Generator().manual_seed(3)
    loss = sum((o.float() * torch.randn(o.shape, generator=g)).sum() for o in outputs)
    loss.backward()
    return [leaf.grad for leaf in leaves]


AUTOGRAD_CASES = {
    "npu_mhc_pre": (lambda ns: lambda x, phi, alpha, bias, gamma: ns.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma),
                    lambda: pre_inputs(dtype=torch.float32)),
    "mhc_head": (lambda ns: lambda x, phi, alpha, bias, gamma: ns.mhc_head(x, phi, alpha, bias, gamma),
                 lambda: pre_inputs(alpha_entries=1)),
    "npu_mhc_sinkhorn": (lambda ns: lambda z: ns.npu_mhc_sinkhorn(z, num_iters=I), lambda: layer_inputs()[1:2]),
    "npu_mhc_post": (lambda ns: lambda x, h_res, h_out, h_post: ns.npu_mhc_post(x, h_res, h_out, h_post),
                     lambda: (layer_inputs()[0], torch.softmax(layer_inputs()[1], -1)) + layer_inputs()[2:]),
    "mhc_pre_sinkhorn": (lambda ns: lambda x, phi, alpha, bias: ns.mhc_pre_sinkhorn(x, phi, alpha, bias, N, I),
                         lambda: pre_inputs()[:4]),
    "mhc_pre_single_pass": (lambda ns: lambda x, phi, alpha, bias, gamma, pre_mix: ns.mhc_pre_single_pass(
                                x, phi, alpha, bias, pre_mix, gamma=gamma, num_iters=I),
                            lambda: pre_inputs() + (pre_mix_of(),)),
    "mhc_collapse": (lambda ns: lambda x, pre_mix: ns.mhc_collapse(x, pre_mix),
                     lambda: (pre_inputs()[0], pre_mix_of())),
    "mhc_post_pre": (lambda ns: lambda x, h_res, h_out, h_post, phi, alpha, bias, gamma, pre_mix: ns.mhc_post_pre(
                         x, h_res, h_out, h_post, phi, alpha, bias, pre_mix, single_pass=True, gamma=gamma,
                         num_iters=I),
                     lambda: (layer_inputs()[0], torch.softmax(layer_inputs()[1], -1)) + layer_inputs()[2:]
                     + pre_inputs()[1:] + (pre_mix_of(lead=(5,)),)),
}


@pytest.mark.parametrize("name", sorted(AUTOGRAD_CASES))
def test_autograd_through_the_dispatcher(name):
    make_run, make_inputs = AUTOGRAD_CASES[name]
    inputs = make_inputs()
    ours = grads_of(make_run(torch.ops.mhc), inputs)
    expected = grads_of(make_run(mhc), inputs)
    assert any(g is not None for g in ours)
    for a, b in zip(ours, expected):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b)


def test_autograd_on_meta_tensors():
    x, phi, alpha, bias, gamma = (t.to("meta").requires_grad_() for t in pre_inputs(dtype=torch.float32))
    h_in, h_post, h_res, *_ = torch.ops.mhc.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma)
    (h_in.sum() + h_post.sum() + h_res.sum()).backward()
    for t in (x, phi, alpha, bias, gamma):
        assert t.grad is not None and t.grad.device.type == "meta" and t.grad.shape == t.shape


class Layer(torch.nn.Module):
    """One mHC layer written on torch.ops.mhc (SPEC §13), the sub-layer a linear map."""

    def __init__(self):
        super().__init__()
        _, phi, alpha, bias, gamma = pre_inputs()
        self.phi = torch.nn.Parameter(phi)
        self.alpha = torch.nn.Parameter(alpha)
        self.bias = torch.nn.Parameter(bias)
        self.gamma = torch.nn.Parameter(gamma)
        self.sublayer = torch.nn.Linear(D, D)

    def forward(self, x):
        pre = torch.ops.mhc.npu_mhc_pre(x, self.phi, self.alpha, self.bias, gamma=self.gamma)
        h_in, h_post, h_res = pre[0], pre[1], pre[2]
        assert h_post is not None and h_res is not None  # a three-entry alpha (TorchScript's refinement)
        H = torch.ops.mhc.npu_mhc_sinkhorn(h_res, num_iters=3)[0]
        h_out = self.sublayer(h_in.float()).to(x.dtype)
        return torch.ops.mhc.npu_mhc_post(x, H, h_out, h_post)


def test_fx_symbolic_trace():
    layer = Layer()
    traced = torch.fx.symbolic_trace(layer)
    targets = {str(node.target) for node in traced.graph.nodes if node.op == "call_function"}
    assert {"mhc.npu_mhc_pre", "mhc.npu_mhc_sinkhorn", "mhc.npu_mhc_post"} <= targets, targets
    x = pre_inputs()[0]
    assert torch.equal(traced(x), layer(x))
    # The traced graph's shapes, by running it on meta tensors.
    meta_layer = Layer().to("meta")
    meta_traced = torch.fx.symbolic_trace(meta_layer)
    out = meta_traced(x.to("meta"))
    assert out.device.type == "meta" and out.shape == x.shape and out.dtype == x.dtype


def test_torchscript():
    layer = Layer()
    scripted = torch.jit.script(layer)
    x = pre_inputs()[0]
    assert torch.equal(scripted(x), layer(x))


def test_npu_namespace():
    mhc.register_npu_namespace()
    mhc.register_npu_namespace()  # again: nothing happens
    for name, args, kwargs in CALLS:
        ours = as_tuple(getattr(torch.ops.npu, name)(*args, **kwargs))
        for a, b in zip(ours, direct(name, args, kwargs)):
            assert (a is None and b is None) or torch.equal(a, b), name


def test_npu_namespace_refused_beside_torch_npu():
    code = ("import sys, types\n"
            "sys.modules['torch_npu'] = types.ModuleType('torch_npu')\n"
            "import mhc\n"
            "try:\n"
            "    mhc.register_npu_namespace()\n"
            "except RuntimeError as e:\n"
            "    print('refused:', e)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert result.returncode == 0, result.stderr
    assert "refused: mhc.register_npu_namespace: torch_npu is loaded" in result.stdout, result.stdout


def test_every_torch_operator_runs_on_a_described_operator():
    from mhc import _lib

    assert set(_lib.TORCH_OPS) == set(SCHEMAS)
    for name, (op, schema) in _lib.TORCH_OPS.items():
        assert op in _lib.OPERATORS, f"{name} runs on {op}, which is not described"
        assert schema.startswith(name + "("), schema
