#!/usr/bin/env python3
"""Train a tiny mHC language model on CPU with mhc's pre block.

The network: character embeddings, replicated to N residual streams; L layers of
[attention sub-layer, MLP sub-layer], each sub-layer wrapped in hyper-connections:

    h_in, h_post, h_res = pre(streams)                 the mHC pre block (mhc.nn.MhcPre)
    out     = sublayer(rmsnorm(h_in))                   [.., D]
    streams = softmax(h_res, -1) @ streams + h_post[.., :, None] * out[.., None, :]

The post side is plain torch. h_res are the residual logits (SPEC §2: no Sinkhorn in
the operator); we turn them into a row-stochastic N x N matrix with a row softmax,
which keeps every stream a convex mix of streams (stable, no Sinkhorn needed) -- a
simpler stand-in for the paper's doubly stochastic Sinkhorn projection. The output
reads the mean of the streams.

The data: a deterministic synthetic corpus of arithmetic lines ("37+45=82",
"81-29=52"), generated here from a seed; no downloads. The digits of the operands are
random (ln 10 nats each), the rest -- format and results -- is learnable.

Modes (all on CPU):
    train_tiny.py                      train with mhc.nn.MhcPre (the library's kernels)
    train_tiny.py --reference          the same with the pre block written in torch ops
                                       (SPEC §2; autograd does the backward)
    train_tiny.py --compare            both, identically initialised, stepped alternately
                                       on the same batches (fair timing on a shared
                                       machine); reports the loss agreement and ms/step
    train_tiny.py --ddp 2              DistributedDataParallel, gloo, 2 processes on
                                       127.0.0.1; --batch is the global batch, split
                                       evenly; DDP all-reduces the grads our backward
                                       produced (phi, alpha, bias, gamma, ...)
    train_tiny.py --ddp 2 --verify     then also train single-process on the same global
                                       batches and report the largest parameter difference

Every step is logged (step, loss, ms/step); a loss plot is written to --plot
(default docs/train_tiny_loss.png; "none" to skip).
Run from the repository root: PYTHONPATH=python /usr/bin/python3 examples/train_tiny.py --compare
"""
import argparse
import datetime
import math
import os
import socket
import statistics
import sys
import tempfile
import textwrap
import time

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
try:
    import mhc
except ImportError:  # run from a checkout without PYTHONPATH
    sys.path.insert(0, os.path.join(REPO, "python"))
    import mhc
import mhc.nn  # noqa: E402  (explicit, although `import mhc` already loads it)

DEFAULT_PLOT = os.path.join(REPO, "docs", "train_tiny_loss.png")

# --------------------------------------------------------------------------- data

VOCAB = "0123456789+-=\n"
STOI = {c: i for i, c in enumerate(VOCAB)}


def make_corpus(n_lines=30000, seed=1234):
    """Arithmetic lines 'a+b=c' / 'a-b=c' (a >= b for '-'), operands 0..99; a 1-D
    LongTensor of character ids, the same for a given seed on every machine."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 100, (n_lines,), generator=gen).tolist()
    b = torch.randint(0, 100, (n_lines,), generator=gen).tolist()
    sub = (torch.rand(n_lines, generator=gen) < 0.5).tolist()
    lines = []
    for x, y, s in zip(a, b, sub):
        if s:
            x, y = max(x, y), min(x, y)
            lines.append(f"{x}-{y}={x - y}\n")
        else:
            lines.append(f"{x}+{y}={x + y}\n")
    text = "".join(lines)
    return torch.tensor([STOI[c] for c in text], dtype=torch.long)


def global_batch(data, step, batch, seq, seed):
    """The global batch of a step: (inputs, targets), each [batch, seq]. Depends only on
    (seed, step), so every process -- and a single-process run -- sees the same one."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=gen)
    idx = starts[:, None] + torch.arange(seq + 1)[None, :]
    chunk = data[idx]
    return chunk[:, :-1], chunk[:, 1:]


# ------------------------------------------------------------------- the pre block

