"""MhcPre / MhcPreBackward against the float64 oracle over a pairwise covering array.

Every value of every factor appears, and every pair of values of any two factors
appears in at least one case, within a per-case cost budget that keeps the suite
at a few minutes on 2 cores (the float64 oracle, not the library, is the slow part).
"""
import functools
import itertools
import random

import pytest

import mhc
from conftest import (BWD_NAMES, FWD_NAMES, QUICK, assert_same_bits, compare_with_oracle, fusion_size,
                      make_inputs, run_ours, run_ours_strided)

FACTORS = {
    "N": [1, 2, 3, 4, 5, 6, 8],
    "D": [1, 7, 64, 100, 512, 4096],
    "T": [1, 3, 1000],
    "layout": ["BSND", "TND"],
    "dtype": ["bf16", "fp16", "fp32"],
    "gamma": [True, False],
    "grad_x_post": [True, False],
    "form": ["square", "factorial", "two_entry", "head"],  # F = N*N+2N, N!+2N, 2N, N
    "noncontig": ["none", "inputs", "grads"],  # which tensors come as strided views
}
NAMES = list(FACTORS)
SEED = 20250101
CANDIDATES = 30
# Rough float64-oracle work of one case (T*K*(F+40) + 10*F*K, twice that with strided
# views: their outputs are checked against the truth too); 1e9 is ~5 s here.
BUDGET = 1e9
COST_FACTORS = ("N", "D", "T", "form", "noncontig")


def case_cost(n, d, t, form, noncontig="none"):
    f = fusion_size(n, form)
    k = n * d
    return (t * k * (f + 40) + 10 * f * k) * (1 if noncontig == "none" else 2)


@functools.lru_cache(maxsize=None)
def _min_cost(fixed):
    """Cheapest cost of any completion of the partially fixed (N, D, T, form)."""
    pools = [[v] if v is not None else FACTORS[name] for name, v in zip(COST_FACTORS, fixed)]
    return min(case_cost(*combo) for combo in itertools.product(*pools))


def min_cost(partial):
    return _min_cost(tuple(partial.get(name) for name in COST_FACTORS))


def pair_key(fa, va, fb, vb):
    return (fa, va, fb, vb) if NAMES.index(fa) < NAMES.index(fb) else (fb, vb, fa, va)


def case_pairs(case):
    return {pair_key(a, case[a], b, case[b]) for a, b in itertools.combinations(NAMES, 2)}


def all_pairs():
    return {(a, va, b, vb) for a, b in itertools.combinations(NAMES, 2)
            for va in FACTORS[a] for vb in FACTORS[b]}


def feasible(partial):
    return min_cost(partial) <= BUDGET


def pairwise_cover():
    """Greedy (AETG-style) pairwise covering array under the cost budget, deterministic."""
    rng = random.Random(SEED)
    uncovered = {p for p in all_pairs() if feasible({p[0]: p[1], p[2]: p[3]})}
    cases = []
    while uncovered:
        pool = sorted(uncovered, key=repr)
        best, best_score = None, None
        for _ in range(CANDIDATES):
            fa, va, fb, vb = rng.choice(pool)  # each candidate covers one open pair at least
            case = {fa: va, fb: vb}
            order = [f for f in NAMES if f not in case]
            rng.shuffle(order)
            for f in order:
                options = []
                for v in FACTORS[f]:
                    trial = dict(case, **{f: v})
                    if not feasible(trial):
                        continue
                    gain = sum(pair_key(f, v, g, w) in uncovered for g, w in case.items())
                    options.append((-gain, rng.random(), v))  # random among equals, within budget
                case[f] = min(options)[2]
            score = (len(case_pairs(case) & uncovered), -min_cost(case))  # cheaper on ties
            if best_score is None or score > best_score:
                best, best_score = case, score
        cases.append({f: best[f] for f in NAMES})
        uncovered -= case_pairs(best)
    return cases


def quick_subset(cases):
    """About a fifth of the cover that still shows every value of every factor."""
    chosen = []
    for name in NAMES:
        for value in FACTORS[name]:
            if not any(c[name] == value for c in chosen):
                chosen.append(next(c for c in cases if c[name] == value))
    for c in cases[::5]:
        if len(chosen) >= max(len(cases) // 5, 1):
            break
        if c not in chosen:
            chosen.append(c)
    return chosen


def case_id(case):
    return (f"N{case['N']}-D{case['D']}-T{case['T']}-{case['layout']}-{case['dtype']}-"
            f"{'gamma' if case['gamma'] else 'nogamma'}-{'gxp' if case['grad_x_post'] else 'nogxp'}-"
            f"{case['form']}-nc_{case['noncontig']}")


FULL_COVER = pairwise_cover()
CASES = quick_subset(FULL_COVER) if QUICK else FULL_COVER


def test_cover_is_pairwise_within_budget():
    every_pair = all_pairs()
    infeasible = {p for p in every_pair if not feasible({p[0]: p[1], p[2]: p[3]})}
    assert not infeasible, f"pairs no case can hold within the budget: {sorted(infeasible)}"
    covered = set().union(*(case_pairs(c) for c in FULL_COVER))
    assert covered == every_pair, f"missing pairs: {sorted(every_pair - covered, key=repr)}"
    assert all(case_cost(*(c[name] for name in COST_FACTORS)) <= BUDGET for c in FULL_COVER)
    for name in NAMES:  # the run subset (quick or full) still shows every value
        assert {c[name] for c in CASES} == set(FACTORS[name]), name
    print(f"\npairwise cover: {len(FULL_COVER)} cases, {len(every_pair)} pairs; running {len(CASES)}")


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_case_against_float64_oracle(case):
    cid = case_id(case)
    inp = make_inputs(case, SEED + FULL_COVER.index(case))
    fwd, bwd = run_ours(inp)

    # out_flag=0 computes the same three outputs, bit for bit, and no caches.
    plain = mhc.npu_mhc_pre(inp["x"], inp["phi"], inp["alpha"], inp["bias"], gamma=inp["gamma"])
    assert plain[3:] == (None, None, None)
    for name, a, b in zip(FWD_NAMES[:3], plain[:3], fwd[:3]):
        assert_same_bits(name, a, b, "out_flag=0 vs out_flag=1")

    # Strided views: as accurate, and (below) the very same bits as contiguous tensors.
    fwd2, bwd2 = run_ours_strided(inp, case["noncontig"], fwd, bwd)
    also = [] if fwd2 is fwd else [(dict(zip(FWD_NAMES + BWD_NAMES, fwd2 + bwd2)), cid + "(strided)")]
    errs = compare_with_oracle(inp, dict(zip(FWD_NAMES + BWD_NAMES, fwd + bwd)), cid, also=also)
    print(f"\n{cid} err/bound (x terms bound): " + ", ".join(
        f"{k}={v[0]:.2g}({v[1]:.2g})" for k, v in errs.items()))
    for name, a, b in zip(FWD_NAMES + BWD_NAMES, fwd + bwd, fwd2 + bwd2):
        assert_same_bits(name, a, b, f"contiguous vs strided ({case['noncontig']})")
