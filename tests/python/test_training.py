"""mhc.nn.MhcPre as a torch module, and training an mHC model (examples/train_tiny.py,
built from expand_streams, MhcBlock and MhcHead): the module's init, state_dict,
gradients and agreement with mhc.mhc_pre; the example's three models (mHC on our
operators, its torch-ops twin, a plain residual model) and their initialisation; a short
--compare run; DDP over 2 gloo processes on 127.0.0.1 against a single process on the
same global batches. The V4.1 model (--variant v4.1: MhcBlock(single_pass=True) sites in an
MhcStack): its start, the stack against its blocks one by one, recompute, DDP; the
fortunes corpus and a short --compare-variants run."""
import copy
import importlib.util
import io
import math
import os
import signal
import subprocess
import sys

import pytest
import torch

import mhc
import mhc.nn
from conftest import REPO, assert_same_bits

EXAMPLE = os.path.join(REPO, "examples", "train_tiny.py")
MHC_PARAMS = ("phi", "alpha", "bias", "gamma")
DDP_TIMEOUT = 60  # seconds for the whole 2-process run (it takes ~5 s)


def load_example():
    """examples/train_tiny.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("train_tiny", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_x(layout, n, d, dtype=torch.float32, seed=1000):
    # A seed no module is initialised with: x drawn from the same stream as phi would
    # align with phi's rows and give atypically large logits.
    gen = torch.Generator().manual_seed(seed)
    lead = (2, 5) if layout == "BSND" else (10,)
    return torch.randn(lead + (n, d), generator=gen).to(dtype)


def full_loss(h_in, h_post, h_res, seed=1):
    """A loss touching every output with random weights (so no gradient cancels)."""
    gen = torch.Generator().manual_seed(seed)
    return ((h_in.float() * torch.randn(h_in.shape, generator=gen)).sum()
            + (h_post * torch.randn(h_post.shape, generator=gen)).sum()
            + (h_res * torch.randn(h_res.shape, generator=gen)).sum())


# ------------------------------------------------------------------ mhc.nn.MhcPre

@pytest.mark.parametrize("layout", ["BSND", "TND"])
@pytest.mark.parametrize("n", [4, 2])
@pytest.mark.parametrize("gamma", [True, False], ids=["gamma", "nogamma"])
def test_init_gives_mean_in_unit_post_identity_res(layout, n, gamma):
    d = 32
    torch.manual_seed(0)
    pre = mhc.nn.MhcPre(n, d, gamma=gamma)
    # The static part, exactly: sigma(bias_pre) + hc_eps = 1/N, bias_post = 0, bias_res = I.
    b = pre.bias.detach()
    assert torch.allclose(torch.sigmoid(b[:n]) + pre.hc_eps, torch.full((n,), 1.0 / n), atol=1e-6)
    assert torch.equal(b[n:2 * n], torch.zeros(n))
    assert torch.equal(b[2 * n:].view(n, n), torch.eye(n))
    assert torch.equal(pre.alpha.detach(), torch.full((3,), 0.01))
    assert float(pre.phi.detach().std()) == pytest.approx(1 / math.sqrt(n * d), rel=0.15)
    if gamma:
        assert torch.equal(pre.gamma.detach(), torch.ones(n, d))

    x = make_x(layout, n, d)
    with torch.no_grad():
        h_in, h_post, h_res = pre(x)
        h_pre = mhc.npu_mhc_pre(x, pre.phi, pre.alpha, pre.bias, gamma=pre.gamma, out_flag=1)[5]
    # Dynamic part: alpha (0.01) times logits of order one.
    assert torch.allclose(h_pre, torch.full_like(h_pre, 1.0 / n), atol=0.02)
    assert torch.allclose(h_post, torch.ones_like(h_post), atol=0.05)
    assert torch.allclose(h_res, torch.eye(n).expand_as(h_res), atol=0.1)
    assert torch.allclose(h_in, x.mean(-2), atol=0.05 * float(x.abs().max()))


def test_parameters_are_fp32_with_the_spec_shapes():
    n, d = 4, 16
    f = 2 * n + n * n
    pre = mhc.nn.MhcPre(n, d)
    shapes = {name: tuple(p.shape) for name, p in pre.named_parameters()}
    assert shapes == {"phi": (f, n * d), "alpha": (3,), "bias": (f,), "gamma": (n, d)}
    assert all(p.dtype == torch.float32 and p.requires_grad for p in pre.parameters())
    assert pre.fusion_size == f
    assert list(mhc.nn.MhcPre(n, d, gamma=False).state_dict()) == ["phi", "alpha", "bias"]
    assert mhc.nn.MhcPre(n, d, gamma=False).gamma is None


def test_extra_repr_and_shape_errors():
    pre = mhc.nn.MhcPre(4, 64, gamma=False, norm_eps=1e-5)
    assert repr(pre) == "MhcPre(n_streams=4, hidden=64, gamma=False, norm_eps=1e-05, hc_eps=1e-06)"
    with pytest.raises(ValueError, match=r"\[B,S,4,64\] or \[T,4,64\]"):
        pre(torch.randn(3, 4, 32))
    with pytest.raises(ValueError):
        pre(torch.randn(12, 64))
    with pytest.raises(ValueError):
        mhc.nn.MhcPre(0, 8)


def test_state_dict_round_trip():
    torch.manual_seed(1)
    src = mhc.nn.MhcPre(4, 48)
    with torch.no_grad():  # move away from the init so the round trip is not trivial
        for p in src.parameters():
            p.add_(0.1 * torch.randn_like(p))
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    buf.seek(0)
    torch.manual_seed(2)
    dst = mhc.nn.MhcPre(4, 48)
    assert not torch.equal(dst.phi, src.phi)
    dst.load_state_dict(torch.load(buf))
    for name, p in src.state_dict().items():
        assert_same_bits(name, p, dst.state_dict()[name], "after load_state_dict")
    x = make_x("BSND", 4, 48, torch.bfloat16)
    for a, b, name in zip(src(x), dst(x), ("h_in", "h_post", "h_res")):
        assert_same_bits(name, a.detach(), b.detach(), "loaded module")
    # strict loading catches a gamma mismatch, as for any module
    with pytest.raises(RuntimeError):
        mhc.nn.MhcPre(4, 48, gamma=False).load_state_dict(src.state_dict())


@pytest.mark.parametrize("layout", ["BSND", "TND"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("gamma", [True, False], ids=["gamma", "nogamma"])
def test_module_equals_functional_and_grads_reach_every_parameter(layout, dtype, gamma):
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    n, d = 4, 40
    torch.manual_seed(3)
    pre = mhc.nn.MhcPre(n, d, gamma=gamma)
    x = make_x(layout, n, d, dt).requires_grad_()
    outs = pre(x)
    assert outs[0].dtype == dt and outs[1].dtype == torch.float32 and outs[2].dtype == torch.float32
    lead = tuple(x.shape[:-2])
    assert [tuple(o.shape) for o in outs] == [lead + (d,), lead + (n,), lead + (n, n)]
    full_loss(*outs).backward()

    # The same tensors fed to mhc.mhc_pre directly: the same bits, forward and backward.
    leaves = {k: getattr(pre, k).detach().clone().requires_grad_() for k in MHC_PARAMS
              if getattr(pre, k) is not None}
    x2 = x.detach().clone().requires_grad_()
    outs2 = mhc.mhc_pre(x2, leaves["phi"], leaves["alpha"], leaves["bias"], leaves.get("gamma"),
                        pre.norm_eps, pre.hc_eps)
    full_loss(*outs2).backward()
    for name, a, b in zip(("h_in", "h_post", "h_res"), outs, outs2):
        assert_same_bits(name, a.detach(), b.detach(), "module vs mhc.mhc_pre")
    assert_same_bits("grad_x", x.grad, x2.grad, "module vs mhc.mhc_pre")
    assert x.grad.dtype == dt

    names = [name for name, _ in pre.named_parameters()]
    assert names == [k for k in MHC_PARAMS if k != "gamma" or gamma]
    for name, p in pre.named_parameters():
        assert p.grad is not None, f"{name}: no gradient"
        assert p.grad.dtype == torch.float32 and p.grad.shape == p.shape
        assert bool(torch.isfinite(p.grad).all()), name
        assert float(p.grad.abs().max()) > 0, f"{name}: zero gradient"
        assert_same_bits("grad_" + name, p.grad, leaves[name].grad, "module vs mhc.mhc_pre")


def test_module_cast_and_bf16_activations():
    """x in bf16 leaves the fp32 parameters alone; a module cast to bf16 still runs
    (forward upcasts), and its parameters get bf16 gradients, like any module."""
    torch.manual_seed(4)
    pre = mhc.nn.MhcPre(4, 32)
    x = make_x("TND", 4, 32, torch.bfloat16)
    pre(x)
    assert all(p.dtype == torch.float32 for p in pre.parameters())
    cast = copy.deepcopy(pre).bfloat16()
    assert all(p.dtype == torch.bfloat16 for p in cast.parameters())
    full_loss(*cast(x)).backward()
    assert all(p.grad is not None and p.grad.dtype == torch.bfloat16 for p in cast.parameters())
    back = cast.float()
    assert all(p.dtype == torch.float32 for p in back.parameters())


def test_example_models_share_their_start():
    """The example's mHC model is expand_streams + MhcBlocks + MhcHead; its --reference twin
    has the same parameters and initial values; the residual model has the same sub-layers,
    embeddings, norm and output projection, with their initial values."""
    tt = load_example()
    args = tt.parse_args(TINY)
    models = {kind: tt.build_model(args, kind) for kind in tt.KINDS}
    ours = models["mhc"]
    assert all(isinstance(b, mhc.nn.MhcBlock) for b in ours.blocks) and len(ours.blocks) == 2 * args.layers
    assert isinstance(ours.hc_head, mhc.nn.MhcHead)
    assert all(type(b).__name__ == "ReferenceMhcBlock" for b in models["reference"].blocks)
    sd = {kind: m.state_dict() for kind, m in models.items()}
    assert sd["mhc"].keys() == sd["reference"].keys()
    for name, value in sd["mhc"].items():
        assert_same_bits(name, value, sd["reference"][name], "mhc vs reference init")
    assert set(sd["residual"]) < set(sd["mhc"])
    for name, value in sd["residual"].items():
        assert_same_bits(name, value, sd["mhc"][name], "residual vs mhc init")
    extra = set(sd["mhc"]) - set(sd["residual"])
    assert {k.split(".")[-1] for k in extra} == set(MHC_PARAMS)
    # the mHC parameters keep the paper's start (alpha 0.01, gamma 1), the rest N(0, 0.02)
    assert torch.equal(ours.blocks[0].alpha.detach(), torch.full((3,), 0.01))
    assert torch.equal(ours.hc_head.gamma.detach(), torch.ones(args.streams, args.hidden))
    tokens = torch.randint(0, len(tt.VOCAB), (2, args.seq))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), models["reference"](tokens), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------- training

TINY = ["--hidden", "64", "--streams", "4", "--layers", "1", "--heads", "2", "--seq", "16",
        "--batch", "8", "--plot", "none"]


@pytest.fixture
def torch_threads():
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def test_compare_mode_tracks_reference(torch_threads, capsys):
    tt = load_example()
    assert tt.main(TINY + ["--compare", "--steps", "12"]) == 0
    out = capsys.readouterr().out
    assert "PASS: max relative mhc/reference loss difference" in out
    worst = float(out.split("loss difference over 12 steps: ")[1].split()[0])
    assert worst < 1e-4, out
    last = out.split("# loss: ")[1].split("\n")[0]
    for kind in ("mhc", "reference", "residual"):
        assert f"{kind} " in last, last
    assert "mHC learns" in out and "the plain residual model" in out
    assert "the mHC part of one sub-layer step alone" in out


def test_recompute_trains_the_same(torch_threads):
    """--recompute changes what the blocks keep, not the numbers: the same losses and
    parameters after a few steps, bit for bit."""
    tt = load_example()
    runs = [tt.run_single(tt.parse_args(TINY + ["--steps", "3"] + flag), "mhc", log=False)
            for flag in ([], ["--recompute"])]
    assert runs[0].losses == runs[1].losses
    assert all(b.recompute for b in runs[1].model.blocks)
    sd = [r.model.state_dict() for r in runs]
    for name in sd[0]:
        assert_same_bits(name, sd[0][name], sd[1][name], "recompute vs not")


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is not available")
@pytest.mark.parametrize("variant", ["v4", "v4.1"])
def test_ddp_two_processes_match_single_process(tmp_path, torch_threads, variant):
    """DDP (gloo, 2 processes, 127.0.0.1, port picked at run time) for a few SGD steps on
    fixed global batches: both ranks end bitwise identical, and equal to one process on
    the whole global batch within fp32 rounding. SGD keeps the comparison linear in
    the gradients (Adam's first step is ~lr*sign(g), which would magnify rounding
    noise in near-zero gradients)."""
    steps = 3
    argv = TINY + ["--optim", "sgd", "--lr", "0.5", "--steps", str(steps), "--variant", variant]
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python") + os.pathsep
               + os.environ.get("PYTHONPATH", ""), GLOO_SOCKET_IFNAME="lo",
               MASTER_ADDR="127.0.0.1")
    # Its own session, so that on a timeout the launcher and the ranks it spawned go together.
    proc = subprocess.Popen([sys.executable, EXAMPLE, "--ddp", "2", "--dump-dir", str(tmp_path)] + argv,
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=DDP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"DDP run exceeded {DDP_TIMEOUT} s:\n{stdout}\n{stderr}")
    assert proc.returncode == 0, stdout + stderr
    assert "gloo on 127.0.0.1:" in stdout
    dumps = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    # each rank trained on its own half of the global batch ...
    assert dumps[0]["losses"] != dumps[1]["losses"]
    ranks = [d["state_dict"] for d in dumps]
    # ... yet, the gradients being all-reduced, they hold the same parameters
    for name in ranks[0]:
        assert_same_bits(name, ranks[0][name], ranks[1][name], "rank 0 vs rank 1")

    tt = load_example()
    args = tt.parse_args(argv)
    single = tt.run_single(args, "mhc", log=False).model.state_dict()
    init = tt.build_model(args, "mhc").state_dict()
    assert ranks[0].keys() == single.keys()
    worst = {}
    for name, want in single.items():
        got = ranks[0][name]
        moved = float((want - init[name]).abs().max())
        worst[name] = float((got - want).abs().max())
        # fp32 rounding of differently ordered sums: relative to the parameter's scale
        # and to how far the steps moved it.
        scale = float(want.abs().max())
        assert worst[name] <= 1e-5 * scale + 1e-4 * moved + 1e-7, (name, worst[name], scale, moved)
        if name.split(".")[-1] in MHC_PARAMS and name.startswith("blocks."):
            assert moved > 1e3 * worst[name], f"{name}: moved {moved:.3g}, diff {worst[name]:.3g}"
        elif name.split(".")[-1] in MHC_PARAMS:  # the head's: its N input streams start equal,
            # so its gradients start small (its gamma moves by less than gamma's ulp here)
            assert worst[name] == 0 or moved > 20 * worst[name], f"{name}: moved {moved:.3g}, diff {worst[name]:.3g}"
    print(f"ddp vs single-process max |param diff| {max(worst.values()):.3e} "
          f"(mHC params {max(v for k, v in worst.items() if k.split('.')[-1] in MHC_PARAMS):.3e})")


# ------------------------------------------------------------- V4.1 (--variant v4.1)

def test_v41_model_is_an_mhc_stack_and_shares_the_v4_start(torch_threads):
    """--variant v4.1: the sites are MhcBlock(single_pass=True) in an MhcStack (no head, no
    gamma), starting from the V4 model's values of what they share; the stack's logits and
    gradients are those of its blocks called one by one, bit for bit."""
    tt = load_example()
    args = tt.parse_args(TINY + ["--variant", "v4.1"])
    model = tt.build_model(args, "mhc")
    assert isinstance(model.blocks, mhc.nn.MhcStack) and model.blocks.single_pass and model.hc_head is None
    assert len(model.blocks) == 2 * args.layers and all(b.gamma is None for b in model.blocks)
    v4 = tt.build_model(args, "mhc", "v4").state_dict()
    sd = model.state_dict()
    assert set(sd) < set(v4) and {k.split(".")[-1] for k in set(v4) - set(sd)} == {"gamma", "phi", "alpha", "bias"}
    for name, value in sd.items():
        assert_same_bits(name, value, v4[name], "v4.1 vs v4 init")

    tokens = torch.randint(0, len(tt.VOCAB), (2, args.seq), generator=torch.Generator().manual_seed(0))

    def one_by_one(idx):
        h = model.tok(idx) + model.pos(torch.arange(idx.shape[1]))
        x, pre_mix = mhc.nn.expand_streams(h, model.n), None
        for block in model.blocks:
            x, pre_mix = block(x, pre_mix)
        return model.lm_head(model.norm(mhc.mhc_collapse(x, pre_mix)))

    results = []
    for forward in (model, one_by_one):
        model.zero_grad(set_to_none=True)
        logits = forward(tokens)
        logits.logsumexp(-1).mean().backward()
        results.append((logits.detach(), {k: p.grad for k, p in model.named_parameters()}))
    assert_same_bits("logits", results[0][0], results[1][0], "stack vs blocks")
    for name, grad in results[0][1].items():
        assert grad is not None, name
        assert_same_bits(name, grad, results[1][1][name], "stack vs blocks")


def test_v41_trains_and_recompute_trains_the_same(torch_threads):
    tt = load_example()
    runs = [tt.run_single(tt.parse_args(TINY + ["--variant", "v4.1", "--steps", "4"] + flag), "mhc", log=False)
            for flag in ([], ["--recompute"])]
    assert runs[0].losses == runs[1].losses and runs[0].losses[-1] < runs[0].losses[0]
    assert all(b.recompute for b in runs[1].model.blocks)
    sd = [r.model.state_dict() for r in runs]
    for name in sd[0]:
        assert_same_bits(name, sd[0][name], sd[1][name], "recompute vs not")
    with pytest.raises(SystemExit):  # the torch-ops twin is V4's
        tt.parse_args(TINY + ["--variant", "v4.1", "--compare"])


@pytest.mark.skipif(not os.path.isdir("/usr/share/games/fortunes"), reason="Debian's fortunes is not installed")
def test_fortunes_corpus_and_compare_variants(torch_threads, capsys):
    """--corpus fortunes: printable ASCII and newline, the last tenth of each file's lines held
    out; --compare-variants reports V4.1, V4 and the residual model per seed and over seeds."""
    tt = load_example()
    args = tt.parse_args(TINY + ["--corpus", "fortunes"])
    train, held = tt.load_corpus(args, "train"), tt.load_corpus(args, "held_out")
    assert tt.vocab_size(args) == 97 and int(train.max()) < 97 and int(held.min()) >= 0
    assert 0.08 < held.numel() / (train.numel() + held.numel()) < 0.12
    text = tt.fortunes_text("held_out")
    assert text[-200:] not in tt.fortunes_text("train")
    assert tt.main(TINY + ["--corpus", "fortunes", "--compare-variants", "--seeds", "2", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    for seed in (0, 1):
        assert f"# seed {seed}: held-out loss v4.1 " in out
    assert "held-out loss over 2 seeds (mean +- standard error): v4.1 " in out
    for pair in ("v4.1 - v4", "v4.1 - residual", "v4 - residual"):
        assert f"# {pair}: " in out
