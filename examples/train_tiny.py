#!/usr/bin/env python3
"""Train a tiny mHC language model on CPU, every mHC step an operator of mhc.

The network: character embeddings, copied to N residual streams (mhc.nn.expand_streams);
L layers of [attention sub-layer, MLP sub-layer], each sub-layer an mhc.nn.MhcBlock
(SPEC §13):

    h_in, h_post, z_res = MhcPre(streams)                  [.., D], [.., N], [.., N, N]
    H       = MhcSinkhorn(z_res)                            doubly stochastic N x N
    streams = MhcPost(streams, H, sublayer(h_in), h_post)   out_j = h_post_j out + sum_i H_ij x_i

(the sub-layer is rmsnorm + attention or rmsnorm + MLP); then mhc.nn.MhcHead, the
weighted sum of the streams, the final norm and the output projection. The backward
is the library's: MhcPostBackward, MhcSinkhornBackward, MhcPreBackward with the post's
grad_x as grad_x_post.

The data: a deterministic synthetic corpus of arithmetic lines ("37+45=82",
"81-29=52"), generated here from a seed; no downloads. The digits of the operands are
random (ln 10 nats each), the rest -- format and results -- is learnable.

Modes (all on CPU):
    train_tiny.py                      train the mHC model on mhc's operators
    train_tiny.py --reference          the same model with the whole layer in torch ops
                                       (mhc.nn.reference: SPEC §2, §10, §11, §6; autograd
                                       does the backward)
    train_tiny.py --residual           a plain residual model of the same size (no
                                       hyper-connections: x + sublayer(x))
    train_tiny.py --compare            all three, mhc and reference identically
                                       initialised (the residual model shares their
                                       sub-layers' initial weights), stepped in turn on the
                                       same batches; reports the mhc/reference loss
                                       agreement, mHC against the residual model, ms/step
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
from mhc.nn.reference import ReferenceMhcBlock, ReferenceMhcHead  # noqa: E402

DEFAULT_PLOT = os.path.join(REPO, "docs", "train_tiny_loss.png")
KINDS = ("mhc", "reference", "residual")
LABELS = {"mhc": "mHC on mhc's operators", "reference": "mHC in torch ops (reference)",
          "residual": "plain residual (no hyper-connections)"}

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


class PreNorm(nn.Module):
    """A sub-layer: rmsnorm, then attention or MLP ([B, S, D] -> [B, S, D])."""

    def __init__(self, d, inner):
        super().__init__()
        self.norm = RMSNorm(d)
        self.inner = inner

    def forward(self, h):
        return self.inner(self.norm(h))


class ResidualBlock(nn.Module):
    """The plain residual connection x + sublayer(x), for the comparison."""

    def __init__(self, sublayer):
        super().__init__()
        self.sublayer = sublayer

    def forward(self, x):
        return x + self.sublayer(x)


class TinyLM(nn.Module):
    """kind "mhc": expand_streams, MhcBlock per sub-layer, MhcHead; "reference": the same
    with mhc.nn.reference's torch-ops twins (same parameters, same initialisation);
    "residual": one stream, ResidualBlock per sub-layer (the same sub-layers)."""

    def __init__(self, vocab, seq, n, d, layers, heads, mlp_ratio, kind="mhc", recompute=False):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
        self.n, self.kind = n, kind
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        subs = []
        for _ in range(layers):
            subs += [PreNorm(d, Attention(d, heads)), PreNorm(d, MLP(d, mlp_ratio))]
        if kind == "residual":
            self.blocks = nn.ModuleList(ResidualBlock(s) for s in subs)
            self.hc_head = None
        else:
            block, head = (ReferenceMhcBlock, ReferenceMhcHead) if kind == "reference" else (
                mhc.nn.MhcBlock, mhc.nn.MhcHead)
            self.blocks = nn.ModuleList(block(n, d, s, recompute=recompute) for s in subs)
            self.hc_head = head(n, d)
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        for module in self.modules():  # the mHC parameters keep their own initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, 0.02)

    def forward(self, idx):                            # [B, S] -> logits [B, S, V]
        s = idx.shape[1]
        h = self.tok(idx) + self.pos(torch.arange(s))  # [B, S, D]
        if self.hc_head is None:
            for block in self.blocks:
                h = block(h)
        else:
            streams = mhc.nn.expand_streams(h, self.n)  # [B, S, N, D]
            for block in self.blocks:
                streams = block(streams)
            h = self.hc_head(streams)
        return self.lm_head(self.norm(h))


def build_model(args, kind):
    """Same seed, same parameter order: mhc and reference start identical; the residual
    model then takes their shared parameters (embeddings, sub-layers, norm, output)."""
    torch.manual_seed(args.seed)
    make = lambda k: TinyLM(len(VOCAB), args.seq, args.streams, args.hidden, args.layers,  # noqa: E731
                            args.heads, args.mlp_ratio, kind=k, recompute=args.recompute)
    model = make(kind)
    if kind == "residual":
        torch.manual_seed(args.seed)
        shared = make("mhc").state_dict()
        own = model.state_dict()
        model.load_state_dict({k: shared[k] for k in own})
    return model


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

    def __init__(self, args, kind, model=None, rank=0, world=1):
        self.args, self.kind, self.rank, self.world = args, kind, rank, world
        self.model = model if model is not None else build_model(args, kind)
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


def held_out_losses(model, args, batches=32):
    """The loss on each of `batches` batches of a held-out corpus (lines drawn from another
    seed than the training corpus'), without gradients."""
    data = make_corpus(seed=args.seed + 1)
    losses = []
    with torch.no_grad():
        for i in range(batches):
            x, y = global_batch(data, i, args.batch, args.seq, args.seed + 1)
            logits = model(x)
            losses.append(float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))))
    return losses