def mhc_pre_torch(x, phi, alpha, bias, gamma=None, norm_eps=1e-6, hc_eps=1e-6):
    """SPEC §2 in plain torch ops (square alpha form, F = 2N + N*N); autograd differentiates it."""
    n = x.shape[-2]
    xf = x.float()
    v = xf.flatten(-2)                                               # [.., K]
    r = torch.rsqrt(v.square().mean(-1, keepdim=True) + norm_eps)   # inv_rms, from raw x
    u = v if gamma is None else v * gamma.flatten()
    w = r * torch.matmul(u, phi.t())                                 # r * h_mix, [.., F]
    scale = torch.cat([alpha[0].expand(n), alpha[1].expand(n), alpha[2].expand(n * n)])
    z = w * scale + bias
    h_pre = torch.sigmoid(z[..., :n]) + hc_eps
    h_post = 2.0 * torch.sigmoid(z[..., n:2 * n])
    h_res = z[..., 2 * n:].unflatten(-1, (n, n))
    h_in = (h_pre.unsqueeze(-1) * xf).sum(-2).to(x.dtype)
    return h_in, h_post, h_res


class ReferenceMhcPre(mhc.nn.MhcPre):
    """mhc.nn.MhcPre with the forward in torch ops: same parameters, same init."""

    def forward(self, x):
        return mhc_pre_torch(x, self.phi, self.alpha, self.bias, self.gamma, self.norm_eps, self.hc_eps)


# ------------------------------------------------------------------------ the model

class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    """Causal multi-head self-attention (written out: torch 1.13 has no fused SDPA)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, h):
        b, s, d = h.shape
        q, k, v = self.qkv(h).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        return self.out(torch.matmul(att, v).transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, d, ratio):
        super().__init__()
        self.up = nn.Linear(d, ratio * d, bias=False)
        self.down = nn.Linear(ratio * d, d, bias=False)

    def forward(self, h):
        return self.down(F.gelu(self.up(h)))


class HyperConnection(nn.Module):
    """One sub-layer on N residual streams: the mHC pre block, the sub-layer, the post merge."""

    def __init__(self, n, d, sublayer, pre_cls):
        super().__init__()
        self.pre = pre_cls(n, d)
        self.norm = RMSNorm(d)
        self.sublayer = sublayer

    def forward(self, streams):                        # [B, S, N, D]
        h_in, h_post, h_res = self.pre(streams)        # [B,S,D], [B,S,N], [B,S,N,N]
        out = self.sublayer(self.norm(h_in))           # [B, S, D]
        mix = torch.softmax(h_res, dim=-1)             # row-stochastic N x N per token
        return torch.matmul(mix, streams) + h_post.unsqueeze(-1) * out.unsqueeze(-2)


class TinyLM(nn.Module):
    def __init__(self, vocab, seq, n, d, layers, heads, mlp_ratio, reference=False):
        super().__init__()
        pre_cls = ReferenceMhcPre if reference else mhc.nn.MhcPre
        self.n = n
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        blocks = []
        for _ in range(layers):
            blocks.append(HyperConnection(n, d, Attention(d, heads), pre_cls))
            blocks.append(HyperConnection(n, d, MLP(d, mlp_ratio), pre_cls))
        self.blocks = nn.ModuleList(blocks)
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2 and not name.endswith(".phi"):   # phi keeps MhcPre's own init
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):                            # [B, S] -> logits [B, S, V]
        s = idx.shape[1]
        e = self.tok(idx) + self.pos(torch.arange(s))
        streams = e.unsqueeze(-2).expand(*e.shape[:-1], self.n, e.shape[-1])  # N copies
        for block in self.blocks:
            streams = block(streams)
        return self.head(self.norm(streams.mean(-2)))


def build_model(args, reference):
    torch.manual_seed(args.seed)  # same seed, same parameter order: identical init
    return TinyLM(len(VOCAB), args.seq, args.streams, args.hidden, args.layers, args.heads,
                  args.mlp_ratio, reference=reference)


def make_optimizer(args, model):
    if args.optim == "sgd":
        return torch.optim.SGD(model.parameters(), lr=args.lr)
    return torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)


def lr_at(args, step):
    """Linear warm-up for 5% of the steps, then cosine to 10%."""
    if args.optim == "sgd":
        return args.lr
    warm = max(1, args.steps // 20)
    if step < warm:
        return args.lr * (step + 1) / warm
    t = (step - warm) / max(1, args.steps - warm)
    return args.lr * (0.1 + 0.45 * (1.0 + math.cos(math.pi * t)))


class Trainer:
    """One model, its optimizer, and its per-step record."""

    def __init__(self, args, reference, model=None, rank=0, world=1):
        self.args, self.rank, self.world = args, rank, world
        self.model = model if model is not None else build_model(args, reference)
        self.opt = make_optimizer(args, self.model)
        self.losses, self.ms = [], []

    def step(self, data, step):
        args = self.args
        x, y = global_batch(data, step, args.batch, args.seq, args.seed)
        per = args.batch // self.world
        x, y = x[self.rank * per:(self.rank + 1) * per], y[self.rank * per:(self.rank + 1) * per]
        for group in self.opt.param_groups:
            group["lr"] = lr_at(args, step)
        t0 = time.perf_counter()
        logits = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), args.clip)
        self.opt.step()
        ms = 1e3 * (time.perf_counter() - t0)
        self.losses.append(float(loss))
        self.ms.append(ms)
        return float(loss), ms


def set_threads(n):
    torch.set_num_threads(n)
    mhc.set_num_threads(n)


def summary_ms(ms, skip):
    """(median, mean) ms/step, skipping the first `skip` (warm-up) steps."""
    body = ms[skip:] if len(ms) > skip else ms
    return statistics.median(body), statistics.fmean(body)


def describe(args):
    tokens = args.batch * args.seq
    return (f"N={args.streams} streams, D={args.hidden}, {args.layers} layers "
            f"({2 * args.layers} mHC pre blocks), {args.heads} heads, MLP x{args.mlp_ratio}, "
            f"batch {args.batch} x seq {args.seq} = {tokens} tokens/step, {args.steps} steps, "
            f"{args.optim} lr {args.lr:g}, fp32, {args.threads} thread(s), mhc isa {mhc.isa()}")


# ------------------------------------------------------------------------ the modes

def run_single(args, reference, log=True):
    set_threads(args.threads)
    data = make_corpus(seed=args.seed)
    tr = Trainer(args, reference)
    name = "reference" if reference else "mhc"
    for step in range(args.steps):
        loss, ms = tr.step(data, step)
        if log:
            print(f"step {step:4d} | {name} loss {loss:.5f} | {ms:7.1f} ms/step", flush=True)
    return tr


def bench_pre(args, reps=20):
    """The pre block alone, forward + backward at the model's shape: mhc vs torch ops."""
    torch.manual_seed(0)
    ours = mhc.nn.MhcPre(args.streams, args.hidden)
    ref = ReferenceMhcPre(args.streams, args.hidden)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(args.batch, args.seq, args.streams, args.hidden, requires_grad=True)
    g = [torch.randn(args.batch, args.seq, args.hidden), torch.randn(args.batch, args.seq, args.streams),
         torch.randn(args.batch, args.seq, args.streams, args.streams)]
    times = {}
    for name, mod in (("mhc", ours), ("reference", ref)):
        ts = []
        for _ in range(reps + 3):
            t0 = time.perf_counter()
            out = mod(x)
            torch.autograd.backward(out, g)
            ts.append(1e3 * (time.perf_counter() - t0))
        times[name] = statistics.median(ts[3:])
    return times


