# Cross build for aarch64 Linux on a Debian host (scripts/test_arm64.sh):
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# The compiler is Debian's g++-aarch64-linux-gnu; the target's libraries (libhwy-dev:arm64,
# libgtest-dev:arm64) are multiarch packages under /usr/lib/aarch64-linux-gnu, so there is no
# separate sysroot. Binaries run through qemu-user, which also serves gtest_discover_tests.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Packages and libraries only from the target's multiarch directories, never the host's.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# -L /: the target's loader, libc and libstdc++ from the multiarch packages (libc6:arm64,
# which libhwy1:arm64 brings). /usr/aarch64-linux-gnu's loader (libc6-arm64-cross) with
# the multiarch libc it then finds is a mismatched pair: pthread_create hangs.
# binfmt_misc is not needed.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
