#!/usr/bin/env bash
# The whole test run of freeway:
#   1. installs what it needs (Debian/Ubuntu; skipped when all is present),
#   2. the layering of src/ (tools/check_layers.py against src/LAYERS, and
#      the checker's own tests), before anything is built,
#   3. release build with gcc + ctest (API, heaps, stress, cross-thread,
#      churn, fork, out-of-memory, RSS, LD_PRELOAD and static flavours, real
#      programs under LD_PRELOAD, the install tree moved elsewhere and used
#      through pkg-config and find_package),
#   3b. the same tests again in cautious mode (FREEWAY_CAUTIOUS=1), but for
#      the few that measure or assert what only the default mode does,
#   3b'. the same tests again at the secure level (FREEWAY_SECURE=1), but for
#      those that measure what only the default mode does,
#   3c. the bad-input suite on the release build: every misuse in a child
#      process, in cautious mode, at the secure level and in the default
#      mode (tests/badinput),
#   4. build of everything with clang (-Werror) and its fw_* C tests,
#   5. AddressSanitizer + UBSan build of the fw_* tests,
#   6. ThreadSanitizer build of the multi-threaded tests,
#   7. 32-bit (-m32) build and its tests (all but the real programs, which
#      are 64-bit binaries of the system),
#   8. debug build (-DFW_DEBUG=ON: internal assertions and validators of
#      pages, segments, queues and heaps) and the whole suite on it,
#   9. the libFuzzer target fuzz/fuzz_api (clang, ASan + UBSan, internal
#      checks): every input of fuzz/corpus/ once, then a bounded run of
#      fuzzing, in the default mode and in cautious mode,
#  10. Windows (stage "windows"): cross builds with MinGW-w64 for x64 and
#      x86 (freeway.dll, libfreeway.a, libfreeway-fw.a, freeway-redirect.dll,
#      tests/windows, and the benchmark programs, each against the C runtime
#      and against libfreeway.a: built, not run; bench/wine.py runs them),
#      and the x64 tests under Wine, the redirection's
#      against msvcrt and the UCRT (docs/windows.md; the x86 ones are built,
#      not run: Debian's 32-bit Wine does not install beside the 64-bit
#      system here). Its compilers and Wine are installed only when the
#      stage is selected.
# Exits non-zero if any build or test fails. Run from anywhere:
#   bash scripts/test.sh
# Environment: JOBS (parallel jobs, default: number of CPUs),
#   FW_TEST_STAGES (default "layers release cautious secure badinput clang asan tsan m32 debug fuzz windows"),
#   FW_FUZZ_SECONDS (fuzzing time of the default mode, default 120; cautious
#   mode gets half).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
stages=${FW_TEST_STAGES:-"layers release cautious secure badinput clang asan tsan m32 debug fuzz windows"}
log() { printf '\n==== %s\n' "$*"; }

