#!/usr/bin/env bash
# real_programs.sh LIB NAME
#
# Runs a real program nobody here wrote twice, on the system allocator and
# with LD_PRELOAD=LIB (libfreeway.so), and compares the output and exit
# status. NAME is one of: python sqlite sort_gzip gcc git.
# Exits 77 (ctest: skipped) when the program is not installed.
set -euo pipefail

lib=${1:?usage: real_programs.sh LIB NAME}
name=${2:?usage: real_programs.sh LIB NAME}
[ -f "$lib" ] || { echo "no such library: $lib" >&2; exit 1; }
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")

work=$(mktemp -d "${TMPDIR:-/tmp}/fw-real.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
export LC_ALL=C
unset LD_PRELOAD

need() {
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || { echo "SKIP: $c is not installed"; exit 77; }
  done
}

# The dynamic loader only warns when a preload fails, so prove it took.
LD_PRELOAD=$lib cat /proc/self/maps > maps.txt
grep -qF "$lib" maps.txt || {
  echo "FAIL: $lib does not show up in a preloaded process's maps" >&2
  exit 1
}

# run_both TAG CMD...: runs CMD (a shell function or command) as plain and as
# fw, with output in TAG.plain / TAG.fw, and compares.
run_both() {
  local tag=$1
  shift
  local s0=0 s1=0 t0 t1 t2
  t0=$(date +%s.%N)
  ( "$@" ) > "$tag.plain" 2> "$tag.plain.err" || s0=$?
  t1=$(date +%s.%N)
  ( export LD_PRELOAD=$lib; "$@" ) > "$tag.fw" 2> "$tag.fw.err" || s1=$?
  t2=$(date +%s.%N)
  printf '%s: system allocator %.1fs (exit %d), freeway %.1fs (exit %d), %s lines, md5 %s\n' \
    "$tag" "$(awk "BEGIN { print $t1 - $t0 }")" "$s0" "$(awk "BEGIN { print $t2 - $t1 }")" "$s1" \
    "$(wc -l < "$tag.fw")" "$(md5sum < "$tag.fw" | cut -c1-12)"
  if [ "$s0" -ne 0 ]; then
    echo "FAIL: $tag failed on the system allocator too (exit $s0); stderr:" >&2
    head -20 "$tag.plain.err" >&2
    exit 1
  fi
  if [ "$s1" -ne 0 ]; then
    echo "FAIL: $tag exited $s1 under freeway; stderr:" >&2
    head -40 "$tag.fw.err" >&2
    exit 1
  fi
  if ! cmp -s "$tag.plain" "$tag.fw"; then
    echo "FAIL: $tag output differs under freeway:" >&2
    diff "$tag.plain" "$tag.fw" | head -40 >&2
    exit 1
  fi
  if [ ! -s "$tag.fw" ]; then
    echo "FAIL: $tag printed nothing" >&2
    exit 1
  fi
}

case $name in
python)
  need python3
  cat > work.py <<'EOF'
# Builds and drops millions of objects: dicts, lists, tuples, strings, bytes.
import sys, zlib, random, os
random.seed(20240601)
maps = open("/proc/self/maps").read()
sys.stderr.write("freeway mapped: %s\n" % ("libfreeway" in maps))
crc = 0
total = 0
for rnd in range(6):
    d = {}
    order = []
    for i in range(60000):
        k = "k%d-%d-%s" % (rnd, i, "x" * (i % 13))
        d[k] = [i, str(i * 7919) * (1 + i % 5), {"a": i, "b": (k, i % 97)}, bytes(i % 64)]
        order.append(k[::-1])
    for i in range(0, 60000, 3):
        del d["k%d-%d-%s" % (rnd, i, "x" * (i % 13))]
    order.sort()
    s = "|".join(order[::97])
    crc = zlib.crc32(s.encode(), crc)
    keys = sorted(d)[:2000]
    crc = zlib.crc32(repr([d[k][:2] for k in keys]).encode(), crc)
    # Strings and bytes of growing and shrinking sizes.
    parts = []
    for j in range(8000):
        n = random.randrange(1, 3000)
        parts.append(("%d," % j) * (n // 4))
    blob = "".join(parts).encode()
    crc = zlib.crc32(blob, crc)
    total += len(d) + len(blob)
    sets = [set(range(j, j + 50)) for j in range(0, 50000, 7)]
    total += sum(len(x) for x in sets)
    del d, order, parts, blob, sets
print("checksum", crc, "total", total)
EOF
  # PYTHONMALLOC=malloc sends every object, small ones too, through malloc.
  run_py() { PYTHONHASHSEED=0 PYTHONMALLOC=malloc python3 work.py; }
  run_both python run_py
  grep -q "freeway mapped: True" python.fw.err || {
    echo "FAIL: python did not run with freeway loaded" >&2
    cat python.fw.err >&2
    exit 1
  }
  ;;

sqlite)
  need sqlite3
  cat > work.sql <<'EOF'
PRAGMA cache_size = -200000;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL, data BLOB);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO t SELECT x, (x * 7919) % 1000,
  printf('name-%08d-%s', (x * 104729) % 1000003, hex(x * 31)),
  (x % 977) * 1.5, zeroblob(x % 300) FROM c;
