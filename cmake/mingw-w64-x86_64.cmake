# Cross-compiles freeway for Windows (x86_64) with Debian's MinGW-w64 gcc:
#   cmake -S . -B build-win -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake
# Tests run under Wine when it is installed (docs/windows.md).
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(FW_MINGW_PREFIX x86_64-w64-mingw32)
include(${CMAKE_CURRENT_LIST_DIR}/mingw-w64-common.cmake)
