"""The float64 truth for MhcPre, written from SPEC §2 (and §7's HF32 mode), for
MhcSinkhorn, MhcPost and the fused MhcPreSinkhorn (SPEC §10-§12), for DeepSeek-V4.1's
single pass, MhcPreSinglePass and MhcCollapse (SPEC §14), and for the fused boundary
MhcPostPre (SPEC §15), independent of the library.

Every form of alpha is covered: three entries (F = 2N + R), two (F = 2N, no h_res)
and one, the head (F = N: h_pre = sigmoid(alpha[0]*r*m + bias) + hc_eps and
h_in = sum_n h_pre[n] v[n], no h_post, no h_res).

The fused layer boundary MhcPostPre (SPEC §15) is post64 followed by either pre
(post_pre64).

Gradients are torch autograd through forward64 (SPEC §3 is checked against it in
the tests, not used to build it). backward_terms64 evaluates the §3 intermediate
quantities in float64, for the error bounds of h_in and grad_x.
"""
import torch

F64 = torch.float64


def hf32(a):
    """SPEC §7: fp32 a with its significand rounded to 10 stored bits, half away from
    zero, on the bit pattern (b the bits as int32: ((b >> 12) + 1) >> 1 << 13)."""
    b = a.to(torch.float32).contiguous().view(torch.int32)
    return (((b >> 12) + 1) >> 1 << 13).view(torch.float32)


def forward64(x, phi, alpha, bias, gamma=None, norm_eps=1e-6, hc_eps=1e-6, *, hf32_matmul=False):
    """SPEC §2 in float64. x: [..., N, D]; returns (h_in, h_post, h_res, inv_rms, h_mix, h_pre).

    h_res is [..., N, N] when R = N*N, else [..., R]; None for a two-entry alpha, and
    h_post too for a one-entry alpha (the head, F = N: SPEC §6).
    hf32_matmul: SPEC §7's opImplMode 1, h_mix = hf32(phi) · hf32(u) with u = x·gamma
    computed in fp32; the product itself in float64.
    """
    lead = x.shape[:-2]
    n, d = x.shape[-2], x.shape[-1]
    k = n * d
    f = phi.shape[0]
    v = x.to(F64).reshape(-1, k)
    r = 1.0 / torch.sqrt((v * v).sum(dim=1) / k + norm_eps)  # from raw x, never x*gamma
    if hf32_matmul:
        u32 = x.to(torch.float32).reshape(-1, k)
        u32 = u32 * gamma.to(torch.float32).reshape(1, k) if gamma is not None else u32
        m = hf32(u32).to(F64) @ hf32(phi).to(F64).t()
    else:
        u = v * gamma.to(F64).reshape(1, k) if gamma is not None else v
        m = u @ phi.to(F64).t()  # h_mix: before scaling by r
    w = r[:, None] * m
    alpha = alpha.to(F64)
    bias = bias.to(F64)
    h_pre = torch.sigmoid(alpha[0] * w[:, :n] + bias[:n]) + hc_eps
    h_post = None
    if alpha.numel() >= 2:  # the head has no post branch (SPEC §6)
        h_post = 2.0 * torch.sigmoid(alpha[1] * w[:, n:2 * n] + bias[n:2 * n]).reshape(lead + (n,))
    if alpha.numel() <= 2:  # no residual branch (SPEC §6)
        h_res = None
    else:
        rr = f - 2 * n
        h_res = alpha[2] * w[:, 2 * n:] + bias[2 * n:]
        h_res = h_res.reshape(lead + ((n, n) if rr == n * n else (rr,)))
    h_in = (h_pre[:, :, None] * v.reshape(-1, n, d)).sum(dim=1)
    return (h_in.reshape(lead + (d,)), h_post, h_res, r.reshape(lead),
            m.reshape(lead + (f,)), h_pre.reshape(lead + (n,)))


