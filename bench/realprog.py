"""Real programs of the system under the allocator being measured.

The runner starts this script with LD_PRELOAD set; the programs it starts
inherit it, so they run on the allocator under test. The script writes the
program's input into a temporary directory first (not timed), then runs the
program and times it.

    python3 bench/realprog.py cc1 --functions 300 [--runs 1]
        gcc -O2 -c on a generated C file: the compiler proper (cc1) allocates
        heavily while it builds and optimises its intermediate forms.
    python3 bench/realprog.py sqlite --rows 200000
        sqlite3 on an in-memory database: bulk inserts, indexes, joins,
        grouping, window functions, updates and deletes; every page of the
        database lives in memory the library takes from malloc.

Prints one JSON line. Time, CPU and minor faults are those of the program and
its own children (gcc runs cc1 and as), from wait4; peak_rss_kb is the
largest resident set of any of them (ru_maxrss, which on Linux starts from
this script's own resident set at the exec: a floor of a few MiB, far below
what the programs reach). A missing program gives a "skipped" result.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time


def gen_c(path, functions, seed):
    """A translation unit with enough of everything an optimiser works on:
    structs, loops to unroll and vectorise, switches, inline helpers, calls
    between functions, constant tables and string literals."""
    rng = random.Random(seed)
    out = ["#include <stddef.h>", "#include <string.h>", ""]
    out.append("static inline int mix(int a, int b) { return (a << 5) - a + (b ^ (a >> 3)); }")
    out.append("static inline double lerp(double a, double b, double t) { return a + (b - a) * t; }")
    out.append("")
    for i in range(functions):
        n = rng.randrange(2, 12)
        fields = ["int a%d;" % k for k in range(n)] + ["double w%d;" % k for k in range(rng.randrange(1, 5))]
        out.append("struct rec%d { %s const char *name; int v[%d]; };" % (i, " ".join(fields), rng.randrange(4, 64)))
        table = ", ".join(str(rng.randrange(-1000, 1000)) for _ in range(rng.randrange(8, 40)))
        out.append("static const int tab%d[] = { %s };" % (i, table))
        out.append("int fn%d(struct rec%d *r, const int *in, int len, double t) {" % (i, i))
        out.append("  int acc = %d;" % rng.randrange(1, 1 << 16))
        out.append("  double d = 0;")
        for _ in range(rng.randrange(2, 6)):
            k = rng.randrange(0, 3)
            if k == 0:
                out.append("  for (int j = 0; j < len; j++) acc = mix(acc, in[j] * %d + tab%d[j %% %d]);" % (
                    rng.randrange(1, 97), i, len(table.split(","))))
            elif k == 1:
                m = rng.randrange(0, 64)
                out.append("  for (size_t j = 0; j < sizeof r->v / sizeof r->v[0]; j++) {")
                out.append("    r->v[j] = r->v[j] * %d + (int)j + acc;" % rng.randrange(2, 9))
                out.append("    d = lerp(d, r->v[j], t * %d.5);" % m)
                out.append("  }")
            else:
                out.append("  switch (acc & 7) {")
                for c in range(rng.randrange(3, 8)):
                    out.append("  case %d: acc += r->a%d * %d - (int)strlen(r->name); d += r->w0; break;" % (
                        c, rng.randrange(0, n), rng.randrange(1, 50)))
                out.append("  default: acc ^= %d; }" % rng.randrange(0, 1 << 20))
        if i > 0:
            j = rng.randrange(0, i)
            out.append("  { extern int fn%d(struct rec%d *, const int *, int, double);" % (j, j))
            out.append("    static struct rec%d s%d; s%d.name = \"rec%d-%d\"; acc += fn%d(&s%d, in, len / 2, t); }" % (
                j, i, i, i, j, j, i))
        out.append("  return acc + (int)d;")
        out.append("}")
        out.append("")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def gen_sql(path, rows):
    """Bulk work written to make sqlite allocate: row and index pages, sort
    buffers, temporary b-trees for grouping and DISTINCT, string results."""
    sql = """
PRAGMA cache_size = -400000;
CREATE TABLE item(id INTEGER PRIMARY KEY, cat INTEGER, label TEXT, price REAL, note TEXT);
CREATE TABLE cat(id INTEGER PRIMARY KEY, name TEXT, parent INTEGER);
BEGIN;
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {cats})
INSERT INTO cat SELECT x, 'category ' || x || ' ' || substr('abcdefghijklmnopqrstuvwxyz', x % 26 + 1),
  CASE WHEN x > 10 THEN x / 10 ELSE NULL END FROM n;
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {rows})
INSERT INTO item SELECT x, (x * 2654435761) % {cats} + 1,
  printf('item-%09d-%s', (x * 40503) % 1000000007, hex((x * 7) % 65521)),
  ((x * 31) % 10007) / 100.0,
  substr(printf('%.*c', (x % 200) + 1, 'n'), 1, (x % 200) + 1)
  FROM n;
