"""SPEC §5: bitwise identical results whatever the thread count, and per-token outputs
that do not depend on the other tokens of the batch."""
import pytest

import mhc
from conftest import BWD_NAMES, FWD_NAMES, assert_same_bits, make_inputs, run_ours

THREAD_CASES = [
    # many tokens: threads split the token loop and the token reductions
    {"N": 4, "D": 64, "T": 1000, "layout": "TND", "dtype": "bf16", "gamma": True,
     "grad_x_post": True, "form": "square"},
    # one token, long rows: threads (if any) split inside a token
    {"N": 4, "D": 4096, "T": 1, "layout": "BSND", "dtype": "fp32", "gamma": True,
     "grad_x_post": False, "form": "factorial"},
    {"N": 6, "D": 100, "T": 37, "layout": "BSND", "dtype": "fp16", "gamma": False,
     "grad_x_post": True, "form": "two_entry"},
    # the head (one-entry alpha): many tokens, then one long token
    {"N": 4, "D": 64, "T": 1000, "layout": "BSND", "dtype": "bf16", "gamma": True,
     "grad_x_post": True, "form": "head"},
    {"N": 8, "D": 4096, "T": 1, "layout": "TND", "dtype": "fp16", "gamma": False,
     "grad_x_post": False, "form": "head"},
]


@pytest.mark.parametrize("case", THREAD_CASES, ids=lambda c: f"N{c['N']}-D{c['D']}-T{c['T']}-{c['form']}")
def test_bitwise_identical_across_thread_counts(case):
    inp = make_inputs(case, seed=606)
    results = {}
    for threads in (1, 2, 7, 0):
        mhc.set_num_threads(threads)
        assert mhc.get_num_threads() == threads
        fwd, bwd = run_ours(inp)
        results[threads] = fwd + bwd
    for threads in (2, 7, 0):
        for name, a, b in zip(FWD_NAMES + BWD_NAMES, results[1], results[threads]):
            assert_same_bits(name, a, b, f"1 thread vs {threads} threads")


def test_repeated_calls_are_bitwise_identical():
    inp = make_inputs(THREAD_CASES[0], seed=607)
    first = sum(run_ours(inp), ())
    second = sum(run_ours(inp), ())
    for name, a, b in zip(FWD_NAMES + BWD_NAMES, first, second):
        assert_same_bits(name, a, b, "first vs second call")


def slice_token(inp, layout, i):
    """Token i of every per-token tensor, as a batch of one in the same layout."""
    out = dict(inp)
    for name in ("x", "grad_h_in", "grad_h_post", "grad_h_res", "grad_x_post"):
        t = inp[name]
        if t is not None:
            out[name] = t[i:i + 1] if layout == "TND" else t[:, i:i + 1]
    return out


@pytest.mark.parametrize("form", ["square", "head"])
@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_token_alone_equals_token_in_batch(layout, dtype, form):
    case = {"N": 4, "D": 100, "T": 37, "layout": "TND", "dtype": dtype, "gamma": True,
            "grad_x_post": True, "form": form}
    inp = make_inputs(case, seed=608)
    if layout == "BSND":  # [1, 37, ...]: the tokens along S
        for name in ("x", "grad_h_in", "grad_h_post", "grad_h_res", "grad_x_post"):
            if inp[name] is not None:  # the head has no grad_h_post, grad_h_res
                inp[name] = inp[name].unsqueeze(0)
    mhc.set_num_threads(2)
    fwd, bwd = run_ours(inp)
    per_token = dict(zip(FWD_NAMES + ("grad_x",), fwd + bwd[:1]))
    for i in (0, 17, 36):
        one_fwd, one_bwd = run_ours(slice_token(inp, layout, i))
        for name, alone in zip(FWD_NAMES + ("grad_x",), one_fwd + one_bwd[:1]):
            batch = per_token[name]
            if batch is None:  # h_post, h_res of the head
                assert alone is None, name
                continue
            row = batch[i:i + 1] if layout == "TND" else batch[:, i:i + 1]
            assert_same_bits(name, row, alone, f"token {i} in the batch vs alone")
