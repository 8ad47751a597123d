# What both MinGW-w64 toolchain files set once FW_MINGW_PREFIX names the
# target (mingw-w64-x86_64.cmake, mingw-w64-i686.cmake).
set(CMAKE_SYSTEM_NAME Windows)
# The win32 thread model: the toolchain's default, with no dependency on
# libwinpthread (freeway's OS layer uses the Windows API directly).
find_program(CMAKE_C_COMPILER NAMES ${FW_MINGW_PREFIX}-gcc-win32 ${FW_MINGW_PREFIX}-gcc REQUIRED)
find_program(CMAKE_CXX_COMPILER NAMES ${FW_MINGW_PREFIX}-g++-win32 ${FW_MINGW_PREFIX}-g++ REQUIRED)
find_program(CMAKE_RC_COMPILER NAMES ${FW_MINGW_PREFIX}-windres)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
