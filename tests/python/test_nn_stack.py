"""mhc.nn.MhcStack (SPEC §15): consecutive MhcBlocks with their boundaries fused
(MhcPostPre forward; backward, the site backward's two steps, as the blocks') against the
same blocks called one by one, bit for bit: the output and every gradient (x's, every block's phi, alpha, bias, gamma, the
sub-layers', the head's), V4 with and without a head and V4.1 ending with the collapse,
with and without recompute (also mixed per block); that the fused operators run; what the
stack keeps for the backward; the no-graph path and any leading dims; 1 and 2 threads;
sub-layers with their own checkpointing; frozen mHC parameters; the state_dict layout;
the errors. Bit for bit on every kernel family."""
import pytest
import torch
import torch.utils.checkpoint
from torch import nn

import mhc
import mhc.nn
import mhc.nn.stack
from conftest import DTYPES, assert_same_bits

N, D = 4, 32
LEAD = (2, 6)  # [B, S]
SITES = 3
VARIANTS = ["v4", "v4-nohead", "v4.1"]
RECOMPUTE = {"": [False] * SITES, "recompute": [True] * SITES, "mixed": [True, False, True]}


class Sub(nn.Module):
    """A sub-layer h -> W2 tanh(W1 h + b1) in fp32, cast back to x's dtype by the block."""

    def __init__(self, d, hidden):
        super().__init__()
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, h):
        return self.down(torch.tanh(self.up(h.to(self.up.weight.dtype))))


class Checkpointed(Sub):
    """Sub under torch.utils.checkpoint: its forward runs again inside the engine's backward."""

    def forward(self, h):
        return torch.utils.checkpoint.checkpoint(super().forward, h)


class Neg(nn.Module):
    """A sub-layer whose autograd keeps nothing: -h."""

    def forward(self, h):
        return -h


def perturb(module, seed):
    """Moves the mHC parameters off their near-static start, so every branch matters."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, mhc.nn.MhcParameters):
                m.alpha.copy_(0.3 + 0.5 * torch.rand(m.alpha.shape, generator=gen))
                m.bias.add_(0.7 * torch.randn(m.bias.shape, generator=gen))
                if m.gamma is not None:
                    m.gamma.add_(0.3 * torch.randn(m.gamma.shape, generator=gen))


def make_stack(variant, recompute=(False,) * SITES, sub=Sub, seed=0, recompute_every=None):
    torch.manual_seed(seed)
    single_pass = variant == "v4.1"
    blocks = [mhc.nn.MhcBlock(N, D, sub(D, 24 + 8 * i) if sub is not Neg else Neg(), single_pass=single_pass,
                              recompute=r) for i, r in enumerate(recompute)]
    head = mhc.nn.MhcHead(N, D) if variant == "v4" else None
    stack = mhc.nn.MhcStack(blocks, head=head, recompute_every=recompute_every)
    perturb(stack, seed + 100)
    return stack


def one_by_one(stack, x):
    """The stack's blocks called one by one, then the head or the collapse."""
    if stack.single_pass:
        pre_mix = None
        for block in stack:
            x, pre_mix = block(x, pre_mix)
        return mhc.mhc_collapse(x, pre_mix)
    for block in stack:
        x = block(x)
    return x if stack.head is None else stack.head(x)


def make_x(dtype, lead=LEAD, seed=7):
    return torch.randn(lead + (N, D), generator=torch.Generator().manual_seed(seed)).to(dtype)


def run(forward, module, x, seed=8):
    """Forward and backward of sum(forward(x) * weights): (output, x.grad, {name: grad})."""
    x = x.detach().clone().requires_grad_()
    module.zero_grad(set_to_none=True)
    out = forward(x)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    (out.float() * w).sum().backward()
    return out.detach(), x.grad, {k: p.grad for k, p in module.named_parameters()}


def assert_runs_equal(a, b, what):
    """The same bits: the output and every gradient."""
    assert_same_bits("output", a[0], b[0], what)
    assert a[2].keys() == b[2].keys()
    for name, ga, gb in [("grad_x", a[1], b[1])] + [(k, a[2][k], b[2][k]) for k in a[2]]:
        assert ga is not None, f"{name}: no gradient"
        assert_same_bits(name, ga, gb, what)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("recompute", list(RECOMPUTE))