# ---- dependencies -----------------------------------------------------------
need_cmds="cmake make gcc g++ clang sqlite3 python3 git gzip awk pkg-config"
install_deps() {
  local missing=() c
  for c in $need_cmds; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
  # The sanitizer runtimes come with gcc; check that they link.
  local probe
  probe=$(mktemp -d)
  printf 'int main(void) { return 0; }\n' > "$probe/p.c"
  local san_ok=1
  if command -v gcc >/dev/null 2>&1; then
    gcc -fsanitize=address,undefined "$probe/p.c" -o "$probe/a" >/dev/null 2>&1 || san_ok=0
    gcc -fsanitize=thread "$probe/p.c" -o "$probe/t" >/dev/null 2>&1 || san_ok=0
    # the 32-bit stage needs the multilib C and C++ runtimes
    case " $stages " in *" m32 "*)
      printf '#include <new>\nint main() { delete new int; return 0; }\n' > "$probe/q.cc"
      g++ -m32 "$probe/q.cc" -o "$probe/q" >/dev/null 2>&1 || san_ok=0 ;;
    esac
  fi
  rm -rf "$probe"
  if [ ${#missing[@]} -eq 0 ] && [ $san_ok -eq 1 ]; then
    echo "dependencies: all present"
    return 0
  fi
  echo "dependencies: missing ${missing[*]:-} (sanitizer runtimes ok: $san_ok); installing"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q || return 1
  $sudo apt-get install -y -q --no-install-recommends cmake make gcc g++ clang sqlite3 \
    python3 git gzip gawk pkg-config libc6-dev libasan8 libubsan1 libtsan2 gcc-multilib g++-multilib ||
    $sudo apt-get install -y -q cmake make gcc g++ clang sqlite3 python3 git gzip gawk pkg-config \
      libc6-dev ||
    return 1
}

# ---- bookkeeping ------------------------------------------------------------------
total_pass=0
total_fail=0
failed_stages=()
summary=()

# Tests to skip, as a ctest regular expression (empty: none). For local
# triage only: CI runs everything.
known_failing=${FW_KNOWN_FAILING-}

# run_ctest STAGE BUILD_DIR ctest-args...: runs ctest, records its counts.
run_ctest() {
  local stage=$1 dir=$2
  shift 2
  local out="$dir/ctest-output.txt" rc=0
  local exclude=() skip=${stage_exclude:-}
  if [ -n "$known_failing" ]; then
    echo "NOTE: skipping tests matching $known_failing (FW_KNOWN_FAILING)"
    skip=${skip:+$skip|}$known_failing
  fi
  [ -z "$skip" ] || exclude=(-E "$skip")
  # The bad-input suite (label badinput) runs in its own stage, on the
  # release build: its cases crash on purpose, which the debug build's
  # assertions and the 32-bit build's layout would judge differently.
  local labels=(-LE '^badinput$')
  [ "$stage" = badinput ] && labels=(-L '^badinput$')
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" "${labels[@]}" "${exclude[@]}" "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  local line pass=0 fail=0 all=0
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$out" | tail -n 1)
  if [ -n "$line" ]; then
    fail=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
    all=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")
    pass=$((all - fail))
  fi
  total_pass=$((total_pass + pass))
  total_fail=$((total_fail + fail))
  summary+=("$stage: $pass passed, $fail failed (ctest exit $rc)")
  if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
    failed_stages+=("$stage")
  fi
}

build() {
  local stage=$1 dir=$2
  shift 2
  if ! "$@"; then
    summary+=("$stage: BUILD FAILED")
    failed_stages+=("$stage")
    total_fail=$((total_fail + 1))
    return 1
  fi
}

# ---- stages ----------------------------------------------------------------------
# Needs no build, so a call that breaks the layering is reported first.
# The same two checks are the ctest tests layers.selftest and layers.check,
# and FW_KNOWN_FAILING skips them here too.
stage_layers() {
  log "layers of src/ (tools/check_layers.py)"
  local pass=0 fail=0 name script
  for name in layers.selftest:tools/test_check_layers.py layers.check:tools/check_layers.py; do
    script=${name#*:}
    name=${name%%:*}
    if [ -n "$known_failing" ] && grep -Eq -- "$known_failing" <<<"$name"; then
      echo "NOTE: skipping $name (FW_KNOWN_FAILING)"
      continue
    fi
    if python3 "$script"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
  done
  total_pass=$((total_pass + pass))
  total_fail=$((total_fail + fail))
  summary+=("layers: $pass passed, $fail failed")
  [ "$fail" -eq 0 ] || failed_stages+=("layers")
}

stage_release() {
  log "release build (gcc)"
  build release build cmake -S . -B build -DCMAKE_BUILD_TYPE=Release &&
    build release build cmake --build build -j "$jobs" || return
  log "release tests"
  run_ctest release build --timeout 900
}

# The whole release suite again with FREEWAY_CAUTIOUS=1 (docs/cautious.md):
# cautious mode must never stop a correct program, and the tests' own checks
# must hold in it. Left out, as they are about what only the default mode
# does:
#   rss.*                   RSS and page-fault counts and purge timing (the
#                           trailers and canaries touch memory, the
#                           large-block cache is off);
#   secure.*                the secure level's own tests (cautious mode,
#                           which takes precedence, has no guard pages);
#   heapown.collect_race, heapown.foreign_calls, heapown.dead_heap,
#   heapstress.foreign      a heap call from a thread that does not own the
#                           heap must be refused and the program go on;
#                           cautious mode aborts there by design (tested by
#                           heapown.cautious and heap.misuse);
#   internal.*              unit tests of the layers below the front end,
#                           linked to the allocator's object files: no
#                           cautious path runs in them, and some assert the
#                           default mode's page flags.
# (The bad-input suite has a stage of its own, in every mode.)
cautious_exclude='^rss\.|^secure\.|^heapown\.(collect_race|foreign_calls|dead_heap)(\.preload)?$|^heapstress\.foreign(\.preload)?$|^internal\.'
stage_cautious() {
  if [ ! -f build/CTestTestfile.cmake ]; then
    log "release build (gcc), for the cautious stage"
    build cautious build cmake -S . -B build -DCMAKE_BUILD_TYPE=Release &&
      build cautious build cmake --build build -j "$jobs" || return
  fi
  log "release tests in cautious mode (FREEWAY_CAUTIOUS=1)"
  FREEWAY_CAUTIOUS=1 stage_exclude=$cautious_exclude run_ctest cautious build --timeout 900
}

# The whole release suite at the secure level (FREEWAY_SECURE=1,
# docs/hardening.md): it must never stop a correct program either. Left out:
#   rss.*        RSS and page-fault counts (the large-block cache is off and
#                freed blocks wait before reuse);
#   big.realloc_place  a large block grows in place there; the secure level
#                copies it instead, as its guard page ends the block's segment;
#   internal.*   unit tests of the lower layers, which assert the default
#                mode's page flags;
#   badinput.*   they set the mode of each case themselves (stage badinput).
secure_exclude='^rss\.|^big\.realloc_place|^internal\.|^badinput\.'
stage_secure() {
  if [ ! -f build/CTestTestfile.cmake ]; then
    log "release build (gcc), for the secure stage"
    build secure build cmake -S . -B build -DCMAKE_BUILD_TYPE=Release &&
      build secure build cmake --build build -j "$jobs" || return
  fi
  log "release tests at the secure level (FREEWAY_SECURE=1)"
  FREEWAY_SECURE=1 stage_exclude=$secure_exclude run_ctest secure build --timeout 900
}

# Every misuse case in a child process, in cautious mode, at the secure
# level and in the default mode, in the
# three link flavours (tests/badinput). Known gaps are listed in the runner
# and reported; a new failure, or a gap that closes, fails the stage.
stage_badinput() {
  log "bad-input suite (release build)"
  if [ ! -x build/tests/badinput/misuse ]; then
    build badinput build cmake -S . -B build -DCMAKE_BUILD_TYPE=Release &&
      build badinput build cmake --build build -j "$jobs" || return
  fi
  run_ctest badinput build --timeout 600
}

stage_clang() {
  log "clang build of everything (-Werror)"
  build clang build-clang cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFW_WERROR=ON &&
    build clang build-clang cmake --build build-clang -j "$jobs" || return
  log "clang: the fw_* flavour of the C tests"
  run_ctest clang build-clang -L '^fw$' --timeout 900
}

sanitizer_stage() {
  local name=$1 flags=$2
  local dir=build-$name
  log "$name build (fw_* tests against libfreeway-fw.a, $flags)"
  build "$name" "$dir" cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
    -DFWT_SANITIZER="$name" -DFW_BUILD_BENCH=OFF \
    "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" \
    "-DCMAKE_EXE_LINKER_FLAGS=$flags" "-DCMAKE_SHARED_LINKER_FLAGS=$flags" &&
    build "$name" "$dir" cmake --build "$dir" --target fwt_all -j "$jobs" || return
  log "$name tests"
  run_ctest "$name" "$dir" -L sanitizer --timeout 900
}
stage_asan() {
  sanitizer_stage asan "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
}
stage_tsan() {
  sanitizer_stage tsan "-fsanitize=thread"
}

stage_m32() {
  local flags=-m32
  log "32-bit build (gcc $flags)"
  build m32 build-m32 cmake -S . -B build-m32 -DCMAKE_BUILD_TYPE=Release -DFW_BUILD_BENCH=OFF \
    "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" \
    "-DCMAKE_EXE_LINKER_FLAGS=$flags" "-DCMAKE_SHARED_LINKER_FLAGS=$flags" &&
    build m32 build-m32 cmake --build build-m32 -j "$jobs" || return
  log "32-bit tests"
  # left out: the tests that preload the library into 64-bit programs
  # (real.*: installed programs; obs.*, cli.*: shells, Python and programs
  # they compile with the host's compiler)
  run_ctest m32 build-m32 -E '^real\.|^obs\.|^cli\.' --timeout 900
}

stage_debug() {
  log "debug build (FW_DEBUG=ON: internal consistency checks)"
  build debug build-debug cmake -S . -B build-debug -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFW_DEBUG=ON \
    -DFW_BUILD_BENCH=OFF &&
    build debug build-debug cmake --build build-debug -j "$jobs" || return
  log "debug tests (the whole suite)"
  run_ctest debug build-debug --timeout 900
}

# libFuzzer's runtime comes with clang on some systems and in a package of
# its own on Debian (libclang-rt-<version>-dev).
fuzz_deps() {
  local probe ok=0
  probe=$(mktemp -d)
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    > "$probe/f.c"
  clang -fsanitize=fuzzer,address,undefined "$probe/f.c" -o "$probe/f" >/dev/null 2>&1 && ok=1
  if [ $ok -eq 0 ]; then
    local ver sudo=""
    ver=$(clang -dumpversion 2>/dev/null | cut -d. -f1)
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "libFuzzer runtime missing; installing clang and libclang-rt-${ver:-14}-dev"
    export DEBIAN_FRONTEND=noninteractive
    { $sudo apt-get install -y -q clang "libclang-rt-${ver:-14}-dev" ||
      { $sudo apt-get update -q && $sudo apt-get install -y -q clang "libclang-rt-${ver:-14}-dev"; }; } &&
      clang -fsanitize=fuzzer,address,undefined "$probe/f.c" -o "$probe/f" >/dev/null 2>&1 && ok=1
  fi
  rm -rf "$probe"
  [ $ok -eq 1 ]
}

# fuzz_run NAME LOG BINARY ARGS...: one run of a fuzzer; on failure prints the
# end of its log and the input that made it fail (kept in build-fuzz/).
fuzz_run() {
  local name=$1 out=$2
  shift 2
  if "$@" >"$out" 2>&1; then
    grep -E '^(#[0-9]+[[:space:]]+DONE|stat::)' "$out" | sed 's/^/  /'
    grep -q '^Executed ' "$out" && echo "  $(grep -c '^Executed ' "$out") inputs executed"
    echo "$name: passed"
    return 0
  fi
  echo "$name: FAILED; end of $out:"
  grep -vE '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|RELOAD)' "$out" | tail -n 60
  local unit
  unit=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$out" | tail -n 1)
  if [ -n "$unit" ] && [ -f "$unit" ]; then
    echo "failing input: $unit ($(wc -c <"$unit") bytes):"
    od -A d -t x1 "$unit" | head -n 40
  fi
  return 1
}

stage_fuzz() {
  local dir=build-fuzz secs=${FW_FUZZ_SECONDS:-120}
  log "fuzz: libFuzzer target fuzz/fuzz_api (clang, ASan + UBSan, FW_DEBUG)"
  if ! fuzz_deps; then
    summary+=("fuzz: BUILD FAILED (no libFuzzer runtime)")
    failed_stages+=("fuzz")
    total_fail=$((total_fail + 1))
    return
  fi
  build fuzz "$dir" cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFW_FUZZ=ON \
    -DFW_BUILD_TESTS=OFF -DFW_BUILD_BENCH=OFF &&
    build fuzz "$dir" cmake --build "$dir" --target fuzz -j "$jobs" || return
  local pass=0 fail=0 mode bin t bad f i name files=() left=() broken=()
  mkdir -p "$dir/artifacts"
  mapfile -t files < <(find fuzz/corpus -type f | sort)
  for mode in default cautious; do
    bin=$dir/fuzz/fuzz_api
    t=$secs
    if [ $mode = cautious ]; then
      bin=$dir/fuzz/fuzz_api_cautious
      t=$((secs / 2))
    fi
    # Every committed input once: each is a regression test. The run stops
    # at the first failure, so a failing input is set aside and the rest run
    # again, until all that fail are known.
    log "fuzz ($mode mode): the ${#files[@]} inputs of fuzz/corpus"
    left=("${files[@]}")
    broken=()
    while [ ${#left[@]} -gt 0 ]; do
      name="fuzz.corpus.$mode"
      [ ${#broken[@]} -eq 0 ] || name="$name, the ${#left[@]} inputs left"
      if fuzz_run "$name" "$dir/corpus-$mode.log" "$bin" -rss_limit_mb=4096 -timeout=120 \
        -artifact_prefix="$dir/artifacts/corpus-$mode-" "${left[@]}"; then
        break
      fi
      bad=$(sed -n 's/^Running: //p' "$dir/corpus-$mode.log" | tail -n 1)
      broken+=("${bad:-?}")
      [ -n "$bad" ] || break
      for i in "${!left[@]}"; do [ "${left[$i]}" != "$bad" ] || unset 'left[i]'; done
      left=("${left[@]}")
    done
    if [ ${#broken[@]} -eq 0 ]; then
      pass=$((pass + 1))
    else
      echo "fuzz.corpus.$mode: inputs that fail: ${broken[*]}"
      fail=$((fail + 1))
    fi
    # Fuzzing starts from the inputs that pass (one that fails would end it
    # at once); what it finds goes to a scratch corpus in the build tree.
    log "fuzz ($mode mode): fuzzing for ${t}s"
    rm -rf "$dir/seed-$mode"
    mkdir -p "$dir/corpus-$mode" "$dir/seed-$mode"
    for f in "${left[@]}"; do cp "$f" "$dir/seed-$mode/"; done
    if fuzz_run "fuzz.run.$mode" "$dir/fuzz-$mode.log" "$bin" -max_total_time="$t" -rss_limit_mb=4096 \
      -timeout=120 -print_final_stats=1 -artifact_prefix="$dir/artifacts/$mode-" \
      "$dir/corpus-$mode" "$dir/seed-$mode"; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1))
    fi
  done
  total_pass=$((total_pass + pass))
  total_fail=$((total_fail + fail))
  summary+=("fuzz: $pass passed, $fail failed")
  [ "$fail" -eq 0 ] || failed_stages+=("fuzz")
}

# The Windows stage's tools: the MinGW-w64 cross compilers and Wine (about
# half a minute to install).
install_windows_deps() {
  local c missing=0
  for c in x86_64-w64-mingw32-gcc x86_64-w64-mingw32-g++ i686-w64-mingw32-gcc i686-w64-mingw32-g++ wine; do
    command -v "$c" >/dev/null 2>&1 || missing=1
  done
  [ $missing -eq 1 ] || return 0
  echo "windows: installing the MinGW-w64 cross compilers and Wine"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  local t0
  t0=$(date +%s)
  { $sudo apt-get install -y -q gcc-mingw-w64-x86-64 g++-mingw-w64-x86-64 gcc-mingw-w64-i686 \
      g++-mingw-w64-i686 wine64 ||
    { $sudo apt-get update -q && $sudo apt-get install -y -q gcc-mingw-w64-x86-64 g++-mingw-w64-x86-64 \
      gcc-mingw-w64-i686 g++-mingw-w64-i686 wine64; }; } || return 1
  echo "windows: installed in $(( $(date +%s) - t0 ))s"
}

stage_windows() {
  if ! install_windows_deps; then
    summary+=("windows: INSTALL FAILED")
    failed_stages+=("windows")
    total_fail=$((total_fail + 1))
    return
  fi
  local arch dir
  for arch in x86_64 i686; do
    dir=build-win-$arch
    log "Windows cross build ($arch, MinGW-w64)"
    build "windows-$arch" "$dir" cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-$arch.cmake &&
      build "windows-$arch" "$dir" cmake --build "$dir" -j "$jobs" || continue
    if [ "$arch" = x86_64 ]; then
      log "Windows tests under Wine ($arch)"
      # bounded: each test has its own limit (tests/windows/CMakeLists.txt)
      run_ctest windows "$dir" --timeout 300
    fi
  done
}

start=$(date +%s)
if ! install_deps; then
  echo "could not install the dependencies" >&2
  exit 1
fi
for s in $stages; do
  t0=$(date +%s)
  "stage_$s"
  echo "stage $s took $(( $(date +%s) - t0 ))s"
done

log "summary ($(( $(date +%s) - start ))s)"
for l in "${summary[@]}"; do echo "  $l"; done
echo "total: $total_pass passed, $total_fail failed"
if [ ${#failed_stages[@]} -ne 0 ]; then
  echo "FAILED stages: ${failed_stages[*]}"
  exit 1
fi
echo "all stages passed"