def grads64(x, phi, alpha, bias, gamma, norm_eps, hc_eps, grad_h_in, grad_h_post, grad_h_res,
            grad_x_post=None):
    """Autograd truth: grads of sum(h_in*g_h_in)+sum(h_post*g_h_post)+sum(h_res*g_h_res)
    w.r.t. x, phi, alpha, bias, gamma (None without gamma), plus grad_x_post on grad_x.
    The terms of the outputs an alpha's form lacks (h_post, h_res) are left out."""
    leaves = [t.detach().to(F64).requires_grad_(True) for t in (x, phi, alpha, bias)]
    g = gamma.detach().to(F64).requires_grad_(True) if gamma is not None else None
    h_in, h_post, h_res, _, _, _ = forward64(*leaves, g, norm_eps, hc_eps)
    loss = (h_in * grad_h_in.to(F64)).sum()
    if h_post is not None:
        loss = loss + (h_post * grad_h_post.to(F64)).sum()
    if h_res is not None:
        loss = loss + (h_res * grad_h_res.to(F64).reshape(h_res.shape)).sum()
    wrt = leaves + ([g] if g is not None else [])
    out = list(torch.autograd.grad(loss, wrt))
    if grad_x_post is not None:
        out[0] = out[0] + grad_x_post.to(F64)
    if g is None:
        out.append(None)
    return tuple(out)


def backward_terms64(x, phi, alpha, bias, gamma, norm_eps, hc_eps, grad_h_in, grad_h_post,
                     grad_h_res, grad_x_post=None):
    """SPEC §3 in float64: the four terms of grad_x, each shaped like x.

    Returns (h_pre[n]*grad_h_in[d], gamma*gu, c*v, grad_x_post or zeros)."""
    n, d = x.shape[-2], x.shape[-1]
    k = n * d
    nt = x.numel() // k
    with torch.no_grad():
        _, h_post, _, r, m, h_pre = forward64(x, phi, alpha, bias, gamma, norm_eps, hc_eps)
        v = x.to(F64).reshape(nt, n, d)
        gh_in = grad_h_in.to(F64).reshape(nt, d)
        h_pre = h_pre.reshape(nt, n)
        r = r.reshape(nt)
        m = m.reshape(nt, -1)
        a = alpha.to(F64)
        s = h_pre - hc_eps
        gz_pre = (v * gh_in[:, None, :]).sum(dim=2) * s * (1 - s)
        gw = [a[0] * gz_pre]
        if a.numel() >= 2:  # the post branch (not the head's)
            h_post = h_post.reshape(nt, n)
            gw.append(a[1] * grad_h_post.to(F64).reshape(nt, n) * h_post * (1 - h_post / 2))
        if a.numel() == 3:
            gw.append(a[2] * grad_h_res.to(F64).reshape(nt, -1))
        gw = torch.cat(gw, dim=1)
        big_g = r[:, None] * gw
        g_r = (gw * m).sum(dim=1)
        gu = big_g @ phi.to(F64)
        c = -(r ** 3) * g_r / k
        gamma_flat = gamma.to(F64).reshape(1, k) if gamma is not None else torch.ones(1, k, dtype=F64)
        t_in = (h_pre[:, :, None] * gh_in[:, None, :]).reshape(x.shape)
        t_gu = (gamma_flat * gu).reshape(x.shape)
        t_cv = (c[:, None] * v.reshape(nt, k)).reshape(x.shape)
        t_post = grad_x_post.to(F64) if grad_x_post is not None else torch.zeros(x.shape, dtype=F64)
    return t_in, t_gu, t_cv, t_post