def paired(a, b):
    """(mean of a - b, its standard error) over paired samples."""
    d = [x - y for x, y in zip(a, b)]
    return statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d))


def describe(args):
    tokens = args.batch * args.seq
    return (f"N={args.streams} streams, D={args.hidden}, {args.layers} layers "
            f"({2 * args.layers} MhcBlocks), {args.heads} heads, MLP x{args.mlp_ratio}, "
            f"batch {args.batch} x seq {args.seq} = {tokens} tokens/step, {args.steps} steps, "
            f"{args.optim} lr {args.lr:g}, fp32, {args.threads} thread(s), mhc isa {mhc.isa()}"
            + (", recompute" if args.recompute else ""))


def kind_of(args):
    return "reference" if args.reference else "residual" if args.residual else "mhc"


# ------------------------------------------------------------------------ the modes

def run_single(args, kind, log=True):
    set_threads(args.threads)
    data = make_corpus(seed=args.seed)
    tr = Trainer(args, kind)
    for step in range(args.steps):
        loss, ms = tr.step(data, step)
        if log:
            print(f"step {step:4d} | {kind} loss {loss:.5f} | {ms:7.1f} ms/step", flush=True)
    return tr


class Identity(nn.Module):
    def forward(self, h):
        return h


def bench_mhc_part(args, reps=20):
    """The mHC part of one sub-layer step alone (pre + Sinkhorn + post, forward and
    backward, the sub-layer the identity) at the model's shape: ours against torch ops,
    alternating, median ms."""
    torch.manual_seed(0)
    n, d = args.streams, args.hidden
    blocks = {"mhc": mhc.nn.MhcBlock(n, d, Identity()), "reference": ReferenceMhcBlock(n, d, Identity())}
    blocks["reference"].load_state_dict(blocks["mhc"].state_dict())
    x = torch.randn(args.batch, args.seq, n, d, requires_grad=True)
    g = torch.randn(args.batch, args.seq, n, d)
    times = {name: [] for name in blocks}
    for i in range(reps + 3):
        for name, block in blocks.items():
            x.grad = None
            t0 = time.perf_counter()
            block(x).backward(g)
            if i >= 3:
                times[name].append(1e3 * (time.perf_counter() - t0))
    return {name: statistics.median(ts) for name, ts in times.items()}


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
    runs = {kind: Trainer(args, kind) for kind in KINDS}
    ours, ref, res = runs["mhc"], runs["reference"], runs["residual"]
    sd_a, sd_b = ours.model.state_dict(), ref.model.state_dict()
    assert sd_a.keys() == sd_b.keys() and all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a), "init differs"
    counts = {k: sum(p.numel() for p in tr.model.parameters()) for k, tr in runs.items()}
    print(f"# compare: {describe(args)}", flush=True)
    print(f"# parameters: mHC {counts['mhc']:,} (of which hyper-connections "
          f"{counts['mhc'] - counts['residual']:,}), residual {counts['residual']:,}", flush=True)
    print(f"# step-0 gradients, mhc vs reference: {grad_agreement(ours.model, ref.model, data, args)}",
          flush=True)
    worst = 0.0
    order = list(runs.values())
    for step in range(args.steps):
        # Rotate which one goes first, so none always inherits another's caches.
        for tr in order[step % 3:] + order[:step % 3]:
            tr.step(data, step)
        la, lb, lc = ours.losses[-1], ref.losses[-1], res.losses[-1]
        rel = abs(la - lb) / abs(lb)
        worst = max(worst, rel)
        print(f"step {step:4d} | mhc {la:.5f} {ours.ms[-1]:6.1f} ms | reference {lb:.5f} "
              f"{ref.ms[-1]:6.1f} ms | residual {lc:.5f} {res.ms[-1]:6.1f} ms | mhc/ref rel diff "
              f"{rel:.2e}", flush=True)
    skip = min(10, args.steps // 10)
    med = {k: summary_ms(tr.ms, skip) for k, tr in runs.items()}
    part = bench_mhc_part(args)
    held = {k: held_out_losses(tr.model, args) for k, tr in runs.items()}
    mean_held = {k: statistics.fmean(v) for k, v in held.items()}
    diff, se = paired(held["mhc"], held["residual"])
    print(f"# loss: first {ours.losses[0]:.4f}; last mhc {ours.losses[-1]:.4f}, reference "
          f"{ref.losses[-1]:.4f}, residual {res.losses[-1]:.4f}; max relative mhc/reference loss "
          f"difference over {args.steps} steps: {worst:.3e}")
    verdict = ("better than" if diff < -2 * se else "as well as (within noise)" if diff <= 2 * se
               else "less well than")
    print(f"# held-out loss ({len(held['mhc'])} batches of unseen lines): mhc {mean_held['mhc']:.4f}, "
          f"reference {mean_held['reference']:.4f}, residual {mean_held['residual']:.4f}; mhc - residual "
          f"{diff:+.4f} +- {se:.4f} (paired standard error): mHC learns {verdict} the plain residual "
          f"model", flush=True)
    print(f"# ms/step (median, mean; first {skip} steps skipped): "
          + " | ".join(f"{k} {med[k][0]:.1f}, {med[k][1]:.1f}" for k in KINDS)
          + f" | reference / mhc {med['reference'][0] / med['mhc'][0]:.2f}x (median)")
    print(f"# the mHC part of one sub-layer step alone (pre + Sinkhorn + post, forward+backward, "
          f"identity sub-layer) at [{args.batch},{args.seq},{args.streams},{args.hidden}] fp32: "
          f"mhc {part['mhc']:.2f} ms, reference {part['reference']:.2f} ms "
          f"({part['reference'] / part['mhc']:.1f}x)", flush=True)
    if args.plot:
        plot(args, runs, worst,
             "ms/step median: " + ", ".join(f"{k} {med[k][0]:.1f}" for k in KINDS)
             + "; held-out loss: " + ", ".join(f"{k} {mean_held[k]:.4f}" for k in KINDS))
    ok = worst <= args.tolerance
    print(f"# {'PASS' if ok else 'FAIL'}: max relative mhc/reference loss difference {worst:.3e} "
          f"{'<=' if ok else '>'} tolerance {args.tolerance:g}", flush=True)
    return 0 if ok else 1


def moving_average(values, window):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot(args, runs, worst, subtitle):
    """Loss curves and ms/step; with mhc and reference, their relative loss difference; with
    mhc and residual, the moving average of their loss difference."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pair = "mhc" in runs and "reference" in runs
    versus = "mhc" in runs and "residual" in runs
    panels = ["loss"] + (["versus"] if versus else []) + (["pair"] if pair else []) + ["ms"]
    cols = 2 if len(panels) == 4 else len(panels)
    rows = (len(panels) + cols - 1) // cols
    fig, grid = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.9 * rows), squeeze=False)
    ax = dict(zip(panels, grid.flat))
    styles = {"mhc": dict(color="tab:blue", lw=1.6), "reference": dict(color="tab:orange", lw=1.0, ls="--"),
              "residual": dict(color="tab:gray", lw=1.0)}
    for kind, tr in runs.items():
        style = styles.get(kind, styles["mhc"])
        label = LABELS.get(kind, kind)
        ax["loss"].plot(tr.losses, label=label, **style)
        ax["ms"].plot(tr.ms, label=label, **style)
    ax["loss"].set(xlabel="step", ylabel="training loss (nats/char)", title="training loss")
    ax["loss"].legend()
    ax["ms"].set(xlabel="step", ylabel="ms/step",
                 title=f"time per step (forward, backward, {'AdamW' if args.optim == 'adamw' else 'SGD'})")
    ax["ms"].set_ylim(0, 2.0 * max(statistics.median(tr.ms) for tr in runs.values()))
    ax["ms"].legend()
    if versus:
        window = max(1, args.steps // 15)
        d = [a - b for a, b in zip(runs["mhc"].losses, runs["residual"].losses)]
        ax["versus"].plot(moving_average(d, window), color="tab:purple", lw=1.2)
        ax["versus"].axhline(0.0, color="black", lw=0.6)
        ax["versus"].set(xlabel="step", ylabel="loss_mhc - loss_residual (nats/char)",
                         title=f"mHC against the plain residual model ({window}-step moving average)")
    if pair:
        a, b = runs["mhc"], runs["reference"]
        rel = [abs(x - y) / abs(y) for x, y in zip(a.losses, b.losses)]
        ax["pair"].semilogy([max(r, 1e-9) for r in rel], color="tab:green", lw=1.0)
        ax["pair"].set(xlabel="step", ylabel="|loss_mhc - loss_ref| / loss_ref",
                       title=f"mhc vs reference (max {worst:.2e}; 0 drawn at 1e-9)")
    fig.suptitle("\n".join(textwrap.wrap(f"train_tiny: {describe(args)}", 140) + [subtitle]), fontsize=9)
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
        kind = kind_of(args)
        model = build_model(args, kind)
        ddp = DDP(model)  # broadcasts rank 0's parameters; all-reduces (averages) every grad
        tr = Trainer(args, kind, model=ddp, rank=rank, world=world)
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
    kind = kind_of(args)
    print(f"# ddp: {world} processes, gloo on 127.0.0.1:{port}, global batch {args.batch} "
          f"({args.batch // world} per rank); {kind}: {describe(args)}", flush=True)
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
        single = run_single(args, kind, log=False).model.state_dict()
        diff = max_param_diff(single, sd0)
        moved = max(max_param_diff(single, build_model(args, kind).state_dict()).values())
        worst = max(diff.values())
        mhc_keys = [k for k in diff if k.split(".")[-1] in ("phi", "alpha", "bias", "gamma")]
        mhc_part = f"mHC params {max(diff[k] for k in mhc_keys):.3e}; " if mhc_keys else ""
        print(f"# ddp x{world} vs single process on the same global batches, {args.steps} steps: "
              f"max |param diff| {worst:.3e} ({mhc_part}largest at {max(diff, key=diff.get)}); "
              f"the steps moved parameters by up to {moved:.3e}", flush=True)
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
    mode.add_argument("--reference", action="store_true", help="the mHC layer in torch ops")
    mode.add_argument("--residual", action="store_true", help="a plain residual model, no mHC")
    mode.add_argument("--compare", action="store_true",
                      help="train mhc, reference and residual side by side")
    p.add_argument("--ddp", type=int, default=0, metavar="P", help="DDP over P gloo processes")
    p.add_argument("--verify", action="store_true", help="with --ddp: compare with a single process")
    p.add_argument("--dump-dir", default=None, help="with --ddp: keep each rank's final state here")
    p.add_argument("--recompute", action="store_true",
                   help="MhcBlock(recompute=True): recompute the mHC forward in the backward")
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
                   help="--compare fails above this max relative mhc/reference loss difference")
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
    kind = kind_of(args)
    print(f"# {kind}: {describe(args)}", flush=True)
    tr = run_single(args, kind)
    med, mean = summary_ms(tr.ms, min(10, args.steps // 10))
    print(f"# final loss {tr.losses[-1]:.4f}; ms/step median {med:.1f}, mean {mean:.1f}", flush=True)
    if args.plot:
        plot(args, {kind: tr}, 0.0, f"ms/step median {med:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
