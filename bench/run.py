#!/usr/bin/env python3
"""Runs freeway's benchmark suite against the system allocator and the peer
allocators, all swapped in with LD_PRELOAD over the same binaries.

    python3 bench/run.py                    # quick pass (about 25 minutes on 2 cores)
    python3 bench/run.py --only frag32      # the 32-bit experiment (needs BUILD/m32)
    python3 bench/run.py --full             # the seeds' own scale
    python3 bench/run.py --only speed,pools --alloc freeway,mimalloc
    python3 bench/run.py --only larson --cases '^4T '  # only the cases whose label matches
    python3 bench/run.py --list             # experiments and allocators

Writes results.json, runs.csv, summary.csv, RESULTS.md and plots/*.png into
the output directory (default bench/results/quick or bench/results/full). A
partial run (--only, --skip, --alloc, --cases) replaces only what it re-ran and
keeps the rest of the results already there (unless --no-merge).
See docs/benchmarks.md.
"""
import argparse
import csv
import datetime
import json
import math
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# ---------------------------------------------------------------------------
# Allocators
# ---------------------------------------------------------------------------

# name -> shared object to preload (None: the C library's own allocator).
# freeway's comes from the build directory; "@peers" ones are built from
# source by bench/peers/build.sh into BUILD/peers/NAME/ (its peer.json names
# the library and where it came from); the others are Debian's packages,
# looked up in the system's library directories.
PEERS = [
    ("system", None),
    ("freeway", "@build"),
    ("freeway-cautious", "@build"),
    ("freeway-secure", "@build"),
    ("jemalloc", "libjemalloc.so.2"),
    ("tcmalloc", "libtcmalloc_minimal.so.4"),
    ("mimalloc", "libmimalloc.so.2"),
    ("mimalloc3", "@peers"),
    ("mimalloc2", "@peers"),
    ("snmalloc", "@peers"),
    ("rpmalloc", "@peers"),
    ("tbb", "libtbbmalloc_proxy.so.2"),
]
ALLOC_NAMES = [n for n, _ in PEERS]
BUILT_PEERS = [n for n, lib in PEERS if lib == "@peers"]
# Environment an allocator's runs get on top of the runner's, and the cautious
# mode (fw_option_get("cautious")) its library must then report.
ALLOC_ENV = {"freeway-cautious": {"FREEWAY_CAUTIOUS": "1"}, "freeway-secure": {"FREEWAY_SECURE": "1"}}
# freeway's columns and the (cautious, secure) options each must report.
FREEWAY_MODE = {"freeway": (0, 0), "freeway-cautious": (1, 0), "freeway-secure": (0, 1)}
# Run only by the experiments that name them in extra_allocs, or when asked
# for with --alloc: cautious mode is a checking tool, hundreds of times slower
# than the default mode, and the speed experiment reports what it costs.
OPT_IN_ALLOCS = {"freeway-cautious", "freeway-secure"}
DEFAULT_ALLOCS = [n for n in ALLOC_NAMES if n not in OPT_IN_ALLOCS]
# freeway's targets are stated against the newest mimalloc release.
NEWEST_MIMALLOC = "mimalloc3"