def magnitudes64(x, phi, alpha, bias, gamma, norm_eps, hc_eps, grad_h_in, grad_h_post,
                 grad_h_res, grad_x_post=None, *, carried=None, grad_h_pre=None):
    """First-order condition magnitudes of every output, for error bounds.

    If every fp32 quantity the operators compute (each product, each sum, each cache)
    carries a relative error e of the sum of the absolute values that enter it, an
    output's error is at most about e * magnitude. Two effects make these larger
    than plain sums of |terms|: cancellation inside phi·u, phi^T·G and Σ gw·m, and
    the backward recovering σ(1−σ) from the cached fp32 h_pre / h_post, where an
    error Δs of s costs |1−2s|·Δs while s(1−s) may be tiny.
    carried: (pre_mix or None, grad_h_pre or None), the single pass (SPEC §14): h_in and
    grad_x's collapse term take pre_mix (None: stream 0), g_pre is grad_h_pre (None: 0),
    and "grad_pre_mix" is added.
    grad_h_pre (not carried: V4's site in MhcPostPre, SPEC §15, where h_pre is an output as
    well as the collapse's weights): h_pre's own incoming grad, added to g_pre.
    Returns a dict of float64 tensors shaped like the outputs.
    """
    if carried is not None and grad_h_pre is not None:
        raise ValueError("grad_h_pre: the carried mode takes it in carried")
    lead = x.shape[:-2]
    n, d = x.shape[-2], x.shape[-1]
    k = n * d
    f = phi.shape[0]
    with torch.no_grad():
        _, _, _, r, m, h_pre = forward64(x, phi, alpha, bias, gamma, norm_eps, hc_eps)
        nt = x.numel() // k
        v = x.to(F64).reshape(nt, k)
        gam = gamma.to(F64).reshape(1, k) if gamma is not None else torch.ones(1, k, dtype=F64)
        u = v * gam
        phi_abs = phi.to(F64).abs()
        r = r.reshape(nt, 1)
        m = m.reshape(nt, f)
        a = alpha.to(F64)
        branches = a.numel()  # 1 the head (pre only), 2 pre and post, 3 with res
        a_rows = torch.cat([a[0].abs().expand(n)] + ([a[1].abs().expand(n)] if branches >= 2 else [])
                           + ([a[2].abs().expand(f - 2 * n)] if branches == 3 else []))
        b = bias.to(F64)
        # forward
        m_mag = u.abs() @ phi_abs.t()
        z_mag = a_rows * r * m_mag + b.abs()
        s = h_pre.reshape(nt, n) - hc_eps
        h_pre_mag = s + s * (1 - s) * z_mag[:, :n]
        if branches >= 2:
            sp = torch.sigmoid(a[1] * r[:, 0:1] * m[:, n:2 * n] + b[n:2 * n])
            h_post_mag = 2 * sp + 2 * sp * (1 - sp) * z_mag[:, n:2 * n]
        vv = v.reshape(nt, n, d).abs()
        mix_mag = h_pre_mag
        if carried is not None:  # the collapse's weights are an input, exact
            pre_mix, grad_h_pre = carried
            mix_mag = (pre_mix.to(F64).reshape(nt, n).abs() if pre_mix is not None
                       else torch.eye(1, n, dtype=F64).expand(nt, n))
        h_in_mag = (mix_mag[:, :, None] * vv).sum(dim=1)
        # backward
        gh = grad_h_in.to(F64).reshape(nt, d)
        collapse_mag = (vv * gh.abs()[:, None, :]).sum(dim=2)
        if carried is None:
            g_pre = (v.reshape(nt, n, d) * gh[:, None, :]).sum(dim=2)
            g_pre_mag = collapse_mag
            if grad_h_pre is not None:
                g_pre = g_pre + grad_h_pre.to(F64).reshape(nt, n)
                g_pre_mag = g_pre_mag + grad_h_pre.to(F64).reshape(nt, n).abs()
        else:
            g_pre = (grad_h_pre.to(F64).reshape(nt, n) if grad_h_pre is not None
                     else torch.zeros(nt, n, dtype=F64))
            g_pre_mag = g_pre.abs()
        gz_pre = g_pre * s * (1 - s)
        gz_pre_mag = g_pre_mag * s * (1 - s) + g_pre.abs() * h_pre_mag
        gz = [gz_pre]
        gz_mag = [gz_pre_mag]
        if branches >= 2:
            ghp = grad_h_post.to(F64).reshape(nt, n)
            gz.append(ghp * 2 * sp * (1 - sp))
            gz_mag.append(ghp.abs() * (2 * sp * (1 - sp) + (1 - 2 * sp).abs() * h_post_mag))
        if branches == 3:
            ghr = grad_h_res.to(F64).reshape(nt, f - 2 * n)
            gz.append(ghr)
            gz_mag.append(ghr.abs())
        gz = torch.cat(gz, dim=1)
        gz_mag = torch.cat(gz_mag, dim=1)
        gw_abs = a_rows * gz.abs()
        gw_mag = a_rows * gz_mag
        big_g_mag = r * gw_mag
        g_r_mag = (gw_mag * m.abs() + gw_abs * m_mag).sum(dim=1, keepdim=True)
        gu_mag = big_g_mag @ phi_abs
        c_mag = r ** 3 * g_r_mag / k
        grad_x_mag = ((mix_mag[:, :, None] * gh.abs()[:, None, :]).reshape(nt, k)
                      + gam.abs() * gu_mag + c_mag * v.abs())
        if grad_x_post is not None:
            grad_x_mag = grad_x_mag + grad_x_post.to(F64).reshape(nt, k).abs()
        w = r * m
        w_mag = r * m_mag
        ga_rows = gz_mag * w.abs() + gz.abs() * w_mag
        blocks = [ga_rows[:, :n].sum()] + ([ga_rows[:, n:2 * n].sum()] if branches >= 2 else [])
        if branches == 3:
            blocks.append(ga_rows[:, 2 * n:].sum())
        rr = f - 2 * n
        res_shape = lead + ((n, n) if rr == n * n else (rr,))
        return {
            "h_in": h_in_mag.reshape(lead + (d,)),
            "h_post": h_post_mag.reshape(lead + (n,)) if branches >= 2 else None,
            "h_res": z_mag[:, 2 * n:].reshape(res_shape) if branches == 3 else None,
            "inv_rms": r.reshape(lead),
            "h_mix": m_mag.reshape(lead + (f,)),
            "h_pre": h_pre_mag.reshape(lead + (n,)),
            "grad_x": grad_x_mag.reshape(x.shape),
            "grad_phi": big_g_mag.t() @ u.abs(),
            "grad_alpha": torch.stack(blocks),
            "grad_bias": gz_mag.sum(dim=0),
            "grad_gamma": ((v.abs() * gu_mag).sum(dim=0).reshape(n, d) if gamma is not None else None),
            "grad_pre_mix": collapse_mag.reshape(lead + (n,)) if carried is not None else None,
        }