COMMIT;
CREATE INDEX item_cat ON item(cat, price);
CREATE INDEX item_label ON item(label);
SELECT c.name, count(*), round(sum(i.price), 2), min(i.label), max(i.label)
  FROM item i JOIN cat c ON c.id = i.cat GROUP BY c.id ORDER BY 2 DESC, 1 LIMIT 50;
SELECT p.name, count(DISTINCT i.label), round(avg(i.price), 3)
  FROM item i JOIN cat c ON c.id = i.cat JOIN cat p ON p.id = c.parent
  GROUP BY p.id ORDER BY 3 DESC, 1 LIMIT 50;
SELECT cat, label, price, rank() OVER (PARTITION BY cat ORDER BY price DESC, label) AS r
  FROM item WHERE cat % 37 = 0 ORDER BY cat, r LIMIT 2000;
SELECT group_concat(label, ';') FROM (SELECT label FROM item WHERE id % 997 = 0 ORDER BY label);
UPDATE item SET note = note || '|' || label, price = price * 1.1 WHERE id % 3 = 0;
DELETE FROM item WHERE id % 7 = 0;
INSERT INTO item(cat, label, price, note)
  SELECT cat, label || '-copy', price / 2, upper(note) FROM item WHERE id % 5 = 0;
SELECT substr(label, 1, 9) AS k, count(*), total(length(note)) FROM item GROUP BY k ORDER BY 2 DESC, 1 LIMIT 100;
SELECT count(*), count(DISTINCT cat), round(total(price), 2), total(length(note)) FROM item;
""".format(rows=rows, cats=max(rows // 100, 20))
    with open(path, "w") as f:
        f.write(sql)


def run(argv, cwd, stdin_path=None):
    """Runs argv to the end; returns (wall_ms, rusage, stdout bytes)."""
    with tempfile.TemporaryFile() as out:
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        try:
            t0 = time.monotonic()
            p = subprocess.Popen(argv, cwd=cwd, stdin=stdin, stdout=out)
            _, status, ru = os.wait4(p.pid, 0)
            wall = (time.monotonic() - t0) * 1e3
        finally:
            if stdin_path:
                stdin.close()
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            sys.stderr.write("%s exited with %d\n" % (argv[0], code))
            sys.exit(1)
        out.seek(0)
        return wall, ru, out.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("program", choices=("cc1", "sqlite"))
    ap.add_argument("--functions", type=int, default=300, help="cc1: functions in the generated file")
    ap.add_argument("--opt", default="-O2", help="cc1: optimisation flag")
    ap.add_argument("--rows", type=int, default=200000, help="sqlite: rows inserted")
    ap.add_argument("--runs", type=int, default=1, help="runs of the program, timed together")
    args = ap.parse_args()

    result = {"bench": "realprog", "program": args.program, "runs": args.runs}
    tool = "gcc" if args.program == "cc1" else "sqlite3"
    exe = shutil.which(tool)
    if not exe:
        result["skipped"] = "%s not installed" % tool
        print(json.dumps(result))
        return
    work = tempfile.mkdtemp(prefix="fw-realprog-")
    try:
        if args.program == "cc1":
            gen_c(os.path.join(work, "gen.c"), args.functions, 1)
            argv, stdin = [exe, args.opt, "-g0", "-w", "-frandom-seed=1", "-c", "gen.c", "-o", "gen.o"], None
            result["functions"] = args.functions
        else:
            gen_sql(os.path.join(work, "work.sql"), args.rows)
            argv, stdin = [exe, ":memory:"], os.path.join(work, "work.sql")
            result["rows"] = args.rows
        wall = user = sys_ = 0.0
        minflt = peak = 0
        digest = hashlib.md5()
        for _ in range(args.runs):
            w, ru, out = run(argv, work, stdin)
            if args.program == "cc1":
                with open(os.path.join(work, "gen.o"), "rb") as f:
                    out = f.read()
            digest.update(out)
            wall += w
            user += ru.ru_utime * 1e3
            sys_ += ru.ru_stime * 1e3
            minflt += ru.ru_minflt
            peak = max(peak, ru.ru_maxrss)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ncpus = len(os.sched_getaffinity(0))
    result.update({
        "wall_ms": wall, "user_ms": user, "sys_ms": sys_,
        "cpu_util": (user + sys_) / (wall * ncpus) if wall > 0 else 0,
        "minflt": minflt, "ncpus": ncpus, "peak_rss_kb": peak,
        # The same input must give the same output on every allocator.
        "output_md5": digest.hexdigest(),
    })
    print(json.dumps(result))


if __name__ == "__main__":
    main()