CREATE INDEX t_grp ON t(grp, name);
SELECT grp, count(*), sum(val), min(name), max(name) FROM t GROUP BY grp ORDER BY grp;
SELECT name, val FROM t ORDER BY name DESC LIMIT 3000;
SELECT count(DISTINCT name), total(length(data)) FROM t;
SELECT a.grp, count(*) FROM t a JOIN t b ON a.id = b.id + 1
  WHERE a.grp < 50 GROUP BY a.grp ORDER BY 2 DESC, 1;
UPDATE t SET name = name || '-updated-' || hex(randomblob(0)) WHERE id % 3 = 0;
DELETE FROM t WHERE id % 5 = 0;
SELECT grp, group_concat(id, ',') FROM (SELECT id, grp FROM t WHERE grp % 97 = 0 ORDER BY id)
  GROUP BY grp ORDER BY grp;
SELECT substr(name, 1, 12) AS p, count(*) FROM t GROUP BY p ORDER BY count(*) DESC, p LIMIT 500;
VACUUM;
PRAGMA integrity_check;
SELECT count(*), sum(grp), sum(length(name)) FROM t;
EOF
  run_sql() { rm -f db.sqlite; sqlite3 db.sqlite < work.sql; }
  run_both sqlite run_sql
  ;;

sort_gzip)
  need sort gzip gunzip md5sum awk
  # 1.5 million generated lines, made once (not part of the comparison).
  awk 'BEGIN { x = 12345; for (i = 0; i < 1500000; i++) {
         x = (x * 1103515245 + 12345) % 2147483648;
         printf "%08x %d %s\n", x, i % 100003, substr("abcdefghijklmnopqrstuvwxyz", 1 + x % 26) } }' > data.txt
  run_sort() {
    sort -S 100M data.txt | md5sum
    sort -S 100M --parallel=2 -k2,2n -k1,1r data.txt | gzip -6 | gunzip | md5sum
    sort -S 100M -u -k3,3 data.txt | md5sum
    gzip -9 < data.txt | gunzip | sort -S 100M -r | uniq -c -w 4 | sort -S 100M -k1,1n -k2 | sed -n '1,20p'
    cut -d' ' -f2 data.txt | sort -S 100M -n | uniq -c | sort -S 100M -rn -k1,1 -k2,2n | sed -n '1,50p'
  }
  run_both sort_gzip run_sort
  ;;

gcc)
  need gcc
  # A generated translation unit big enough to keep cc1 busy.
  {
    echo '#include <stdio.h>'
    echo '#include <string.h>'
    for i in $(seq 1 300); do
      echo "struct s$i { int a[$((i % 17 + 1))]; double d; const char *n; };"
      echo "static int f$i(int x, struct s$i *s) {"
      echo "  int r = x * $i;"
      echo "  switch (x % 7) {"
      for k in 0 1 2 3 4 5; do echo "  case $k: r += s->a[$k % $((i % 17 + 1))] * $k + (int)strlen(s->n); break;"; done
      echo "  default: r ^= $((i * 2654435761 % 65536)); }"
      echo "  for (int j = 0; j < $((i % 9 + 2)); j++) r = r * 31 + j + (int)s->d;"
      echo "  return r;"
      echo "}"
    done
    echo 'int main(void) { long t = 0;'
    for i in $(seq 1 300); do echo "  { struct s$i v; memset(&v, 0, sizeof v); v.n = \"f$i\"; t += f$i($i, &v); }"; done
    echo '  printf("%ld\n", t); return 0; }'
  } > big.c
  run_gcc() {
    gcc -O2 -g0 -frandom-seed=fw -c big.c -o big.o && md5sum big.o
    gcc -O1 -S big.c -o - | md5sum
    gcc -O2 big.c -o big && ./big
  }
  run_both gcc run_gcc
  ;;

git)
  need git
  export HOME=$work GIT_CONFIG_NOSYSTEM=1
  export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.invalid GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.invalid
  export GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'
  run_git() {
    rm -rf repo
    git init -q -b main repo
    cd repo
    for d in $(seq 1 12); do
      mkdir -p "d$d"
      for f in $(seq 1 50); do seq "$f" $((f * d + 50)) > "d$d/f$f.txt"; done
    done
    git add -A && git commit -q -m one
    for d in $(seq 1 12 | awk 'NR % 3 == 1'); do
      for f in $(seq 1 50 | awk 'NR % 4 == 0'); do echo "change $d $f" >> "d$d/f$f.txt"; done
    done
    git mv d2 moved && git rm -q -r d3
    git add -A && git commit -q -m two
    git rev-parse HEAD HEAD~1
    git log --stat --format='%H %s' | md5sum
    git diff --stat HEAD~1 HEAD | tail -n 3
    git repack -q -a -d -f
    git fsck --strict 2>&1 | md5sum
    git count-objects -v | grep -E '^(count|in-pack|packs)'
    git grep -c 'change 1 ' | sort | sed -n '1,10p'
  }
  run_both git run_git
  ;;

*)
  echo "unknown program: $name" >&2
  exit 2
  ;;
esac
echo "PASS: $name gives the same output under freeway"