# The rest of the layer (SPEC §10-§12), written from SPEC's formulas.

def sinkhorn64(z, eps=1e-6, num_iters=20, *, with_caches=False):
    """SPEC §10 in float64, per token on the last two dims of z ([..., N, N]).

    step 0: P = softmax_rows(z) + eps; step 1: columns; then num_iters-1 times rows and
    columns, every divisor (the row or column sum) plus eps; H = P after step 2I-1.
    Differentiable by torch autograd (the max subtracted in the softmax is detached: the
    softmax does not depend on it). with_caches: also (norm, sums), SPEC's caches without
    padding, [2I, ..., N, N] and [2I, ..., N]: slot 0 the softmax p (without eps) and its
    row sums Σ_j exp(z_ij - max_j z_ij), slot k the matrix after step k and its divisors.
    """
    z = z.to(F64)
    top = z.detach().amax(dim=-1, keepdim=True)
    e = torch.exp(z - top)
    row_sums = e.sum(dim=-1)
    p = e / row_sums[..., :, None]
    norms, sums = [p], [row_sums]
    P = p + eps
    for step in range(1, 2 * num_iters):
        if step % 2 == 1:  # columns: c_j = Σ_i P_ij + eps
            div = P.sum(dim=-2) + eps
            P = P / div[..., None, :]
        else:  # rows: r_i = Σ_j P_ij + eps
            div = P.sum(dim=-1) + eps
            P = P / div[..., :, None]
        norms.append(P)
        sums.append(div)
    if with_caches:
        return P, torch.stack(norms), torch.stack(sums)
    return P


def sinkhorn_grad64(z, grad_h, eps=1e-6, num_iters=20):
    """Autograd truth of MhcSinkhornBackward: d(Σ H·grad_h)/dz in float64."""
    leaf = z.detach().to(F64).requires_grad_(True)
    h = sinkhorn64(leaf, eps, num_iters)
    (grad,) = torch.autograd.grad((h * grad_h.to(F64)).sum(), leaf)
    return grad


def post64(x, h_res, h_out, h_post):
    """SPEC §11 in float64: out[j, d] = h_post[j]·h_out[d] + Σ_i H[i, j]·x[i, d] (H transposed),
    or x[j, d] + h_post[j]·h_out[d] without h_res. x [..., N, D], h_res [..., N, N] or None,
    h_out [..., D], h_post [..., N]."""
    v = x.to(F64)
    update = h_post.to(F64)[..., :, None] * h_out.to(F64)[..., None, :]
    if h_res is None:
        return v + update
    return update + torch.einsum("...ij,...id->...jd", h_res.to(F64), v)


