"""Builds the Python package mhc together with the native library it loads.

`pip install .` (or `pip wheel .`) configures a private CMake build tree under
setuptools' build_temp (inside build-pip/, never the developers' build/), builds only
the shared-library target `mhc`, and puts the library file itself (not a symlink) into
the package as mhc/libmhc.so, where mhc/_lib.py looks for it. The package version is
the one of CMakeLists.txt's project(mhc VERSION ...), the version libmhc.so reports.

CMAKE_BUILD_PARALLEL_LEVEL sets the number of build jobs (default 2).
"""
import os
import re
import shutil

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution
try:  # setuptools >= 70 has its own; before, the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))


def cmake_version():
    """The version in CMakeLists.txt's project(mhc VERSION x.y.z ...)."""
    with open(os.path.join(HERE, "CMakeLists.txt"), encoding="utf-8") as f:
        found = re.search(r"project\(\s*mhc\s+VERSION\s+([0-9]+(?:\.[0-9]+)*)", f.read())
    if not found:
        raise RuntimeError("setup.py: no project(mhc VERSION ...) in CMakeLists.txt")
    return found.group(1)


class BuildCMake(Command):
    """Configures and builds libmhc.so with CMake in build_temp/cmake."""

    description = "build the native library libmhc.so with CMake"
    user_options = [("build-temp=", "t", "directory for the CMake build tree")]

    def initialize_options(self):
        self.build_temp = None
        self.library = None

    def finalize_options(self):
        self.set_undefined_options("build", ("build_temp", "build_temp"))

    def run(self):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        cache = os.path.join(build_dir, "CMakeCache.txt")
        if os.path.exists(cache):
            # A tree configured for another source directory (a copied checkout) is
            # refused by CMake: start over.
            with open(cache, encoding="utf-8", errors="replace") as f:
                home = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", f.read(), re.M)
            if not home or os.path.realpath(home.group(1)) != os.path.realpath(HERE):
                shutil.rmtree(build_dir)
        os.makedirs(build_dir, exist_ok=True)
        configure = ["cmake", "-S", HERE, "-B", build_dir,
                     "-DCMAKE_BUILD_TYPE=Release",
                     "-DMHC_BUILD_TESTS=OFF", "-DMHC_BUILD_EXAMPLES=OFF", "-DMHC_BUILD_BENCH=OFF",
                     "-DMHC_PYTHON_COPY=OFF"]
        if not os.path.exists(cache) and shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        self.spawn(configure)
        compile_ = ["cmake", "--build", build_dir, "--target", "mhc"]
        if not os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL"):
            compile_ += ["--parallel", "2"]  # else cmake --build reads the variable itself
        self.spawn(compile_)
        # src/libmhc.so is the linker name: a symlink to libmhc.so.<version>.
        library = os.path.realpath(os.path.join(build_dir, "src", "libmhc.so"))
        if not os.path.isfile(library):
            raise RuntimeError(f"setup.py: the CMake build left no library at {library}")
        self.library = library


class BuildPyWithLibrary(build_py):
    """build_py: the package's modules plus the library file as mhc/libmhc.so."""

    def run(self):
        # Start from an empty package directory, so that a module removed from the
        # sources does not live on in the wheel.
        stale = os.path.join(self.build_lib, "mhc")
        if os.path.isdir(stale):
            shutil.rmtree(stale)
        super().run()
        self.run_command("build_cmake")
        library = self.get_finalized_command("build_cmake").library
        target = os.path.join(self.build_lib, "mhc", "libmhc.so")
        if os.path.islink(target):
            os.remove(target)
        self.copy_file(library, target)  # copies the contents: a regular file

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, "mhc", "libmhc.so")]


class BinaryDistribution(Distribution):
    """The package carries a native library: platlib, a platform wheel."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: the library is loaded with ctypes, so any Python 3 on
    this platform can use it, but only on this platform."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


# setuptools' own files go to build-pip/ (the developers' CMake tree is build/): the
# build (lib, temp: the CMake tree, bdist) and the egg-info, which the source tree
# would otherwise get as python/mhc.egg-info.
BUILD_BASE = "build-pip"
os.makedirs(BUILD_BASE, exist_ok=True)  # egg_info wants its egg_base to exist

setup(
    version=cmake_version(),
    distclass=BinaryDistribution,
    cmdclass={"build_cmake": BuildCMake, "build_py": BuildPyWithLibrary,
              "bdist_wheel": PlatformWheel},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
)