@pytest.mark.parametrize("variant", VARIANTS)
def test_stack_is_the_blocks_one_by_one_bit_for_bit(variant, recompute, dtype):
    stack = make_stack(variant, RECOMPUTE[recompute])
    x = make_x(DTYPES[dtype])
    fused = run(stack, stack, x)
    assert_runs_equal(fused, run(lambda t: one_by_one(stack, t), stack, x), f"{variant} stack vs blocks")
    expected = LEAD + ((N, D) if variant == "v4-nohead" else (D,))
    assert fused[0].shape == expected and fused[0].dtype == x.dtype
    n_mhc = SITES * (3 + (variant != "v4.1")) + (4 if variant == "v4" else 0)
    assert len(fused[2]) == n_mhc + SITES * 3


@pytest.mark.parametrize("variant", ["v4", "v4.1"])
def test_the_boundaries_are_the_fused_operators(variant, monkeypatch):
    """SITES - 1 MhcPostPre calls forward; backward the site backward's prepare and finish
    once per site, and no MhcPostBackward or MhcPreBackward of their own."""
    calls = {}

    def counted(module, name):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return original(*args, **kwargs)
        monkeypatch.setattr(module, name, wrapper)

    counted(mhc.nn.stack, "run_post_pre_forward")
    for module in (mhc.nn.stack, mhc.nn.block):
        counted(module, "run_site_backward_prepare")
    counted(mhc.nn.block, "run_site_backward_finish")  # every site's pre side, the stack's included
    library_calls = []  # every operator the library runs, by its C name
    original_call = mhc._core._call

    def recorded(op, *args, **kwargs):
        library_calls.append(op)
        return original_call(op, *args, **kwargs)
    monkeypatch.setattr(mhc._core, "_call", recorded)
    stack = make_stack(variant)
    run(stack, stack, make_x(torch.bfloat16))
    assert calls == {"run_post_pre_forward": SITES - 1, "run_site_backward_prepare": SITES,
                     "run_site_backward_finish": SITES}
    backward_ops = sorted(op for op in set(library_calls) if "backward" in op)
    # V4's head is MhcPre with a one-entry alpha: its backward is MhcPreBackward's.
    head = ["pre_backward"] if variant == "v4" else ["collapse_backward"]
    assert backward_ops == sorted(head + ["site_backward_finish", "site_backward_prepare"])


EVERY_SITES = 5


