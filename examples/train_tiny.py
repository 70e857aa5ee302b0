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
is the library's: per site the site backward (SPEC §15), MhcPostBackward without grad_x,
then MhcSinkhornBackward and MhcPreBackward forming the post's share of grad_x.

--variant v4.1 is DeepSeek-V4.1's single pass (SPEC §14): each sub-layer an
MhcBlock(single_pass=True), whose h_in collapses the streams with the previous site's h_pre
(the first site: stream 0), all of them in one mhc.nn.MhcStack (the boundaries fused,
SPEC §15), which ends with MhcCollapse by the last site's h_pre instead of a head.

The data (--corpus): "arith", a deterministic synthetic corpus of arithmetic lines
("37+45=82", "81-29=52"), generated here from a seed; no downloads. The digits of the
operands are random (ln 10 nats each), the rest -- format and results -- is learnable.
"fortunes", the text of Debian's fortunes package (/usr/share/games/fortunes, apt
install fortunes), character-level (printable ASCII and newline, anything else one
unknown symbol); the last tenth of each file's lines is held out.

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
    train_tiny.py --compare-variants   V4.1, V4 and the residual model for --seeds seeds,
                                       stepped in turn on the same batches from the same
                                       initial sub-layers; held-out loss per seed, means,
                                       standard errors

Every step is logged (step, loss, ms/step); a loss plot is written to --plot
(default docs/train_tiny_loss.png, docs/train_tiny_variants.png for --compare-variants;
"none" to skip).
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
VARIANTS_PLOT = os.path.join(REPO, "docs", "train_tiny_variants.png")
KINDS = ("mhc", "reference", "residual")
LABELS = {"mhc": "mHC on mhc's operators", "reference": "mHC in torch ops (reference)",
          "residual": "plain residual (no hyper-connections)"}
# --compare-variants: (name, kind, variant)
STUDY = (("v4.1", "mhc", "v4.1"), ("v4", "mhc", "v4"), ("residual", "residual", "v4"))
STUDY_LABELS = {"v4.1": "mHC V4.1 (single pass, MhcStack)", "v4": "mHC V4 (MhcBlock, MhcHead)",
                "residual": "plain residual (no hyper-connections)"}

# --------------------------------------------------------------------------- data

VOCAB = "0123456789+-=\n"
STOI = {c: i for i, c in enumerate(VOCAB)}
FORTUNES_DIR = "/usr/share/games/fortunes"
FORTUNES_VOCAB = "\n" + "".join(chr(c) for c in range(32, 127)) + "\x00"  # \x00: any other character
HELD_OUT_FRACTION = 0.1


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


def fortunes_text(part):
    """The fortunes package's text: per file (sorted by name; the .dat indexes and .u8 links
    skipped), its first 90% of lines for part "train", the last 10% for "held_out"."""
    if not os.path.isdir(FORTUNES_DIR):
        raise SystemExit(f"--corpus fortunes: {FORTUNES_DIR} is missing (apt-get install fortunes)")
    texts = []
    for name in sorted(os.listdir(FORTUNES_DIR)):
        path = os.path.join(FORTUNES_DIR, name)
        if name.endswith(".dat") or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines(keepends=True)
        cut = len(lines) - max(1, round(HELD_OUT_FRACTION * len(lines)))
        texts.append("".join(lines[:cut] if part == "train" else lines[cut:]))
    return "".join(texts)


_CORPORA = {}


def load_corpus(args, part):
    """The character ids (1-D LongTensor) of --corpus's part "train" or "held_out": arith
    lines drawn from --seed (held out: --seed + 1), or the fortunes' text."""
    key = (args.corpus, part, args.seed if args.corpus == "arith" else None)
    if key not in _CORPORA:
        if args.corpus == "arith":
            _CORPORA[key] = make_corpus(seed=args.seed + (part == "held_out"))
        else:
            unknown = len(FORTUNES_VOCAB) - 1
            table = torch.full((128,), unknown, dtype=torch.long)
            table[torch.tensor([ord(c) for c in FORTUNES_VOCAB[:-1]])] = torch.arange(unknown)
            codes = torch.tensor([min(ord(c), 127) for c in fortunes_text(part)], dtype=torch.long)
            _CORPORA[key] = table[codes]
    return _CORPORA[key]