def grad_agreement(model_a, model_b, data, args):
    """Largest over parameters of max|g_a - g_b| / max|g_b| on the first batch."""
    x, y = global_batch(data, 0, args.batch, args.seq, args.seed)
    grads = []
    for model in (model_a, model_b):
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters()})
        model.zero_grad(set_to_none=True)
    rel = {k: float((grads[0][k] - g).abs().max() / g.abs().max().clamp(min=1e-30))
           for k, g in grads[1].items()}
    worst = max(rel, key=rel.get)
    mhc_rel = max(v for k, v in rel.items() if k.split(".")[-1] in ("phi", "alpha", "bias", "gamma"))
    return f"max relative difference {rel[worst]:.2e} (at {worst}); mHC parameters {mhc_rel:.2e}"


def run_compare(args):
    set_threads(args.threads)
    data = make_corpus(seed=args.seed)
    ours, ref = Trainer(args, reference=False), Trainer(args, reference=True)
    sd_a, sd_b = ours.model.state_dict(), ref.model.state_dict()
    assert sd_a.keys() == sd_b.keys() and all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a), "init differs"
    print(f"# compare: {describe(args)}", flush=True)
    print(f"# step-0 gradients, mhc vs reference: {grad_agreement(ours.model, ref.model, data, args)}",
          flush=True)
    worst = 0.0
    for step in range(args.steps):
        # Alternate which one goes first, so neither always inherits the other's caches.
        pair = (ours, ref) if step % 2 == 0 else (ref, ours)
        for tr in pair:
            tr.step(data, step)
        la, lb = ours.losses[-1], ref.losses[-1]
        rel = abs(la - lb) / abs(lb)
        worst = max(worst, rel)
        print(f"step {step:4d} | mhc loss {la:.5f} {ours.ms[-1]:7.1f} ms | reference loss {lb:.5f} "
              f"{ref.ms[-1]:7.1f} ms | rel diff {rel:.2e}", flush=True)
    skip = min(10, args.steps // 10)
    med_a, mean_a = summary_ms(ours.ms, skip)
    med_b, mean_b = summary_ms(ref.ms, skip)
    pre = bench_pre(args)
    print(f"# loss: first {ours.losses[0]:.4f}, last mhc {ours.losses[-1]:.4f} reference "
          f"{ref.losses[-1]:.4f}; max relative loss difference over {args.steps} steps: {worst:.3e}")
    print(f"# ms/step (median, mean; first {skip} steps skipped): mhc {med_a:.1f}, {mean_a:.1f} | "
          f"reference {med_b:.1f}, {mean_b:.1f} | speed-up {med_b / med_a:.2f}x (median)")
    print(f"# the pre block alone, forward+backward at [{args.batch},{args.seq},{args.streams},"
          f"{args.hidden}] fp32: mhc {pre['mhc']:.2f} ms, reference {pre['reference']:.2f} ms "
          f"({pre['reference'] / pre['mhc']:.1f}x)", flush=True)
    if args.plot:
        plot(args, {"mhc (mhc.nn.MhcPre)": ours, "reference (torch ops)": ref}, worst,
             f"ms/step median: mhc {med_a:.1f}, reference {med_b:.1f} ({med_b / med_a:.2f}x)")
    ok = worst <= args.tolerance
    print(f"# {'PASS' if ok else 'FAIL'}: max relative loss difference {worst:.3e} "
          f"{'<=' if ok else '>'} tolerance {args.tolerance:g}", flush=True)
    return 0 if ok else 1


def plot(args, runs, worst, subtitle):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    two = len(runs) == 2
    fig, axes = plt.subplots(1, 3 if two else 2, figsize=(15 if two else 10, 4.2))
    styles = [dict(color="tab:blue", lw=1.6), dict(color="tab:orange", lw=1.0, ls="--")]
    for (label, tr), st in zip(runs.items(), styles):
        axes[0].plot(tr.losses, label=label, **st)
        axes[-1].plot(tr.ms, label=label, **st)
    axes[0].set(xlabel="step", ylabel="training loss (nats/char)", title="loss")
    axes[0].legend()
    axes[-1].set(xlabel="step", ylabel="ms/step",
                 title=f"time per step (forward, backward, {'AdamW' if args.optim == 'adamw' else 'SGD'})")
    axes[-1].set_ylim(0, 2.0 * max(statistics.median(tr.ms) for tr in runs.values()))
    axes[-1].legend()
    if two:
        a, b = runs.values()
        rel = [abs(x - y) / abs(y) for x, y in zip(a.losses, b.losses)]
        axes[1].semilogy([max(r, 1e-9) for r in rel], color="tab:green", lw=1.0)
        axes[1].set(xlabel="step", ylabel="|loss_mhc - loss_ref| / loss_ref",
                    title=f"relative loss difference (max {worst:.2e}; equal drawn at 1e-9)")
    fig.suptitle("\n".join(textwrap.wrap(f"train_tiny: {describe(args)}", 120) + [subtitle]), fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
    fig.savefig(args.plot, dpi=100)
    print(f"# plot written to {args.plot}", flush=True)


# ------------------------------------------------------------------------------ DDP

def free_port():
    """A free TCP port on 127.0.0.1, chosen now (loopback only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_worker(rank, world, port, args, out_dir):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        set_threads(args.threads)
        data = make_corpus(seed=args.seed)
        model = build_model(args, reference=args.reference)
        ddp = DDP(model)  # broadcasts rank 0's parameters; all-reduces (averages) every grad
        tr = Trainer(args, args.reference, model=ddp, rank=rank, world=world)
        global_losses = []
        for step in range(args.steps):
            loss, ms = tr.step(data, step)
            mean_loss = torch.tensor([loss])
            dist.all_reduce(mean_loss)  # the global batch's loss, for the log only
            global_losses.append(float(mean_loss) / world)
            if rank == 0:
                print(f"step {step:4d} | ddp x{world} loss {global_losses[-1]:.5f} | "
                      f"{ms:7.1f} ms/step", flush=True)
        if out_dir:
            torch.save({"state_dict": model.state_dict(), "losses": tr.losses, "ms": tr.ms,
                        "global_losses": global_losses}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run_ddp(args):
    import torch.multiprocessing as mp

    world = args.ddp
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must be a multiple of --ddp {world}")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo on the loopback interface
    port = free_port()
    print(f"# ddp: {world} processes, gloo on 127.0.0.1:{port}, global batch {args.batch} "
          f"({args.batch // world} per rank); {describe(args)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = args.dump_dir or tmp
        os.makedirs(out_dir, exist_ok=True)
        t0 = time.perf_counter()
        mp.spawn(ddp_worker, args=(world, port, args, out_dir), nprocs=world, join=True)
        print(f"# ddp run took {time.perf_counter() - t0:.1f} s", flush=True)
        ranks = [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world)]
    sd0 = ranks[0]["state_dict"]
    same = all(torch.equal(r["state_dict"][k], sd0[k]) for r in ranks[1:] for k in sd0)
    print(f"# every rank holds bitwise identical parameters: {same}", flush=True)
    status = 0 if same else 1
    if args.verify:
        single = run_single(args, args.reference, log=False).model.state_dict()
        diff = max_param_diff(single, sd0)
        moved = max(max_param_diff(single, build_model(args, args.reference).state_dict()).values())
        worst = max(diff.values())
        mhc_keys = [k for k in diff if k.split(".")[-1] in ("phi", "alpha", "bias", "gamma")]
        print(f"# ddp x{world} vs single process on the same global batches, {args.steps} steps: "
              f"max |param diff| {worst:.3e} (mHC params {max(diff[k] for k in mhc_keys):.3e}; "
              f"largest at {max(diff, key=diff.get)}); the steps moved parameters by up to "
              f"{moved:.3e}", flush=True)
    if args.plot:
        tr = Trainer.__new__(Trainer)
        tr.losses, tr.ms = ranks[0]["global_losses"], ranks[0]["ms"]
        plot(args, {f"ddp x{world} (global-batch loss; rank 0's ms/step)": tr}, 0.0,
             "DistributedDataParallel, gloo, 127.0.0.1")
    return status


def max_param_diff(sd_a, sd_b):
    return {k: float((sd_a[k].double() - sd_b[k].double()).abs().max()) for k in sd_a}


# ----------------------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--reference", action="store_true", help="pre block in torch ops")
    mode.add_argument("--compare", action="store_true", help="run mhc and reference side by side")
    p.add_argument("--ddp", type=int, default=0, metavar="P", help="DDP over P gloo processes")
    p.add_argument("--verify", action="store_true", help="with --ddp: compare with a single process")
    p.add_argument("--dump-dir", default=None, help="with --ddp: keep each rank's final state here")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=8, help="global batch (sequences per step)")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--streams", type=int, default=4, help="N")
    p.add_argument("--hidden", type=int, default=256, help="D")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--mlp-ratio", type=int, default=2)
    p.add_argument("--optim", choices=("adamw", "sgd"), default="adamw")
    p.add_argument("--lr", type=float, default=None, help="default 1e-3 (adamw), 0.3 (sgd)")
    p.add_argument("--clip", type=float, default=1.0, help="gradient-norm clipping (0: off)")
    p.add_argument("--threads", type=int, default=1, help="torch and mhc threads (per process)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=1e-3,
                   help="--compare fails above this max relative loss difference")
    p.add_argument("--plot", default=DEFAULT_PLOT, help='PNG path, or "none"')
    args = p.parse_args(argv)
    if args.lr is None:
        args.lr = 0.3 if args.optim == "sgd" else 1e-3
    if args.plot in ("", "none"):
        args.plot = None
    if args.ddp and args.compare:
        p.error("--ddp and --compare are separate runs")
    if args.hidden % args.heads:
        p.error("--hidden must be a multiple of --heads")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.ddp:
        return run_ddp(args)
    if args.compare:
        return run_compare(args)
    print(f"# {'reference' if args.reference else 'mhc'}: {describe(args)}", flush=True)
    tr = run_single(args, args.reference)
    med, mean = summary_ms(tr.ms, min(10, args.steps // 10))
    print(f"# final loss {tr.losses[-1]:.4f}; ms/step median {med:.1f}, mean {mean:.1f}", flush=True)
    if args.plot:
        plot(args, {"reference (torch ops)" if args.reference else "mhc (mhc.nn.MhcPre)": tr}, 0.0,
             f"ms/step median {med:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
