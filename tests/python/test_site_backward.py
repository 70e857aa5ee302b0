"""The site backward (SPEC §15) through mhc.mhc_site_backward_prepare and
mhc.mhc_site_backward_finish, both variants, on every kernel family: prepare bitwise
npu_mhc_post_backward's grad_h_res, grad_h_out and grad_h_post; finish bitwise the site's
pre backward given the post's grad_x in fp32 as grad_x_post (V4.1: the single pass's
backward; V4: MhcSinkhornBackward from the logits formed again from the caches, then
npu_mhc_pre_backward). Strided and stride-0 (expanded) gradients, an identity post (no H),
no gradient of x_next, 1 and 2 threads, a token's outputs alone and in a batch; errors in
these functions' words. Their agreement with float64 autograd is MhcBlock's
(test_nn_block.py), whose backward they are."""
import pytest
import torch

import mhc
from mhc import _core
from conftest import DTYPES, FAMILIES, assert_same_bits, strided_copy

N, D = 4, 40
LEAD = (2, 5)  # [B, S]
F = 2 * N + N * N


def make_site(dtype, single_pass, seed=1):
    """A site's forward (x, parameters, caches, H) and random gradients of its outputs."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]
    rand = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    s = dict(x=rand(*LEAD, N, D).to(dt), phi=rand(F, N * D) * 0.05, alpha=torch.tensor([0.8, 0.6, 0.9]),
             bias=rand(F) * 0.2, gamma=None if single_pass else 1 + 0.1 * rand(N, D),
             pre_mix=torch.softmax(rand(*LEAD, N), -1) if single_pass else None)
    if single_pass:
        (h_in, h_pre, h_post, h, inv_rms, h_mix) = _core.run_pre_single_pass_forward(
            s["x"], s["phi"], s["alpha"], s["bias"], s["pre_mix"], None, 20, 1e-6, 1e-6, 1e-6)
    else:
        h_in, h_post, z, inv_rms, h_mix, h_pre = mhc.npu_mhc_pre(s["x"], s["phi"], s["alpha"], s["bias"],
                                                                gamma=s["gamma"], out_flag=1)
        h = mhc.npu_mhc_sinkhorn(z)[0]
    s.update(h_in=h_in, h_pre=h_pre, h_post=h_post, h=h, inv_rms=inv_rms, h_mix=h_mix,
             h_out=rand(*LEAD, D).to(dt), grad_x_next=rand(*LEAD, N, D).to(dt), grad_h_in=rand(*LEAD, D).to(dt),
             grad_h_pre=rand(*LEAD, N) if single_pass else None, grad_h_post=rand(*LEAD, N),
             grad_h=rand(*LEAD, N, N))
    return s


def chain(s, single_pass, h, grad_x_next):
    """The unfused site: npu_mhc_post_backward (grad_x in fp32), then the pre backward with it
    as grad_x_post; (prepare's three, finish's six)."""
    gx_post = None
    post = (None, None, None)
    if grad_x_next is not None:
        gx_post, g_h, g_out, g_post = mhc.npu_mhc_post_backward(grad_x_next, s["x"], h, s["h_out"], s["h_post"],
                                                                grad_x_dtype=torch.float32)
        post = (g_h if h is not None else None, g_out, g_post)
    if single_pass:
        pre = _core.run_pre_single_pass_backward(
            s["x"], s["phi"], s["alpha"], s["bias"], s["pre_mix"], None, s["grad_h_in"], s["grad_h_pre"],
            s["grad_h_post"], s["grad_h"], s["inv_rms"], s["h_mix"], s["h_pre"], s["h_post"], 20, 1e-6, 1e-6, 1e-6,
            grad_x_post=gx_post)
        return post, pre
    # finish forms the logits again from the caches, in fp32 (the fp32 families' MhcPre's z_res)
    z = s["alpha"][2] * (s["inv_rms"].reshape(LEAD + (1,)) * s["h_mix"][..., 2 * N:]) + s["bias"][2 * N:]
    g_z = _core.run_sinkhorn_backward(s["grad_h"], None, None, z.reshape(LEAD + (N, N)), 1e-6, 20)
    g = mhc.npu_mhc_pre_backward(s["x"], s["phi"], s["alpha"], s["grad_h_in"], s["grad_h_post"], g_z, s["inv_rms"],
                                 s["h_mix"], s["h_pre"], s["h_post"], gamma=s["gamma"], grad_x_post=gx_post)
    return post, (g[0], None, g[1], g[2], g[3], g[4])


def steps(s, single_pass, h, grad_x_next):
    """The site backward's two steps through the public functions."""
    post = (None, None, None)
    if grad_x_next is not None:
        post = mhc.mhc_site_backward_prepare(grad_x_next, s["x"], h, s["h_out"], s["h_post"])
    pre = mhc.mhc_site_backward_finish(
        s["x"], s["phi"], s["alpha"], s["bias"], s["pre_mix"], s["gamma"], h, grad_x_next, s["grad_h_in"],
        s["grad_h_pre"], s["grad_h_post"], s["grad_h"], s["inv_rms"], s["h_mix"], s["h_pre"], s["h_post"],
        single_pass=single_pass)
    return post, pre


