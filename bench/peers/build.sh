#!/usr/bin/env bash
# Builds the newest releases of the peer allocators, which Debian packages
# only in older versions or not at all, as LD_PRELOAD libraries for
# bench/run.py:
#
#   bench/peers/build.sh [OUT [NAME...]]     # OUT defaults to build/peers
#
# The sources are the ones crates.io's -sys crates carry, pinned with their
# sha256 in bench/peers/versions.txt and fetched with cargo. For each NAME
# (all of versions.txt by default) it leaves
#
#   OUT/NAME/lib*.so      the library to preload
#   OUT/NAME/peer.json    what was built, from which crate, with which flags
#
# A library whose peer.json matches the pinned line and the flags below is
# not rebuilt. One allocator that cannot be fetched or built is logged and
# left out; the others still build, and the script exits 0 either way
# (bench/run.py skips, with a note, every allocator it does not find).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-build/peers}
shift || true
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
WANT=("$@")
JOBS=${JOBS:-2}
CC=${CC:-cc}
CXX=${CXX:-c++}

log() { echo "peers: $*" >&2; }

# ---- flags --------------------------------------------------------------------
# mimalloc: the single-file build of src/static.c, which is what the crate
# itself compiles. Its CMake build is not usable from the crate (the crate
# leaves out the cmake/ directory that CMakeLists.txt includes), so these are
# the flags mimalloc's CMake gives its shared library with
# -DCMAKE_BUILD_TYPE=Release -DMI_OVERRIDE=ON on Linux with gcc/clang:
# CMake's Release -O3 -DNDEBUG, its visibility, TLS and no-builtin options,
# MI_MALLOC_OVERRIDE (defines malloc, free, ..., operator new/delete) and the
# MI_SHARED_LIB defines of the shared target.
MI_CFLAGS="-O3 -DNDEBUG -fPIC -fvisibility=hidden -ftls-model=initial-exec -fno-builtin-malloc
  -Wall -Wextra -Wno-unknown-pragmas -DMI_MALLOC_OVERRIDE -DMI_SHARED_LIB -DMI_SHARED_LIB_EXPORT"
MI_LIBS="-pthread -lrt"
# snmalloc: its own CMake, Release, target snmallocshim (malloc.cc + new.cc,
# the LD_PRELOAD shim); C++20 as its CMakeLists asks.
SN_CMAKE="-DCMAKE_BUILD_TYPE=Release -DSNMALLOC_BUILD_TESTING=OFF"
# rpmalloc: the flags of its own ninja generator for the release
# configuration of the rpmallocwrap shared library (build/ninja/gcc.py and
# configure.py), -g and -Werror left out.
RP_CFLAGS="-O3 -funroll-loops -funit-at-a-time -fstrict-aliasing -fno-math-errno -ffinite-math-only
  -funsafe-math-optimizations -fno-trapping-math -ffast-math -DRPMALLOC_COMPILE=1 -DBUILD_RELEASE=1
  -DBUILD_DYNAMIC_LINK=1 -D_GNU_SOURCE=1 -fPIC -Wall -Wextra -DENABLE_PRELOAD=1 -DENABLE_OVERRIDE=1"
RP_LIBS="-pthread -ldl"

flags_of() {
  case "$1" in
    mimalloc*) echo $MI_CFLAGS $MI_LIBS ;;
    snmalloc) echo $SN_CMAKE ;;
    rpmalloc) echo $RP_CFLAGS $RP_LIBS ;;
  esac
}

compiler_of() {
  case "$1" in
    snmalloc) "$CXX" --version 2>/dev/null | head -1 ;;
    *) "$CC" --version 2>/dev/null | head -1 ;;
  esac
}

# What a built library must match to be reused.
stamp_of() { echo "${CRATE[$1]} ${VERSION[$1]} ${SHA[$1]} | $(flags_of "$1") | $(compiler_of "$1")"; }

json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

# ---- the pinned crates ---------------------------------------------------------
declare -A CRATE VERSION SHA UPSTREAM
NAMES=()
while read -r name crate version sha upstream _; do
  case "$name" in ''|'#'*) continue ;; esac
  NAMES+=("$name")
  CRATE[$name]=$crate VERSION[$name]=$version SHA[$name]=$sha UPSTREAM[$name]=$upstream
