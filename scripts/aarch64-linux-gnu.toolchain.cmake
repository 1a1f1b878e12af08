# CMake toolchain file: cross-compile for aarch64 Linux with Debian's cross toolchain
# (g++-aarch64-linux-gnu) against the arm64 multiarch -dev packages (libfmt-dev:arm64, ...).
# Used by scripts/cross_build_arm64.sh; on an aarch64 host build natively instead.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Multiarch: find_package and find_library look in /usr/lib/aarch64-linux-gnu, never in the host's
# /usr/lib/x86_64-linux-gnu; arch-independent packages (nlohmann-json, CLI11) stay under /usr/share.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# pkg-config reads the arm64 .pc files only (and the arch-independent ones).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Test binaries (CTest, gtest discovery) run under qemu-user against the arm64 C and C++ runtime of
# multiarch (libc6:arm64, libstdc++6:arm64 in /lib/aarch64-linux-gnu), not the cross toolchain's copy
# under /usr/aarch64-linux-gnu, whose first pthread_create never returns under Debian 12's qemu-user.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