POST_NAMES = ("grad_h_res", "grad_h_out", "grad_h_post")
PRE_NAMES = ("grad_x", "grad_pre_mix", "grad_phi", "grad_alpha", "grad_bias", "grad_gamma")


def assert_equal_runs(a, b, what):
    for name, x, y in zip(POST_NAMES + PRE_NAMES, a[0] + a[1], b[0] + b[1]):
        assert_same_bits(name, x, y, what)


@pytest.mark.parametrize("isa_family", FAMILIES, indirect=True)
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("single_pass", [False, True], ids=["v4", "v4.1"])
def test_the_two_steps_are_the_chain_bit_for_bit(isa_family, dtype, single_pass):
    s = make_site(dtype, single_pass)
    for what, h, grad_x_next in [("H", s["h"], s["grad_x_next"]), ("identity post", None, s["grad_x_next"]),
                                 ("no grad of x_next", s["h"], None),
                                 ("strided", strided_copy(s["h"], "reversed"), strided_copy(s["grad_x_next"], "step")),
                                 ("expanded", s["h"], s["grad_x_next"][:, :1].expand_as(s["grad_x_next"]))]:
        assert_equal_runs(steps(s, single_pass, h, grad_x_next), chain(s, single_pass, h, grad_x_next),
                          f"{isa_family} {what}: the two steps vs the chain")


@pytest.mark.parametrize("single_pass", [False, True], ids=["v4", "v4.1"])
def test_threads_give_the_same_bits(single_pass):
    s = make_site("bf16", single_pass, seed=3)
    runs = []
    try:
        for threads in (1, 2):
            mhc.set_num_threads(threads)
            runs.append(steps(s, single_pass, s["h"], s["grad_x_next"]))
    finally:
        mhc.set_num_threads(0)
    assert_equal_runs(runs[0], runs[1], "1 vs 2 threads")


@pytest.mark.parametrize("single_pass", [False, True], ids=["v4", "v4.1"])
def test_per_token_outputs_do_not_depend_on_the_batch(single_pass):
    """grad_x and prepare's outputs of tokens [3, 7) alone: the bits they have in the batch."""
    s = make_site("bf16", single_pass, seed=5)
    whole = steps(s, single_pass, s["h"], s["grad_x_next"])
    part = {k: (v.reshape((-1,) + v.shape[2:])[3:7] if torch.is_tensor(v) and v.shape[:2] == LEAD else v)
            for k, v in s.items()}
    alone = steps(part, single_pass, part["h"], part["grad_x_next"])
    per_token = lambda t: t.reshape((-1,) + t.shape[2:])[3:7]  # noqa: E731
    for name, a, b in zip(POST_NAMES, whole[0], alone[0]):
        assert_same_bits(name, per_token(a), b, "tokens 3..6 alone vs in the batch")
    assert_same_bits("grad_x", per_token(whole[1][0]), alone[1][0], "tokens 3..6 alone vs in the batch")
    if single_pass:
        assert_same_bits("grad_pre_mix", per_token(whole[1][1]), alone[1][1], "tokens 3..6 alone vs in the batch")


def test_errors_name_the_arguments():
    s = make_site("bf16", False)
    args = [s[k] for k in ("x", "phi", "alpha", "bias", "pre_mix", "gamma", "h", "grad_x_next", "grad_h_in",
                           "grad_h_pre", "grad_h_post", "grad_h", "inv_rms", "h_mix", "h_pre", "h_post")]
    bad = list(args)
    bad[7] = s["grad_x_next"].float()  # the post's grad_out: x's dtype only
    with pytest.raises(TypeError, match="^grad_x_next: expected"):
        mhc.mhc_site_backward_finish(*bad)
    bad = list(args)
    bad[4] = torch.full(LEAD + (N,), 0.25)
    with pytest.raises(ValueError, match="^pre_mix: expected absent with single_pass = 0"):
        mhc.mhc_site_backward_finish(*bad)
    bad = list(args)
    bad[6] = s["h"][..., :3]
    with pytest.raises(ValueError, match="^h_res: expected"):
        mhc.mhc_site_backward_finish(*bad)
    with pytest.raises(ValueError, match="^single_pass"):
        mhc.mhc_site_backward_finish(*args, single_pass=2)
    with pytest.raises(ValueError, match="^grad_x_next: expected"):
        mhc.mhc_site_backward_prepare(s["grad_x_next"][..., :7], s["x"], s["h"], s["h_out"], s["h_post"])
    with pytest.raises(TypeError, match="^h_out: expected"):
        mhc.mhc_site_backward_prepare(s["grad_x_next"], s["x"], s["h"], s["h_out"].float(), s["h_post"])
