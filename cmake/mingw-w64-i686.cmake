# Cross-compiles freeway for Windows (i686) with Debian's MinGW-w64 gcc:
#   cmake -S . -B build-win -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-i686.cmake
# Tests run under Wine when it is installed (docs/windows.md).
set(CMAKE_SYSTEM_PROCESSOR i686)
set(FW_MINGW_PREFIX i686-w64-mingw32)
include(${CMAKE_CURRENT_LIST_DIR}/mingw-w64-common.cmake)