def post_grads64(x, h_res, h_out, h_post, grad_out):
    """Autograd truth of MhcPostBackward: the grads of Σ out·grad_out with respect to x,
    h_res (also without h_res: the grad of a identity h_res), h_out and h_post."""
    n = x.shape[-2]
    leaves = [t.detach().to(F64).requires_grad_(True) for t in (x, h_out, h_post)]
    if h_res is None:  # x + h_post·h_out is the identity matrix's update: its grad is SPEC's
        eye = torch.eye(n, dtype=F64).expand(x.shape[:-2] + (n, n)).clone().requires_grad_(True)
        out = post64(leaves[0], eye, leaves[1], leaves[2])
        h = eye
    else:
        h = h_res.detach().to(F64).requires_grad_(True)
        out = post64(leaves[0], h, leaves[1], leaves[2])
    gx, gh, gout, gpost = torch.autograd.grad((out * grad_out.to(F64)).sum(), [leaves[0], h] + leaves[1:])
    return gx, gh, gout, gpost


def post_magnitudes64(x, h_res, h_out, h_post, grad_out):
    """Condition magnitudes of MhcPost's outputs: the sum of |terms| each output's fp32 sum
    adds (out, grad_x, grad_h_res, grad_h_out, grad_h_post), for error bounds."""
    v = x.to(F64).abs()
    g = grad_out.to(F64).abs()
    ho = h_out.to(F64).abs()
    hp = h_post.to(F64).abs()
    n = x.shape[-2]
    h = (torch.eye(n, dtype=F64) if h_res is None else h_res.to(F64)).abs().expand(x.shape[:-2] + (n, n))
    return {
        "out": hp[..., :, None] * ho[..., None, :] + torch.einsum("...ij,...id->...jd", h, v),
        "grad_x": torch.einsum("...ij,...jd->...id", h, g),
        "grad_h_res": torch.einsum("...id,...jd->...ij", v, g),
        "grad_h_out": (hp[..., :, None] * g).sum(dim=-2),
        "grad_h_post": (ho[..., None, :] * g).sum(dim=-1),
    }


def pre_sinkhorn64(x, phi, alpha, bias, num_iters=20, hc_eps=1e-6, norm_eps=1e-6):
    """SPEC §12 in float64: MhcPre (no gamma) then MhcSinkhorn on z_res with eps = hc_eps,
    in CANN's order and shapes: (h_in, h_post, h_res [.., N*N], h_pre, hc_before_norm
    (= h_mix), inv_rms [.., 1], sum_out [2I, .., N], norm_out [2I, .., N, N])."""
    n = x.shape[-2]
    h_in, h_post, z_res, inv_rms, h_mix, h_pre = forward64(x, phi, alpha, bias, None, norm_eps, hc_eps)
    lead = x.shape[:-2]
    h, norms, sums = sinkhorn64(z_res.reshape(lead + (n, n)), hc_eps, num_iters, with_caches=True)
    return (h_in, h_post, h.reshape(h.shape[:-2] + (n * n,)), h_pre, h_mix, inv_rms[..., None], sums, norms)


def pre_sinkhorn_grads64(x, phi, alpha, bias, num_iters, hc_eps, norm_eps, grad_h_in, grad_h_post,
                         grad_h_res):
    """Autograd truth of MhcPreSinkhornBackward: the grads of Σ h_in·g_in + Σ h_post·g_post +
    Σ H·g_res with respect to x, phi, alpha, bias."""
    leaves = [t.detach().to(F64).requires_grad_(True) for t in (x, phi, alpha, bias)]
    h_in, h_post, h_res = pre_sinkhorn64(*leaves, num_iters, hc_eps, norm_eps)[:3]
    loss = ((h_in * grad_h_in.to(F64)).sum() + (h_post * grad_h_post.to(F64)).sum()
            + (h_res * grad_h_res.to(F64).reshape(h_res.shape)).sum())
    return torch.autograd.grad(loss, leaves)