done < "$HERE/versions.txt"
[ ${#WANT[@]} -eq 0 ] && WANT=("${NAMES[@]}")

crate_file() { echo "$OUT/crates/$1-$2.crate"; }

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

# Fetches every missing crate with one `cargo fetch` of a manifest that
# depends on exactly the pinned versions, then copies the .crate files out of
# cargo's download cache.
fetch_crates() {
  local missing=() n c v
  for n in "$@"; do
    c=${CRATE[$n]} v=${VERSION[$n]}
    sha_ok "$(crate_file "$c" "$v")" "${SHA[$n]}" || missing+=("$c=$v")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v cargo >/dev/null 2>&1; then
    log "cargo not found: cannot fetch ${missing[*]} (put the .crate files in $OUT/crates/ by hand)"
    return 0
  fi
  local dir="$OUT/fetch" dep
  mkdir -p "$dir" "$OUT/crates"
  {
    printf '[package]\nname = "freeway-bench-peers"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n'
    printf '[lib]\npath = "lib.rs"\n\n[dependencies]\n'
    for dep in $(printf '%s\n' "${missing[@]}" | sort -u); do
      # Build metadata (+...) plays no part in cargo's version matching.
      printf '%s = "=%s"\n' "${dep%%=*}" "$(echo "${dep#*=}" | sed 's/+.*//')"
    done
  } > "$dir/Cargo.toml"
  : > "$dir/lib.rs"
  rm -f "$dir/Cargo.lock"
  log "fetching $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')with cargo"
  local host
  host=$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')
  if ! cargo fetch -q --manifest-path "$dir/Cargo.toml" ${host:+--target "$host"} >"$dir/fetch.log" 2>&1; then
    log "cargo fetch failed (see $dir/fetch.log)"
  fi
  local cache="${CARGO_HOME:-$HOME/.cargo}/registry/cache" f
  for dep in $(printf '%s\n' "${missing[@]}" | sort -u); do
    f=$(ls "$cache"/*/"${dep%%=*}-${dep#*=}.crate" 2>/dev/null | head -1)
    [ -n "$f" ] && cp "$f" "$(crate_file "${dep%%=*}" "${dep#*=}")"
  done
}

# Unpacks a crate once; prints the directory.
unpack() {
  local c=$1 v=$2 dir="$OUT/src/$1-$2"
  if [ ! -f "$dir/.unpacked" ]; then
    rm -rf "$dir" && mkdir -p "$OUT/src"
    tar -xzf "$(crate_file "$c" "$v")" -C "$OUT/src" || return 1
    touch "$dir/.unpacked"
  fi
  echo "$dir"
}

# ---- one allocator ---------------------------------------------------------------
# Prints the library's file name and upstream version on success.
build_mimalloc() { # SRC_DIR (v2 or v3 tree) DEST LIBNAME
  local src=$1 dest=$2 lib=$3 v
  v=$(sed -n 's/^#define MI_MALLOC_VERSION *\([0-9]*\).*/\1/p' "$src/include/mimalloc.h")
  [ -n "$v" ] || { log "no MI_MALLOC_VERSION in $src/include/mimalloc.h"; return 1; }
  v="$((v / 10000)).$((v / 100 % 100)).$((v % 100))"
  # shellcheck disable=SC2086
  $CC $MI_CFLAGS -I"$src/include" -I"$src/src" -shared -o "$dest/$lib" "$src/src/static.c" $MI_LIBS \
    >"$dest/build.log" 2>&1 || { log "compile failed (see $dest/build.log)"; return 1; }
  echo "$v"
}

build_one() { # NAME
  local n=$1 c=${CRATE[$1]} v=${VERSION[$1]} dest="$OUT/$1" lib src up=""
  local stamp
  stamp=$(stamp_of "$n")
  case "$n" in
    mimalloc3) lib=libmimalloc3.so ;;
    mimalloc2) lib=libmimalloc2.so ;;
    snmalloc) lib=libsnmallocshim.so ;;
    rpmalloc) lib=librpmallocwrap.so ;;
    *) log "$n: no recipe in build.sh; skipped"; return 1 ;;
  esac
  if [ -f "$dest/$lib" ] && [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ]; then
    return 0
  fi
  if ! sha_ok "$(crate_file "$c" "$v")" "${SHA[$n]}"; then
    if [ -f "$(crate_file "$c" "$v")" ]; then
      log "$n: $c-$v.crate does not have the pinned sha256; skipped"
      rm -f "$(crate_file "$c" "$v")"
    else
      log "$n: $c-$v.crate not available; skipped"
    fi
    return 1
  fi
  src=$(unpack "$c" "$v") || { log "$n: cannot unpack $c-$v.crate; skipped"; return 1; }
  rm -rf "$dest" && mkdir -p "$dest"
  log "$n: building from $c $v"
  case "$n" in
    mimalloc3|mimalloc2)
      up=$(build_mimalloc "$src/c_src/mimalloc/v${n#mimalloc}" "$dest" "$lib") || return 1
      if [ "${UPSTREAM[$n]}" != "-" ] && [ "$up" != "${UPSTREAM[$n]}" ]; then
        log "$n: the crate's mimalloc.h says $up, versions.txt ${UPSTREAM[$n]}; recording $up"
      fi
      ;;
    snmalloc)
      command -v "$CXX" >/dev/null 2>&1 || { log "$n: no C++ compiler; skipped"; return 1; }
      # shellcheck disable=SC2086
      if ! { cmake -S "$src/upstream" -B "$dest/cmake" $SN_CMAKE -DCMAKE_CXX_COMPILER="$CXX" &&
             cmake --build "$dest/cmake" -j"$JOBS" --target snmallocshim; } >"$dest/build.log" 2>&1; then
        log "$n: build failed (see $dest/build.log)"
        return 1
      fi
      cp "$dest/cmake/$lib" "$dest/$lib" && rm -rf "$dest/cmake"
      ;;
    rpmalloc)
      local r="$src/rpmalloc/rpmalloc"
      # shellcheck disable=SC2086
      $CC $RP_CFLAGS -shared -o "$dest/$lib" "$r/rpmalloc.c" $RP_LIBS >"$dest/build.log" 2>&1 ||
        { log "$n: compile failed (see $dest/build.log)"; return 1; }
      up=$(head -1 "$src/rpmalloc/CHANGELOG" | tr -d '[:space:]')
      ;;
  esac
  [ -n "$up" ] || up=${UPSTREAM[$n]}
  [ "$up" = "-" ] && up=""
  {
    printf '{"name": %s, "lib": %s, "crate": %s, "crate_version": %s, "crate_sha256": %s,\n' \
      "$(json_str "$n")" "$(json_str "$lib")" "$(json_str "$c")" "$(json_str "$v")" "$(json_str "${SHA[$n]}")"
    printf ' "upstream_version": %s, "flags": %s, "compiler": %s}\n' "$(json_str "$up")" \
      "$(json_str "$(flags_of "$n")")" "$(json_str "$(compiler_of "$n")")"
  } > "$dest/peer.json"
  echo "$stamp" > "$dest/stamp"
  log "$n: $dest/$lib (${up:-version not stated})"
}

todo=()
for n in "${WANT[@]}"; do
  [ -n "${CRATE[$n]:-}" ] || { log "$n: not in versions.txt; skipped"; continue; }
  todo+=("$n")
done
[ ${#todo[@]} -eq 0 ] && exit 0

# Only the crates of allocators that are not already built are fetched.
need=()
for n in "${todo[@]}"; do
  stamp=$(stamp_of "$n")
  [ -f "$OUT/$n/stamp" ] && [ "$(cat "$OUT/$n/stamp")" = "$stamp" ] && ls "$OUT/$n"/lib*.so >/dev/null 2>&1 ||
    need+=("$n")
done
[ ${#need[@]} -gt 0 ] && fetch_crates "${need[@]}"

for n in "${todo[@]}"; do
  # A subshell: one allocator's failure (or a stray `exit`) leaves the others.
  ( build_one "$n" ) || { log "$n: not built; bench/run.py will skip it"; rm -f "$OUT/$n"/lib*.so "$OUT/$n/stamp"; }
done
exit 0
