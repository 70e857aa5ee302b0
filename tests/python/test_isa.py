"""The kernel-family choice: mhc.set_isa, mhc.isa, mhc.available_isas."""
import pytest
import torch

import mhc
from conftest import BWD_NAMES, FWD_NAMES, assert_same_bits, make_inputs, run_ours

FAMILIES = ("amx", "avx512", "avx2", "sve2", "sve", "neon", "portable", "reference")  # best first
CASE = {"N": 4, "D": 100, "T": 37, "layout": "BSND", "dtype": "bf16", "gamma": True,
        "grad_x_post": True, "form": "square"}
BF16_TOL = 2 * torch.finfo(torch.bfloat16).eps  # 2 ulps of bf16, relative


@pytest.fixture(autouse=True)
def default_isa():
    """Every test starts and ends with the process default family; yields its name."""
    mhc.set_isa(None)
    yield mhc.isa()
    mhc.set_isa(None)


def outputs_with(family, inp):
    mhc.set_isa(family)
    assert mhc.isa() == family
    fwd, bwd = run_ours(inp)
    return dict(zip(FWD_NAMES + BWD_NAMES, fwd + bwd))


def test_available_isas(default_isa):
    available = mhc.available_isas()
    assert "portable" in available and "reference" in available, available
    assert available == [name for name in FAMILIES if name in available], "not best first"
    assert default_isa in available


@pytest.mark.parametrize("family", FAMILIES)
def test_family_agrees_with_reference_and_repeats_bitwise(family, default_isa):
    if family not in mhc.available_isas():  # this build or CPU cannot run it
        with pytest.raises(ValueError, match=family):
            mhc.set_isa(family)
        assert mhc.isa() == default_isa
        return
    inp = make_inputs(CASE, seed=909)
    truth = outputs_with("reference", inp)
    first = outputs_with(family, inp)
    second = outputs_with(family, inp)
    for name, ours in first.items():
        assert_same_bits(name, ours, second[name], f"{family}: first vs second call")
        ref = truth[name].double()
        scale = float(ref.abs().max())
        torch.testing.assert_close(ours.double(), ref, rtol=BF16_TOL, atol=1e-3 * scale,
                                   msg=lambda m, name=name: f"{name}, {family} vs reference: {m}")


def test_set_isa_changes_the_family_that_runs(default_isa):
    # portable (plain fp32, no FMA) and the float64 reference round differently
    # here: set_isa must change the bits a call gives, not only what isa() reports.
    inp = make_inputs(CASE, seed=910)
    portable = outputs_with("portable", inp)
    reference = outputs_with("reference", inp)
    assert any(not torch.equal(portable[name], reference[name]) for name in portable), \
        "portable and reference gave the same bits: set_isa did not change the family"
    again = outputs_with("portable", inp)
    for name in portable:
        assert_same_bits(name, portable[name], again[name], "portable after reference")


def test_none_and_empty_restore_the_default(default_isa):
    for reset in (None, ""):
        mhc.set_isa("reference")
        assert mhc.isa() == "reference"
        mhc.set_isa(reset)
        assert mhc.isa() == default_isa
    mhc.set_isa("portable")
    mhc.set_isa()
    assert mhc.isa() == default_isa


def test_unknown_family_is_value_error_and_keeps_the_default():
    mhc.set_isa("reference")
    with pytest.raises(ValueError, match="nonsense"):
        mhc.set_isa("nonsense")
    assert mhc.isa() == "reference"
    with pytest.raises(ValueError):
        mhc.set_isa("portable\0")
    assert mhc.isa() == "reference"


@pytest.mark.parametrize("name", [3, b"portable", ["portable"]])
def test_non_str_name_is_type_error(name, default_isa):
    with pytest.raises(TypeError, match="name"):
        mhc.set_isa(name)
    assert mhc.isa() == default_isa