def peer_build(build_dir, name):
    """What bench/peers/build.sh recorded for a peer it built (its peer.json
    plus the library's path), or None when the library is not there."""
    d = os.path.join(build_dir, "peers", name)
    try:
        with open(os.path.join(d, "peer.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    info["path"] = os.path.join(d, info.get("lib", ""))
    return info if info.get("lib") and os.path.exists(info["path"]) else None


def mi_version_number(text):
    """"3.3.2" -> 30302, mimalloc's mi_version() encoding; None if not x.y.z."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)$", text or "")
    return int(m.group(1)) * 10000 + int(m.group(2)) * 100 + int(m.group(3)) if m else None


def lib_dirs():
    dirs = []
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if not multiarch:
        try:
            multiarch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True,
                                       text=True, check=False).stdout.strip()
        except OSError:
            multiarch = ""
    for base in ("/usr/lib", "/lib"):
        if multiarch:
            dirs.append(os.path.join(base, multiarch))
    dirs += ["/usr/lib64", "/lib64", "/usr/lib", "/usr/local/lib"]
    return dirs


def find_library(soname):
    for d in lib_dirs():
        path = os.path.join(d, soname)
        if os.path.exists(path):
            return path
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) .*=> (\S+)", line)
        if m and m.group(1) == soname and os.path.exists(m.group(2)):
            return m.group(2)
    return None


def package_version(path):
    """Debian package and version owning a file, or ("", "")."""
    for p in (path, os.path.realpath(path)):
        try:
            r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True, check=False)
        except OSError:
            return "", ""
        if r.returncode == 0 and ":" in r.stdout:
            pkg = r.stdout.split(": ")[0].split(",")[0].strip()
            v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                               text=True, check=False).stdout.strip()
            return pkg, v
    return "", ""


def clean_arg(a):
    """A command-line word fit for the saved results: paths inside the
    repository made relative, other absolute paths reduced to their name."""
    a = str(a)
    if not os.path.isabs(a):
        return a
    r = rel(a)
    return r if not os.path.isabs(r) else os.path.basename(a)


def rel(path):
    """A path relative to the repository when it is inside it."""
    try:
        r = os.path.relpath(path, REPO)
    except ValueError:
        return path
    return path if r.startswith("..") else r


# ---------------------------------------------------------------------------
# Running one program
# ---------------------------------------------------------------------------

class RunResult:
    def __init__(self):
        self.ok = False
        self.data = {}
        self.error = ""
        self.stderr = ""
        self.wall_ms = 0.0
        self.maxrss_kb = 0
        self.user_ms = 0.0
        self.sys_ms = 0.0


def run_program(argv, preload=None, env_extra=None, timeout=600.0, want_json=True):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    # Only the freeway-cautious and freeway-secure columns turn their modes
    # on (ALLOC_ENV).
    env.pop("FREEWAY_CAUTIOUS", None)
    env.pop("FREEWAY_SECURE", None)
    if preload:
        env["LD_PRELOAD"] = preload
    if env_extra:
        env.update(env_extra)
    res = RunResult()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, stdin=subprocess.DEVNULL)
        except OSError as e:
            res.error = "cannot start: %s" % e
            return res
        timed_out = []

        def kill():
            timed_out.append(True)
            try:
                proc.kill()
            except OSError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        res.wall_ms = (time.monotonic() - t0) * 1e3
        res.maxrss_kb = ru.ru_maxrss
        res.user_ms = ru.ru_utime * 1e3
        res.sys_ms = ru.ru_stime * 1e3
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        res.stderr = err.read().decode("utf-8", "replace")
    if timed_out:
        res.error = "timeout after %.0f s" % timeout
        return res
    if want_json:
        for line in reversed(stdout.strip().splitlines()):
            line = line.strip()
            if line.startswith("{"):
                try:
                    res.data = json.loads(line)
                except ValueError:
                    pass
                break
    if proc.returncode != 0:
        tail = res.stderr.strip().splitlines()[-3:]
        res.error = "exit status %d%s" % (proc.returncode, (": " + " | ".join(tail)) if tail else "")
        return res
    if want_json and not res.data:
        res.error = "no result line"
        return res
    res.ok = True
    return res


# ---------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------

class Progress:
    def __init__(self, total, stream=sys.stderr):
        self.total = max(total, 1)
        self.done = 0
        self.start = time.monotonic()
        self.stream = stream
        self.tty = stream.isatty()
        self.last_pct = -1

    def step(self, label):
        self.done += 1
        frac = self.done / self.total
        elapsed = time.monotonic() - self.start
        eta = elapsed / frac - elapsed if frac > 0 else 0
        width = 30
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        line = "[%s] %3d%% %d/%d %s elapsed %s eta %s" % (
            bar, int(frac * 100), self.done, self.total, label[:48].ljust(48), fmt_dur(elapsed), fmt_dur(eta))
        if self.tty:
            self.stream.write("\r" + line)
            if self.done == self.total:
                self.stream.write("\n")
        else:
            pct = int(frac * 20)
            if pct != self.last_pct or self.done == self.total:
                self.stream.write(line + "\n")
                self.last_pct = pct
        self.stream.flush()

    def note(self, text):
        if self.tty:
            self.stream.write("\r" + " " * 140 + "\r")
        self.stream.write(text + "\n")
        self.stream.flush()


def fmt_dur(s):
    s = int(s)
    return "%dm%02ds" % (s // 60, s % 60)


# ---------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------

def human_size(n):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            v = n / k
            return ("%g" % round(v, 2)) + unit
    return "%dB" % n


def human_count(n):
    if n >= 1000000 and n % 100000 == 0:
        return "%gM" % (n / 1e6)
    if n >= 1000 and n % 100 == 0:
        return "%gk" % (n / 1e3)
    return str(n)


def scaled(n, scale, minimum=1):
    return max(minimum, int(round(n * scale)))


class Case:
    """One point of an experiment: a command line, run for every allocator."""

    def __init__(self, label, argv, group="", x=None, seed_key=None, env=None, skip_allocs=()):
        self.label = label
        self.argv = argv
        self.group = group
        self.x = x
        self.seed_key = seed_key or label
        self.env = env or {}
        self.skip_allocs = set(skip_allocs)


NOISY_REPS = 11


class Experiment:
    name = ""
    title = ""
    seed = ""          # seed document reproduced; "" for a standard workload
    what = ""
    metric = "wall_ms"          # primary metric (lower is better)
    metric_label = "time (ms)"
    extra_tables = ()           # (metric, title, format)
    xlabel = "threads"
    plot = True
    extra_plots = ()            # (metric, axis label): more charts against threads
    min_reps = 1                # at least this many repetitions (unless --reps is given)
    full_reps = 0               # repetitions of the full pass if not the default
    # Repetitions of the quick pass at least (unless --reps is given). The
    # experiments whose runs spread most get NOISY_REPS: in the quick pass of
    # 3848999 (5 runs a point), one allocator's runs of one row spread by a
    # median factor (max/min over rows and allocators) of 3.5 in prodcons,
    # 2.3 in xmalloc and samesize, 2.1 in pools, 2.0 in frag, 1.7 in
    # heapfree, against 1.1 to 1.6 elsewhere; their runs are short (together
    # about 6 of the pass's 28 minutes), so more of them is cheap.
    quick_reps = 0
    quick_scale = 0.05
    trimmed_mean = False
    extra_allocs = ()           # opt-in allocators (OPT_IN_ALLOCS) this experiment runs by default
    default = True              # part of the quick pass; False: only with --only NAME or --full
    in_summary = True           # counted in the report's geometric means
    bits = 64                   # 32: runs the 32-bit build's programs and libraries
    fixed_reps = 0              # repetitions regardless of --quick/--full (unless --reps)

    def notes(self, summary, labels, alloc_names, cases=(), seeds=None):
        """Extra Markdown lines after the experiment's tables."""
        return []

    def run_args(self, case, alloc, rep, ctx):
        """Extra arguments for one run (ctx: the runner's scratch and output directories)."""
        return []

    def after_run(self, rec, case, alloc, rep, ctx):
        """Adds to a run's record what its files say."""

    # Runs besides the timed ones, made after them and kept out of their
    # figures: side_run_count says how many (for the progress bar),
    # side_runs makes them and returns what to keep in the experiment's entry
    # of results.json (a dict; its keys are side_keys), side_lines reports it.
    side_keys = ()

    def side_run_count(self, cases, allocs):
        return 0

    def side_runs(self, cases, allocs, timeout, progress, ctx):
        return {}

    def side_lines(self, meta_exp, labels, alloc_names):
        """Markdown lines after the experiment's secondary tables."""
        return []

    def cases(self, binpath, scale, full):
        raise NotImplementedError

    def sweep(self, binpath, threads, label, *args, group=""):
        """One case per thread count t: bench_<name> --threads t ARGS...,
        labelled `label` with {t} replaced by t."""
        return [Case(label.format(t=t), [binpath(self.name), "--threads", t] + list(args), group=group, x=t)
                for t in threads]


class Speed(Experiment):
    name = "speed"
    title = "malloc/free speed over size ranges"
    seed = "000_19b1555fca47c325.txt"
    what = ("T threads x M operations; an operation frees a random block of the thread's window of live "
            "blocks and allocates one of a random size from 256 B to the range's top. CPU usage is "
            "(user+sys)/(wall x cores), as in the seed. As the seed's x86 table, freeway runs in both its "
            "modes: 'freeway' is the default (fast) mode, 'freeway-cautious' the same library with "
            "FREEWAY_CAUTIOUS=1 (every block checked, docs/cautious.md).")
    extra_tables = (("cpu_util", "CPU usage (user+sys)/(wall x cores)", "pct"),)
    quick_scale = 0.15
    extra_allocs = ("freeway-cautious", "freeway-secure")
    TABLE = [(4, 10000000, 512), (8, 5000000, 2048), (10, 1000000, 32 << 10),
             (12, 200000, 128 << 10), (14, 50000, 512 << 10), (16, 20000, 2 << 20)]

    def cases(self, binpath, scale, full):
        out = []
        for t, m, top in self.TABLE:
            seed_key = "%dT x %s, 256B-%s" % (t, human_count(m), human_size(top))
            ops = scaled(m, scale)
            label = "%dT x %s, 256B-%s" % (t, human_count(ops), human_size(top))
            out.append(Case(label, [binpath("speed"), "--threads", t, "--ops", ops, "--min", 256, "--max", top],
                            x=t, seed_key=seed_key))
        return out

    def notes(self, summary, labels, alloc_names, cases=(), seeds=None):
        if "freeway-cautious" not in alloc_names:
            return []
        x86 = ((seeds or {}).get(self.name) or {}).get("x86", {})
        scols, srows = x86.get("columns", []), x86.get("rows", {})

        def seed_ms(key, col):
            vals = srows.get(key)
            return vals[scols.index(col)] if vals and col in scols else None

        rows = []
        for l, c in zip(labels, cases):
            fast, slow = med(summary, l, "freeway", self.metric), med(summary, l, "freeway-cautious", self.metric)
            secure = med(summary, l, "freeway-secure", self.metric)
            sysv = med(summary, l, "system", self.metric)
            crt, s_slow, s_fast = (seed_ms(c.seed_key, k) for k in ("CRT ms", "NEW cautious ms", "NEW fast ms"))
            rows.append([l, cell_stat(summary.get((l, "freeway")), self.metric),
                         cell_stat(summary.get((l, "freeway-secure")), self.metric),
                         cell_stat(summary.get((l, "freeway-cautious")), self.metric),
                         "**%s**" % fmt_ratio(ratio(secure, fast)),
                         "**%s**" % fmt_ratio(ratio(slow, fast)), fmt_ratio(ratio(slow, sysv)),
                         "-" if crt is None else "%g" % crt, "-" if s_fast is None else "%g" % s_fast,
                         "-" if s_slow is None else "%g" % s_slow, fmt_ratio(ratio(s_slow, s_fast)),
                         fmt_ratio(ratio(s_slow, crt))])
        lines = ["**Each mode against the default (fast) mode**: the secure level (FREEWAY_SECURE=1) and "
                 "cautious mode (FREEWAY_CAUTIOUS=1), %s, median [min-max]; the seed's x86 "
                 "(32-bit) figures at the seed's scale, on its hardware, where it timed both its modes:"
                 % self.metric_label,
                 "", md_table(["case", "freeway (fast)", "freeway-secure", "freeway-cautious", "secure / fast",
                               "cautious / fast", "cautious / system", "seed x86: CRT", "seed x86: fast",
                               "seed x86: cautious", "seed: cautious / fast", "seed: cautious / CRT"], rows), ""]
        # Every run says which mode it measured (bench_json_fw_mode).
        checks = []
        for a, wants in sorted(FREEWAY_MODE.items()):
            for key, want in zip(("fw_cautious", "fw_secure"), wants):
                seen = [summary.get((l, a), {}).get(key) for l in labels]
                n = sum(st["n"] for st in seen if st)
                right = sum(st["n"] for st in seen if st and st["min"] == st["max"] == want)
                runs = sum(summary.get((l, a), {}).get("ok", 0) for l in labels)
                if runs:
                    checks.append("%s: %d of %d runs reported %s = %d" % (a, right, runs, key, want)
                                  + ("" if right == n == runs else " (MISMATCH: %d reported)" % n))
        lines += ["Mode check, from each run's own report (fw_option_get(\"cautious\") and "
                  "fw_option_get(\"secure\") in the benchmark process): " + "; ".join(checks) + ".", ""]
        return lines


class Frag(Experiment):
    name = "frag"
    title = "allocate without freeing, in loops (fragmentation)"
    seed = "000_19b1555fca47c325.txt"
    what = ("T threads each allocate N blocks of 128 B to X and keep them; then one 8 MiB block is "
            "requested; then everything is freed, and the loop starts again. Time = mean allocation "
            "time per loop (the seed's 'average time'); the 8 MiB probe and RSS are reported per run. "
            "For freeway, one more run of each case, outside the figures, saves its heap map with every "
            "block live and after the last free-all (below the RSS tables).")
    metric = "loop_ms"
    metric_label = "mean time per loop (ms)"
    extra_tables = (("probes_ok", "8 MiB requests that succeeded (of loops)", "probe"),
                    ("rss_alloc_mib", "RSS with every block live (MiB)", "f1"),
                    ("rss_free_mib", "RSS after the free-all (MiB)", "f1"))
    quick_scale = 0.1
    quick_reps = NOISY_REPS
    full_reps = 3               # each run already averages its loops
    LARGE = [(2, 2000000, 256), (4, 800000, 512), (8, 200000, 1024), (10, 50000, 1280), (12, 15000, 1536)]
    SMALL = [(2, 1000000, 256), (4, 400000, 512), (8, 100000, 1024), (10, 50000, 1280), (12, 25000, 1536)]

    def cases(self, binpath, scale, full):
        loops = 10 if full else 3
        out = []
        for table, rows in (("large", self.LARGE), ("small", self.SMALL)):
            for t, n, top in rows:
                seed_key = "%s: %dT x %s, 128B-%s" % (table, t, human_count(n), human_size(top))
                label = "%s: %dT x %s, 128B-%s" % (table, t, human_count(scaled(n, scale)), human_size(top))
                out.append(Case(label, [binpath("frag"), "--threads", t, "--ptrs", scaled(n, scale),
                                        "--min", 128, "--max", top, "--loops", loops],
                                group=table + " table", x=t, seed_key=seed_key))
        return out

    # The heap maps: bench_frag --heap-map PREFIX writes freeway's map
    # (fw_heap_map_json, format freeway-map) at two moments of the last loop.
    MAP_ALLOC = "freeway"
    MAP_MOMENTS = (("live", "every block live (before the last 8 MiB request)"),
                   ("end", "after the last free-all"))
    side_keys = ("heap_maps",)

    def side_run_count(self, cases, allocs):
        return len(cases) if any(a["name"] == self.MAP_ALLOC for a in allocs) else 0

    def side_runs(self, cases, allocs, timeout, progress, ctx):
        """One run of each case under freeway with --heap-map: its maps saved
        as OUT/maps/frag/<case>-<moment>.json, drawn by `freeway report
        --svg` into OUT/plots/frag-map-<case>-<moment>.svg, and summed up."""
        fw = next((a for a in allocs if a["name"] == self.MAP_ALLOC), None)
        if fw is None:
            return {}
        out_dir = ctx["out_dir"]
        maps_rel, plots_rel = os.path.join("maps", self.name), "plots"
        maps_dir, plots_dir = os.path.join(out_dir, maps_rel), os.path.join(out_dir, plots_rel)
        os.makedirs(maps_dir, exist_ok=True)
        os.makedirs(plots_dir, exist_ok=True)
        moments = [m for m, _ in self.MAP_MOMENTS]
        # Only this run's maps stay (the cases may have changed), but for a
        # run of some cases (--cases) whose other rows are kept: then only
        # theirs go.
        names = {"%s-%s" % (slug(c.label), m) for c in cases for m in moments}
        for d, pattern in ((maps_dir, r"(.*-(%s))\.json$" % "|".join(moments)),
                           (plots_dir, r"%s-map-(.*)\.svg$" % self.name)):
            for f in os.listdir(d):
                m = re.match(pattern, f)
                if m and (not ctx.get("other_cases_kept") or m.group(1) in names):
                    os.remove(os.path.join(d, f))
        tool = os.path.join(REPO, "tools", "freeway")
        no_tool = "" if os.path.isfile(tool) else "%s not found" % rel(tool)
        kept = {}
        for case in cases:
            prefix = os.path.join(ctx["scratch"], "heapmap-" + slug(case.label))
            argv = [str(x) for x in case.argv] + ["--heap-map", prefix]
            r = run_program(argv, preload=fw["path"], env_extra=run_env(case, fw), timeout=timeout)
            entry = {"argv": " ".join(clean_arg(x) for x in case.argv) + " --heap-map PREFIX"}
            kept[case.label] = entry
            if not r.ok or not r.data.get("heap_map"):
                entry["error"] = r.error or ("the library has no fw_heap_map_json" if "heap_map" in r.data
                                             else "bench_frag does not know --heap-map (rebuild it)")
                progress.note("  %s / %s / %s heap map: %s" % (self.name, case.label, fw["name"], entry["error"]))
                progress.step("%s heap map %s" % (self.name, case.label))
                continue
            entry["rss_alloc_mib"] = r.data.get("rss_alloc_mib")
            entry["rss_free_mib"] = r.data.get("rss_free_mib")
            drawing = []
            for moment in moments:
                m = entry.setdefault("maps", {}).setdefault(moment, {})
                src = "%s-%s.json" % (prefix, moment)
                try:
                    with open(src) as f:
                        m.update(heap_map_summary(json.load(f)))
                except (OSError, ValueError, KeyError, TypeError) as e:
                    m["error"] = "no readable map (%s)" % (e.__class__.__name__ if not isinstance(e, OSError)
                                                          else e.strerror)
                    continue
                name = "%s-%s" % (slug(case.label), moment)
                shutil.copyfile(src, os.path.join(maps_dir, name + ".json"))
                m["json"] = os.path.join(maps_rel, name + ".json")
                if no_tool:
                    m["svg_error"] = no_tool
                    continue
                svg = os.path.join(plots_rel, "%s-map-%s.svg" % (self.name, name))
                out = open(os.path.join(out_dir, svg), "w")
                try:
                    proc = subprocess.Popen([sys.executable, tool, "report", "--svg", os.path.join(out_dir, m["json"])],
                                            stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
                except OSError as e:
                    out.close()
                    os.remove(os.path.join(out_dir, svg))
                    m["svg_error"] = "cannot start %s (%s)" % (rel(tool), e.strerror)
                    continue
                drawing.append((m, svg, out, proc))
            for m, svg, out, proc in drawing:  # the moments' drawings run side by side
                try:
                    _, err = proc.communicate(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    _, err = proc.communicate()
                out.close()
                if proc.returncode == 0:
                    m["svg"] = svg
                else:
                    os.remove(os.path.join(out_dir, svg))
                    tail = err.decode("utf-8", "replace").strip().splitlines()[-1:]
                    m["svg_error"] = "freeway report --svg failed (exit status %d%s)" % (
                        proc.returncode, (": " + tail[0]) if tail else "")
            progress.step("%s heap map %s" % (self.name, case.label))
        return {"heap_maps": kept}

    def side_lines(self, meta_exp, labels, alloc_names):
        maps = meta_exp.get("heap_maps")
        if maps is None:
            return ["freeway's heap maps: not made in this run.", ""] if self.MAP_ALLOC in alloc_names else []
        rows, undrawn = [], []
        for l in labels:
            e = maps.get(l)
            if e is None:
                continue
            for m in e.get("maps", {}).values():
                if m.get("svg_error") and m["svg_error"] not in undrawn:
                    undrawn.append(m["svg_error"])
            if e.get("error"):
                rows.append([l] + ["no map: " + e["error"]] * len(self.MAP_MOMENTS))
                continue
            row = [l]
            for moment, _ in self.MAP_MOMENTS:
                m = e.get("maps", {}).get(moment, {})
                rss = e.get("rss_alloc_mib" if moment == "live" else "rss_free_mib")
                row.append(heap_map_cell(m, rss))
            rows.append(row)
        if not rows:
            return []
        return ["**freeway's heap maps** beside the RSS figures above: one more run of each case under freeway, "
                "outside the figures, where `bench_frag --heap-map` has the library write its heap map "
                "(`fw_heap_map_json`, format freeway-map, docs/observability.md) with every block live, just "
                "before the last loop's 8 MiB request, and after the last free-all; drawn by `tools/freeway "
                "report --svg`. Committed: the segments' memory not purged (and the huge blocks); live: the bytes of "
                "live blocks; fill: those bytes / the bytes of the blocks their pages hold; RSS: that run's own "
                "figure at the same moment.", "",
                md_table(["case"] + [title for _, title in self.MAP_MOMENTS], rows), ""] + (
                    ["Maps not drawn: %s." % "; ".join(undrawn), ""] if undrawn else [])


def heap_map_summary(doc):
    """The figures of a freeway-map report (docs/observability.md) the frag
    section shows: segments, bytes by slice state, live bytes and fill, as
    `freeway report` counts them."""
    if doc.get("format") != "freeway-map":
        raise ValueError("not a freeway-map report")
    slice_size = doc["slice_size"]
    out = {"segments": 0, "abandoned": 0, "segment_bytes": 0, "live_bytes": 0, "block_bytes": 0,
           "huge_blocks": doc["huge"]["blocks"], "huge_bytes": doc["huge"]["bytes"],
           "page": 0, "cached": 0, "free": 0, "purged": 0, "reserved": 0}
    for seg in doc["segments"]:
        out["segments"] += 1
        out["abandoned"] += 1 if seg.get("abandoned") else 0
        out["segment_bytes"] += seg["size"]
        for sl in seg["slices"]:
            out[sl["state"]] += sl["count"] * slice_size
            if sl["state"] == "page":
                out["live_bytes"] += sl["used"] * sl["block_size"]
                out["block_bytes"] += sl["capacity"] * sl["block_size"]
    out["committed_bytes"] = out["segment_bytes"] - out["purged"] + out["huge_bytes"]
    out["fill"] = out["live_bytes"] / out["block_bytes"] if out["block_bytes"] else None
    return out


def fmt_bytes(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return "%.1f %s" % (n / k, unit)
    return "%d B" % n


def heap_map_cell(m, rss_mib):
    """One map in a table cell: links, then its figures."""
    if not m or m.get("error"):
        return "no map: " + (m.get("error") if m else "not written")
    links = "[map](%s)" % m["svg"] if m.get("svg") else "not drawn"
    figs = ["%d segment%s" % (m["segments"], "" if m["segments"] == 1 else "s")]
    if m.get("abandoned"):
        figs[-1] += " (%d abandoned)" % m["abandoned"]
    figs.append("%s committed" % fmt_bytes(m["committed_bytes"]))
    figs.append("%s live" % fmt_bytes(m["live_bytes"]))
    if m.get("fill") is not None:
        figs.append("fill %.1f%%" % (100 * m["fill"]))
    if m.get("huge_blocks"):
        figs.append("%d huge block%s" % (m["huge_blocks"], "" if m["huge_blocks"] == 1 else "s"))
    if rss_mib is not None:
        figs.append("RSS %.1f MiB" % rss_mib)
    return "%s, [JSON](%s): %s" % (links, m["json"], ", ".join(figs))


class Frag32(Experiment):
    name = "frag32"
    title = "allocate without freeing, 100 loops, in a 32-bit process: the 8 MiB request and the address space"
    seed = "000_19b1555fca47c325.txt"
    what = ("The frag experiment's loop (T threads each allocate N blocks of 128 B to X and keep them; one "
            "8 MiB block is requested; everything is freed) run 100 times by the 32-bit (-m32) build of "
            "bench_frag, at the seed's sizes, under the 32-bit system allocator and the 32-bit freeway. "
            "'4 GiB space': a 32-bit process on a 64-bit kernel, which gets almost all 4 GiB. '2 GiB space': "
            "what a 32-bit Windows process gets, as in the seed: everything above 2 GiB is reserved before "
            "any library's constructor runs (bench_frag --space 2G; the libraries and the main stack, "
            "mapped by the loader and the kernel above 2 GiB, stay there). Reported: the loop whose 8 MiB "
            "request first failed (or that none did), the first loop where a small block could not be had, "
            "and the address space from /proc/self/maps just before the last loop's request (every block "
            "live) and after the last free-all: what is mapped, and the largest free range.")
    metric = "probe_first_fail"
    metric_label = "loop of the first failed 8 MiB request"
    plot = False
    default = False             # opt-in: --only frag32 (and the full pass)
    in_summary = False
    bits = 32
    fixed_reps = 1              # the outcome is a loop number; one run per point unless --reps
    quick_scale = 1.0           # the seed's sizes
    LOOPS = 100
    SPACES = [("4 GiB", None), ("2 GiB", "2G")]
    MOMENTS = (("live", "before the last 8 MiB request, every block live"), ("end", "after the last free-all"),
               ("fail", "at the first failed 8 MiB request"))

    def cases(self, binpath, scale, full):
        rows = Frag.LARGE if full else Frag.LARGE[:2]
        out = []
        for space_label, space in self.SPACES:
            for t, n, top in rows:
                seed_key = "large: %dT x %s, 128B-%s" % (t, human_count(n), human_size(top))
                label = "%s space: %dT x %s, 128B-%s" % (space_label, t, human_count(scaled(n, scale)),
                                                         human_size(top))
                argv = [binpath("frag"), "--threads", t, "--ptrs", scaled(n, scale), "--min", 128, "--max", top,
                        "--loops", self.LOOPS, "--allow-fail", 1] + (["--space", space] if space else [])
                out.append(Case(label, argv, group=space_label + " space", x=t, seed_key=seed_key))
        return out

    def _prefix(self, case, alloc, rep, ctx):
        return os.path.join(ctx["scratch"], "%s-%s-%d" % (slug(case.label), alloc["name"], rep))

    def run_args(self, case, alloc, rep, ctx):
        return ["--maps", self._prefix(case, alloc, rep, ctx)]

    def after_run(self, rec, case, alloc, rep, ctx):
        data = rec["data"]
        top = data.get("space_top_mib") or 4096
        prefix = self._prefix(case, alloc, rep, ctx)
        maps = {}
        for moment, _ in self.MOMENTS:
            path = "%s-%s.maps" % (prefix, moment)
            try:
                with open(path) as f:
                    text = f.read()
            except OSError:
                continue
            regions = parse_maps(text, top * MIB)
            st = space_stats(regions, mmap_min_addr(), top * MIB)
            maps[moment] = regions
            for k, v in st.items():
                data["%s_%s" % (k, moment)] = v
            if ctx.get("maps_out"):
                os.makedirs(ctx["maps_out"], exist_ok=True)
                with open(os.path.join(ctx["maps_out"], "%s-%s-%d-%s.maps" % (
                        slug(case.label), alloc["name"], rep, moment)), "w") as f:
                    f.write(clean_maps(text))
        rec["maps"] = maps


MIB = 1 << 20
# What a line of /proc/PID/maps is, for the address-space pictures.
MAP_KINDS = [("image", "program and libraries", "dimgray"),
             ("brk", "brk heap ([heap])", "tab:blue"),
             ("anon", "anonymous read/write (allocator memory, thread stacks)", "tab:orange"),
             ("reserved", "anonymous, no access (reserved, guard pages)", "navajowhite"),
             ("system", "main stack, vdso, vvar", "black"),
             ("outside", "beyond the space (bench_frag --space)", "lightgray")]


def clean_maps(text):
    """A maps file fit for the saved results: the repository's paths made
    relative, the system's library paths kept, other paths reduced to their name."""
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) > 5 and parts[5].startswith("/"):
            path = parts[5].strip()
            keep = path.startswith(("/usr/", "/lib/", "/lib32/", "/lib64/"))
            r = rel(path)
            line = line[:line.rindex(path)] + (path if keep else r if not os.path.isabs(r) else os.path.basename(path))
        out.append(line)
    return "\n".join(out) + "\n"


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def mmap_min_addr():
    try:
        with open("/proc/sys/vm/mmap_min_addr") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 65536


def parse_maps(text, top):
    """[[start, end, kind], ...] from /proc/PID/maps, neighbours of one kind merged."""
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or "-" not in parts[0]:
            continue
        a, b = (int(x, 16) for x in parts[0].split("-"))
        perms, path = parts[1], parts[5].strip() if len(parts) > 5 else ""
        if path.startswith("/"):
            kind = "image"
        elif path == "[heap]":
            kind = "brk"
        elif path.startswith("["):
            kind = "system"
        elif perms.startswith("---"):
            kind = "outside" if a >= top else "reserved"
        else:
            kind = "anon"
        if out and out[-1][1] == a and out[-1][2] == kind:
            out[-1][1] = b
        else:
            out.append([a, b, kind])
    return out


def space_stats(regions, lo, top):
    """Mapped and free MiB in [lo, top), and the largest free range (start, MiB)."""
    cursor, free, gaps = lo, 0, []
    for a, b, _ in sorted(regions):
        a, b = max(a, lo), min(b, top)
        if b <= a:
            continue
        if a > cursor:
            gaps.append((cursor, a))
        cursor = max(cursor, b)
    if top > cursor:
        gaps.append((cursor, top))
    free = sum(b - a for a, b in gaps)
    big = max(gaps, key=lambda g: g[1] - g[0]) if gaps else (0, 0)
    return {"free_mib": free / MIB, "mapped_mib": (top - lo - free) / MIB,
            "largest_gap_mib": (big[1] - big[0]) / MIB, "largest_gap_at_mib": big[0] / MIB,
            "gaps_8mib": sum(1 for a, b in gaps if b - a >= 8 * MIB)}


class Pools(Experiment):
    name = "pools"
    title = "pools of objects: one lock vs sub-pools, std::list vs private list"
    seed = "000_19b1555fca47c325.txt"
    what = ("Each operation releases a held 128 B object to a random sub-pool and acquires one from a "
            "random sub-pool. 'std' keeps free objects in a std::list (a node allocated and freed per "
            "operation), 'private' in an intrusive list; 'fwpool' uses freeway's fw_pool_* API (looked "
            "up with dlsym; skipped under other allocators), its shards set to the sub-pool count; "
            "'direct' is malloc/free per operation with no pool.")
    extra_tables = (("cpu_util", "CPU usage (user+sys)/(wall x cores)", "pct"),)
    quick_scale = 0.1
    quick_reps = NOISY_REPS
    THREADS = [(4, 1000000), (8, 1000000), (16, 300000)]

    def cases(self, binpath, scale, full):
        subs = [1, 4, 8, 16, 32, 64] if full else [1, 8, 64]
        out = []
        for lst in ("std", "private", "fwpool"):
            for k in subs:
                for t, m in self.THREADS:
                    kname = "baseline" if k == 1 else "%d sub-pools" % k
                    seed_key = "%s %dT x %dk %s" % (lst, t, m // 1000, kname)
                    ops = scaled(m, scale)
                    label = "%s %dT x %s %s" % (lst, t, human_count(ops), kname)
                    out.append(Case(label, [binpath("pools"), "--threads", t, "--ops", ops,
                                            "--subpools", k, "--list", lst],
                                    group="%s, %s" % (lst, kname), x=t, seed_key=seed_key))
        for t, m in self.THREADS:
            label = "direct %dT x %s" % (t, human_count(scaled(m, scale)))
            out.append(Case(label, [binpath("pools"), "--threads", t, "--ops", scaled(m, scale), "--list", "direct"],
                            group="direct malloc/free", x=t))
        return out


class HeapFree(Experiment):
    name = "heapfree"
    title = "releasing 1M small blocks: free one by one vs destroying the heap"
    seed = "000_19b1555fca47c325.txt"
    what = ("1M blocks of 16-128 B are allocated and then released. 'free' = free() block by block "
            "(every allocator); with freeway's heap API (fw_heap_*, looked up with dlsym) also the same "
            "blocks taken from a private heap and released by fw_heap_destroy at once. Medians of the "
            "rounds inside one run, then over runs.")
    metric = "free_ms"
    metric_label = "free block by block (ms)"
    extra_tables = (("malloc_ms", "allocating the blocks (ms)", "f1"),
                    ("heap_free_ms", "freeway heap: free block by block + destroy (ms)", "f1"),
                    ("heap_destroy_ms", "freeway heap: fw_heap_destroy only (ms)", "f2"))
    plot = False
    quick_scale = 1.0
    quick_reps = NOISY_REPS

    def cases(self, binpath, scale, full):
        n = scaled(1000000, scale)
        return [Case("%s blocks, 16-128B" % human_count(n),
                     [binpath("heapfree"), "--blocks", n, "--rounds", 5 if full else 1])]


class SameSize(Experiment):
    name = "samesize"
    title = "same-size malloc then free per thread (Test 1) and with fill + check (Test 2)"
    seed = "001_3f3672d33bf8207a.txt"
    what = ("Every thread repeats: allocate 100 blocks of 64 B, then free them (Test 2: fill each block "
            "after malloc and check its whole content before free). The work per thread is fixed. As in "
            "the seed each point is also summarised as the mean with the min and max run dropped.")
    extra_tables = (("ms_per_thread", "time per thread = total / threads (ms)", "f1"),)
    extra_plots = (("ms_per_thread", "time per thread (ms)"),)
    quick_scale = 0.04
    quick_reps = NOISY_REPS
    trimmed_mean = True
    min_reps = 5                # the seed: at least 5 runs, fastest and slowest dropped

    def cases(self, binpath, scale, full):
        out = []
        rounds = scaled(50000, scale)
        for test, check in (("Test 1", 0), ("Test 2", 1)):
            out += self.sweep(binpath, range(1, 11), test + ", {t}T", "--rounds", rounds, "--batch", 100,
                              "--size", 64, "--check", check, group=test)
        return out


class Scaled(Experiment):
    name = "scaled"
    title = "contention-normalised load"
    seed = "002_39120c6782f82bab.txt"
    what = ("Each thread does W x min(T, cores) / T operations (free a random block of a 256-block "
            "window, allocate 8-512 B), so a contention-free allocator takes the same time at every "
            "thread count; time above the 1-thread time is contention.")
    quick_scale = 0.5
    min_reps = 7                # a 2-core machine's noise moves single runs by 30%

    def cases(self, binpath, scale, full):
        return self.sweep(binpath, (1, 2, 4, 8, 16), "{t}T", "--work", scaled(10000000, scale))

    def notes(self, summary, labels, alloc_names, cases=(), seeds=None):
        # With the total work fixed, throughput at T threads is 1/time(T).
        rows = []
        for a in alloc_names:
            t2, t16 = med(summary, "2T", a, self.metric), med(summary, "16T", a, self.metric)
            rows.append([a, "-" if not (t2 and t16) else "%.2f" % (t2 / t16)])
        return ["Throughput kept at 16 threads, relative to 2 threads (time at 2T / time at 16T of the "
                "medians; 1.00 = no loss, higher is better):", "", md_table(["allocator", "16T / 2T"], rows), ""]


class Strings(Experiment):
    name = "strings"
    title = "string churn: formatted integer assigned to a std::string"
    seed = "003_42323dc2e47f932d.txt"
    what = ("Each thread assigns a freshly formatted 24-digit integer to a std::string (beyond the "
            "small-string buffer: one malloc and one free per assignment) 10M times. snprintf is most "
            "of the work (under callgrind an allocator's malloc+free is ~40 of ~1200 instructions per assignment), so "
            "allocators differ by a few per cent at most, less than a shared 2-core machine moves the "
            "time of one run: the user CPU time, which does not count time spent waiting for a core, "
            "ranks them more steadily.")
    extra_tables = (("user_ms", "user CPU time (ms)", "f1"),
                    ("cpu_util", "CPU usage (user+sys)/(wall x cores)", "pct"))
    extra_plots = (("cpu_util", "CPU usage (fraction of all cores)"),)
    quick_scale = 0.04
    # Wall time of a quick 1-thread run on a loaded 2-core machine: 21-85 ms
    # for 21 ms of CPU. Medians of 3 runs put freeway / mimalloc3 anywhere in
    # 0.58-1.64 (5-95 %), of 7 in 0.75-1.30; runs 2.5x as long were no
    # steadier (the noise is other processes, not the run's own length).
    min_reps = 7

    def cases(self, binpath, scale, full):
        n = scaled(10000000, scale)
        threads = range(1, 9) if full else (1, 2, 3, 4, 6, 8)
        return self.sweep(binpath, threads, "{t}T x " + human_count(n), "--iters", n)


class Objects(Experiment):
    name = "objects"
    title = "create and destroy objects, fixed total work split over threads"
    seed = "004_2d738c79ad3b7617.txt"
    what = ("A fixed total of objects (new/delete, constructor writes header and last byte, batches of "
            "64) split evenly over 1..8 threads. The ratio table shows time relative to the system "
            "allocator on 1 thread for the same size, as the seed does.")
    quick_scale = 0.2
    SIZES = [(128, 20000000), (1024, 10000000), (1 << 20, 200000)]
    relative_to_system_1t = True

    def cases(self, binpath, scale, full):
        out = []
        for size, total in self.SIZES:
            n = scaled(total, scale)
            out += self.sweep(binpath, range(1, 9) if full else (1, 2, 4, 8),
                              "%s x %s, {t}T" % (human_size(size), human_count(n)), "--total", n, "--size", size,
                              group="%s objects" % human_size(size))
        return out


class Larson(Experiment):
    name = "larson"
    title = "server-style rolling working set, frees from other threads"
    what = ("T arrays of 1000 live blocks (16-1024 B); each round starts T new threads and thread i "
            "replaces random blocks of array (i + round) mod T, so the blocks it frees were allocated by "
            "other (mostly exited) threads.")
    quick_scale = 0.4

    def cases(self, binpath, scale, full):
        ops = scaled(200000, scale)
        return self.sweep(binpath, (1, 2, 4, 8), "{t}T x 20 rounds x " + human_count(ops), "--rounds", 20, "--ops", ops)


class ProdCons(Experiment):
    name = "prodcons"
    title = "producer/consumer pipeline"
    what = ("P producer/consumer pairs; producers allocate 16 B-4 KiB messages, consumers check and free "
            "them (every block freed by another thread than its allocator).")
    quick_scale = 0.5
    quick_reps = NOISY_REPS

    def cases(self, binpath, scale, full):
        n = scaled(2000000, scale)
        return [Case("%d pairs x %s msgs" % (p, human_count(n)),
                     [binpath("prodcons"), "--pairs", p, "--msgs", n], x=2 * p)
                for p in (1, 2, 4)]


class FalseShare(Experiment):
    name = "falseshare"
    title = "false sharing of small blocks (thrash: own blocks; scratch: blocks handed over)"
    what = ("thrash: each thread allocates an 8 B block, writes it 100 times, frees it, repeatedly. "
            "scratch: the same after each thread freed a block the main thread allocated for it. "
            "Times that grow with threads past the cores mean shared cache lines.")
    quick_scale = 0.2

    def cases(self, binpath, scale, full):
        n = scaled(1000000, scale)
        out = []
        for mode in ("thrash", "scratch"):
            for t in (1, 2, 4):
                out.append(Case("%s %dT x %s" % (mode, t, human_count(n)),
                                [binpath("falseshare"), "--mode", mode, "--threads", t, "--iters", n],
                                group=mode, x=t))
        return out


class ReallocGrow(Experiment):
    name = "reallocgrow"
    title = "realloc-heavy growth"
    what = "Each thread grows 64 buffers in turn by random 1-64 B steps to the final size with realloc."
    quick_scale = 0.5

    def cases(self, binpath, scale, full):
        final = 256 << 10 if full else 64 << 10
        rounds = scaled(4, scale)
        return self.sweep(binpath, (1, 2, 4), "{t}T, 64 x %s, %d rounds" % (human_size(final), rounds),
                          "--final", final, "--rounds", rounds)


class Churn(Experiment):
    name = "churn"
    title = "memory returned after a burst"
    what = ("T threads allocate a total of 1 GiB (full; 256 MiB quick) in 16-256 B blocks, free them "
            "all, then keep calling malloc/free lightly while RSS is sampled from /proc/self/statm. "
            "Lower RSS after the free and after settling is better.")
    metric = "rss_end_mib"
    metric_label = "RSS at the end of settling (MiB)"
    extra_tables = (("rss_peak_mib", "RSS at the peak (MiB)", "f1"),
                    ("rss_after_free_mib", "RSS right after free-all (MiB)", "f1"),
                    ("rss_settled_min_mib", "lowest RSS while settling (MiB)", "f1"),
                    ("wall_ms", "allocate + free time (ms)", "f1"))
    plot = False
    quick_scale = 0.25

    def cases(self, binpath, scale, full):
        total = scaled(1 << 30, scale)
        settle = 2000 if full else 400
        threads = (1, 2) if full else (2,)
        return self.sweep(binpath, threads, "{t}T, %s, settle %d ms" % (human_size(total), settle),
                          "--total", total, "--settle-ms", settle)


class Python(Experiment):
    name = "python"
    title = "a real program: the Python interpreter building and dropping objects"
    what = ("bench/pyalloc.py builds a million-scale list of records, an index dict and a joined text, "
            "drops them, repeatedly. 'malloc' sets PYTHONMALLOC=malloc (every object through the "
            "allocator under test); 'pymalloc' leaves the interpreter's small-object allocator on.")
    plot = False
    quick_scale = 0.05

    def cases(self, binpath, scale, full):
        n = scaled(1000000, scale)
        rounds = 5 if full else 2
        out = []
        for variant in ("malloc", "pymalloc"):
            env = {"PYTHONMALLOC": "malloc"} if variant == "malloc" else {"PYTHONMALLOC": ""}
            out.append(Case("%s, %s records x %d" % (variant, human_count(n), rounds),
                            [sys.executable, os.path.join(HERE, "pyalloc.py"), "--records", n, "--rounds", rounds],
                            env=env))
        return out


class FastPath(Experiment):
    name = "fastpath"
    title = "instructions per operation on the fast path (callgrind)"
    what = ("bench_fastpath runs N malloc+free pairs (or N steps of a ring of 1000 live blocks: free the "
            "oldest, allocate a new one) under valgrind --tool=callgrind; the instruction count of a run "
            "with 2N minus that of a run with N, divided by N, is the cost of one step with start-up "
            "cancelled. Counts include the benchmark loop itself (a few instructions, shown as 'loop').")
    metric = "instr_per_op"
    metric_label = "instructions per malloc+free"
    plot = False
    CONFIGS = [("pair", 16), ("pair", 64), ("pair", 256), ("pair", 1024), ("ring", 64), ("ring", 1024),
               ("calloc", 64), ("aligned", 64), ("realloc", 64)]
    # Full passes only: the C library and mimalloc 2.0.9 and 2.3 map and
    # unmap a block of 256 KiB at each pair, which under valgrind took the
    # quick pass's fastpath experiment from some 3 to 8.4 minutes.
    FULL_CONFIGS = [("pair", 256 << 10)]

    # (bench_apipath's modes: calloc, aligned_alloc and realloc)
    APIPATH = ("calloc", "aligned", "realloc")

    def cases(self, binpath, scale, full):
        return [Case("%s %s" % (mode, human_size(size)),
                     [binpath("apipath" if mode in self.APIPATH else "fastpath"), mode, size])
                for mode, size in self.CONFIGS + (self.FULL_CONFIGS if full else [])]


class BigChurn(Experiment):
    name = "bigchurn"
    title = "big blocks allocated, touched and freed over and over by one thread"
    what = ("One thread keeps 3 slots; an operation frees the block in a random slot and allocates a new "
            "one of a random size (5-25 MiB, or 1-4 MiB), writing a byte in every page of it. Models a "
            "program cycling through big buffers (decoders, image or batch processing): the cost is "
            "mostly what the allocator makes the kernel do. Minor page faults of the timed loop are "
            "reported beside the time; faults per page touched is near 1 when every block is fresh "
            "memory and near 0 when blocks are reused.")
    extra_tables = (("minflt", "minor page faults in the timed loop", "int"),
                    ("faults_per_page", "minor faults per page touched", "f2"),
                    ("sys_ms", "system CPU time (ms)", "f1"))
    plot = False
    quick_scale = 0.1
    # What the run before leaves the kernel decides much of a run's time
    # here: on a 2-core VM, 5-25 MiB, right after the system allocator
    # freeway took 28-169 ms (6 tries) and mimalloc v3 31-159 ms (5 tries),
    # right after one another 28-84 ms. Shuffled orders (run_timed) make that
    # noise, not bias, and more runs make their median hold.
    quick_reps = 11

    def cases(self, binpath, scale, full):
        out = []
        for lo, hi, ops in ((5 << 20, 25 << 20, 3000), (1 << 20, 4 << 20, 20000)):
            n = scaled(ops, scale)
            out.append(Case("%s-%s x %s" % (human_size(lo), human_size(hi), human_count(n)),
                            [binpath("bigchurn"), "--ops", n, "--min", lo, "--max", hi, "--live", 3]))
        return out


class ThreadWave(Experiment):
    name = "threadwave"
    title = "waves of short-lived threads freeing the previous wave's blocks"
    what = ("Waves of T threads, started and joined in turn. Each thread replaces random blocks of a "
            "window of its own (16-256 B mostly, some up to 4 KiB, a few up to 256 KiB) and swaps some "
            "into a shared array, freeing what it takes out; at its end it leaves a quarter of its window "
            "there. So every wave frees blocks of threads that have exited. 'waves': a fixed 160k "
            "operations per wave split over the threads. 'many threads': thousands of waves of 4 "
            "threads doing 50 operations each (tens of thousands of threads), where thread start and "
            "exit inside the allocator dominate. Models thread-per-task programs and thread pools that "
            "are torn down and rebuilt.")
    extra_tables = (("threads_per_s", "threads started, run and joined per second", "int"),
                    ("minflt", "minor page faults", "int"))
    quick_scale = 0.25

    def cases(self, binpath, scale, full):
        waves = scaled(200, scale)
        out = []
        for t in ((2, 4, 8, 16) if full else (2, 8)):
            out.append(Case("waves: %dT x %d waves x %s ops" % (t, waves, human_count(160000 // t)),
                            [binpath("threadwave"), "--threads", t, "--waves", waves, "--ops", 160000 // t],
                            group="waves", x=t))
        n = scaled(20000, scale)
        out.append(Case("many threads: %s waves x 4T x 50 ops" % human_count(n),
                        [binpath("threadwave"), "--threads", 4, "--waves", n, "--ops", 50, "--window", 20],
                        group="many threads", x=4))
        return out


class XMalloc(Experiment):
    name = "xmalloc"
    title = "producers allocate, consumers free, blocks passed in batches"
    what = ("P producer threads allocate a fixed total of blocks of log-uniform random sizes (8 B-1 KiB, "
            "or 8 B-16 KiB) and pass them in batches of 64 through one shared queue (mutex and condition "
            "variables, at most 64 batches) to C consumer threads, which check and free them. Every "
            "block is freed by another thread than its allocator, in bulk. Models pipelines and "
            "message-passing servers.")
    extra_tables = (("mblocks_per_s", "million blocks per second", "f2"),)
    quick_scale = 0.15
    quick_reps = NOISY_REPS

    def cases(self, binpath, scale, full):
        out = []
        for top, total in ((1 << 10, 20000000), (16 << 10, 10000000)):
            n = scaled(total, scale)
            for p in ((1, 2, 4, 8) if full else (1, 4)):
                out.append(Case("8B-%s, %dP+%dC x %s" % (human_size(top), p, p, human_count(n)),
                                [binpath("xmalloc"), "--producers", p, "--consumers", p, "--blocks", n,
                                 "--min", 8, "--max", top],
                                group="8B-%s" % human_size(top), x=2 * p))
        return out


class LarsonSized(Experiment):
    name = "larsonsized"
    title = "larson in C++: new/new[] and sized delete, frees from other threads"
    what = ("The larson pattern (T arrays of 1000 live blocks, each of 20 rounds starts T new threads "
            "and thread i replaces random blocks of array (i + round) mod T) with C++ objects: raw "
            "storage of 16 B-1 KiB from operator new, released with the sized operator delete(p, size); "
            "arrays of a class with a destructor (new[]/delete[], the size reaches the allocator through "
            "the array cookie); fixed-size nodes (new/delete). Compiled with -fsized-deallocation. "
            "Models C++ servers, where most deletes pass the size.")
    quick_scale = 0.4

    def cases(self, binpath, scale, full):
        ops = scaled(200000, scale)
        return self.sweep(binpath, (1, 2, 4, 8), "{t}T x 20 rounds x " + human_count(ops), "--rounds", 20, "--ops", ops)


class AllocTest(Experiment):
    name = "alloctest"
    title = "one thread, small-object mix with mixed lifetimes, long run"
    what = ("One thread, a working set of 4000 slots picked with a skew (slot 4000 u^3), so block "
            "lifetimes run from about 16 to 12k operations; an operation frees the slot's block and, 3 "
            "times in 4, allocates a new one: 63 in 64 log-uniform 8-512 B, the rest up to 8 KiB. "
            "Models the single-threaded core of interpreters and document or graph processing.")
    extra_tables = (("ns_per_op", "ns per operation", "f1"),)
    plot = False
    quick_scale = 0.1

    def cases(self, binpath, scale, full):
        n = scaled(300000000, scale)
        return [Case("%s ops, 4000 slots" % human_count(n), [binpath("alloctest"), "--ops", n, "--slots", 4000])]


class CacheFalseSharing(Experiment):
    name = "cache"
    title = "cache-thrash and cache-scratch: false sharing, fixed total work"
    what = ("The classic false-sharing tests with their proportions: a fixed total of 8 B objects split "
            "over the threads, each written 40000 times (5000 passes over its bytes) between its "
            "allocation and its free. thrash: each thread allocates its own objects; scratch: each "
            "thread first frees an object the main thread allocated for it (objects allocated "
            "together, so sharing cache lines). With no false sharing the time halves from 1 to 2 "
            "threads on 2 cores and stays flat beyond; an allocator that hands threads neighbouring "
            "bytes stays at the 1-thread time or worse. (falseshare is the allocation-heavy variant: "
            "100 writes per object, fixed work per thread.)")
    quick_scale = 0.1

    def cases(self, binpath, scale, full):
        total = scaled(20000, scale)
        out = []
        for mode in ("thrash", "scratch"):
            for t in (1, 2, 4, 8):
                out.append(Case("cache-%s %dT x %s" % (mode, t, human_count(total // t)),
                                [binpath("falseshare"), "--mode", mode, "--threads", t, "--iters", total // t,
                                 "--writes", 40000, "--size", 8],
                                group="cache-" + mode, x=t))
        return out


class GlibcBench(Experiment):
    name = "glibcbench"
    title = "the C library's malloc microbenchmarks: one size at a time, and random sizes per thread"
    what = ("simple (after bench-malloc-simple): for each size 16, 32, ..., 4096 B, batches of 25, 400 "
            "and 1600 blocks allocated then freed in order, the same number of pairs for each; on the "
            "main thread, or on T threads at once each doing the same. thread (after "
            "bench-malloc-thread): each of T threads does a fixed number of operations on its own "
            "window of 1024 slots, replacing a random block with one of a log-uniform random size in "
            "8 B-32 KiB; and one size alone: 128 slots of 16 KiB blocks. Time for the whole run; per-size "
            "ns per pair for 'simple'.")
    extra_tables = (("ns_16", "simple: ns per malloc+free of 16 B", "f1"),
                    ("ns_256", "simple: ns per malloc+free of 256 B", "f1"),
                    ("ns_4096", "simple: ns per malloc+free of 4 KiB", "f1"),
                    ("mops_per_s", "thread: million operations per second, all threads", "f1"))
    quick_scale = 0.1

    def cases(self, binpath, scale, full):
        pairs = scaled(1000000, scale)
        out = [Case("simple, main thread, %s pairs/size/count" % human_count(pairs),
                    [binpath("glibcbench"), "--mode", "simple", "--main", 1, "--pairs", pairs], group="simple")]
        for t in ((1, 2, 4) if full else (2,)):
            out.append(Case("simple, %dT, %s pairs/size/count" % (t, human_count(pairs)),
                            [binpath("glibcbench"), "--mode", "simple", "--threads", t, "--pairs", pairs],
                            group="simple", x=t))
        ops = scaled(10000000, scale)
        for t in (1, 2, 4, 8):
            out.append(Case("thread, %dT x %s ops, 8B-32KiB" % (t, human_count(ops)),
                            [binpath("glibcbench"), "--mode", "thread", "--threads", t, "--ops", ops],
                            group="thread", x=t))
        # A pool of 128 buffers of one medium size (16 KiB) replaced at
        # random: the live blocks of the class fill its pages, so that
        # nearly every free lands in a full page and the next malloc finds
        # its head page used up (a page moves between the full list and its
        # class queue on most operations in freeway and mimalloc).
        out.append(Case("thread, 1T x %s ops, 16KiB only, 128 slots" % human_count(ops),
                        [binpath("glibcbench"), "--mode", "thread", "--threads", 1, "--ops", ops,
                         "--min", 16384, "--max", 16384, "--window", 128], group="one size"))
        return out


class RPTest(Experiment):
    name = "rptest"
    title = "request/response server: per-request, cached and shared blocks"
    what = ("T worker threads serve a fixed total of requests. A request allocates 4-40 blocks "
            "(log-uniform 16 B-16 KiB, 1 in 128 up to 128 KiB), writes their first bytes and gives each "
            "a lifetime: 60% freed when the request ends (random order), 20% scratch freed at the next "
            "allocation, 15% kept in the thread's 256-entry cache until evicted by a later request, 5% "
            "swapped into a 4096-slot cache shared by all workers, whose evicted block, mostly another "
            "worker's, is freed at once. 2 to 16 threads on 2 cores: thread-per-connection "
            "oversubscription.")
    extra_tables = (("krequests_per_s", "thousand requests per second", "f1"),)
    quick_scale = 0.1

    def cases(self, binpath, scale, full):
        n = scaled(2000000, scale)
        return self.sweep(binpath, (2, 4, 8, 16), "{t}T, %s requests" % human_count(n), "--requests", n)


class RealCc1(Experiment):
    name = "cc1"
    title = "a real program: gcc -O2 compiling a generated C file"
    what = ("bench/realprog.py writes a C file of N functions (structs, constant tables, loops, "
            "switches, inline helpers, calls between the functions) and times `gcc -O2 -c` on it; the "
            "compiler proper (cc1) and the assembler inherit LD_PRELOAD. cc1 keeps much of its data in "
            "its own garbage-collected pages (mapped directly), the rest (obstacks, vectors, hash tables, "
            "bitmaps) comes from malloc. Time, CPU and faults are those of gcc and its children; peak "
            "RSS is the largest of them (ru_maxrss). The object file is the same under every allocator.")
    extra_tables = (("user_ms", "user CPU time (ms)", "f1"), ("minflt", "minor page faults", "int"))
    plot = False
    quick_scale = 0.2

    def cases(self, binpath, scale, full):
        n = scaled(500, scale)
        return [Case("gcc -O2 -c, %d functions" % n,
                     [sys.executable, os.path.join(HERE, "realprog.py"), "cc1", "--functions", n])]


class RealSqlite(Experiment):
    name = "sqlite"
    title = "a real program: sqlite3 on an in-memory database"
    what = ("bench/realprog.py runs the sqlite3 shell on an in-memory database with a generated script: "
            "N rows inserted in one transaction, two indexes, joins with grouping and DISTINCT, a window "
            "function, group_concat, an update growing a third of the rows' text, deletes, an "
            "insert-select, more grouping. Every page of the database and every sort or temporary "
            "b-tree is memory sqlite takes from malloc. Time, CPU, faults and peak RSS of the sqlite3 "
            "process (from wait4).")
    extra_tables = (("user_ms", "user CPU time (ms)", "f1"), ("minflt", "minor page faults", "int"))
    plot = False
    quick_scale = 0.1

    def cases(self, binpath, scale, full):
        n = scaled(1000000, scale)
        return [Case("sqlite3 :memory:, %s rows" % human_count(n),
                     [sys.executable, os.path.join(HERE, "realprog.py"), "sqlite", "--rows", n])]


EXPERIMENTS = [Speed(), Frag(), Frag32(), Pools(), HeapFree(), SameSize(), Scaled(), Strings(), Objects(),
               Larson(), ProdCons(), FalseShare(), ReallocGrow(), Churn(), Python(), FastPath(),
               BigChurn(), ThreadWave(), XMalloc(), LarsonSized(), AllocTest(), CacheFalseSharing(),
               GlibcBench(), RPTest(), RealCc1(), RealSqlite()]
EXP_BY_NAME = {e.name: e for e in EXPERIMENTS}

# ---------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------


def median(v):
    return statistics.median(v) if v else None


def trimmed_mean(v):
    if len(v) < 3:
        return statistics.mean(v) if v else None
    s = sorted(v)[1:-1]
    return statistics.mean(s)


def summarise(records, exp):
    """Per (case, allocator): median, min and max of every numeric field."""
    groups = {}
    for r in records:
        key = (r["case"], r["alloc"])
        groups.setdefault(key, []).append(r)
    out = {}
    for key, rs in groups.items():
        ok = [r for r in rs if r.get("ok")]
        s = {"runs": len(rs), "ok": len(ok), "errors": sorted({r.get("error", "") for r in rs if not r.get("ok")}),
             "skipped": next((r["data"]["skipped"] for r in ok if "skipped" in r.get("data", {})), None)}
        fields = {}
        for r in ok:
            for k, v in list(r.get("data", {}).items()) + [("run_maxrss_kb", r.get("run_maxrss_kb")),
                                                         ("run_wall_ms", r.get("run_wall_ms"))]:
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None:
                    fields.setdefault(k, []).append(float(v))
        for k, v in fields.items():
            s[k] = {"median": median(v), "min": min(v), "max": max(v), "n": len(v)}
            if exp.trimmed_mean:
                s[k]["trimmed_mean"] = trimmed_mean(v)
        out[key] = s
    return out


# ---------------------------------------------------------------------------
# Machine and versions
# ---------------------------------------------------------------------------


def read_first(path, pattern):
    try:
        with open(path) as f:
            for line in f:
                m = re.match(pattern, line)
                if m:
                    return m.group(1).strip()
    except OSError:
        pass
    return ""


def git(*args):
    try:
        r = subprocess.run(["git", "-C", REPO] + list(args), capture_output=True, text=True, check=False)
        return r.stdout.strip() if r.returncode == 0 else ""
    except OSError:
        return ""


def machine_info():
    mem_kb = read_first("/proc/meminfo", r"MemTotal:\s+(\d+)")
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": read_first("/proc/cpuinfo", r"model name\s*:\s*(.*)"),
        "memory_gib": round(int(mem_kb) / 1048576, 1) if mem_kb else None,
        "kernel": platform.release(),
        "os": read_first("/etc/os-release", r'PRETTY_NAME="?([^"]*)"?'),
        "python": platform.python_version(),
        "freeway_commit": git("rev-parse", "HEAD"),
        "freeway_commit_date": git("log", "-1", "--format=%cI"),
        "freeway_tree_dirty": bool(git("status", "--porcelain", "--", "src", "include", "CMakeLists.txt")),
    }
    try:
        info["compiler"] = subprocess.run(["cc", "--version"], capture_output=True, text=True,
                                          check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        info["compiler"] = ""
    pkg, ver = package_version("/lib/%s/libc.so.6" % (sysconfig.get_config_var("MULTIARCH") or ""))
    info["glibc"] = ver or platform.libc_ver()[1]
    vg = shutil.which("valgrind")
    if vg:
        info["valgrind"] = subprocess.run([vg, "--version"], capture_output=True, text=True,
                                          check=False).stdout.strip()
    return info


# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------


LIB_DIRS_32 = ["/usr/lib/i386-linux-gnu", "/lib/i386-linux-gnu", "/usr/lib32", "/lib32"]


def add_variant(spec):
    """--variant NAME=LIB[,KEY=VALUE...]: a column freeway-NAME, the library
    at LIB with those environment settings, in the default mode unless they
    set FREEWAY_CAUTIOUS or FREEWAY_SECURE."""
    name, _, rest = spec.partition("=")
    parts = [x for x in rest.split(",") if x]
    if not name or not parts or "=" in parts[0]:
        sys.exit("--variant %r: expected NAME=LIB[,KEY=VALUE...]" % spec)
    col = "freeway-" + name
    if col in ALLOC_NAMES:
        sys.exit("--variant %r: %s is already a column" % (spec, col))
    lib = os.path.abspath(parts[0])
    env = dict(x.split("=", 1) for x in parts[1:])
    PEERS.insert(ALLOC_NAMES.index("freeway") + 1, (col, lib))
    ALLOC_NAMES[:] = [n for n, _ in PEERS]
    DEFAULT_ALLOCS.insert(DEFAULT_ALLOCS.index("freeway") + 1, col)
    ALLOC_ENV[col] = env
    FREEWAY_MODE[col] = (int(env.get("FREEWAY_CAUTIOUS", "0") != "0"),
                         int(env.get("FREEWAY_SECURE", "0") != "0" and env.get("FREEWAY_CAUTIOUS", "0") == "0"))


def resolve_allocators(build_dir, wanted, bin_dir, notes, bits=64):
    """The allocators of `wanted` found and checked with bench_whoami. With
    bits=32: build_dir and bin_dir are the 32-bit build's, Debian's libraries
    are looked up in the i386 directories, and the peers built from source
    (64-bit only) are left out."""
    allocs = []
    whoami = os.path.join(bin_dir, "bench_whoami")
    tag = "" if bits == 64 else "32-bit "
    missing32 = []
    for name, lib in PEERS:
        if name not in wanted:
            continue
        peer = None
        if lib is None:
            path = None
        elif lib == "@peers" and bits != 64:
            missing32.append(name)
            continue
        elif lib == "@peers":
            peer = peer_build(build_dir, name)
            if not peer:
                notes.append("%s: %s not built (scripts/bench.sh builds it with bench/peers/build.sh); skipped"
                             % (name, rel(os.path.join(build_dir, "peers", name))))
                continue
            path = peer["path"]
        elif lib == "@build":
            path = os.path.join(build_dir, "libfreeway.so")
            if not os.path.exists(path):
                notes.append("%s%s: %s not found (build the library first); skipped" % (tag, name, rel(path)))
                continue
        elif os.path.isabs(lib):  # a --variant's library
            path = lib
            if not os.path.exists(path) or bits != 64:
                notes.append("%s%s: %s not found; skipped" % (tag, name, rel(path)))
                continue
        elif bits != 64:
            path = next((p for p in (os.path.join(d, lib) for d in LIB_DIRS_32) if os.path.exists(p)), None)
            if not path:
                missing32.append(name)
                continue
        else:
            path = find_library(lib)
            if not path:
                notes.append("%s: %s not found on this system; skipped" % (name, lib))
                continue
        env = ALLOC_ENV.get(name, {})
        r = run_program([whoami], preload=path, env_extra=env, timeout=30)
        if not r.ok:
            notes.append("%s%s: test run failed (%s); skipped" % (tag, name, r.error))
            continue
        provider = r.data.get("malloc", "")
        if path and provider.startswith("libc.so"):
            notes.append("%s%s: LD_PRELOAD did not replace malloc; skipped" % (tag, name))
            continue
        if peer and provider != os.path.basename(path):
            notes.append("%s: malloc came from %s, not %s; skipped" % (name, provider, os.path.basename(path)))
            continue
        want_mi = mi_version_number(peer.get("upstream_version")) if peer and name.startswith("mimalloc") else None
        if want_mi and r.data.get("mi_version") != want_mi:
            notes.append("%s: the live mimalloc says version %s, its build %s; skipped"
                         % (name, r.data.get("mi_version"), peer.get("upstream_version")))
            continue
        mode = None
        if name in FREEWAY_MODE:
            # The options as the library reads them, and behaviour only
            # cautious mode has (malloc_usable_size is the requested size there).
            want_c, want_s = FREEWAY_MODE[name]
            got_c, got_s, usable = r.data.get("fw_cautious"), r.data.get("fw_secure"), r.data.get("usable_of_10")
            if got_c != want_c or got_s != want_s or (usable == 10) != (want_c == 1):
                notes.append("%s%s: expected cautious %d, secure %d; the library reports cautious %s, secure %s "
                             "(malloc_usable_size of a 10-byte block: %s); skipped"
                             % (tag, name, want_c, want_s, got_c, got_s, usable))
                continue
            mode = "%s (fw_option_get: cautious %d, secure %d; malloc_usable_size(malloc(10)) = %s)" % (
                "cautious" if want_c else "secure" if want_s else "default", got_c, got_s, usable)
        if path:
            pkg, ver = package_version(path)
        elif bits != 64:
            pkg, ver = next((pv for pv in (package_version(os.path.join(d, "libc.so.6")) for d in LIB_DIRS_32)
                             if pv[0]), ("libc (32-bit)", ""))
        else:
            pkg, ver = package_version("/lib/%s/libc.so.6" % (sysconfig.get_config_var("MULTIARCH") or ""))
            if not pkg:
                pkg, ver = "libc6", platform.libc_ver()[1]
        if lib == "@build" or (lib and os.path.isabs(lib)):
            pkg, ver = "freeway (this repository)", (git("rev-parse", "--short", "HEAD") or "?") + (
                "+dirty" if git("status", "--porcelain", "--", "src", "include") else "")
        built = None
        if peer:
            pkg = "crates.io %s %s, built here" % (peer.get("crate", "?"), peer.get("crate_version", "?"))
            ver = peer.get("upstream_version") or "not stated (crate %s)" % peer.get("crate_version", "?")
            built = {k: peer.get(k, "") for k in ("crate", "crate_version", "crate_sha256", "flags", "compiler")}
        allocs.append({"name": name, "path": path,
                       "lib": (rel(path) if not os.path.isabs(rel(path)) else os.path.basename(path))
                       if path else "(none: C library)",
                       "package": pkg, "version": ver, "malloc_from": provider})
        if env:
            allocs[-1]["env"] = dict(env)
        if mode:
            allocs[-1]["mode"] = mode
        if built:
            allocs[-1]["built_from"] = built
    if missing32:
        notes.append("32-bit: no 32-bit library of %s on this system (Debian's i386 packages are not installed; the "
                     "peers built from source are 64-bit only); the 32-bit experiment runs without them"
                     % ", ".join(missing32))
    return allocs


def exp_reps(exp, reps, explicit, full):
    if explicit:
        return reps
    if exp.fixed_reps:
        return exp.fixed_reps
    if full and exp.full_reps:
        reps = exp.full_reps
    if not full:
        reps = max(reps, exp.quick_reps)
    return max(reps, exp.min_reps)


def run_timed(exp, cases, allocs, reps, timeout, progress, records, ctx=None):
    for rep in range(reps):
        for ci, case in enumerate(cases):
            # A shuffle of its own for each repetition and case (seeded: a
            # pass is repeatable), not a rotation: a rotation keeps every
            # allocator behind the same one, and what the one before leaves
            # the kernel matters on this kind of virtual machine (bench_bigchurn
            # 5-25 MiB, 4 tries each: freeway took 24-217 ms after the system
            # allocator, 19-236 ms after mimalloc v3; so did mimalloc 2.x,
            # 20-141 and 21-277 ms), which a fixed order turns into a bias.
            order = list(allocs)
            random.Random(rep * 1000003 + ci).shuffle(order)
            for a in order:
                if a["name"] in case.skip_allocs:
                    progress.step("%s %s (skip)" % (exp.name, a["name"]))
                    continue
                argv = [str(x) for x in case.argv] + [str(x) for x in exp.run_args(case, a, rep, ctx)]
                r = run_program(argv, preload=a["path"], env_extra=run_env(case, a), timeout=timeout)
                rec = {"exp": exp.name, "case": case.label, "group": case.group, "x": case.x,
                       "alloc": a["name"], "rep": rep, "ok": r.ok, "error": r.error,
                       "run_wall_ms": round(r.wall_ms, 3), "run_maxrss_kb": r.maxrss_kb,
                       "run_user_ms": round(r.user_ms, 3), "run_sys_ms": round(r.sys_ms, 3),
                       "argv": " ".join(clean_arg(x) for x in case.argv),
                       "data": r.data}
                exp.after_run(rec, case, a, rep, ctx)
                if not r.ok:
                    progress.note("  %s / %s / %s: %s" % (exp.name, case.label, a["name"], r.error))
                records.append(rec)
                progress.step("%s %s %s" % (exp.name, case.label, a["name"]))


def run_env(case, alloc):
    """A run's extra environment: the case's, then the allocator's."""
    env = dict(case.env)
    env.update(alloc.get("env", {}))
    return env


def callgrind_count(argv, preload, timeout, env=None):
    vg = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    r = run_program(vg + argv, preload=preload, env_extra=env, timeout=timeout, want_json=False)
    m = re.search(r"Collected\s*:\s*(\d+)", r.stderr)
    if not r.ok or not m:
        # The program's own words, not valgrind's summary, say why it stopped.
        own = [l.strip() for l in r.stderr.splitlines() if l.strip() and not l.startswith("==")]
        return None, (own[0] + ": " if own else "") + (r.error or "no 'Collected' line from callgrind")
    return int(m.group(1)), ""


def run_fastpath(exp, cases, allocs, full, timeout, progress, records, notes):
    if not shutil.which("valgrind"):
        notes.append("fastpath: valgrind not found; instruction counts skipped")
        for _ in cases:
            for _ in allocs:
                progress.step("fastpath (no valgrind)")
        return
    n1, n2 = (1000000, 2000000) if full else (100000, 200000)
    jobs = []
    for case in cases:
        for a in allocs:
            jobs.append((case, a))
    loop_argv = [str(cases[0].argv[0]), "loop", "64"]

    def work(job):
        case, a = job
        argv = [str(x) for x in case.argv]
        c1, e1 = callgrind_count(argv + [str(n1)], a["path"], timeout, run_env(case, a))
        c2, e2 = callgrind_count(argv + [str(n2)], a["path"], timeout, run_env(case, a))
        return case, a, c1, c2, e1 or e2

    workers = max(1, min(len(os.sched_getaffinity(0)), 4))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for case, a, c1, c2, err in pool.map(work, jobs):
            ok = c1 is not None and c2 is not None
            data = {}
            if ok:
                data = {"instr_per_op": (c2 - c1) / (n2 - n1), "instr_n1": c1, "instr_n2": c2, "n1": n1, "n2": n2}
            records.append({"exp": exp.name, "case": case.label, "group": "", "x": None, "alloc": a["name"],
                            "rep": 0, "ok": ok, "error": err, "data": data,
                            "argv": "valgrind --tool=callgrind bench_fastpath %s {%d,%d}" % (
                                " ".join(str(x) for x in case.argv[1:]), n1, n2)})
            if not ok:
                progress.note("  fastpath / %s / %s: %s" % (case.label, a["name"], err))
            progress.step("fastpath %s %s" % (case.label, a["name"]))
    for a in allocs:
        mine = [r for r in records if r["exp"] == exp.name and r["alloc"] == a["name"]]
        if mine and not any(r["ok"] for r in mine):
            notes.append("fastpath: %s failed in every case under valgrind (%s)"
                         % (a["name"], mine[0]["error"].split(":")[0]))
    l1, _ = callgrind_count(loop_argv + [str(n1)], None, timeout)
    l2, _ = callgrind_count(loop_argv + [str(n2)], None, timeout)
    if l1 is not None and l2 is not None:
        records.append({"exp": exp.name, "case": "loop", "group": "", "x": None, "alloc": "-", "rep": 0,
                        "ok": True, "error": "", "data": {"instr_per_op": (l2 - l1) / (n2 - n1)},
                        "argv": "bench_fastpath loop 64"})


# ---------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------


def fmt_value(v, how):
    if v is None:
        return "-"
    if how == "pct":
        return "%.0f%%" % (100 * v)
    if how == "int":
        return "%d" % round(v)
    if how == "f2":
        return "%.2f" % v
    if how == "f1":
        return "%.1f" % v
    if abs(v) >= 100:
        return "%.0f" % v
    if abs(v) >= 10:
        return "%.1f" % v
    return "%.2f" % v


def cell_stat(s, metric, how="auto", with_range=True):
    if s is None:
        return "-"
    if s.get("skipped"):
        return "skipped"
    st = s.get(metric)
    if st is None:
        if s.get("errors") and not s.get("ok"):
            return "failed"
        return "-"
    txt = fmt_value(st["median"], how)
    if with_range and st["n"] > 1 and st["min"] != st["max"]:
        txt += " [%s-%s]" % (fmt_value(st["min"], how), fmt_value(st["max"], how))
    return txt


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(r):
    return "-" if r is None else "%.2fx" % r


def med(summary, case, alloc, metric):
    s = summary.get((case, alloc))
    if not s or s.get("skipped") or metric not in s:
        return None
    return s[metric]["median"]


def best_peer(summary, case, alloc_names, metric):
    best = None
    for a in alloc_names:
        if a in FREEWAY_MODE:
            continue
        v = med(summary, case, a, metric)
        if v is not None and (best is None or v < best[1]):
            best = (a, v)
    return best


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def seed_columns(seeds, exp):
    sf = seeds.get(exp.name, {})
    return sf.get("columns", []), sf.get("rows", {}), sf.get("note", "")


def report_experiment(exp, cases, summary, alloc_names, seeds, plots_dir_rel, plot_file, meta_exp, records=(),
                      space_plots=None):
    lines = []
    seed_txt = (" - reproduces seed `%s`" % exp.seed) if exp.seed else " - standard workload"
    lines.append("## %s: %s%s" % (exp.name, exp.title, seed_txt))
    lines.append("")
    lines.append(exp.what)
    lines.append("")
    lines.append("Run: %s, freeway commit %s, scale %g, %d repetition(s) interleaved across allocators. Re-run: "
                 "`python3 bench/run.py --only %s`." % (meta_exp.get("date", "?"),
                                                         (meta_exp.get("freeway_commit") or "?")[:10],
                                                         meta_exp.get("scale", 1), meta_exp.get("reps", 1), exp.name))
    lines.append("")
    for rr in meta_exp.get("partial_reruns", []):
        if rr.get("cases"):
            lines.append("Re-run on %s for the case(s) %s only (`--cases`), under %s, %d repetition(s) (freeway "
                         "commit %s); everything else comes from the run above." % (
                             rr["date"], "; ".join("'%s'" % c for c in rr["cases"]), ", ".join(rr["allocs"]),
                             rr.get("reps", 1), rr["freeway_commit"][:10]))
        else:
            lines.append("Re-run on %s for %s only (freeway commit %s); the other columns come from the run "
                         "above." % (rr["date"], ", ".join(rr["allocs"]), rr["freeway_commit"][:10]))
        lines.append("")
    labels = [c.label for c in cases]
    if exp.name == "fastpath":
        return lines + report_fastpath(exp, labels, summary, alloc_names)
    if exp.name == "frag32":
        return lines + report_frag32(exp, cases, summary, alloc_names, records, meta_exp, seeds,
                                     {k: os.path.join(plots_dir_rel, v) for k, v in (space_plots or {}).items()})
    scols, srows, snote = seed_columns(seeds, exp)
    has_seed = any(c.seed_key in srows for c in cases)
    vs_newest = NEWEST_MIMALLOC in alloc_names
    header = ["case"] + alloc_names + ["freeway / best peer"] + (
        ["freeway / " + NEWEST_MIMALLOC] if vs_newest else []) + (["seed: " + c for c in scols] if has_seed else [])
    rows = []
    for l, case in zip(labels, cases):
        row = [l]
        for a in alloc_names:
            row.append(cell_stat(summary.get((l, a)), exp.metric))
        bp = best_peer(summary, l, alloc_names, exp.metric)
        fw = med(summary, l, "freeway", exp.metric)
        row.append(("%s (%s)" % (fmt_ratio(ratio(fw, bp[1])), bp[0])) if (bp and fw is not None) else "-")
        if vs_newest:
            row.append(fmt_ratio(ratio(fw, med(summary, l, NEWEST_MIMALLOC, exp.metric))))
        if has_seed:
            vals = srows.get(case.seed_key, [])
            row += [("%g%%" % v if "CPU" in c else "%g" % v) if i < len(vals) else "" for i, (c, v) in
                    enumerate(zip(scols, vals + [None] * (len(scols) - len(vals))))]
        rows.append(row)
    lines.append("**%s**, median [min-max] of the runs%s:" % (
        exp.metric_label, "; 'seed:' columns: the seed's own figures for the row at the seed's scale, on its "
        "hardware and OS" if has_seed else ""))
    lines.append("")
    lines.append(md_table(header, rows))
    lines.append("")
    # Ratios.
    rel_1t = getattr(exp, "relative_to_system_1t", False)
    rrows = []
    for l, c in zip(labels, cases):
        if rel_1t:
            base_label = next((x.label for x in cases if x.group == c.group and x.x == 1), None)
            base = med(summary, base_label, "system", exp.metric) if base_label else None
        else:
            base = med(summary, l, "system", exp.metric)
        rrows.append([l] + [fmt_ratio(ratio(med(summary, l, a, exp.metric), base)) for a in alloc_names])
    lines.append("Relative to %s (lower is better):" % (
        "the system allocator on 1 thread, same object size" if rel_1t else "the system allocator"))
    lines.append("")
    lines.append(md_table(["case"] + alloc_names, rrows))
    lines.append("")
    if exp.trimmed_mean:
        trows = []
        for l in labels:
            row = [l]
            for a in alloc_names:
                s = summary.get((l, a))
                st = s.get(exp.metric) if s else None
                row.append(fmt_value(st.get("trimmed_mean"), "auto") if st else "-")
            trows.append(row)
        lines.append("Seed-style summary: mean of the runs with the fastest and slowest dropped (ms):")
        lines.append("")
        lines.append(md_table(["case"] + alloc_names, trows))
        lines.append("")
    for metric, title, how in exp.extra_tables:
        if not any(metric in (summary.get((l, a)) or {}) for l in labels for a in alloc_names):
            continue
        erows = []
        for l in labels:
            row = [l]
            for a in alloc_names:
                s = summary.get((l, a))
                if how == "probe":
                    st = s.get(metric) if s else None
                    loops = s.get("loops") if s else None
                    row.append("%d/%d" % (st["min"], loops["median"]) if st and loops else "-")
                else:
                    row.append(cell_stat(s, metric, how, with_range=False))
            erows.append(row)
        lines.append("%s, median:" % title if how != "probe" else "%s, worst run:" % title)
        lines.append("")
        lines.append(md_table(["case"] + alloc_names, erows))
        lines.append("")
    lines += exp.side_lines(meta_exp, labels, alloc_names)
    # Peak RSS of every run.
    rss_rows = []
    for l in labels:
        row = [l]
        for a in alloc_names:
            v = med(summary, l, a, "peak_rss_kb")
            row.append("-" if v is None else "%.1f" % (v / 1024))
        rss_rows.append(row)
    lines.append("<details><summary>Peak RSS per run (MiB, median; the program's VmHWM)</summary>")
    lines.append("")
    lines.append(md_table(["case"] + alloc_names, rss_rows))
    lines.append("")
    lines.append("</details>")
    lines.append("")
    if snote:
        lines.append("Seed context: " + snote)
        lines.append("")
    lines += exp.notes(summary, labels, alloc_names, cases=cases, seeds=seeds)
    if plot_file:
        lines.append("![%s](%s)" % (exp.name, os.path.join(plots_dir_rel, plot_file)))
        lines.append("")
    return lines


def report_fastpath(exp, labels, summary, alloc_names):
    lines = []
    vs_newest = NEWEST_MIMALLOC in alloc_names
    header = ["case"] + alloc_names + ["freeway / mimalloc"] + (["freeway / " + NEWEST_MIMALLOC] if vs_newest else [])
    rows = []
    for l in labels:
        row = [l]
        for a in alloc_names:
            v = med(summary, l, a, "instr_per_op")
            row.append("-" if v is None else "%.1f" % v)
        fw = med(summary, l, "freeway", "instr_per_op")
        mi = med(summary, l, "mimalloc", "instr_per_op")
        row.append(fmt_ratio(ratio(fw, mi)))
        if vs_newest:
            row.append(fmt_ratio(ratio(fw, med(summary, l, NEWEST_MIMALLOC, "instr_per_op"))))
        rows.append(row)
    lines.append("**Instructions per step** (callgrind, (I(2N) - I(N)) / N):")
    lines.append("")
    lines.append(md_table(header, rows))
    lines.append("")
    loop = med(summary, "loop", "-", "instr_per_op")
    if loop is not None:
        lines.append("The benchmark loop alone costs %.1f instructions per step (included above)." % loop)
        lines.append("")
    rrows = []
    for l in labels:
        mi = med(summary, l, "mimalloc", "instr_per_op")
        rrows.append([l] + [fmt_ratio(ratio(med(summary, l, a, "instr_per_op"), mi)) for a in alloc_names])
    lines.append("Relative to mimalloc (lower is better):")
    lines.append("")
    lines.append(md_table(["case"] + alloc_names, rrows))
    lines.append("")
    goals = []
    for l, limit in FASTPATH_GOALS:
        row = [l, "<= %.2fx" % limit]
        for m in ["mimalloc"] + ([NEWEST_MIMALLOC] if vs_newest else []):
            r = ratio(med(summary, l, "freeway", "instr_per_op"), med(summary, l, m, "instr_per_op"))
            row += [fmt_ratio(r), "-" if r is None else ("met" if r <= limit else "NOT met")]
        goals.append(row)
    lines.append("freeway's goals against mimalloc (Debian's) and, where it ran, the newest mimalloc (%s):"
                 % NEWEST_MIMALLOC)
    lines.append("")
    lines.append(md_table(["case", "goal", "freeway / mimalloc", "status"] + (
        ["freeway / " + NEWEST_MIMALLOC, "status"] if vs_newest else []), goals))
    lines.append("")
    return lines


def report_frag32(exp, cases, summary, alloc_names, records, meta_exp, seeds, plots):
    lines = []
    libs = meta_exp.get("allocators", [])
    if libs:
        lines += ["32-bit libraries: " + "; ".join("%s: %s (%s %s)" % (a["name"], a["lib"], a["package"], a["version"])
                                                 for a in libs) + ".", ""]

    def first_ok(label, alloc):
        return next((r for r in records if r["case"] == label and r["alloc"] == alloc and r.get("data")), None)

    rows = []
    for c in cases:
        row = [c.label]
        for a in alloc_names:
            r = first_ok(c.label, a)
            d = r["data"] if r else {}
            if "probe_first_fail" not in d:
                row.append("failed: " + r["error"] if r and r.get("error") else "-")
                continue
            ff, ok, loops = d["probe_first_fail"], d["probes_ok"], d["loops"]
            txt = ("**never** (%d of %d met)" % (ok, loops)) if ff == 0 else (
                "**loop %d** (%d of %d met)" % (ff, ok, loops))
            if d.get("alloc_first_fail"):
                txt += "; small blocks refused from loop %d (%d in all)" % (d["alloc_first_fail"], d.get("failed", 0))
            row.append(txt)
        rows.append(row)
    lines += ["**First loop whose 8 MiB request failed** (the requests met, of the loops run):", "",
              md_table(["case"] + ["%s (32-bit)" % a for a in alloc_names], rows), ""]

    def mib(v):
        return "-" if v is None else "%.0f" % v

    srows = []
    for c in cases:
        for a in alloc_names:
            r = first_ok(c.label, a)
            if not r:
                continue
            d = r["data"]
            srows.append([c.label, a, mib(d.get("vm_mib_at_probe", [None])[-1] if d.get("vm_mib_at_probe") else None),
                          mib(d.get("mapped_mib_live")), mib(d.get("largest_gap_mib_live")),
                          mib(d.get("mapped_mib_end")), mib(d.get("largest_gap_mib_end")),
                          "-" if d.get("gaps_8mib_end") is None else "%d" % d["gaps_8mib_end"],
                          mib(d.get("rss_alloc_mib")), "%.0f" % d["loop_ms"] if "loop_ms" in d else "-"])
    lines += ["**The address space** (MiB; from /proc/self/maps; 'mapped' counts every mapping inside the "
              "space, reserved ones too; the free ranges are those an mmap could still use): before the last "
              "loop's 8 MiB request, with every block live, and after its free-all:", "",
              md_table(["case", "allocator", "VmSize at the last request", "mapped, last request",
                        "largest free range, last request", "mapped at the end", "largest free range at the end",
                        "free ranges of 8 MiB or more at the end", "RSS with every block live",
                        "mean allocation time per loop (ms)"], srows), ""]
    detail = []
    for c in cases:
        for a in alloc_names:
            r = first_ok(c.label, a)
            if r and r["data"].get("probe_by_loop"):
                detail.append("- %s, %s: `%s`" % (c.label, a, r["data"]["probe_by_loop"]))
    if detail:
        lines += ["<details><summary>The 8 MiB request, loop by loop (1: met, 0: failed)</summary>", ""] + detail + [
            "", "</details>", ""]
    note = ((seeds or {}).get(exp.name) or {}).get("note")
    if note:
        lines += ["Seed context: " + note, ""]
    for c in cases:
        if c.label in plots:
            lines += ["![%s](%s)" % (c.label, plots[c.label]), ""]
    lines += ["The maps themselves: `maps/%s/` beside this report (CASE-ALLOCATOR-REP-MOMENT.maps)." % exp.name, ""]
    return lines


def plot_address_space(cases, records, alloc_names, plots_dir):
    """One chart per case: the 32-bit address space of every allocator's run
    at the moments its maps were taken, mappings coloured by kind and the
    largest free range outlined. Returns {case label: file name}."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch, Rectangle
    except ImportError:
        return {}
    colours = {k: c for k, _, c in MAP_KINDS}
    moments = [("fail", "first failed request"), ("live", "last request, blocks live"), ("end", "after the last free")]
    out = {}
    for c in cases:
        bars = []
        for a in alloc_names:
            r = next((x for x in records if x["case"] == c.label and x["alloc"] == a and x.get("maps")), None)
            if not r:
                continue
            for m, mlabel in moments:
                if m in r["maps"]:
                    bars.append(("%s: %s" % (a, mlabel), r["maps"][m], r["data"]))
        if not bars:
            continue
        fig, ax = plt.subplots(figsize=(11, 0.55 * len(bars) + 1.6))
        for i, (label, regions, data) in enumerate(bars):
            y = len(bars) - 1 - i
            for kind, _, _ in MAP_KINDS:
                spans = [(a / MIB, (b - a) / MIB) for a, b, k in regions if k == kind]
                if spans:
                    ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colours[kind], linewidth=0)
            m = label.split(": ", 1)[1]
            key = next(k for k, ml in moments if ml == m)
            start, size = data.get("largest_gap_at_mib_" + key), data.get("largest_gap_mib_" + key)
            if size:
                ax.add_patch(Rectangle((start, y - 0.42), size, 0.84, fill=False, edgecolor="red", linewidth=1.2))
                ax.text(start + size / 2, y, "largest free\n%.0f MiB" % size, ha="center", va="center", fontsize=7,
                        color="red")
        top = max((b[2].get("space_top_mib") or 4096) for b in bars)
        ax.set_xlim(0, 4096)
        ax.set_xticks(range(0, 4097, 512))
        ax.set_xlabel("address (MiB)%s" % ("; the space ends at %.0f MiB" % top if top < 4096 else ""))
        ax.set_yticks(range(len(bars)))
        ax.set_yticklabels([b[0] for b in reversed(bars)], fontsize=8)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(handles=[Patch(facecolor=col, label=lab) for _, lab, col in MAP_KINDS] +
                  [Patch(facecolor="white", edgecolor="red", label="largest free range")],
                  fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(bars) < 5 else -0.12), ncol=4)
        ax.set_title("32-bit address space, %s" % c.label, fontsize=10)
        fig.tight_layout()
        name = "frag32_%s.png" % slug(c.label)
        fig.savefig(os.path.join(plots_dir, name), dpi=90, bbox_inches="tight")
        plt.close(fig)
        out[c.label] = name
    return out


# freeway's instruction-count goals: (case, highest freeway/mimalloc ratio).
FASTPATH_GOALS = [("pair 64B", 0.45), ("ring 64B", 0.75), ("ring 1KiB", 0.75)]


COLOURS = {"system": "tab:blue", "freeway": "tab:orange", "freeway-cautious": "saddlebrown", "jemalloc": "tab:green", "tcmalloc": "tab:red",
           "mimalloc": "tab:purple", "tbb": "tab:brown", "mimalloc3": "tab:pink", "mimalloc2": "tab:gray",
           "snmalloc": "tab:olive", "rpmalloc": "tab:cyan"}


def geomean(values):
    v = [x for x in values if x is not None and x > 0]
    return (math.exp(sum(math.log(x) for x in v) / len(v)), len(v)) if v else (None, 0)


def ratio_summary(per_exp):
    """The report's summary: per experiment, and over every row of every
    experiment, geometric means of freeway's primary metric over the newest
    mimalloc's, the best other allocator's and Debian's mimalloc's.
    per_exp: [(experiment, {"newest": [...], "best": [...], "mimalloc": [...]})]."""
    def cell(v):
        g, n = geomean(v)
        return "-" if g is None else "%.3f (%d)" % (g, n)
    rows = [[e.name, e.metric] + [cell(r[k]) for k in ("newest", "best", "mimalloc")] for e, r in per_exp]
    pooled = {k: [x for _, r in per_exp for x in r[k]] for k in ("newest", "best", "mimalloc")}
    rows.append(["**all experiments**", ""] + ["**%s**" % cell(pooled[k]) for k in ("newest", "best", "mimalloc")])
    g, n = geomean(pooled["newest"])
    lines = ["## Summary: freeway against the newest mimalloc", ""]
    if g is not None:
        lines += ["Geometric mean of freeway / %s over the %d rows where both ran: **%.3f** (below 1: freeway "
                  "takes less time, or memory, or instructions)." % (NEWEST_MIMALLOC, n, g), ""]
    lines += ["Geometric means of freeway's ratio to each allocator, on each experiment's primary metric (lower "
              "is better; the number of rows in brackets). 'best peer' is the best other allocator of each row.",
              "", md_table(["experiment", "metric", "freeway / " + NEWEST_MIMALLOC, "freeway / best peer",
                            "freeway / mimalloc (Debian)"], rows), ""]
    return lines


def make_plots(exp, cases, summary, alloc_names, plots_dir, metric=None, metric_label=None):
    if not exp.plot:
        return None
    metric = metric or exp.metric
    metric_label = metric_label or exp.metric_label
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    groups = []
    for c in cases:
        if c.group not in groups:
            groups.append(c.group)
    n = len(groups)
    cols = min(3, n)
    rows = int(math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    drawn = False
    for gi, g in enumerate(groups):
        ax = axes[gi // cols][gi % cols]
        gcases = [c for c in cases if c.group == g and c.x is not None]
        for a in alloc_names:
            xs, ys, lo, hi = [], [], [], []
            for c in gcases:
                s = summary.get((c.label, a))
                if not s or s.get("skipped") or metric not in s:
                    continue
                st = s[metric]
                xs.append(c.x)
                ys.append(st["median"])
                lo.append(st["median"] - st["min"])
                hi.append(st["max"] - st["median"])
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=a, color=COLOURS.get(a),
                            linewidth=2.2 if a in FREEWAY_MODE else 1.2,
                            linestyle="--" if a == "freeway-cautious" else "-")
                drawn = True
        ax.set_title(g or exp.name, fontsize=10)
        ax.set_xlabel(exp.xlabel)
        ax.set_ylabel(metric_label, fontsize=8)
        ticks = sorted({c.x for c in gcases})
        ax.set_xticks(ticks)
        if exp.name == "speed":
            ax.set_xticklabels(["%d\n%s" % (c.x, c.label.split(", ")[1]) for c in sorted(gcases, key=lambda c: c.x)],
                               fontsize=7)
        vals = [v for line in ax.get_lines() for v in line.get_ydata()]
        if vals and min(vals) > 0 and max(vals) / min(vals) > 30:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for gi in range(n, rows * cols):
        axes[gi // cols][gi % cols].axis("off")
    fig.suptitle("%s - %s%s" % (exp.name, exp.title, "" if metric == exp.metric else " - " + metric_label),
                 fontsize=11)
    fig.tight_layout()
    name = "%s.png" % (exp.name if metric == exp.metric else "%s_%s" % (exp.name, metric))
    if drawn:
        fig.savefig(os.path.join(plots_dir, name), dpi=90)
    plt.close(fig)
    return name if drawn else None


def write_outputs(out_dir, meta, exp_meta, records, allocs_info, notes, seeds):
    os.makedirs(out_dir, exist_ok=True)
    plots_dir = os.path.join(out_dir, "plots")
    os.makedirs(plots_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "experiments": exp_meta, "allocators": allocs_info, "notes": notes,
                   "records": records}, f, indent=1, sort_keys=True)
    with open(os.path.join(out_dir, "runs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["exp", "case", "alloc", "rep", "ok", "metric", "value", "peak_rss_kb", "run_wall_ms",
                    "run_maxrss_kb", "error", "argv"])
        for r in records:
            exp = EXP_BY_NAME.get(r["exp"])
            metric = exp.metric if exp else ""
            w.writerow([r["exp"], r["case"], r["alloc"], r["rep"], int(bool(r["ok"])), metric,
                        r.get("data", {}).get(metric, ""), r.get("data", {}).get("peak_rss_kb", ""),
                        r.get("run_wall_ms", ""), r.get("run_maxrss_kb", ""),
                        r.get("error", ""), r.get("argv", "")])
    present = [a["name"] for a in allocs_info]
    alloc_names = [a for a in ALLOC_NAMES if a in present]
    md = []
    md.append("# freeway benchmark results (%s pass)" % meta.get("mode", "?"))
    md.append("")
    md.append("Generated by `bench/run.py` (see `docs/benchmarks.md`). Every allocator runs the same "
              "benchmark binaries, swapped in with LD_PRELOAD; repetitions are interleaved across "
              "allocators; figures are medians with [min-max] of the runs. The machine is small and "
              "shared, so compare allocators within a table (ratios), not across machines. The seed "
              "columns are the seed documents' own figures on their hardware and OS, for context only.")
    md.append("")
    md.append("## Machine and versions")
    md.append("")
    for k in ("date", "nproc", "cpu_model", "memory_gib", "os", "kernel", "glibc", "compiler", "python",
              "valgrind", "freeway_commit", "freeway_commit_date", "freeway_tree_dirty"):
        if k in meta:
            md.append("- %s: %s" % (k, meta[k]))
    md.append("")
    md.append(md_table(["allocator", "library", "package", "version", "malloc provided by"],
                       [[a["name"], a["lib"] + "".join(" with %s=%s" % kv for kv in sorted(a.get("env", {}).items())),
                         a["package"], a["version"], a["malloc_from"]] for a in allocs_info]))
    md.append("")
    moded = [a for a in allocs_info if a.get("mode")]
    if moded:
        md.append("freeway's mode, as the library reported it under the runner's environment before the runs: "
                  + "; ".join("%s: %s" % (a["name"], a["mode"]) for a in moded) + ".")
        md.append("")
    built = [a for a in allocs_info if a.get("built_from")]
    if built:
        md.append("Built from the sources of the crates pinned in `bench/peers/versions.txt` by "
                  "`bench/peers/build.sh`:")
        md.append("")
        for a in built:
            b = a["built_from"]
            md.append("- %s: %s %s (sha256 %s...), %s, `%s`" % (a["name"], b["crate"], b["crate_version"],
                                                            b["crate_sha256"][:12], b["compiler"], b["flags"]))
        md.append("")
    if notes:
        md.append("Notes:")
        md.append("")
        for n in notes:
            md.append("- " + n)
        md.append("")
    summary_rows = []
    md_sections = []
    index = []
    ratios = []
    for exp in EXPERIMENTS:
        recs = [r for r in records if r["exp"] == exp.name]
        if not recs:
            continue
        em = exp_meta.get(exp.name, {})
        cases = [Case(**c) for c in em.get("cases", [])]
        summary = summarise(recs, exp)
        # Columns for the allocators this experiment ran (opt-in ones only where they did).
        ran = {r["alloc"] for r in recs}
        exp_allocs = [a for a in ALLOC_NAMES if a in ran]
        r = {"newest": [], "best": [], "mimalloc": []}
        for c in cases:
            fw = med(summary, c.label, "freeway", exp.metric)
            bp = best_peer(summary, c.label, exp_allocs, exp.metric)
            r["newest"].append(ratio(fw, med(summary, c.label, NEWEST_MIMALLOC, exp.metric)))
            r["best"].append(ratio(fw, bp[1]) if bp else None)
            r["mimalloc"].append(ratio(fw, med(summary, c.label, "mimalloc", exp.metric)))
        if exp.in_summary:
            ratios.append((exp, r))
        for (case, alloc), s in sorted(summary.items()):
            st = s.get(exp.metric) or {}
            summary_rows.append([exp.name, case, alloc, exp.metric, st.get("median", ""), st.get("min", ""),
                                 st.get("max", ""), s["ok"], s["runs"], s.get("skipped") or "",
                                 "; ".join(e for e in s["errors"] if e)])
        cases_for_report = cases
        plot_file = make_plots(exp, cases_for_report, summary, exp_allocs, plots_dir)
        extra_plot_files = [f for f in (make_plots(exp, cases_for_report, summary, exp_allocs, plots_dir, m, ml)
                                        for m, ml in exp.extra_plots) if f]
        index.append("- [%s](#%s) %s%s" % (exp.name, anchor("%s: %s%s" % (
            exp.name, exp.title, (" - reproduces seed `%s`" % exp.seed) if exp.seed else " - standard workload")),
            exp.title, (" (seed `%s`)" % exp.seed) if exp.seed else ""))
        space_plots = plot_address_space(cases_for_report, recs, exp_allocs, plots_dir) if exp.name == "frag32" else {}
        md_sections += report_experiment(exp, cases_for_report, summary, exp_allocs, seeds, "plots", plot_file, em,
                                          recs, space_plots)
        for f in extra_plot_files:
            md_sections += ["![%s](plots/%s)" % (f[:-4], f), ""]
    if "freeway" in alloc_names:
        md += ratio_summary(ratios)
    md.append("## Experiments")
    md.append("")
    md += index
    md.append("")
    md += md_sections
    with open(os.path.join(out_dir, "RESULTS.md"), "w") as f:
        f.write("\n".join(md).rstrip() + "\n")
    with open(os.path.join(out_dir, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["exp", "case", "alloc", "metric", "median", "min", "max", "ok_runs", "runs", "skipped", "errors"])
        w.writerows(summary_rows)


def anchor(title):
    a = title.strip().lower()
    a = re.sub(r"[^\w\- ]", "", a)
    return a.replace(" ", "-")


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="scaled-down pass (default)")
    g.add_argument("--full", action="store_true", help="the seeds' own scale")
    ap.add_argument("--only", default="", help="comma-separated experiments (see --list)")
    ap.add_argument("--skip", default="", help="comma-separated experiments to leave out")
    ap.add_argument("--cases", default="", metavar="REGEX",
                    help="run only the cases whose label matches REGEX (Python re.search), in every experiment "
                         "selected; an experiment with no matching case is not run")
    ap.add_argument("--alloc", default="", help="comma-separated allocators: " + ",".join(ALLOC_NAMES))
    ap.add_argument("--build-dir", default="build", help="the cmake build directory (default: build)")
    ap.add_argument("--bin-dir", default="", help="where the bench_* programs are (default: BUILD/bench)")
    ap.add_argument("--m32-build-dir", default="",
                    help="the 32-bit (-m32) cmake build directory of the 32-bit experiments (default: BUILD/m32)")
    ap.add_argument("--reps", type=int, default=0, help="repetitions per point (default 3 quick, 5 full)")
    ap.add_argument("--scale", type=float, default=0.0, help="work scale for every experiment (1 = seed scale)")
    ap.add_argument("--out", default="", help="output directory")
    ap.add_argument("--no-merge", action="store_true",
                    help="start the output afresh even for a partial run (by default a partial run keeps the "
                         "results already in the output directory and replaces only what it re-ran)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=LIB[,KEY=VALUE...]",
                    help="one more column, freeway-NAME: the freeway library at LIB (e.g. another build "
                         "directory's libfreeway.so) with the FREEWAY_* settings given, run in every experiment "
                         "as 'freeway' is, to weigh a change or a setting against the default (repeatable)")
    ap.add_argument("--timeout", type=float, default=0, help="per-run timeout in seconds")
    ap.add_argument("--list", action="store_true", help="list experiments and allocators, then exit")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite RESULTS.md, the CSV files and the plots from the output directory's results.json, "
                         "running nothing")
    args = ap.parse_args()
    for v in args.variant:
        add_variant(v)

    full = bool(args.full)
    mode = "full" if full else "quick"
    build_dir = os.path.abspath(os.path.join(REPO, args.build_dir) if not os.path.isabs(args.build_dir)
                                else args.build_dir)
    bin_dir = os.path.abspath(args.bin_dir) if args.bin_dir else os.path.join(build_dir, "bench")
    m32_dir = os.path.abspath(args.m32_build_dir) if args.m32_build_dir else os.path.join(build_dir, "m32")
    bin32_dir = os.path.join(m32_dir, "bench")

    if args.list:
        print("experiments:")
        for e in EXPERIMENTS:
            print("  %-12s %s%s%s" % (e.name, e.title, (" [seed %s]" % e.seed) if e.seed else "",
                                      "" if e.default else " [not in the quick pass: --only %s]" % e.name))
        print("allocators:")
        for n, lib in PEERS:
            if lib == "@peers":
                peer = peer_build(build_dir, n)
                where = "%s (%s)" % (rel(peer["path"]), peer.get("upstream_version") or "?") if peer else (
                    "not built (bench/peers/build.sh)")
            else:
                where = "(C library)" if lib is None else (
                    os.path.join(build_dir, "libfreeway.so") if lib == "@build" else (find_library(lib) or "not found"))
            extra = "".join(" %s=%s" % kv for kv in sorted(ALLOC_ENV.get(n, {}).items()))
            if n in OPT_IN_ALLOCS:
                extra += " (by default only in: %s)" % (
                    ", ".join(e.name for e in EXPERIMENTS if n in e.extra_allocs) or "none")
            print("  %-16s %s%s" % (n, rel(where), extra))
        return 0

    only = [x for x in args.only.split(",") if x]
    skip = [x for x in args.skip.split(",") if x]
    for x in only + skip:
        if x not in EXP_BY_NAME:
            ap.error("unknown experiment %r (have: %s)" % (x, ", ".join(EXP_BY_NAME)))
    default_allocs = DEFAULT_ALLOCS
    if os.environ.get("FW_BENCH_NO_PEERS") == "1":
        default_allocs = [n for n in default_allocs if n not in BUILT_PEERS]
    explicit_allocs = [x for x in args.alloc.split(",") if x]
    for x in explicit_allocs:
        if x not in ALLOC_NAMES:
            ap.error("unknown allocator %r (have: %s)" % (x, ", ".join(ALLOC_NAMES)))
    exps = [e for e in EXPERIMENTS if (not only or e.name in only) and e.name not in skip
            and (e.default or full or e.name in only)]

    def binpath_of(e):
        d = bin32_dir if e.bits == 32 else bin_dir
        return lambda name: os.path.join(d, "bench_" + name)

    def exp_scale(e):
        return args.scale or (1.0 if full else e.quick_scale)

    # Each experiment's cases; with --cases, only those whose label matches,
    # and only the experiments left with one.
    exp_cases = {e.name: e.cases(binpath_of(e), exp_scale(e), full) for e in exps}
    if args.cases:
        try:
            cases_re = re.compile(args.cases)
        except re.error as err:
            ap.error("--cases %r: %s" % (args.cases, err))
        exp_cases = {k: [c for c in v if cases_re.search(c.label)] for k, v in exp_cases.items()}
        exps = [e for e in exps if exp_cases[e.name]]
        if not exps:
            ap.error("--cases %r matches no case of the experiments selected (their labels: bench/run.py "
                     "--only NAME writes them in the output's summary.csv)" % args.cases)

    def exp_alloc_names(e):
        """The allocators experiment e runs: --alloc's, or the default set plus
        the opt-in ones the experiment names."""
        return explicit_allocs or default_allocs + [n for n in e.extra_allocs if n not in default_allocs]

    notes = []
    allocs32 = []
    if any(e.bits == 32 for e in exps):
        if not all(os.path.exists(os.path.join(bin32_dir, p)) for p in ("bench_whoami", "bench_frag")):
            notes.append("32-bit experiments (%s): no 32-bit build in %s (scripts/bench.sh makes it when gcc -m32 "
                         "links, i.e. with Debian's gcc-multilib); skipped" % (
                             ", ".join(e.name for e in exps if e.bits == 32), rel(m32_dir)))
            exps = [e for e in exps if e.bits != 32]
        else:
            allocs32 = resolve_allocators(m32_dir, [n for n in ALLOC_NAMES if any(
                n in exp_alloc_names(e) for e in exps if e.bits == 32)], bin32_dir, notes, bits=32)
    wanted_allocs = [n for n in ALLOC_NAMES if any(n in exp_alloc_names(e) for e in exps if e.bits == 64)]
    reps = args.reps or (5 if full else 3)
    timeout = args.timeout or (1800 if full else 300)
    partial = bool(only or skip or args.alloc or args.cases)
    out_dir = os.path.abspath(args.out) if args.out else os.path.join(HERE, "results", mode)
    if args.report_only:
        with open(os.path.join(out_dir, "results.json")) as f:
            old = json.load(f)
        with open(os.path.join(HERE, "seed_figures.json")) as f:
            seeds = json.load(f)
        write_outputs(out_dir, old["meta"], old["experiments"], old["records"], old["allocators"], old["notes"], seeds)
        print("results: %s" % rel(os.path.join(out_dir, "RESULTS.md")), file=sys.stderr)
        return 0

    if wanted_allocs and not os.path.exists(os.path.join(bin_dir, "bench_whoami")):
        print("benchmark programs not found in %s: build first (scripts/bench.sh does)" % rel(bin_dir),
              file=sys.stderr)
        return 1

    allocs = resolve_allocators(build_dir, wanted_allocs, bin_dir, notes) if wanted_allocs else []
    for n in notes:
        print("note: " + n, file=sys.stderr)
    if not allocs and not allocs32:
        print("no allocator available", file=sys.stderr)
        return 1
    with open(os.path.join(HERE, "seed_figures.json")) as f:
        seeds = json.load(f)

    plan = []
    total = 0
    for e in exps:
        scale = exp_scale(e)
        cases = exp_cases[e.name]
        e_allocs = [a for a in (allocs32 if e.bits == 32 else allocs) if a["name"] in exp_alloc_names(e)]
        plan.append((e, cases, scale, e_allocs))
        if e.name == "fastpath":
            total += len(cases) * len(e_allocs)
        else:
            total += len(cases) * len(e_allocs) * exp_reps(e, reps, bool(args.reps), full)
        total += e.side_run_count(cases, e_allocs)
    meta = machine_info()
    meta.update({"mode": mode, "reps": reps, "build_dir": rel(build_dir)})
    print("freeway bench: %s pass, %d experiment(s), allocators: %s, %d runs, output %s" % (
        mode, len(exps), ", ".join([a["name"] for a in allocs] + ["%s (32-bit)" % a["name"] for a in allocs32]),
        total, rel(out_dir)), file=sys.stderr)

    records = []
    exp_meta = {}
    allocs_info = [{k: v for k, v in a.items() if k != "path"} for a in allocs]
    # The experiments of which --cases left out cases the output already
    # holds: experiment -> the labels re-run (the other rows are kept).
    case_partial = {}
    if partial and not args.no_merge and os.path.exists(os.path.join(out_dir, "results.json")):
        with open(os.path.join(out_dir, "results.json")) as f:
            old = json.load(f)
        rerun = {e.name: {a["name"] for a in ea} for e, _, _, ea in plan}
        if args.cases:
            for e, cases, _, _ in plan:
                labels = {c.label for c in cases}
                if {c["label"] for c in old.get("experiments", {}).get(e.name, {}).get("cases", [])} - labels:
                    case_partial[e.name] = labels

        def replaced(r):
            if r["exp"] not in rerun:
                return False
            if r["alloc"] == "-":
                # fastpath's allocator-free loop count, re-measured with the experiment
                return True
            return r["alloc"] in rerun[r["exp"]] and (
                r["exp"] not in case_partial or r["case"] in case_partial[r["exp"]])
        records = [r for r in old.get("records", []) if not replaced(r)]
        exp_meta = {k: v for k, v in old.get("experiments", {}).items()}
        known = {a["name"] for a in allocs_info}
        allocs_info += [a for a in old.get("allocators", []) if a["name"] not in known]
        allocs_info.sort(key=lambda a: ALLOC_NAMES.index(a["name"]))
        notes = list(dict.fromkeys(old.get("notes", []) + notes))
        meta["merged_from_earlier_runs"] = True
        for e, cases, _, e_allocs in plan:
            if e.name in exp_meta and (e.name in case_partial or set(exp_alloc_names(e)) != set(
                    DEFAULT_ALLOCS + [n for n in e.extra_allocs if n not in DEFAULT_ALLOCS])):
                earlier = exp_meta[e.name]
                exp_meta[e.name] = dict(earlier)
                entry = {"date": meta["date"], "allocs": [a["name"] for a in e_allocs],
                         "freeway_commit": meta["freeway_commit"]}
                if e.name in case_partial:
                    entry["cases"] = [c.label for c in cases]
                    entry["reps"] = 1 if e.name == "fastpath" else exp_reps(e, reps, bool(args.reps), full)
                exp_meta[e.name]["partial_reruns"] = earlier.get("partial_reruns", []) + [entry]

    progress = Progress(total)
    scratch = tempfile.TemporaryDirectory(prefix="fwbench-")
    for e, cases, scale, e_allocs in plan:
        started = time.monotonic()
        earlier = exp_meta.get(e.name, {})
        reruns = earlier.get("partial_reruns")
        first = earlier if reruns else {}
        exp_meta[e.name] = {"date": first.get("date", meta["date"]), "scale": scale, "reps": 1 if e.name == "fastpath" else exp_reps(e, reps, bool(args.reps), full),
                            "freeway_commit": meta["freeway_commit"], "mode": mode,
                            "cases": [{"label": c.label, "argv": [str(a) for a in c.argv], "group": c.group,
                                       "x": c.x, "seed_key": c.seed_key, "env": c.env} for c in cases]}
        if e.name in case_partial:
            # The other rows are the earlier run's: so are the run's figures
            # (the re-run's are in its partial_reruns entry), and its case
            # list keeps them in their order, the re-run ones replaced.
            for k in ("reps", "freeway_commit", "seconds"):
                if k in earlier:
                    exp_meta[e.name][k] = earlier[k]
            new = {c["label"]: c for c in exp_meta[e.name]["cases"]}
            merged = [new.pop(c["label"], c) for c in earlier.get("cases", [])]
            exp_meta[e.name]["cases"] = merged + list(new.values())
        if reruns:
            exp_meta[e.name]["partial_reruns"] = reruns
        if e.bits != 64:
            # Its libraries are not the allocator table's (64-bit) ones.
            exp_meta[e.name]["allocators"] = [{k: v for k, v in a.items() if k != "path"} for a in e_allocs]
        ctx = {"scratch": scratch.name, "maps_out": os.path.join(out_dir, "maps", e.name), "out_dir": out_dir,
               "other_cases_kept": e.name in case_partial}
        if e.name == "fastpath":
            run_fastpath(e, cases, e_allocs, full, timeout, progress, records, notes)
        else:
            run_timed(e, cases, e_allocs, exp_reps(e, reps, bool(args.reps), full), timeout, progress, records, ctx)
        side = e.side_runs(cases, e_allocs, timeout, progress, ctx)
        for k in e.side_keys:
            # A partial run that did not make them keeps the earlier run's;
            # one of some cases (--cases) replaces only theirs.
            if k in side and e.name in case_partial and isinstance(side[k], dict) \
                    and isinstance(earlier.get(k), dict):
                exp_meta[e.name][k] = {**earlier[k], **side[k]}
            elif k in side or k in earlier:
                exp_meta[e.name][k] = side[k] if k in side else earlier[k]
        if e.name not in case_partial:
            exp_meta[e.name]["seconds"] = round(time.monotonic() - started, 1)
        progress.note("%s done in %.0f s" % (e.name, time.monotonic() - started))
    # Binary paths in the saved case lists are made relative to the repository.
    for em in exp_meta.values():
        for c in em.get("cases", []):
            c["argv"] = [clean_arg(a) for a in c["argv"]]
    scratch.cleanup()
    write_outputs(out_dir, meta, exp_meta, records, allocs_info, notes, seeds)
    print("results: %s" % rel(os.path.join(out_dir, "RESULTS.md")), file=sys.stderr)
    failed = [r for r in records if not r["ok"]]
    if failed:
        print("%d run(s) failed; see the errors column of %s" % (len(failed), rel(os.path.join(out_dir, "runs.csv"))),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
