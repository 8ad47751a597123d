#!/usr/bin/env python3
"""Counts the instructions each single-threaded case of the suite executes
under two or more flavours of freeway (callgrind, deterministic), and prints
the ratios to the first flavour with their geometric mean.

On a 2-core virtual machine the timed passes of bench/run.py spread by 10 %
and more between runs of the same allocator, which hides a cost of a few per
cent: the cost of a flavour (counting, sampling, cautious) is read here as
instructions instead, beside the timed pass. Multi-threaded cases are left
out: under valgrind their threads run one at a time in an order that varies
from run to run.

    python3 bench/instr_cost.py --build-dir build \\
        --variant freeway=libfreeway.so \\
        --variant count=libfreeway-prof.so \\
        --variant prof=libfreeway-prof.so,FREEWAY_PROFILE=1 [--scale 0.1]

A variant is NAME=LIB[,VAR=VALUE...], LIB relative to the build directory.
Cases come from bench/run.py's experiments at --scale times their quick
size (callgrind runs some 50 times slower than the program).
"""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (the suite's experiments and their cases)


def single_threaded(argv):
    """True if the case runs one thread that allocates."""
    a = [str(x) for x in argv]
    if "--producers" in a or "--pairs" in a:
        return False  # a producer and a consumer: two threads at least
    return "--threads" not in a or a[a.index("--threads") + 1] == "1"


def count_instructions(argv, lib, env_extra, timeout):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.%p")
        env = dict(os.environ)
        env.update(env_extra)
        env.setdefault("FREEWAY_REPORT_DIR", tmp)  # a profile, if any, is written and thrown away
        cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--callgrind-out-file=" + out,
               "env", "LD_PRELOAD=" + lib] + [str(x) for x in argv]
        p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, timeout=timeout)
        total = 0
        for m in re.finditer(r"==(\d+)== Collected : (\d+)", p.stderr):
            total += int(m.group(2))
        if p.returncode != 0 or total == 0:
            raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
        return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--variant", action="append", required=True, help="NAME=LIB[,VAR=VALUE...]")
    ap.add_argument("--scale", type=float, default=0.1, help="times each experiment's quick size")
    ap.add_argument("--only", default="", help="comma-separated experiment names")
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args()

    variants = []
    for v in args.variant:
        name, _, rest = v.partition("=")
        parts = rest.split(",")
        lib = os.path.abspath(os.path.join(args.build_dir, parts[0]))
        if not os.path.exists(lib):
            sys.exit("instr_cost: %s: no such library" % lib)
        variants.append((name, lib, dict(p.split("=", 1) for p in parts[1:])))

    def binpath(name):
        return os.path.abspath(os.path.join(args.build_dir, "bench", "bench_" + name))

    only = set(filter(None, args.only.split(",")))
    rows = []
    for exp in run.EXPERIMENTS:
        if only and exp.name not in only:
            continue
        if exp.name in ("frag32", "fastpath", "python", "cc1", "sqlite", "churn"):
            continue  # 32-bit, counted already, other programs' runtimes, or timed by sleeping
        try:
            cases = exp.cases(binpath, exp.quick_scale * args.scale, False)
        except Exception as e:  # an experiment whose program is not built here
            print("instr_cost: %s skipped (%s)" % (exp.name, e), file=sys.stderr)
            continue
        for case in cases:
            if not single_threaded(case.argv) or not os.path.exists(str(case.argv[0])):
                continue
            counts = []
            for name, lib, env in variants:
                counts.append(count_instructions(case.argv, lib, env, args.timeout))
            rows.append((exp.name, case.label, counts))
            print("%-12s %-45s %s" % (exp.name, case.label[:45],
                                      " ".join("%.3f" % (c / counts[0]) for c in counts[1:])),
                  file=sys.stderr, flush=True)

    names = [v[0] for v in variants]
    print("| experiment | case | %s instructions | %s |" % (names[0], " | ".join(n + " / " + names[0] for n in names[1:])))
    print("|---|---|---|%s" % ("---|" * (len(names) - 1)))
    for exp, label, counts in rows:
        print("| %s | %s | %s | %s |" % (exp, label, format(counts[0], ","),
                                          " | ".join("%.3f" % (c / counts[0]) for c in counts[1:])))
    for i, n in enumerate(names[1:], 1):
        logs = [math.log(c[i] / c[0]) for _, _, c in rows]
        print("\n%s / %s, geometric mean over %d single-threaded cases: %.4f (max %.3f)"
              % (n, names[0], len(logs), math.exp(sum(logs) / len(logs)), math.exp(max(logs))))


if __name__ == "__main__":
    main()