def vocab_size(args):
    return len(VOCAB) if args.corpus == "arith" else len(FORTUNES_VOCAB)


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
    "residual": one stream, ResidualBlock per sub-layer (the same sub-layers). variant
    "v4.1" (kind "mhc"): MhcBlock(single_pass=True) per sub-layer in an MhcStack, which
    ends with MhcCollapse; no head."""

    def __init__(self, vocab, seq, n, d, layers, heads, mlp_ratio, kind="mhc", recompute=False, variant="v4"):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
        if variant not in ("v4", "v4.1") or (variant == "v4.1" and kind == "reference"):
            raise ValueError(f"variant: expected v4, or v4.1 with kind mhc or residual, got {variant!r}")
        self.n, self.kind = n, kind
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        subs = []
        for _ in range(layers):
            subs += [PreNorm(d, Attention(d, heads)), PreNorm(d, MLP(d, mlp_ratio))]
        if kind == "residual":
            self.blocks = nn.ModuleList(ResidualBlock(s) for s in subs)
            self.hc_head = None
        elif variant == "v4.1":  # children "0", "1", ...: the state_dict of a ModuleList of blocks
            self.blocks = mhc.nn.MhcStack(mhc.nn.MhcBlock(n, d, s, single_pass=True, recompute=recompute)
                                          for s in subs)
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
        if isinstance(self.blocks, mhc.nn.MhcStack):
            h = self.blocks(mhc.nn.expand_streams(h, self.n))  # the collapse included
        elif self.hc_head is None:
            for block in self.blocks:
                h = block(h)
        else:
            streams = mhc.nn.expand_streams(h, self.n)  # [B, S, N, D]
            for block in self.blocks:
                streams = block(streams)
            h = self.hc_head(streams)
        return self.lm_head(self.norm(h))


def build_model(args, kind, variant=None):
    """Same seed, same parameter order: mhc and reference start identical; the residual
    model and V4.1's then take the V4 model's values of what they share (embeddings,
    sub-layers, norm, output; V4.1 also phi, alpha and bias)."""
    variant = variant or args.variant
    torch.manual_seed(args.seed)
    make = lambda k, v: TinyLM(vocab_size(args), args.seq, args.streams, args.hidden,  # noqa: E731
                               args.layers, args.heads, args.mlp_ratio, kind=k, recompute=args.recompute,
                               variant=v)
    model = make(kind, variant)
    if kind == "residual" or variant == "v4.1":
        torch.manual_seed(args.seed)
        shared = make("mhc", "v4").state_dict()
        model.load_state_dict({k: shared.get(k, v) for k, v in model.state_dict().items()})
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

    def __init__(self, args, kind, model=None, rank=0, world=1, variant=None):
        self.args, self.kind, self.rank, self.world = args, kind, rank, world
        self.model = model if model is not None else build_model(args, kind, variant)
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
    """The loss on each of `batches` batches of the held-out corpus (arith: lines drawn from
    another seed than the training corpus'; fortunes: the held-out lines), without
    gradients."""
    data = load_corpus(args, "held_out")
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
    variant = "" if args.compare_variants else ("V4.1 (single pass), " if args.variant == "v4.1" else "V4, ")
    return (f"{args.corpus} corpus, {variant}"
            f"N={args.streams} streams, D={args.hidden}, {args.layers} layers "
            f"({2 * args.layers} MhcBlocks), {args.heads} heads, MLP x{args.mlp_ratio}, "
            f"batch {args.batch} x seq {args.seq} = {tokens} tokens/step, {args.steps} steps, "
            f"{args.optim} lr {args.lr:g}, fp32, {args.threads} thread(s), mhc isa {mhc.isa()}"
            + (", recompute" if args.recompute else ""))


def kind_of(args):
    return "reference" if args.reference else "residual" if args.residual else "mhc"


# ------------------------------------------------------------------------ the modes

def run_single(args, kind, log=True):
    set_threads(args.threads)
    data = load_corpus(args, "train")
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
    data = load_corpus(args, "train")
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


def run_compare_variants(args):
    """V4.1 (MhcStack), V4 (MhcBlocks and MhcHead) and the residual model for each of --seeds
    seeds, the three stepped in turn on the same batches from the same initial sub-layers,
    embeddings and output (V4.1 also V4's phi, alpha, bias); the held-out loss of each, per
    seed, and over the seeds their means, standard errors and paired differences."""
    set_threads(args.threads)
    print(f"# compare-variants: {describe(args)}; seeds {args.seed}..{args.seed + args.seeds - 1}", flush=True)
    names = [name for name, _, _ in STUDY]
    held = {name: [] for name in names}
    curves = {name: [] for name in names}
    ms = {name: [] for name in names}
    for i in range(args.seeds):
        seed_args = argparse.Namespace(**dict(vars(args), seed=args.seed + i))
        data = load_corpus(seed_args, "train")
        runs = {name: Trainer(seed_args, kind, variant=variant) for name, kind, variant in STUDY}
        if i == 0:
            counts = {name: sum(p.numel() for p in tr.model.parameters()) for name, tr in runs.items()}
            print("# parameters: " + ", ".join(f"{name} {c:,}" for name, c in counts.items()), flush=True)
        order = list(runs.values())
        for step in range(args.steps):
            for tr in order[step % 3:] + order[:step % 3]:  # none always inherits another's caches
                tr.step(data, step)
            print(f"seed {seed_args.seed} step {step:4d} | "
                  + " | ".join(f"{name} {tr.losses[-1]:.5f} {tr.ms[-1]:6.1f} ms" for name, tr in runs.items()),
                  flush=True)
        for name, tr in runs.items():
            held[name].append(statistics.fmean(held_out_losses(tr.model, seed_args)))
            curves[name].append(tr.losses)
            ms[name] += tr.ms[min(10, args.steps // 10):]
        print(f"# seed {seed_args.seed}: held-out loss "
              + ", ".join(f"{name} {held[name][-1]:.4f}" for name in names), flush=True)

    def mean_se(values):
        se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
        return statistics.fmean(values), se

    stats = {name: mean_se(held[name]) for name in names}
    print(f"# held-out loss over {args.seeds} seeds (mean +- standard error): "
          + ", ".join(f"{name} {m:.4f} +- {se:.4f}" for name, (m, se) in stats.items()), flush=True)
    for a, b in (("v4.1", "v4"), ("v4.1", "residual"), ("v4", "residual")):
        m, se = mean_se([x - y for x, y in zip(held[a], held[b])])
        print(f"# {a} - {b}: {m:+.4f} +- {se:.4f} (paired over seeds)", flush=True)
    med = {name: statistics.median(ms[name]) for name in names}
    print("# ms/step (median over seeds, warm-up skipped): "
          + ", ".join(f"{name} {med[name]:.1f}" for name in names), flush=True)
    if args.plot:
        plot_variants(args, names, curves, held, stats, med)
    return 0


def plot_variants(args, names, curves, held, stats, med):
    """The training loss (mean over the seeds) and its difference to the residual model's
    (moving averages), the held-out loss differences per seed with their mean and standard
    error, and ms/step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"v4.1": "tab:red", "v4": "tab:blue", "residual": "tab:gray"}
    fig, grid = plt.subplots(2, 2, figsize=(13, 7.8))
    (loss_ax, versus_ax), (held_ax, ms_ax) = grid
    window = max(1, args.steps // 15)
    mean_curve = {name: [statistics.fmean(step) for step in zip(*curves[name])] for name in names}
    for name in names:
        label = f"{STUDY_LABELS[name]}; held-out {stats[name][0]:.4f}"
        loss_ax.plot(moving_average(mean_curve[name], window), color=colors[name], lw=1.4, label=label)
        if name != "residual":
            d = [a - b for a, b in zip(mean_curve[name], mean_curve["residual"])]
            versus_ax.plot(moving_average(d, window), color=colors[name], lw=1.4, label=f"{name} - residual")
    loss_ax.set(xlabel="step", ylabel="training loss (nats/char)",
                title=f"training loss, mean over {args.seeds} seeds ({window}-step moving average)")
    loss_ax.legend()
    versus_ax.axhline(0.0, color="black", lw=0.6)
    versus_ax.set(xlabel="step", ylabel="loss difference (nats/char)",
                  title=f"training loss against the residual model's ({window}-step moving average)")
    versus_ax.legend()
    pairs = (("v4.1", "residual"), ("v4", "residual"), ("v4.1", "v4"))
    for k, (a, b) in enumerate(pairs):
        d = [x - y for x, y in zip(held[a], held[b])]
        held_ax.plot([k + 0.06 * (i - (len(d) - 1) / 2) for i in range(len(d))], d, "o", color=colors[a], ms=5)
        se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else 0.0
        held_ax.errorbar([k + 0.25], [statistics.fmean(d)], yerr=[se], fmt="s", color="black", capsize=4)
    held_ax.axhline(0.0, color="black", lw=0.6)
    held_ax.set_xticks(range(len(pairs)))
    held_ax.set_xticklabels([f"{a} - {b}" for a, b in pairs])
    held_ax.set(ylabel="held-out loss difference (nats/char)",
                title="held-out loss differences: each seed (dots), mean +- standard error (squares)")
    ms_ax.bar(range(len(names)), [med[name] for name in names], color=[colors[name] for name in names])
    ms_ax.set_xticks(range(len(names)))
    ms_ax.set_xticklabels(names)
    ms_ax.set(ylabel="ms/step (median)", title="time per step (forward, backward, optimizer)")
    fig.suptitle("\n".join(textwrap.wrap(f"train_tiny --compare-variants: {describe(args)}", 140)), fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
    fig.savefig(args.plot, dpi=100)
    print(f"# plot written to {args.plot}", flush=True)


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
        data = load_corpus(args, "train")
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
    mode.add_argument("--compare-variants", action="store_true",
                      help="train V4.1, V4 and residual side by side for --seeds seeds")
    p.add_argument("--variant", choices=("v4", "v4.1"), default="v4",
                   help="v4.1: DeepSeek-V4.1's single pass, MhcBlock(single_pass=True) in an MhcStack")
    p.add_argument("--corpus", choices=("arith", "fortunes"), default="arith",
                   help="the synthetic arithmetic lines, or Debian's fortunes (apt-get install fortunes)")
    p.add_argument("--seeds", type=int, default=3, help="with --compare-variants: seeds --seed, --seed + 1, ...")
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
    p.add_argument("--plot", default=None, help='PNG path, or "none" (default: docs/train_tiny_loss.png, '
                   'docs/train_tiny_variants.png with --compare-variants)')
    args = p.parse_args(argv)
    if args.lr is None:
        args.lr = 0.3 if args.optim == "sgd" else 1e-3
    if args.plot is None:
        args.plot = VARIANTS_PLOT if args.compare_variants else DEFAULT_PLOT
    elif args.plot in ("", "none"):
        args.plot = None
    if args.ddp and (args.compare or args.compare_variants):
        p.error("--ddp and --compare / --compare-variants are separate runs")
    if args.variant == "v4.1" and (args.reference or args.compare):
        p.error("--reference and --compare are V4's (the torch-ops twin of mhc.nn.reference is V4's)")
    if args.hidden % args.heads:
        p.error("--hidden must be a multiple of --heads")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.ddp:
        return run_ddp(args)
    if args.compare:
        return run_compare(args)
    if args.compare_variants:
        return run_compare_variants(args)
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