@pytest.mark.parametrize("every", [2, 3, 5, 7])
@pytest.mark.parametrize("recompute", ["", "mixed"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_recompute_every_gives_the_same_bits(variant, recompute, every):
    """recompute_every=k: the output and every gradient bitwise those of the stack keeping
    every stream (5 sites: segments of k sites, the last one short or the whole stack)."""
    per_block = [r == "1" for r in "10110"] if recompute == "mixed" else [False] * EVERY_SITES
    stack = make_stack(variant, per_block, recompute_every=every)
    x = make_x(torch.bfloat16)
    replayed = run(stack, stack, x)
    stack.recompute_every = None
    assert_runs_equal(replayed, run(stack, stack, x), f"{variant} recompute_every={every}")


@pytest.mark.parametrize("variant", ["v4", "v4.1"])
def test_recompute_every_backward_twice_with_retain_graph(variant):
    """The kept streams live with the graph: a second backward rebuilds them again."""
    stack = make_stack(variant, [False] * EVERY_SITES, recompute_every=2)
    x = make_x(torch.bfloat16).requires_grad_()
    out = stack(x)
    out.float().sum().backward(retain_graph=True)
    first, x.grad = x.grad.clone(), None
    out.float().sum().backward()
    assert_same_bits("grad_x", x.grad, first, "second backward")


@pytest.mark.parametrize("variant", ["v4-nohead", "v4.1"])
def test_recompute_every_keeps_fewer_streams(variant):
    """With a sub-layer that keeps nothing, k = 2 over 5 sites keeps x_0, x_2, x_4 of the
    five streams x_0..x_4 the backward reads: two streams fewer (T*N*D in x's dtype each),
    the H and h_post of the sites it replays kept instead where a block recomputes."""
    x = make_x(torch.bfloat16).requires_grad_()
    every = make_stack(variant, [False] * EVERY_SITES, sub=Neg, recompute_every=2)
    fewer, _ = saved_activation_bytes(every, every, x)
    every.recompute_every = None
    all_kept, _ = saved_activation_bytes(every, every, x)
    stream = LEAD[0] * LEAD[1] * N * D * 2
    assert all_kept - fewer == 2 * stream
    # Its rebuilt streams: at most k - 1 alive at once in the backward.
    every.recompute_every = 2
    alive = []
    original = mhc.nn.stack._Streams.get

    def counting(self, site):
        value = original(self, site)
        alive.append(len(self.rebuilt))
        return value
    mhc.nn.stack._Streams.get = counting
    try:
        run(every, every, make_x(torch.bfloat16))
    finally:
        mhc.nn.stack._Streams.get = original
    assert alive and max(alive) == 1


@pytest.mark.parametrize("variant", ["v4", "v4.1"])
def test_one_block(variant):
    torch.manual_seed(0)
    block = mhc.nn.MhcBlock(N, D, Sub(D, 16), single_pass=variant == "v4.1")
    perturb(block, 1)
    stack = mhc.nn.MhcStack([block])
    x = make_x(torch.bfloat16)
    assert_runs_equal(run(stack, stack, x), run(lambda t: one_by_one(stack, t), stack, x), "one block")


def saved_activation_bytes(forward, module, x):
    """Bytes of the distinct storages autograd keeps after forward(x), parameters excluded."""
    params = {p.data_ptr() for p in module.parameters()}
    seen = {}

    def pack(t):
        storage = t.storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward(x)
    return sum(seen.values()), out


@pytest.mark.parametrize("recompute", ["", "recompute"])
@pytest.mark.parametrize("variant", ["v4-nohead", "v4.1"])
def test_the_stack_keeps_what_the_blocks_keep(variant, recompute):
    """With a sub-layer that keeps nothing: the same storages as the blocks one by one."""
    stack = make_stack(variant, RECOMPUTE[recompute], sub=Neg)
    x = make_x(torch.bfloat16).requires_grad_()
    fused, _ = saved_activation_bytes(stack, stack, x)
    blocks, _ = saved_activation_bytes(lambda t: one_by_one(stack, t), stack, x)
    assert fused == blocks


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_grad_and_any_leading_dims(variant):
    """Without a graph the operators run without caches: the same bits as with one. Leading
    dims [2,3,2] give what [12] gives, forward and backward."""
    stack = make_stack(variant)
    x = make_x(torch.bfloat16, lead=(12,))
    with_graph = run(stack, stack, x)
    with torch.no_grad():
        assert_same_bits("output", stack(x), with_graph[0], "no_grad vs graph")
        assert_same_bits("output", one_by_one(stack, x), with_graph[0], "blocks under no_grad")
        got = stack(x.view(2, 3, 2, N, D)).reshape(with_graph[0].shape)
        assert_same_bits("output", got, with_graph[0], "[2,3,2] vs [12]")
    out, gx, grads = run(stack, stack, x.view(2, 3, 2, N, D))
    assert_same_bits("grad_x", gx.view(12, N, D), with_graph[1], "[2,3,2] vs [12]")
    for name in grads:
        assert_same_bits(name, grads[name], with_graph[2][name], "[2,3,2] vs [12]")


@pytest.mark.parametrize("variant", ["v4", "v4.1"])
def test_bitwise_identical_for_1_and_2_threads(variant):
    stack = make_stack(variant, RECOMPUTE["mixed"])
    x = make_x(torch.bfloat16)
    runs = []
    for threads in (1, 2):
        mhc.set_num_threads(threads)
        runs.append(run(stack, stack, x))
    assert_runs_equal(runs[0], runs[1], "1 vs 2 threads")
    assert_runs_equal(runs[1], run(lambda t: one_by_one(stack, t), stack, x), "stack vs blocks at 2 threads")


@pytest.mark.parametrize("variant", ["v4", "v4.1"])
def test_sublayers_keep_their_own_graphs(variant):
    """Sub-layers under torch.utils.checkpoint (their forward rerun inside the engine's
    backward) give the bits of the plain ones: the engine runs them between the stack's
    Functions."""
    plain = make_stack(variant, sub=Sub)
    checkpointed = make_stack(variant, sub=Checkpointed)
    checkpointed.load_state_dict(plain.state_dict())
    x = make_x(torch.float32)
    assert_runs_equal(run(checkpointed, checkpointed, x), run(plain, plain, x), "checkpointed sub-layers")


@pytest.mark.parametrize("variant", ["v4", "v4.1"])
def test_frozen_mhc_parameters(variant):
    """mHC parameters and x not requiring grad: the sub-layers' gradients still flow (through
    the fused backward), the same bits as the blocks'."""
    stack = make_stack(variant)
    for name, p in stack.named_parameters():
        p.requires_grad_(".sublayer." in name)
    x = make_x(torch.bfloat16)
    outs, grads = [], []
    for forward in (stack, lambda t: one_by_one(stack, t)):
        stack.zero_grad(set_to_none=True)
        out = forward(x)
        out.float().square().sum().backward()
        outs.append(out.detach())
        grads.append({k: p.grad for k, p in stack.named_parameters()})
    assert_same_bits("output", outs[0], outs[1], "frozen mHC")
    for name, g in grads[0].items():
        assert (g is not None) == (".sublayer." in name), name
        if g is not None:
            assert_same_bits(name, g, grads[1][name], "frozen mHC")


def test_state_dict_layout_and_container():
    """The blocks are children "0", "1", ...: the state_dict of an nn.ModuleList of them."""
    stack = make_stack("v4")
    blocks = list(stack)
    assert len(stack) == SITES and all(isinstance(b, mhc.nn.MhcBlock) for b in blocks)
    assert stack[1] is blocks[1] and stack[-1] is blocks[-1]
    keys = list(nn.ModuleList(blocks).state_dict()) + ["head." + k for k in stack.head.state_dict()]
    assert list(stack.state_dict()) == keys
    other = make_stack("v4", seed=3)
    other.load_state_dict(stack.state_dict())
    x = make_x(torch.float32)
    assert_runs_equal(run(other, other, x), run(stack, stack, x), "loaded stack")
    assert "3 sites, V4" in repr(stack) and "3 sites, V4.1 (single_pass)" in repr(make_stack("v4.1"))


def test_errors():
    v4 = [mhc.nn.MhcBlock(N, D, Neg()) for _ in range(2)]
    v41 = [mhc.nn.MhcBlock(N, D, Neg(), single_pass=True) for _ in range(2)]
    with pytest.raises(ValueError, match=r"blocks\[1\]: single_pass=True .* all V4 or all V4.1"):
        mhc.nn.MhcStack([v4[0], v41[0]])
    with pytest.raises(ValueError, match=r"blocks\[1\]: single_pass=False"):
        mhc.nn.MhcStack([v41[0], v4[0]])
    with pytest.raises(ValueError, match="head: a V4.1 stack"):
        mhc.nn.MhcStack(v41, head=mhc.nn.MhcHead(N, D))
    with pytest.raises(ValueError, match="at least one"):
        mhc.nn.MhcStack([])
    with pytest.raises(ValueError, match=r"blocks\[1\]: n_streams, hidden = 4, 16"):
        mhc.nn.MhcStack([v4[0], mhc.nn.MhcBlock(N, 16, Neg())])
    with pytest.raises(TypeError, match=r"blocks\[0\]: expected an mhc.nn.MhcBlock, got ReferenceMhcBlock"):
        mhc.nn.MhcStack([mhc.nn.reference.ReferenceMhcBlock(N, D, Neg())])
    with pytest.raises(TypeError, match=r"blocks\[0\]"):
        mhc.nn.MhcStack([nn.Identity()])
    with pytest.raises(TypeError, match="head"):
        mhc.nn.MhcStack(v4, head=lambda t: t)
    for bad in (0, -2, True, 1.5, "2"):
        with pytest.raises(ValueError, match=r"^recompute_every: expected None or an int >= 1"):
            mhc.nn.MhcStack(v4, recompute_every=bad)
    with pytest.raises(ValueError, match=r"\[\.\., 4, 32\]"):
        mhc.nn.MhcStack(v4)(torch.randn(3, 4, 16))
