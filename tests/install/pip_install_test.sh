#!/usr/bin/env bash
# The Python package as users install it: from a copy of the source tree (what git
# tracks plus untracked files that are not ignored, so nothing of a developer's build/
# or python/mhc/libmhc.so), offline, into a fresh venv that sees Debian's apt packages
# (torch):
#   pip wheel --no-build-isolation --no-index --no-deps .   a platform wheel (CMake builds libmhc.so)
#   pip install --no-build-isolation --no-index .            the same tree again: no second compile
# then, from another directory and without PYTHONPATH or MHC_LIBRARY: the installed
# package and its library are the venv's, a small MhcPost matches plain torch, and
# tests/python/test_torch_library.py (when present) passes against the installed package.
#
#   tests/install/pip_install_test.sh [REPO [PYTHON]]   (default: this checkout, /usr/bin/python3)
set -euo pipefail
repo=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
python=${2:-/usr/bin/python3}
unset PYTHONPATH MHC_LIBRARY
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mhc-pip-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
src=$tmp/src venv=$tmp/venv wheels=$tmp/wheels run=$tmp/run
mkdir -p "$src" "$wheels" "$run"
step() { echo "pip_install_test: $*"; }
fail() { echo "pip_install_test: FAILED: $*" >&2; exit 1; }

step "copying $repo to $src"
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Tracked files still present plus untracked ones that .gitignore does not exclude.
  (cd "$repo" && git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
     [ -e "$f" ] && printf '%s\0' "$f"; done) | tar -C "$repo" --null -T - -cf - | tar -C "$src" -xf -
else
  tar -C "$repo" --exclude='./build*' --exclude='./dist' --exclude='*.egg-info' --exclude='__pycache__' \
      --exclude='./python/mhc/libmhc.so*' -cf - . | tar -C "$src" -xf -
fi
[ -f "$src/setup.py" ] && [ -f "$src/pyproject.toml" ] || fail "no setup.py/pyproject.toml in the copy"
version=$(sed -n 's/^project(mhc VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || fail "no project(mhc VERSION ...) in CMakeLists.txt"
(cd "$src" && find . -path ./build-pip -prune -o -print | sort) >"$tmp/before"

step "creating the venv $venv (--system-site-packages)"
"$python" -m venv --system-site-packages "$venv"
pip=("$venv/bin/pip" --no-input --disable-pip-version-check)

step "pip wheel (builds libmhc.so with CMake)"
start=$SECONDS
(cd "$src" && "${pip[@]}" wheel --no-build-isolation --no-index --no-deps . -w "$wheels")
step "pip wheel took $((SECONDS - start)) s"
shopt -s nullglob
built=("$wheels"/*.whl)
[ ${#built[@]} -eq 1 ] || fail "expected one wheel in $wheels, found: ${built[*]:-none}"
wheel=${built[0]}
name=$(basename "$wheel")
step "wheel $name"
case "$name" in
  "mhc-$version-"*-linux_*.whl) ;;
  *) fail "$name: not a platform wheel of mhc $version" ;;
esac
case "$name" in *-any.whl) fail "$name: a pure wheel, but the package carries libmhc.so" ;; esac
# The wheel holds every module of the package and the library as a regular file.
"$venv/bin/python" - "$wheel" "$src/python" <<'PY'
import os, stat, sys, zipfile
wheel, root = sys.argv[1:]
z = zipfile.ZipFile(wheel)
names = set(z.namelist())
modules = {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(os.path.join(root, "mhc"))
           for f in fs if f.endswith(".py")}
missing = sorted(modules - names)
assert not missing, f"modules missing from the wheel: {missing}"
info = z.getinfo("mhc/libmhc.so")
mode = info.external_attr >> 16
assert not stat.S_ISLNK(mode) and info.file_size > 100000, (oct(mode), info.file_size)
assert z.read("mhc/libmhc.so")[:4] == b"\x7fELF"
wheel_meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
assert "Root-Is-Purelib: false" in wheel_meta, wheel_meta
print(f"pip_install_test: the wheel holds {len(modules)} modules and mhc/libmhc.so ({info.file_size} bytes)")
PY

step "pip install . (the same source tree: the CMake build is up to date)"
start=$SECONDS
(cd "$src" && "${pip[@]}" install --no-build-isolation --no-index .)
step "pip install took $((SECONDS - start)) s"
step "pip install of the wheel"
"${pip[@]}" install --no-build-isolation --no-index --force-reinstall --no-deps "$wheel"
"${pip[@]}" show mhc

# Building left the source tree as it was, apart from build-pip/ (setuptools' build and egg-info).
(cd "$src" && find . -path ./build-pip -prune -o -print | sort) >"$tmp/after"
changed=$(diff "$tmp/before" "$tmp/after" | sed -n 's/^[<>] //p' || true)
[ -z "$changed" ] || fail "building changed the source tree outside build-pip/: $changed"
[ ! -e "$src/build" ] || fail "setuptools wrote into build/"

step "import mhc from $run"
cd "$run"
"$venv/bin/python" - "$venv" "$version" <<'PY'
import os, sys
venv, version = os.path.realpath(sys.argv[1]), sys.argv[2]
import torch
import mhc
from mhc import _lib

package = os.path.dirname(os.path.realpath(mhc.__file__))
assert package.startswith(venv + os.sep), f"mhc imported from {mhc.__file__}, not from {venv}"
library = os.path.realpath(_lib.lib._name)
assert library == os.path.join(package, "libmhc.so"), f"libmhc.so loaded from {_lib.lib._name}"
assert not os.path.islink(os.path.join(package, "libmhc.so"))
assert mhc.__version__ == version, (mhc.__version__, version)
import mhc.nn  # the subpackage is installed too

torch.manual_seed(0)
T, N, D = 5, 4, 24
x = torch.randn(T, N, D)
h_res = torch.rand(T, N, N)
h_out = torch.randn(T, D)
h_post = torch.rand(T, N)
out = mhc.npu_mhc_post(x, h_res, h_out, h_post)
# out[j] = h_post[j] * h_out + sum_i h_res[i, j] * x[i], per token
x64, r64, o64, p64 = (t.double() for t in (x, h_res, h_out, h_post))
want = p64[:, :, None] * o64[:, None, :] + torch.einsum("tij,tid->tjd", r64, x64)
assert out.shape == x.shape and out.dtype == x.dtype, (out.shape, out.dtype)
err = (out.double() - want).abs().max().item()
assert err < 1e-5, f"npu_mhc_post differs from torch by {err}"
print(f"pip_install_test: mhc {mhc.__version__} from {package} ({mhc.isa()}), "
      f"npu_mhc_post matches torch (max error {err:.2e})")
PY

suite=$src/tests/python/test_torch_library.py
if [ -f "$suite" ]; then
  # The file alone, in a directory of its own: tests/python/conftest.py would put the
  # source tree's python/ first on sys.path (and into its subprocesses' PYTHONPATH).
  step "pytest test_torch_library.py against the installed package, from $run/suite"
  mkdir "$run/suite"
  cp "$suite" "$run/suite/"
  (cd "$run/suite" && "$venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir="$run/suite" \
     --confcutdir="$run/suite" test_torch_library.py)
else
  step "NOTICE: $suite does not exist; skipping it"
fi
step "OK"
