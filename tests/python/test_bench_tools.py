"""bench/ab_builds.py runs every operator it offers through two copies of a build."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "bench", "ab_builds.py")


@pytest.fixture
def library():
    path = os.environ.get("MHC_LIBRARY")
    if not path:
        pytest.skip("MHC_LIBRARY names no build (ctest sets it)")
    return path


def run_tool(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=300)


def test_two_copies_of_one_build_give_the_same_bits(library, tmp_path):
    copy = tmp_path / "libmhc_b.so"  # another file: dlopen gives it its own handle and pool
    shutil.copy(library, copy)
    ops = "pre_forward,pre_backward,post_forward,post_backward,site_backward_prepare,site_backward_finish"
    done = run_tool(library, str(copy), "--op", ops, "--tokens", "9", "--hidden", "40", "--pairs", "2",
                    "--threads", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ops.split(",")
    for line in lines:
        assert line.endswith("outputs bitwise equal: True"), line
        assert "T=9 N=4 D=40 bf16, 2 thread(s), 2 pairs" in line, line


def test_an_unknown_operator_is_refused(library):
    done = run_tool(library, library, "--op", "pre_forward,nonsense")
    assert done.returncode == 2 and "--op: expected some of" in done.stderr


def test_another_family_shows_other_bits(library):
    # The same path twice: the tool loads B from a copy, so B's family is its own.
    done = run_tool(library, library, "--op", "pre_backward", "--tokens", "9", "--hidden", "40", "--pairs", "1",
                    "--isa-b", "reference")
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert "A (reference)" not in line and "B (reference)" in line, line
    assert line.endswith("outputs bitwise equal: False"), line


def test_an_unavailable_family_is_refused(library):
    done = run_tool(library, library, "--isa-b", "no_such_family")
    assert done.returncode == 2 and "--isa-b:" in done.stderr
