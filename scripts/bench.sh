#!/usr/bin/env bash
# Runs freeway's benchmark suite beside the system allocator, jemalloc,
# tcmalloc, mimalloc and TBB (Debian's packages), the newest mimalloc v3 and
# v2, snmalloc and rpmalloc (built from source by bench/peers/build.sh), all
# swapped in with LD_PRELOAD over the same benchmark binaries.
#
#   scripts/bench.sh                  # install, build, quick pass (about 25 minutes on 2 cores)
#   scripts/bench.sh --full           # the seeds' own scale (long)
#   scripts/bench.sh --only speed --alloc freeway,mimalloc
#   scripts/bench.sh --only frag32    # the 32-bit experiment (not in the quick pass)
#
# Every argument goes to bench/run.py (see `bench/run.py --help` and
# docs/benchmarks.md). Environment:
#   BUILD_DIR=build        cmake build directory
#   FW_BENCH_NO_INSTALL=1  do not install packages (apt, pip)
#   FW_BENCH_NO_BUILD=1    use the programs (and peer libraries) already built
#   FW_BENCH_NO_PEERS=1    neither build nor run the peers built from source
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=$(nproc 2>/dev/null || echo 2)

log() { echo "bench.sh: $*" >&2; }

# ---- system packages --------------------------------------------------------
# Toolchain, valgrind (instruction counts), the peer allocators, and sqlite3
# for the sqlite experiment (gcc, for cc1, is part of the toolchain).
APT_PACKAGES="cmake make gcc g++ python3 python3-venv valgrind
  libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 libtbbmalloc2 sqlite3"

install_apt() {
  command -v apt-get >/dev/null 2>&1 || { log "no apt-get: install the peers by hand if missing"; return 0; }
  local missing=() p
  for p in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      log "not root: cannot install ${missing[*]}; missing allocators will be skipped"
      return 0
    fi
  fi
  log "installing: ${missing[*]}"
  $sudo apt-get update -qq || log "apt-get update failed"
  if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null; then
    # One at a time, so that one unknown name does not stop the others.
    for p in "${missing[@]}"; do
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$p" >/dev/null ||
        log "could not install $p (it will be skipped)"
    done
  fi
}

# ---- python packages ----------------------------------------------------------
# A virtual environment in the build directory with requirements.txt.
PY=python3
setup_python() {
  local venv="$BUILD_DIR/bench-venv"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" >/dev/null 2>&1 || { log "python3 -m venv failed: plots will be skipped"; return 0; }
  fi
  if ! cmp -s requirements.txt "$venv/requirements.installed" 2>/dev/null; then
    log "installing python packages (requirements.txt)"
    if "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt; then
      cp requirements.txt "$venv/requirements.installed"
    else
      log "pip install failed: plots will be skipped"
    fi
  fi
  PY="$venv/bin/python"
}

if [ "${FW_BENCH_NO_INSTALL:-0}" != 1 ]; then
  install_apt
  mkdir -p "$BUILD_DIR"
  setup_python
elif [ -x "$BUILD_DIR/bench-venv/bin/python" ]; then
  PY="$BUILD_DIR/bench-venv/bin/python"
fi

# ---- build --------------------------------------------------------------------
EXTRA=()
if [ "${FW_BENCH_NO_BUILD:-0}" != 1 ]; then
  log "building (cmake, $BUILD_DIR)"
  if cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
     cmake --build "$BUILD_DIR" -j"$JOBS" --target freeway bench_programs >/dev/null; then
    :
  else
    # The library does not build: still measure the others with the
    # benchmark programs built on their own.
    log "top-level build failed: building the benchmark programs alone; freeway will be skipped if absent"
    cmake -S bench -B "$BUILD_DIR/bench-only" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD_DIR/bench-only" -j"$JOBS" >/dev/null
    EXTRA+=(--bin-dir "$BUILD_DIR/bench-only")
  fi
elif [ ! -x "$BUILD_DIR/bench/bench_whoami" ] && [ -x "$BUILD_DIR/bench-only/bench_whoami" ]; then
  EXTRA+=(--bin-dir "$BUILD_DIR/bench-only")
fi

# ---- 32-bit build ---------------------------------------------------------------
# The library and the programs of the 32-bit experiments (frag32), built with
# -m32 in $BUILD_DIR/m32 when the compiler can link 32-bit programs (Debian:
# gcc-multilib); without it those experiments are skipped with a note.
build_m32() {
  local probe
  probe=$(mktemp -d)
  printf 'int main(void) { return 0; }\n' > "$probe/p.c"
  if ! cc -m32 "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    rm -rf "$probe"
    log "cc -m32 cannot link (gcc-multilib not installed): the 32-bit experiments will be skipped"
    return 0
  fi
  rm -rf "$probe"
  log "32-bit build (cmake -m32, $BUILD_DIR/m32)"
  cmake -S . -B "$BUILD_DIR/m32" -DCMAKE_BUILD_TYPE=Release -DFW_BUILD_TESTS=OFF -DFW_BUILD_BENCH=ON \
    -DCMAKE_C_FLAGS=-m32 -DCMAKE_CXX_FLAGS=-m32 -DCMAKE_EXE_LINKER_FLAGS=-m32 \
    -DCMAKE_SHARED_LINKER_FLAGS=-m32 >/dev/null &&
    cmake --build "$BUILD_DIR/m32" -j"$JOBS" --target freeway bench_frag bench_whoami >/dev/null ||
    log "32-bit build failed: the 32-bit experiments will be skipped"
}
if [ "${FW_BENCH_NO_BUILD:-0}" != 1 ]; then
  build_m32
fi

# ---- peers built from source ----------------------------------------------------
# Cached in $BUILD_DIR/peers: after the first time this only checks stamps.
if [ "${FW_BENCH_NO_PEERS:-0}" != 1 ] && [ "${FW_BENCH_NO_BUILD:-0}" != 1 ]; then
  log "peer allocators (bench/peers/build.sh, $BUILD_DIR/peers)"
  JOBS=$JOBS bash bench/peers/build.sh "$BUILD_DIR/peers" ||
    log "bench/peers/build.sh failed: the peers it did not build will be skipped"
fi

exec "$PY" bench/run.py --build-dir "$BUILD_DIR" "${EXTRA[@]}" "$@"
