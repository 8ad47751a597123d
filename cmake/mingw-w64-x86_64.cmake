# Cross-compiles freeway for Windows (x86_64) with Debian's MinGW-w64 gcc:
#   cmake -S . -B build-win -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake
# Tests run under Wine when it is installed (docs/windows.md).
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(FW_MINGW_PREFIX x86_64-w64-mingw32)
# The win32 thread model: the toolchain's default, with no dependency on
# libwinpthread (freeway's OS layer uses the Windows API directly).
find_program(CMAKE_C_COMPILER NAMES ${FW_MINGW_PREFIX}-gcc-win32 ${FW_MINGW_PREFIX}-gcc REQUIRED)
find_program(CMAKE_CXX_COMPILER NAMES ${FW_MINGW_PREFIX}-g++-win32 ${FW_MINGW_PREFIX}-g++ REQUIRED)
find_program(CMAKE_RC_COMPILER NAMES ${FW_MINGW_PREFIX}-windres)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
