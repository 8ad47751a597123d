#!/usr/bin/env python3
"""Runs the Windows builds of the benchmark programs under Wine, against the
C runtime's allocator and freeway, and writes OUT/RESULTS.md and
OUT/results.json.

Wine results: they show behaviour, not Windows timing. Wine's heap is not
Windows' (msvcrt's malloc is Wine's HeapAlloc), its system calls are Linux's
under a translation layer, and its CPU times and page-fault counts are
coarser than Windows' own.

    cmake -S . -B build-win -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake
    cmake --build build-win -j2 --target bench_programs
    python3 bench/wine.py [--build build-win] [--out bench/results/wine] [--reps 3]
                          [--only speed,frag] [--scale 1.0]

Builds nothing: each program exists twice in BUILD/bench, bench_NAME-crt.exe
(the C runtime's allocator, msvcrt.dll as Wine provides it) and
bench_NAME-freeway.exe (linked to libfreeway.a). The runs are interleaved:
each repetition runs every case under both allocators, alternating which
goes first. Wine runs with WINEDEBUG=-all in a prefix of its own,
BUILD/bench/wineprefix, made on first use.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ALLOCS = ("crt", "freeway")
ALLOC_NAMES = {"crt": "C runtime (msvcrt, Wine)", "freeway": "freeway (libfreeway.a)"}
NOTE = "Wine results: they show behaviour, not Windows timing."


def count(n, scale):
    return max(1, int(round(n * scale)))


def human(n, binary=False):
    unit, suffixes = (1024, ("", "K", "M", "G")) if binary else (1000, ("", "k", "M", "G"))
    for s in suffixes:
        if n < unit or s == suffixes[-1]:
            return ("%d%s" % (n, s)) if n == int(n) else ("%.1f%s" % (n, s))
        n /= unit
    return str(n)


class Exp:
    """One experiment: cases (label, program, args), the metric its ratio
    table compares (lower is better) and more columns to show."""

    def __init__(self, name, title, seed, what, metric, metric_label, extra, cases):
        self.name, self.title, self.seed, self.what = name, title, seed, what
        self.metric, self.metric_label, self.extra, self.cases = metric, metric_label, extra, cases


def experiments(scale):
    """Small versions of the seed experiments of bench/run.py: a run of
    every case under both allocators takes seconds, not minutes."""
    speed = []
    # bench/run.py's Speed.TABLE (the seed's), at 1/20 of its operations
    for t, m, top in ((4, 10000000, 512), (8, 5000000, 2048), (10, 1000000, 32 << 10),
                      (12, 200000, 128 << 10), (14, 50000, 512 << 10), (16, 20000, 2 << 20)):
        ops = count(m // 20, scale)
        speed.append(("%dT x %s, 256B-%sB" % (t, human(ops), human(top, True)), "speed",
                      ["--threads", t, "--ops", ops, "--min", 256, "--max", top]))
    frag = []
    # bench/run.py's Frag.LARGE without its 10-thread row, at 1/10 of its blocks, 3 loops
    for t, n, top in ((2, 2000000, 256), (4, 800000, 512), (8, 200000, 1024), (12, 15000, 1536)):
        ptrs = count(n // 10, scale)
        frag.append(("%dT x %s, 128B-%sB" % (t, human(ptrs), human(top, True)), "frag",
                     ["--threads", t, "--ptrs", ptrs, "--min", 128, "--max", top, "--loops", 3]))
    strings = []
    for t in (1, 2, 4):
        n = count(1000000, scale)
        strings.append(("%dT x %s" % (t, human(n)), "strings", ["--threads", t, "--iters", n]))
    objects = []
    for size, total in ((128, 4000000), (1024, 2000000), (1 << 20, 4000)):
        n = count(total, scale)
        for t in (1, 2, 4):
            objects.append(("%sB x %s, %dT" % (human(size, True), human(n), t), "objects",
                            ["--threads", t, "--total", n, "--size", size]))
    churn = [("2T, %sB burst" % human(count(128 << 20, scale), True), "churn",
              ["--threads", 2, "--total", count(128 << 20, scale), "--settle-ms", 300, "--poll-ms", 10])]
    return [
        Exp("speed", "malloc/free speed over size ranges", "000",
            "T threads x M operations; an operation frees a random block of the thread's window of live "
            "blocks and allocates one of a random size from 256 B to the range's top (bench/speed.c).",
            "wall_ms", "wall time (ms)", (("cpu_util", "CPU usage (user+sys)/(wall x cores)", "pct"),
                                          ("peak_rss_kb", "peak working set (MiB)", "kib")), speed),
        Exp("frag", "allocate without freeing, in loops (fragmentation)", "000",
            "T threads each allocate N blocks of 128 B to X and keep them; one 8 MiB block is requested; "
            "everything is freed; 3 loops (bench/frag.c). Time = mean allocation time per loop.",
            "loop_ms", "mean allocation time per loop (ms)",
            (("probes_ok", "8 MiB requests that succeeded (of 3)", "int"),
             ("rss_alloc_mib", "working set with every block live (MiB)", "f1"),
             ("rss_free_mib", "working set after the free-all (MiB)", "f1")), frag),
        Exp("strings", "string churn: formatted integer assigned to a std::string", "003",
            "Each thread assigns a freshly formatted 24-digit integer to a std::string (one malloc and "
            "one free per assignment; bench/strings.cpp).", "wall_ms", "wall time (ms)", (), strings),
        Exp("objects", "create and destroy objects, fixed total work split over threads", "004",
            "A fixed total of objects (operator new/delete in batches of 64) split evenly over the "
            "threads (bench/objects.cpp).", "wall_ms", "wall time (ms)", (), objects),
        Exp("churn", "memory given back after a burst", "-",
            "Two threads allocate a burst of small blocks (16-256 B), free them all, then use the "
            "allocator lightly for 300 ms while the working set is sampled (bench/churn.c).",
            "free_ms", "time to free the burst (ms)",
            (("alloc_ms", "time to allocate the burst (ms)", "f1"),
             ("rss_peak_mib", "working set at the peak (MiB)", "f1"),
             ("rss_settled_min_mib", "lowest working set after the frees (MiB)", "f1")), churn),
    ]


def find_wine():
    # the launcher first: it picks the 64-bit or 32-bit loader for the program
    for name in ("wine", "wine64"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("wine.py: neither wine64 nor wine is installed (docs/windows.md)")


def first_line(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0].strip() if lines else "unknown"


def cache_value(build, key):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(r"%s:[A-Z]+=(.*)$" % re.escape(key), line.strip())
                if m:
                    return m.group(1)
    except OSError:
        pass
    return ""


def source_commit():
    """The freeway commit of the source tree this script is in, +dirty when
    it has changes (the build is assumed to be of this tree)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (rev + ("+dirty" if dirty else "")) if rev else "unknown"