# DeepSeek-V4.1's single pass (SPEC §14): this site's weights from its own streams, the
# streams collapsed with the carried pre-mix.

def collapse64(x, pre_mix):
    """SPEC §14's MhcCollapse in float64: h[d] = Σ_n p[n]·x[n, d]; pre_mix None (the first
    site) selects stream 0. x [..., N, D], pre_mix [..., N]."""
    if pre_mix is None:
        return x.to(F64)[..., 0, :]
    return (pre_mix.to(F64)[..., :, None] * x.to(F64)).sum(dim=-2)


def single_pass64(x, phi, alpha, bias, pre_mix=None, gamma=None, num_iters=20, hc_eps=1e-6, norm_eps=1e-6,
                  sinkhorn_eps=None):
    """SPEC §14 in float64: MhcPre's maps (forward64), H = Sinkhorn(z_res) (sinkhorn64, eps =
    sinkhorn_eps, None: hc_eps) and h_in = collapse64(x, pre_mix), not with the own h_pre.
    Returns (h_in, h_pre, h_post, H [.., N, N], inv_rms, h_mix); differentiable by autograd."""
    eps = hc_eps if sinkhorn_eps is None else sinkhorn_eps
    n = x.shape[-2]
    _, h_post, z_res, inv_rms, h_mix, h_pre = forward64(x, phi, alpha, bias, gamma, norm_eps, hc_eps)
    h = sinkhorn64(z_res.reshape(x.shape[:-2] + (n, n)), eps, num_iters)
    return collapse64(x, pre_mix), h_pre, h_post, h, inv_rms, h_mix


def single_pass_grads64(x, phi, alpha, bias, pre_mix, gamma, num_iters, hc_eps, norm_eps, sinkhorn_eps,
                        grad_h_in, grad_h_pre, grad_h_post, grad_h_res):
    """Autograd truth of the single pass's backward: the grads of Σ h_in·g_in + Σ h_pre·g_pre
    + Σ h_post·g_post + Σ H·g_H (g_pre None: 0) with respect to (x, phi, alpha, bias,
    pre_mix, gamma), None for an absent pre_mix or gamma."""
    leaves = {name: None if t is None else t.detach().to(F64).requires_grad_(True)
              for name, t in (("x", x), ("phi", phi), ("alpha", alpha), ("bias", bias),
                              ("pre_mix", pre_mix), ("gamma", gamma))}
    h_in, h_pre, h_post, h, _, _ = single_pass64(leaves["x"], leaves["phi"], leaves["alpha"], leaves["bias"],
                                                 leaves["pre_mix"], leaves["gamma"], num_iters, hc_eps,
                                                 norm_eps, sinkhorn_eps)
    loss = ((h_in * grad_h_in.to(F64)).sum() + (h_post * grad_h_post.to(F64)).sum()
            + (h * grad_h_res.to(F64).reshape(h.shape)).sum())
    if grad_h_pre is not None:
        loss = loss + (h_pre * grad_h_pre.to(F64)).sum()
    present = [t for t in leaves.values() if t is not None]
    found = iter(torch.autograd.grad(loss, present))
    return tuple(None if t is None else next(found) for t in leaves.values())


def collapse_grads64(x, pre_mix, grad_h):
    """Autograd truth of MhcCollapseBackward: the grads of Σ h·grad_h w.r.t. x and pre_mix."""
    leaves = [t.detach().to(F64).requires_grad_(True) for t in (x, pre_mix)]
    return torch.autograd.grad((collapse64(*leaves) * grad_h.to(F64)).sum(), leaves)


# The layer boundary fused (SPEC §15): MhcPost of site s, then site s+1's pre (V4 or V4.1).

