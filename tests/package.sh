#!/usr/bin/env bash
# package.sh — an installed freeway still works after its install tree has
# been moved (as distributions, containers and relocatable bundles do):
# installs the build tree to a temporary prefix, moves that prefix to another
# directory, then builds tests/package/consumer.c against the moved tree
#   1. with pkg-config: linked to the shared library (found through an rpath
#      to the libdir pkg-config reports) and, with --static, to the static one;
#   2. with CMake's find_package(freeway CONFIG): linked to freeway::freeway
#      and to freeway::freeway_static;
# and runs each program, which checks that it runs on freeway and reports
# where freeway's code came from.
#
# Usage: package.sh BUILD_DIR LIBDIR VERSION C_COMPILER CMAKE [C_FLAGS]
# (LIBDIR: CMAKE_INSTALL_LIBDIR; C_FLAGS: e.g. -m32 for a 32-bit build).
# Exits 77 (skipped) if pkg-config is not installed.
set -euo pipefail

if ! command -v pkg-config >/dev/null 2>&1; then
  echo "pkg-config is not installed: skipped"
  exit 77
fi
if [ $# -lt 5 ]; then
  echo "usage: $0 BUILD_DIR LIBDIR VERSION C_COMPILER CMAKE [C_FLAGS]" >&2
  exit 2
fi
build=$1 libdir=$2 version=$3 cc=$4 cmake=$5 cflags=${6-}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/package" && pwd)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# ---- install, then move -------------------------------------------------------
"$cmake" --install "$build" --prefix "$tmp/staging" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "cmake --install $build failed"; }
mkdir "$tmp/elsewhere"
mv "$tmp/staging" "$tmp/elsewhere/freeway"
prefix=$(cd "$tmp/elsewhere/freeway" && pwd -P)
pcdir=$prefix/$libdir/pkgconfig
[ -f "$pcdir/freeway.pc" ] || fail "no freeway.pc in $pcdir"
echo "installed, then moved to $prefix"

# True if directory $1 exists and lies inside the moved tree.
in_tree() {
  local d
  d=$(cd "$1" 2>/dev/null && pwd -P) || return 1
  case "$d/" in "$prefix/"*) return 0 ;; esac
  return 1
}

# Runs a consumer; it must succeed, and freeway's code must come from $2
# ("shared": a libfreeway.so of the moved tree; "static": the program itself).
run_consumer() {
  local exe=$1 kind=$2 out from
  out=$(env -u LD_LIBRARY_PATH -u LD_PRELOAD "$exe" "$version" 2>&1) ||
    { echo "$out"; fail "$exe failed"; }
  echo "$out" | sed 's/^/    /'
  from=$(sed -n 's/^freeway-from: //p' <<<"$out")
  [ -n "$from" ] || fail "$exe did not say where freeway came from"
  if [ "$kind" = shared ]; then
    case "$(basename "$from")" in libfreeway.so*) ;; *) fail "$exe: freeway came from $from, not libfreeway.so" ;; esac
    in_tree "$(dirname "$from")" || fail "$exe loaded $from, not the moved tree's library"
  else
    [ "$(cd "$(dirname "$from")" && pwd -P)/$(basename "$from")" = "$(cd "$(dirname "$exe")" && pwd -P)/$(basename "$exe")" ] ||
      fail "$exe: freeway came from $from, not from the statically linked program"
  fi
}

# ---- 1. pkg-config ---------------------------------------------------------------
export PKG_CONFIG_PATH=$pcdir
[ "$(pkg-config --variable=pcfiledir freeway)" = "$pcdir" ] ||
  fail "pkg-config found another freeway.pc: $(pkg-config --variable=pcfiledir freeway)"
[ "$(pkg-config --modversion freeway)" = "$version" ] ||
  fail "pkg-config --modversion freeway = $(pkg-config --modversion freeway), expected $version"
pc_cflags=$(pkg-config --cflags freeway)
pc_libs=$(pkg-config --libs freeway)
pc_static=$(pkg-config --static --libs freeway)
pc_libdir=$(pkg-config --variable=libdir freeway)
echo "pkg-config --cflags: $pc_cflags"
echo "pkg-config --libs: $pc_libs"
echo "pkg-config --static --libs: $pc_static"
echo "pkg-config --variable=libdir: $pc_libdir"
in_tree "$pc_libdir" || fail "pkg-config's libdir $pc_libdir is not in the moved tree"
n_inc=0 n_lib=0
for flag in $pc_cflags $pc_static; do
  case $flag in
  -I*) in_tree "${flag#-I}" || fail "pkg-config gives $flag, not a directory of the moved tree"
    n_inc=$((n_inc + 1)) ;;
  -L*) in_tree "${flag#-L}" || fail "pkg-config gives $flag, not a directory of the moved tree"
    n_lib=$((n_lib + 1)) ;;
  esac
done
[ $n_inc -gt 0 ] && [ $n_lib -gt 0 ] || fail "pkg-config names no include or library directory"

# shellcheck disable=SC2086  # the flags are lists of words
"$cc" $cflags -o "$tmp/pc_shared" "$src/consumer.c" $pc_cflags $pc_libs -Wl,-rpath,"$pc_libdir" -ldl ||
  fail "building against the shared library with pkg-config's flags"
echo "pkg-config, shared:"
run_consumer "$tmp/pc_shared" shared

# With libfreeway.so next to libfreeway.a, only -Bstatic makes -lfreeway
# pick the archive; the other libraries stay as pkg-config gives them.
static_libs=${pc_static//-lfreeway/-Wl,-Bstatic -lfreeway -Wl,-Bdynamic}
# shellcheck disable=SC2086
"$cc" $cflags -o "$tmp/pc_static" "$src/consumer.c" $pc_cflags $static_libs -ldl ||
  fail "building against the static library with pkg-config --static's flags"
echo "pkg-config, static:"
run_consumer "$tmp/pc_static" static

# ---- 2. find_package ---------------------------------------------------------------
"$cmake" -S "$src" -B "$tmp/cmake-build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" "-DCMAKE_C_FLAGS=$cflags" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON \
  >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "configuring the find_package consumer"; }
found=$(sed -n 's/^freeway_DIR:PATH=//p' "$tmp/cmake-build/CMakeCache.txt")
in_tree "$found" || fail "find_package(freeway) found $found, not the moved tree"
echo "find_package(freeway): $found"
"$cmake" --build "$tmp/cmake-build" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; fail "building the find_package consumer"; }
echo "find_package, freeway::freeway:"
run_consumer "$tmp/cmake-build/consumer_shared" shared
echo "find_package, freeway::freeway_static:"
run_consumer "$tmp/cmake-build/consumer_static" static
echo "ok"