def wine_env(prefix):
    env = dict(os.environ)
    env.update(WINEPREFIX=prefix, WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")
    # freeway's options stay at their defaults: the runs measure the default mode
    for k in list(env):
        if k.startswith("FREEWAY_"):
            del env[k]
    return env


def run_one(wine, env, exe, args, timeout):
    argv = [wine, exe] + [str(a) for a in args]
    t0 = time.time()
    # Files, not pipes: Wine's own helper processes inherit the descriptors
    # and would hold a pipe open for seconds after the program ended.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": "timeout after %ds" % timeout}
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    rec = None
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                rec = json.loads(line)
            except ValueError:
                pass
            break
    if rec is None or p.returncode != 0:
        return {"error": "exit %d: %s" % (p.returncode, (stderr or stdout).strip()[-300:])}
    rec["process_s"] = round(time.time() - t0, 3)
    return rec


def median_of(runs, key):
    vals = [r[key] for r in runs if "error" not in r and isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def fmt(v, kind="f1"):
    if v is None:
        return "-"
    if kind == "pct":
        return "%.0f%%" % (100 * v)
    if kind == "kib":
        return "%.1f" % (v / 1024)
    if kind == "int":
        return "%g" % v
    return "%.1f" % v if v >= 10 else "%.2f" % v


def md_table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def geomean(vals):
    vals = [v for v in vals if v and v > 0]
    if not vals:
        return None
    p = 1.0
    for v in vals:
        p *= v
    return p ** (1.0 / len(vals))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build-win", help="the Windows build directory (default build-win)")
    ap.add_argument("--out", default=os.path.join("bench", "results", "wine"), help="where the results go")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of every case and allocator")
    ap.add_argument("--only", default="", help="comma-separated experiments (speed,frag,strings,objects,churn)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the operation and block counts")
    ap.add_argument("--timeout", type=int, default=300, help="seconds for one run")
    opt = ap.parse_args()

    bindir = os.path.join(opt.build, "bench")
    wine = find_wine()
    exps = experiments(opt.scale)
    if opt.only:
        want = set(opt.only.split(","))
        unknown = want - {e.name for e in exps}
        if unknown:
            sys.exit("wine.py: no experiment %s" % ", ".join(sorted(unknown)))
        exps = [e for e in exps if e.name in want]
    for e in exps:
        for _, prog, _ in e.cases:
            for a in ALLOCS:
                exe = os.path.join(bindir, "bench_%s-%s.exe" % (prog, a))
                if not os.path.exists(exe):
                    sys.exit("wine.py: %s is missing: build the bench_programs target of a Windows "
                             "build (docs/windows.md)" % exe)

    prefix = os.path.abspath(os.path.join(bindir, "wineprefix"))
    env = wine_env(prefix)
    if not os.path.isdir(os.path.join(prefix, "drive_c")):
        print("wine.py: making the Wine prefix %s" % os.path.relpath(prefix), flush=True)
        subprocess.run([wine, "wineboot", "-i"], env=env, capture_output=True, timeout=600)

    compiler = cache_value(opt.build, "CMAKE_C_COMPILER")
    meta = {
        "note": NOTE,
        "wine": first_line([wine, "--version"]),
        "compiler": first_line([compiler, "--version"]) if compiler else "unknown",
        "build_type": cache_value(opt.build, "CMAKE_BUILD_TYPE") or "unknown",
        "target": "x86_64" if "x86_64" in compiler else ("i686" if "i686" in compiler else "unknown"),
        "host": "%s %s, %d CPUs" % (platform.system(), platform.machine(), os.cpu_count() or 0),
        "freeway_commit": source_commit(),
        "reps": opt.reps,
        "scale": opt.scale,
        "date": time.strftime("%Y-%m-%d"),
    }

    # One wine server for the whole run, so that no program waits for the
    # previous one's server to shut down or pays for a new one's start.
    server = shutil.which("wineserver") or os.path.join(os.path.dirname(wine), "wineserver")
    subprocess.run([server, "-p"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    runs = {}  # (exp, label) -> alloc -> [records]
    t_start = time.time()
    for rep in range(opt.reps):
        for e in exps:
            for i, (label, prog, args) in enumerate(e.cases):
                order = ALLOCS if (rep + i) % 2 == 0 else ALLOCS[::-1]
                for a in order:
                    exe = os.path.join(bindir, "bench_%s-%s.exe" % (prog, a))
                    rec = run_one(wine, env, exe, args, opt.timeout)
                    runs.setdefault((e.name, label), {}).setdefault(a, []).append(rec)
                    status = rec.get("error") or "%s %.4g" % (e.metric, rec.get(e.metric, float("nan")))
                    print("rep %d/%d  %-8s %-28s %-8s %s" % (rep + 1, opt.reps, e.name, label, a, status),
                          flush=True)
    meta["elapsed_s"] = round(time.time() - t_start, 1)
    subprocess.run([server, "-k"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)

    results = {"meta": meta, "experiments": []}
    md = ["# Benchmarks under Wine", "",
          "**%s** Wine's msvcrt heap is not Windows' heap, its system calls are Linux's behind a "
          "translation layer, and its CPU times and page-fault counts are coarser than Windows' own; "
          "what the figures show is how each allocator behaves (how its time grows with threads and "
          "sizes, what it keeps and gives back), not what either would take on Windows. Wine reports "
          "process CPU time in 10 ms ticks, so the CPU usage of runs of a few tens of ms is rough, and "
          "no page-fault counts (minflt is 0 in the records)." % NOTE, "",
          "- Wine: %s" % meta["wine"],
          "- compiler: %s (%s, %s, linked statically)" % (meta["compiler"], meta["target"], meta["build_type"]),
          "- host: %s; freeway commit %s; %s" % (meta["host"], meta["freeway_commit"], meta["date"]),
          "- %d interleaved repetitions of every case under both allocators (which one goes first "
          "alternates); the tables give medians; scale %g of the default counts; the run took %.0f s"
          % (opt.reps, opt.scale, meta["elapsed_s"]),
          "- crt: `bench_NAME-crt.exe`, the C runtime's malloc (msvcrt.dll as Wine provides it); "
          "freeway: `bench_NAME-freeway.exe`, linked to libfreeway.a (default mode)",
          "- produced by `python3 bench/wine.py` (docs/windows.md, \"Benchmarks under Wine\"); "
          "raw records in results.json", ""]
    summary_rows = []
    for e in exps:
        exp_out = {"name": e.name, "title": e.title, "seed": e.seed, "metric": e.metric, "cases": []}
        md += ["## %s: %s" % (e.name, e.title), "", e.what + (" Seed %s." % e.seed if e.seed != "-" else ""), ""]
        rows, ratios = [], []
        for label, prog, args in e.cases:
            by = runs.get((e.name, label), {})
            case = {"label": label, "program": "bench_%s" % prog, "args": [str(a) for a in args], "runs": by,
                    "median": {}}
            row = [label]
            meds = {}
            for a in ALLOCS:
                rs = by.get(a, [])
                ok = [r for r in rs if "error" not in r]
                meds[a] = median_of(rs, e.metric)
                case["median"][a] = {k: median_of(rs, k) for k, _, _ in ((e.metric, 0, 0),) + e.extra}
                case["median"][a]["ok"] = len(ok)
                case["median"][a]["freeway_linked"] = sum(1 for r in ok if "fw_cautious" in r)
                vals = sorted(r[e.metric] for r in ok if isinstance(r.get(e.metric), (int, float)))
                row.append("%s [%s-%s]" % (fmt(meds[a]), fmt(vals[0]), fmt(vals[-1])) if vals else
                           "failed: %s" % (rs[0].get("error", "?")[:60] if rs else "no run"))
            r = meds["freeway"] / meds["crt"] if meds["crt"] and meds["freeway"] is not None else None
            case["ratio_freeway_crt"] = r
            ratios.append(r)
            row.append("**%.2f**" % r if r is not None else "-")
            rows.append(row)
            exp_out["cases"].append(case)
        md += ["%s, median [min-max] of %d runs; ratio = freeway / crt (below 1: freeway takes less):"
               % (e.metric_label, opt.reps), ""]
        md += md_table(["case", ALLOC_NAMES["crt"], ALLOC_NAMES["freeway"], "freeway / crt"], rows) + [""]
        for key, label, kind in e.extra:
            xrows = [[c["label"]] + [fmt(c["median"][a].get(key), kind) for a in ALLOCS]
                     for c in exp_out["cases"]]
            md += ["%s, median:" % label, ""] + md_table(["case", "crt", "freeway"], xrows) + [""]
        g = geomean(ratios)
        exp_out["geomean_ratio"] = g
        summary_rows.append([e.name, e.metric_label, "%.2f" % g if g else "-",
                             "%.2f-%.2f" % (min(x for x in ratios if x), max(x for x in ratios if x))
                             if any(ratios) else "-"])
        results["experiments"].append(exp_out)

    checks = []
    for e in results["experiments"]:
        for c in e["cases"]:
            for a in ALLOCS:
                m = c["median"][a]
                checks.append((a, m["ok"], m["freeway_linked"]))
    crt_ok = sum(ok for a, ok, _ in checks if a == "crt")
    crt_fw = sum(fw for a, _, fw in checks if a == "crt")
    fw_ok = sum(ok for a, ok, _ in checks if a == "freeway")
    fw_fw = sum(fw for a, _, fw in checks if a == "freeway")
    failed = sum(len(rs) for by in runs.values() for rs in by.values()) - crt_ok - fw_ok
    head = ["## Summary", "",
            "Geometric mean over each experiment's cases of freeway's median / the C runtime's median "
            "(below 1: freeway takes less), and the range of the per-case ratios:", ""]
    head += md_table(["experiment", "metric", "freeway / crt (geomean)", "range"], summary_rows) + [""]
    head += ["Allocator check, from each run's own report (fw_option_get found in the process): "
             "%d of %d crt runs and %d of %d freeway runs had freeway; %d runs failed."
             % (crt_fw, crt_ok, fw_fw, fw_ok, failed), ""]
    idx = md.index("## %s: %s" % (exps[0].name, exps[0].title)) if exps else len(md)
    md[idx:idx] = head

    os.makedirs(opt.out, exist_ok=True)
    with open(os.path.join(opt.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(opt.out, "RESULTS.md"), "w") as f:
        f.write("\n".join(md).rstrip() + "\n")
    print("wrote %s and %s" % (os.path.join(opt.out, "RESULTS.md"), os.path.join(opt.out, "results.json")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