def post_pre64(x, h_res, h_out, h_post, phi, alpha, bias, pre_mix=None, gamma=None, *, single_pass,
               num_iters=20, hc_eps=1e-6, norm_eps=1e-6, sinkhorn_eps=None, x_next=None):
    """SPEC §15 in float64: x_next = post64(x, h_res, h_out, h_post), then on it V4's pre
    (single_pass False: forward64 with gamma, H = sinkhorn64(z_res) with eps = sinkhorn_eps
    (None: hc_eps), h_in collapsed with its own h_pre; pre_mix must be None) or V4.1's
    (single_pass True: single_pass64 with pre_mix).

    x_next: the streams the pre reads. None: post64's own, unrounded. A tensor (the library's
    x_next, rounded to x's dtype as SPEC says): the pre reads its values, with post64's
    derivative (straight through the rounding), so that autograd gives the chain's gradients
    at the point the library evaluates them.
    Returns (x_next (post64's, unrounded), h_in, h_pre, h_post_next, H [.., N, N], inv_rms,
    h_mix); differentiable by autograd."""
    if not single_pass and pre_mix is not None:
        raise ValueError("pre_mix: V4 (single_pass False) collapses with its own h_pre")
    out = post64(x, h_res, h_out, h_post)
    read = out if x_next is None else out + (x_next.to(F64) - out).detach()
    if single_pass:
        h_in, h_pre, h_post_next, h, inv_rms, h_mix = single_pass64(read, phi, alpha, bias, pre_mix, gamma,
                                                                    num_iters, hc_eps, norm_eps, sinkhorn_eps)
    else:
        eps = hc_eps if sinkhorn_eps is None else sinkhorn_eps
        n = x.shape[-2]
        h_in, h_post_next, z_res, inv_rms, h_mix, h_pre = forward64(read, phi, alpha, bias, gamma, norm_eps, hc_eps)
        h = sinkhorn64(z_res.reshape(x.shape[:-2] + (n, n)), eps, num_iters)
    return out, h_in, h_pre, h_post_next, h, inv_rms, h_mix


POST_PRE_LEAVES = ("x", "h_res", "h_out", "h_post", "phi", "alpha", "bias", "pre_mix", "gamma")


def post_pre_grads64(inputs, grads, *, single_pass, num_iters=20, hc_eps=1e-6, norm_eps=1e-6, sinkhorn_eps=None,
                     x_next=None):
    """Autograd truth of MhcPostPre's backward: the grads of Σ x_next·g_x_next + Σ h_in·g_in
    + Σ h_pre·g_pre + Σ h_post_next·g_post + Σ H·g_H (a grad None: that term left out) with
    respect to the inputs (a dict by POST_PRE_LEAVES' names; None for an absent one), and
    under "x_next" the whole grad x_next receives (its own plus the pre's), the one the
    library rounds to x's dtype before MhcPostBackward. grads: a dict with grad_x_next,
    grad_h_in, grad_h_pre, grad_h_post_next, grad_h_res_next. x_next as post_pre64's.
    Returns a dict: "grad_<leaf>" (None for an absent leaf) and "x_next"."""
    leaves = {name: None if inputs.get(name) is None else inputs[name].detach().to(F64).requires_grad_(True)
              for name in POST_PRE_LEAVES}
    out, h_in, h_pre, h_post_next, h, _, _ = post_pre64(
        *(leaves[name] for name in POST_PRE_LEAVES), single_pass=single_pass, num_iters=num_iters, hc_eps=hc_eps,
        norm_eps=norm_eps, sinkhorn_eps=sinkhorn_eps, x_next=x_next)
    out.retain_grad()
    loss = out.new_zeros(())
    for t, name in ((out, "grad_x_next"), (h_in, "grad_h_in"), (h_pre, "grad_h_pre"),
                    (h_post_next, "grad_h_post_next"), (h, "grad_h_res_next")):
        if grads.get(name) is not None:
            loss = loss + (t * grads[name].to(F64).reshape(t.shape)).sum()
    loss.backward()
    result = {"grad_" + name: None if t is None else t.grad for name, t in leaves.items()}
    result["x_next"] = out.grad if out.grad is not None else torch.zeros_like(out)
    return result


# The inference engines' faces (SPEC §16), written from DeepSeek-V4's public inference math (its
# model's hc_pre, hc_post and hc_head, which SGLang's and vLLM's CPU kernels implement), in float64.

def hc_pre64(x, hc_fn, hc_scale, hc_base, num_iters=20, rms_eps=1e-6, hc_pre_eps=1e-6, sinkhorn_eps=None,
             post_mult=2.0, *, delayed=False, pre_mix=None):
    """DeepSeek-V4's hc_pre (SPEC §16 = §2, §10, §12) in float64, x [.., N, D]:

        v      = x flattened to N*D;   mixes = (hc_fn · v) · rsqrt(mean(v²) + rms_eps)
        pre    = σ(hc_scale[0]·mixes[:N] + hc_base[:N]) + hc_pre_eps
        post   = post_mult · σ(hc_scale[1]·mixes[N:2N] + hc_base[N:2N])          (V4: post_mult 2)
        comb   = Sinkhorn(hc_scale[2]·mixes[2N:] + hc_base[2N:] as [N, N])      (sinkhorn64, eps =
                 sinkhorn_eps, None: hc_pre_eps; num_iters)
        y[d]   = Σ_n pre[n]·x[n, d]

    delayed (V4.1's mhc_pre_delayed, SPEC §14): y is collapsed with pre_mix [.., N] instead (None:
    stream 0). Returns (y [.., D], post [.., N], comb [.., N, N], pre [.., N])."""
    n, d = x.shape[-2], x.shape[-1]
    lead = x.shape[:-2]
    v = x.to(F64).reshape(lead + (n * d,))
    rsqrt = torch.rsqrt((v * v).mean(dim=-1, keepdim=True) + rms_eps)
    mixes = (v @ hc_fn.to(F64).t()) * rsqrt
    scale, base = hc_scale.to(F64).reshape(3), hc_base.to(F64)
    pre = torch.sigmoid(scale[0] * mixes[..., :n] + base[:n]) + hc_pre_eps
    post = post_mult * torch.sigmoid(scale[1] * mixes[..., n:2 * n] + base[n:2 * n])
    z = (scale[2] * mixes[..., 2 * n:] + base[2 * n:]).reshape(lead + (n, n))
    comb = sinkhorn64(z, hc_pre_eps if sinkhorn_eps is None else sinkhorn_eps, num_iters)
    if delayed:
        y = collapse64(x, pre_mix)
    else:
        y = (pre[..., :, None] * x.to(F64)).sum(dim=-2)
    return y, post, comb, pre


def hc_post64(x, residual, post, comb):
    """DeepSeek-V4's hc_post (SPEC §16 = §11) in float64: out[.., j, d] = post[j]·x[d] +
    Σ_i comb[i, j]·residual[i, d] (comb transposed). x [.., D], residual [.., N, D], post
    [.., N] or [.., N, 1], comb [.., N, N]."""
    n = residual.shape[-2]
    p = post.to(F64).reshape(residual.shape[:-2] + (n,))
    return p[..., :, None] * x.to(F64)[..., None, :] + (comb.to(F64)[..., :, :, None]
                                                        * residual.to(F64)[..., :, None, :]).sum(dim=-3)


def hc_head64(x, hc_fn, hc_scale, hc_base, hc_eps=1e-6, norm_eps=1e-6):
    """DeepSeek-V4's hc_head (SPEC §16 = §6's one-entry head) in float64, eps in the sgl op's
    order: mixes = (hc_fn · v)·rsqrt(mean(v²) + norm_eps), pre = σ(hc_scale·mixes + hc_base) +
    hc_eps, y[d] = Σ_n pre[n]·x[n, d]. hc_fn [N, N*D], hc_scale 0-d or [1], hc_base [N]."""
    n, d = x.shape[-2], x.shape[-1]
    v = x.to(F64).reshape(x.shape[:-2] + (n * d,))
    rsqrt = torch.rsqrt((v * v).mean(dim=-1, keepdim=True) + norm_eps)
    mixes = (v @ hc_fn.to(F64).t()) * rsqrt
    pre = torch.sigmoid(hc_scale.to(F64).reshape(()) * mixes + hc_base.to(F64)) + hc_eps
    return (pre[..., :, None] * x.to(F64)).sum(dim=-2)


def rms_norm64(h, weight, eps=1e-6):
    """SPEC §16's RMSNorm in float64: h·rsqrt(mean(h²) + eps)·weight over the last dim (h as
    given: the engines' fused form normalises the h_in ROUNDED to x's dtype)."""
    v = h.to(F64)
    return v * torch.rsqrt((v * v).mean(dim=-1, keepdim=True) + eps) * weight.to(F64)
