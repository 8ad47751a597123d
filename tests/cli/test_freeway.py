"""Tests of the freeway command (tools/freeway).

Environment (set by ctest, tests/CMakeLists.txt):
  FREEWAY_LIB          the built libfreeway.so
  FWT_TOOL             the command to test (default: tools/freeway)
  FWT_PROJECT_VERSION  the project's version (default: read from CMakeLists.txt)
  FWT_CC               a C compiler for the symbolisation tests (default: cc)

Run by hand from this directory:
  FREEWAY_LIB=../../build/libfreeway.so python3 -m unittest -v test_freeway
"""
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(HERE, "fixtures")
TOOL = os.path.abspath(os.environ.get("FWT_TOOL") or os.path.join(SOURCE, "tools", "freeway"))
LIB = os.environ.get("FREEWAY_LIB")
if LIB:
    # The tests run the command in other directories.
    LIB = os.environ["FREEWAY_LIB"] = os.path.abspath(LIB)
SVG = "{http://www.w3.org/2000/svg}"


def fixture(name):
    return os.path.join(FIXTURES, name)


def load_tool():
    """The command as a module, for its helpers."""
    loader = importlib.machinery.SourceFileLoader("freeway_tool", TOOL)
    spec = importlib.util.spec_from_loader("freeway_tool", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def clean_env(env=None, unset_lib=False):
    """The environment for a command: each test sets the modes it checks,
    none inherited (the suite also runs under FREEWAY_CAUTIOUS=1), but the
    library's location."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("FREEWAY_") or k == "FREEWAY_LIB"}
    if unset_lib:
        e.pop("FREEWAY_LIB", None)
    if env:
        e.update(env)
    return e


def freeway(*args, env=None, cwd=None, tool=None, unset_lib=False, timeout=60):
    """Runs the command; returns (exit status, stdout, stderr)."""
    e = clean_env(env, unset_lib)
    p = subprocess.run([sys.executable, tool or TOOL] + list(args), env=e, cwd=cwd,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


# A program that prints its environment as JSON.
PRINT_ENV = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


class VersionTest(unittest.TestCase):
    def project_version(self):
        v = os.environ.get("FWT_PROJECT_VERSION")
        if v:
            return v
        with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
            m = re.search(r"project\(\s*freeway\s+VERSION\s+([0-9.]+)", f.read())
        self.assertIsNotNone(m, "no project(freeway VERSION ...) in CMakeLists.txt")
        return m.group(1)

    def test_version_matches_project(self):
        rc, out, _ = freeway("--version")
        self.assertEqual(rc, 0)
        self.assertEqual(out.strip(), "freeway %s" % self.project_version())

    def test_executable_with_shebang(self):
        self.assertTrue(os.access(TOOL, os.X_OK), "%s is not executable" % TOOL)
        with open(TOOL, "rb") as f:
            self.assertEqual(f.readline(), b"#!/usr/bin/env python3\n")


class HelpTest(unittest.TestCase):
    def test_help_at_every_level(self):
        for args, words in ((["--help"], ["run", "report", "examples"]),
                            (["run", "--help"], ["--stats", "--leaks", "--map", "--out",
                                                 "--set", "FREEWAY_LIB", "examples"]),
                            (["report", "--help"], ["--json", "--svg", "--html", "--top",
                                                    "examples"]),
                            (["top", "--help"], ["PID", "--interval", "--once", "--count",
                                                 "--json", "--rows", "--timeout",
                                                 "freeway run --top", "FREEWAY_DUMP_SIGNAL",
                                                 "FREEWAY_REPORT_DIR", "Ctrl-C", "examples"])):
            rc, out, _ = freeway(*args)
            self.assertEqual(rc, 0, args)
            for w in words:
                self.assertIn(w, out, args)

    def test_no_command(self):
        rc, _, err = freeway()
        self.assertEqual(rc, 2)
        self.assertIn("usage", err)


@unittest.skipUnless(LIB and os.path.isfile(LIB), "FREEWAY_LIB does not name the built library")
class DiscoveryTest(unittest.TestCase):
    """The library is $FREEWAY_LIB, else next to the script, else in
    ../lib, ../lib/<multiarch>, ../lib64, else ../build."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fwt-cli-")
        self.bin = os.path.join(self.tmp, "prefix", "bin")
        os.makedirs(self.bin)
        self.tool = os.path.join(self.bin, "freeway")
        shutil.copy2(TOOL, self.tool)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def place(self, rel):
        """A libfreeway.so (a link to the real one) at prefix/REL."""
        path = os.path.join(self.tmp, "prefix", rel, "libfreeway.so")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(os.path.abspath(LIB), path)
        return os.path.normpath(path)

    def preload(self, tool=None, env=None):
        rc, out, err = freeway("run", "--", *PRINT_ENV, tool=tool or self.tool,
                               unset_lib=True, env=env)
        self.assertEqual(rc, 0, err)
        return last_json(out)["LD_PRELOAD"].split(":")[0]

    def test_order(self):
        order = ["bin", "lib", "lib64", "build"]
        arch = sysconfig.get_config_var("MULTIARCH")
        if arch:
            order.insert(2, os.path.join("lib", arch))
        paths = [self.place(rel) for rel in order]
        for path in paths:
            self.assertEqual(self.preload(), path)
            os.unlink(path)
        rc, _, err = freeway("run", "--", "true", tool=self.tool, unset_lib=True)
        self.assertEqual(rc, 125)
        self.assertIn("cannot find libfreeway.so", err)
        for path in paths:
            self.assertIn(path, err)

    def test_env_first(self):
        self.place("bin")
        other = os.path.join(self.tmp, "other.so")
        os.symlink(os.path.abspath(LIB), other)
        self.assertEqual(self.preload(env={"FREEWAY_LIB": other}), other)
        rc, _, err = freeway("run", "--", "true", tool=self.tool,
                             env={"FREEWAY_LIB": os.path.join(self.tmp, "missing.so")})
        self.assertEqual(rc, 125)
        self.assertIn("missing.so: no such file", err)

    def test_through_a_link(self):
        """A link to the installed script finds the library beside the
        script it points to."""
        lib = self.place("lib")
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.mkdir(elsewhere)
        link = os.path.join(elsewhere, "freeway")
        os.symlink(self.tool, link)
        self.assertEqual(self.preload(tool=link), lib)


@unittest.skipUnless(LIB and os.path.isfile(LIB), "FREEWAY_LIB does not name the built library")
class RunTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fwt-cli-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_environment(self):
        out_dir = os.path.join(self.tmp, "a", "b")
        rc, out, err = freeway("run", "--stats", "--leaks", "--map", "--cautious", "--secure",
                               "--set", "purge_delay=0", "--set", "FREEWAY_verbose=1",
                               "--out", out_dir, "--quiet", "--", *PRINT_ENV,
                               env={"LD_PRELOAD": "/nonexistent/libother.so"}, cwd=self.tmp)
        self.assertEqual(rc, 0, err)
        env = last_json(out)
        self.assertEqual(env["LD_PRELOAD"], os.path.abspath(LIB) + ":/nonexistent/libother.so")
        for name in ("FREEWAY_SHOW_STATS", "FREEWAY_LEAK_REPORT", "FREEWAY_HEAP_MAP",
                     "FREEWAY_CAUTIOUS", "FREEWAY_SECURE", "FREEWAY_VERBOSE"):
            self.assertEqual(env.get(name), "1", name)
        self.assertEqual(env["FREEWAY_PURGE_DELAY"], "0")
        self.assertEqual(env["FREEWAY_REPORT_DIR"], out_dir)
        self.assertTrue(os.path.isdir(out_dir))

    def test_top_environment(self):
        # --top: the dump signal and a directory of its own, gone after the run
        rc, out, err = freeway("run", "--top", "--", *PRINT_ENV, cwd=self.tmp)
        self.assertEqual(rc, 0, err)
        env = last_json(out)
        self.assertEqual(env["FREEWAY_DUMP_SIGNAL"], str(int(signal.SIGUSR2)))
        self.assertNotIn("FREEWAY_SHOW_STATS", env)
        d = env["FREEWAY_REPORT_DIR"]
        self.assertTrue(os.path.isabs(d), d)
        self.assertFalse(os.path.exists(d), "the directory of --top outlives the run")
        self.assertEqual(os.listdir(self.tmp), [])
        self.assertRegex(err, r"runs as pid \d+; see its memory live with: \S*freeway top \d+")
        # with --out, that directory; --set comes after the flags
        out_dir = os.path.join(self.tmp, "rep")
        rc, out, err = freeway("run", "--top", "--out", out_dir, "--set", "dump_signal=10",
                               "--quiet", "--", *PRINT_ENV, cwd=self.tmp)
        self.assertEqual(rc, 0, err)
        env = last_json(out)
        self.assertEqual(env["FREEWAY_REPORT_DIR"], out_dir)
        self.assertEqual(env["FREEWAY_DUMP_SIGNAL"], "10")
        self.assertTrue(os.path.isdir(out_dir))

    def test_plain_run_sets_no_reports(self):
        rc, out, err = freeway("run", "--", *PRINT_ENV, cwd=self.tmp)
        self.assertEqual(rc, 0, err)
        env = last_json(out)
        self.assertEqual(env["LD_PRELOAD"], os.path.abspath(LIB))
        for name in ("FREEWAY_REPORT_DIR", "FREEWAY_SHOW_STATS", "FREEWAY_CAUTIOUS"):
            self.assertNotIn(name, env)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_default_report_dir(self):
        # --quiet: the environment is the last line of the output
        rc, out, err = freeway("run", "--stats", "--quiet", "--", *PRINT_ENV, cwd=self.tmp)
        self.assertEqual(rc, 0, err)
        made = os.listdir(self.tmp)
        self.assertEqual(len(made), 1)
        self.assertRegex(made[0], r"^freeway-report-\d+$")
        self.assertEqual(last_json(out)["FREEWAY_REPORT_DIR"], os.path.join(self.tmp, made[0]))

    def test_bad_set(self):
        for bad in ("purge-delay=0", "purge_delay", "=1", "x1=2"):
            rc, _, err = freeway("run", "--set", bad, "--", "true", cwd=self.tmp)
            self.assertEqual(rc, 125, bad)
            self.assertIn("--set", err)

    def test_no_program(self):
        rc, _, err = freeway("run", "--stats", cwd=self.tmp)
        self.assertEqual(rc, 125)
        self.assertIn("no program", err)

    def test_exit_status(self):
        rc, _, _ = freeway("run", "--", "sh", "-c", "exit 7", cwd=self.tmp)
        self.assertEqual(rc, 7)
        rc, _, err = freeway("run", "--", os.path.join(self.tmp, "no-such-program"), cwd=self.tmp)
        self.assertEqual(rc, 127)
        self.assertIn("not found", err)

    def test_signal(self):
        rc, _, err = freeway("run", "--stats", "--out", "d", "--", "sh", "-c", "kill -USR1 $$",
                             cwd=self.tmp)
        self.assertEqual(rc, 128 + signal.SIGUSR1)
        self.assertIn("killed by signal %d (SIGUSR1)" % signal.SIGUSR1, err)
        self.assertIn("no reports were written", err)

    def test_library_loaded(self):
        rc, out, err = freeway("run", "--", "sh", "-c", "grep -c libfreeway /proc/$$/maps",
                               cwd=self.tmp)
        self.assertEqual(rc, 0, err)
        self.assertGreaterEqual(int(out.strip()), 1)

    def test_renders_what_the_run_wrote(self):
        """Every report the run wrote is rendered, one set per process;
        reports already in the directory are not; the map is drawn."""
        out_dir = os.path.join(self.tmp, "rep")
        os.mkdir(out_dir)
        shutil.copy(fixture("stats-mismatch.json"), os.path.join(out_dir, "freeway-1-stats.json"))
        # Stands for a program that forked: reports of two processes.
        prog = ("import os, shutil, sys\n"
                "d, f = os.environ['FREEWAY_REPORT_DIR'], sys.argv[1]\n"
                "pid = os.getpid()\n"
                "for p, kind, src in ((pid, 'stats', 'stats.json'), (pid, 'leaks', 'leaks.json'),\n"
                "                     (pid, 'map', 'map.json'), (pid + 1, 'stats', 'stats.json')):\n"
                "    shutil.copy(os.path.join(f, src), os.path.join(d, 'freeway-%d-%s.json' % (p, kind)))\n"
                # without the exit handlers, where the library would write
                # its own reports over the copies
                "os._exit(0)\n")
        rc, out, err = freeway("run", "--stats", "--leaks", "--map", "--out", out_dir, "--",
                               sys.executable, "-c", prog, FIXTURES, cwd=self.tmp)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.count("==> "), 4, out)
        self.assertEqual(out.count("Ledger:"), 2)
        self.assertIn("Live blocks: 5 blocks", out)
        self.assertIn("Huge blocks: 1, 16.0 MiB", out)
        self.assertNotIn("freeway-1-stats.json", out)
        self.assertNotIn("MISMATCH", out)
        self.assertIn("reports in %s" % out_dir, err)
        for name in ("map.html", "map.svg"):
            self.assertIn(name, err)
            with open(os.path.join(out_dir, name)) as f:
                ET.fromstring(f.read())

        rc, out, err = freeway("run", "--stats", "--quiet", "--out", out_dir, "--",
                               sys.executable, "-c", prog, FIXTURES, cwd=self.tmp)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, "")
        self.assertIn("-stats.json", err)


# A shell command that prints whether libfreeway is mapped into the shell.
LOADED = ["sh", "-c", 'printf "{\\"loaded\\": %d}\\n" "$(grep -c libfreeway /proc/$$/maps)"']


@unittest.skipUnless(LIB, "FREEWAY_LIB not set")
class CompareTest(unittest.TestCase):
    def compare(self, *args):
        return freeway("compare", *args, timeout=120)

    def test_each_allocator_runs_under_its_own_library(self):
        st, out, err = self.compare("--reps", "3", "--with", "freeway,glibc", "--key", "loaded",
                                    "--json", "--", *LOADED)
        self.assertEqual(st, 0, err)
        d = json.loads(out)
        self.assertEqual([a["name"] for a in d["allocators"]], ["freeway", "glibc"])
        self.assertEqual(d["allocators"][0]["library"], LIB)
        self.assertIsNone(d["allocators"][1]["library"])
        for a, loaded in zip(d["allocators"], (True, False)):
            self.assertEqual(len(a["runs"]), 3)
            # the count of the library's mappings in the shell
            self.assertEqual([r["loaded"] > 0 for r in a["runs"]], [loaded] * 3, a["name"])
            self.assertTrue(all(r["status"] == 0 and r["wall_s"] > 0 for r in a["runs"]))
        self.assertEqual(d["allocators"][0]["ratio"]["wall_s"], 1.0)

    def test_peak_rss_is_the_programs(self):
        # The kernel's figure alone would give this test's own (forked) size
        # for a small program; a big one must show its 64 MiB.
        big = [sys.executable, "-c", "b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096])"]
        st, out, err = self.compare("--reps", "1", "--with", "freeway,glibc", "--json", "--", *big)
        self.assertEqual(st, 0, err)
        for a in json.loads(out)["allocators"]:
            self.assertGreaterEqual(a["median"]["maxrss_kib"], 64 << 10, a["name"])
            self.assertLess(a["median"]["maxrss_kib"], 200 << 10, a["name"])
        # A shell that sleeps holds 1 to 3 MiB; the command's own interpreter,
        # whose mark every child inherits, 10 MiB and more.
        st, out, err = self.compare("--reps", "1", "--with", "glibc", "--json", "--", "sh", "-c", "sleep 0.2")
        self.assertEqual(st, 0, err)
        rss = json.loads(out)["allocators"][0]["median"]["maxrss_kib"]
        self.assertLess(rss, 8 << 10)

    def test_text_table_names_labels_and_ratios(self):
        st, out, err = self.compare("--reps", "2", "--with", "mine=%s,glibc" % LIB, "--", "true")
        self.assertEqual(st, 0, err)
        self.assertIn("2 runs each, interleaved", out)
        rows = [l for l in out.splitlines() if l.startswith(("mine ", "glibc "))]
        self.assertEqual(len(rows), 2, out)
        self.assertRegex(rows[1], r"\(\d+\.\d\dx\)")
        self.assertIn("mine: %s" % LIB, out)

    def test_a_failing_run_stops_with_its_status(self):
        st, out, err = self.compare("--reps", "2", "--with", "freeway,glibc", "--",
                                    "sh", "-c", "echo broken >&2; exit 3")
        self.assertEqual(st, 1)
        self.assertRegex(err, r"exited with status 3 under (freeway|glibc) \(run 1\)")
        self.assertIn("broken", err)
        st, _, err = self.compare("--reps", "1", "--with", "glibc", "--", "sh", "-c", "kill -9 $$")
        self.assertEqual(st, 1)
        self.assertIn("was killed by signal 9 under glibc", err)

    def test_unknown_allocator_and_missing_library(self):
        st, _, err = self.compare("--with", "freeway,nosuchalloc", "--", "true")
        self.assertEqual(st, 1)
        self.assertIn("nosuchalloc: not an allocator", err)
        st, _, err = self.compare("--with", "x=/nonexistent/libx.so", "--", "true")
        self.assertEqual(st, 1)
        self.assertIn("no such file", err)
        st, _, err = self.compare("--with", "freeway,freeway", "--", "true")
        self.assertEqual(st, 1)
        self.assertIn("named twice", err)


class ReportTest(unittest.TestCase):
    def report(self, *args):
        rc, out, err = freeway("report", *args)
        self.assertEqual(rc, 0, err)
        return out

    def variant(self, name, change):
        """A copy of fixture NAME changed by change(report), in a temporary
        file (removed at the end of the test); returns its path."""
        with open(fixture(name)) as f:
            report = json.load(f)
        change(report)
        d = tempfile.mkdtemp(prefix="fwt-cli-")
        self.addCleanup(shutil.rmtree, d)
        path = os.path.join(d, name)
        with open(path, "w") as f:
            json.dump(report, f)
        return path

    def test_stats(self):
        out = self.report(fixture("stats.json"))
        self.assertIn("freeway-stats  pid 4242  freeway 0.1.0", out)
        self.assertRegex(out, r"live blocks +4\.0 MiB +50\.0% +4194304 +the block sizes")
        self.assertRegex(out, r"metadata +768\.0 KiB +9\.4% +786432")
        self.assertRegex(out, r"unaccounted +0 B +0\.0% +0 ")
        self.assertRegex(out, r"total +8\.0 MiB +100\.0% +8388608 += process\.committed")
        self.assertNotIn("MISMATCH", out)
        self.assertNotIn("snapshot", out)
        # Size classes: block size, pages, blocks, live blocks, live bytes, fill.
        self.assertRegex(out, r"16 B +2 +8192 +4096 +64\.0 KiB +50\.0%")
        self.assertRegex(out, r"1024 B +4 +256 +192 +192\.0 KiB +75\.0%")
        self.assertRegex(out, r"large +3 +3 +2 +3\.0 MiB +66\.7%")
        self.assertLess(out.index("16 B"), out.index("1024 B"))
        self.assertRegex(out, r"rss +5\.0 MiB")
        self.assertRegex(out, r"reserved +1\.0 GiB")
        self.assertIn("3 segments (1 abandoned), 2 threads (5 in all), 1 arena, 2 heaps, "
                      "1 huge block", out)
        self.assertIn("Options: purge_delay=10, cautious=0, verbose=0, report_dir=\"/tmp/report\"",
                      out)

    def test_stats_counts(self):
        """A report of the counting flavour: allocation and free columns per
        class and per thread, the peaks, cross-thread frees and OS calls."""
        def counted(r):
            for c in r["classes"]:
                c["allocs"], c["frees"] = c["live_blocks"] + 100, 100
            r["threads"] = [{"owner": "0x7f0000001000", "segments": 2, "bytes": 8 << 20, "live_bytes": 1 << 20,
                             "live_blocks": 1, "remote_frees_in": 33, "allocs": 7000, "frees": 500}]
            r["process"].update(committed_peak=16 << 20, rss_peak=6 << 20, segments_abandoned_total=4,
                                segments_adopted_total=3)
            r["counts"] = {"counting": True, "allocs": 1, "frees": 1, "live_blocks": 0, "remote_frees": 77,
                           "os_calls": {"map": 5, "unmap": 2, "purge": 9, "guard": 0, "huge_pages": 1}}
            r["pools"] = {"slab_bytes": 1 << 20, "live_bytes": 3 << 18, "cached_bytes": 1 << 18}
        out = self.report(self.variant("stats.json", counted))
        self.assertRegex(out, r"16 B +2 +8192 +4096 +64\.0 KiB +50\.0% +4196 +100")
        self.assertRegex(out, r"peak committed +16\.0 MiB")
        self.assertRegex(out, r"peak rss +6\.0 MiB")
        self.assertIn("frees across threads 77; OS calls: map 5, unmap 2, purge 9, guard 0, huge_pages 1", out)
        self.assertIn("segments abandoned by exiting threads 4, adopted 3", out)
        self.assertIn("object pools: slabs 1.0 MiB (in the live lines), live objects 768.0 KiB, free objects in the "
                      "pools' caches 256.0 KiB", out)
        self.assertRegex(out, r"33 +7000 +500")
        self.assertNotIn("counting flavour", out)
        # the default library's report: no counts, and a word on where to get them
        self.assertIn("counting flavour", self.report(fixture("stats.json")))

    def test_stats_mismatch(self):
        out = self.report(fixture("stats-mismatch.json"))
        self.assertIn("!= process.committed", out)
        self.assertIn("MISMATCH", out)
        self.assertIn("process.committed is 9437184 (9.0 MiB): 1048576 bytes (1.0 MiB) unexplained",
                      out)
        # A text option that is not set.
        self.assertIn("report_dir=(unset)", out)

    def test_stats_unaccounted(self):
        """A report made while other threads changed the heap: the walk
        found 12 KiB twice, so the unaccounted line is negative and the
        lines still add up to the committed memory."""
        def moved(r):
            for line in r["ledger"]:
                if line["line"] == "live blocks":
                    line["bytes"] += 12288
                if line["line"] == "unaccounted":
                    line["bytes"] = -12288
        out = self.report(self.variant("stats.json", moved))
        self.assertRegex(out, r"unaccounted +-12\.0 KiB +-0\.1% +-12288 ")
        self.assertRegex(out, r"total +8\.0 MiB +100\.0% +8388608 += process\.committed")
        self.assertNotIn("MISMATCH", out)
        self.assertIn("the walk found 12.0 KiB (12288 bytes) twice: other threads changed the heap",
                      out)

    def test_leaks(self):
        out = self.report(fixture("leaks.json"))
        self.assertIn("Live blocks: 5 blocks, 1.3 KiB (1300 bytes)", out)
        self.assertIn("exact: every live block's allocation site is known", out)
        self.assertIn("2 allocation sites, holding 1.3 KiB (1300 bytes)", out)
        self.assertNotIn("not listed", out)
        # Largest site first; no binary to read, so file offsets:
        # 0x55d0c0a01234 - 0x55d0c0a00000 + 0x1000.
        self.assertLess(out.index("#1  1000 B in 2 blocks, 76.9%"), out.index("#2  300 B in 3 blocks"))
        self.assertIn("0x55d0c0a01234  /nonexistent/freeway-test/prog+0x2234", out)
        self.assertIn("0x55d0c0a05678  /nonexistent/freeway-test/prog+0x6678", out)
        self.assertIn("0x7f00deadbeef  (in no mapping)", out)
        out = self.report("--top", "1", fixture("leaks.json"))
        self.assertIn("Top 1 sites", out)
        self.assertNotIn("#2", out)

    def test_leaks_without_mappings(self):
        """No mappings recorded: the raw addresses, and no error."""
        out = self.report(self.variant("leaks.json", lambda r: r.update(mappings=[])))
        lines = out.splitlines()
        for a in ("0x55d0c0a01234", "0x55d0c0a05678", "0x7f00deadbeef"):
            self.assertIn("      " + a, lines)
        self.assertNotIn("in no mapping", out)
        self.assertIn("note: the report records no executable mappings", out)

    def test_leaks_by_size(self):
        """Without cautious mode the sites are block sizes."""
        out = self.report(fixture("leaks-sizes.json"))
        self.assertIn("Live blocks: 1006 blocks, 621.6 KiB (636480 bytes)", out)
        self.assertIn("by block size: allocation sites are recorded in cautious mode only", out)
        self.assertIn("3 block sizes, holding 621.4 KiB (636288 bytes)", out)
        self.assertIn("3 blocks not listed", out)
        self.assertNotIn("(no stack recorded)", out)
        rows = [re.search(r"^  (\d+ blocks? of \d+ bytes) +(\S+ \S+) +(\S+)$", line, re.M)
                for line in out.splitlines()]
        self.assertEqual([m.groups() for m in rows if m],
                         [("1 block of 327680 bytes", "320.0 KiB", "51.5%"),
                          ("2 blocks of 98304 bytes", "192.0 KiB", "30.9%"),
                          ("1000 blocks of 112 bytes", "109.4 KiB", "17.6%")])
        out = self.report("--top", "2", fixture("leaks-sizes.json"))
        self.assertIn("Top 2 block sizes", out)
        self.assertNotIn("of 112 bytes", out)

    def test_map_text(self):
        out = self.report(fixture("map.json"))
        self.assertIn("2 arenas (2.0 GiB reserved); 4 segments", out)
        # kind, segments, abandoned, page/cached/free/purged slices, size, live, fill
        self.assertRegex(out, r"small +1 +0 +2 +0 +3 +59 +4\.0 MiB +32\.0 KiB +25\.0%")
        self.assertRegex(out, r"medium +1 +1 +8 +0 +0 +56 +4\.0 MiB +256\.0 KiB +50\.0%")
        self.assertRegex(out, r"span +1 +0 +4 +5 +6 +48 +4\.0 MiB +256\.0 KiB +100\.0%")
        self.assertRegex(out, r"large +1 +0 +128 +0 +0 +0 +8\.0 MiB +8\.0 MiB +100\.0%")
        self.assertRegex(out, r"total +4 +1 +142 +5 +9 +163 +20\.0 MiB")
        self.assertLess(out.index("medium "), out.index("span "))
        self.assertLess(out.index("span "), out.index("large "))
        self.assertIn("1 segment advised transparent huge pages", out)
        self.assertIn("Huge blocks: 1, 16.0 MiB (16777216 bytes)", out)

    def check_svg(self, svg, report):
        """One titled rect per run of slices, and a fill rect over each page
        partly in use (a full one is drawn dark)."""
        runs = [sl for s in report["segments"] for sl in s["slices"]]
        used = [sl for sl in runs if sl["state"] == "page" and 0 < sl["used"] < sl["capacity"]]
        titled = [r for r in svg.iter(SVG + "rect") if r.find(SVG + "title") is not None]
        self.assertEqual(len(titled), len(runs))
        fills = [r for r in svg.iter(SVG + "rect") if "f" in r.get("class", "").split()
                 and r.find(SVG + "title") is None and r.get("y") is None]
        self.assertEqual(len(fills), len(used))
        self.assertIsNotNone(svg.find(SVG + "title"))
        return titled

    def test_map_svg(self):
        with open(fixture("map.json")) as f:
            report = json.load(f)
        svg = ET.fromstring(self.report("--svg", fixture("map.json")))
        self.assertEqual(svg.tag, SVG + "svg")
        titled = self.check_svg(svg, report)
        tips = [r.find(SVG + "title").text for r in titled]
        for tip in ("slice 0, 64.0 KiB at 0x7f0000400000: small page, 64 B blocks: "
                    "512/1024 used (50.0%), 1024 reserved",
                    "slices 5-63, 3.7 MiB at 0x7f0000450000: purged (returned to the OS)",
                    "slice 0, 64.0 KiB at 0x7f0000800000: no blocks (the segment's header, "
                    "or a guard)",
                    "slices 1-4, 256.0 KiB at 0x7f0000810000: large block of 256.0 KiB "
                    "(262144 bytes), live",
                    "slices 5-9, 320.0 KiB at 0x7f0000850000: cached: a freed large block of "
                    "320.0 KiB (327680 bytes) kept for reuse",
                    "slices 0-127, 8.0 MiB at 0x7f0000c00000: large block of 8.0 MiB "
                    "(8376320 bytes), live"):
            self.assertIn(tip, tips)
        classes = [r.get("class") for r in titled]
        # Rows by arena then address; runs by slice index; class by state and kind.
        self.assertEqual(classes, ["S", "S", "F", "P", "H", "Nf", "C", "F", "P", "Lf", "M", "P"])
        # The large segment (two segments' worth) is squeezed into one row.
        widths = [float(r.get("width")) for r in titled]
        self.assertAlmostEqual(widths[9], sum(widths[:4]), places=1)
        text = "".join(svg.itertext())
        # Grouped by arena, by address: the medium segment's arena is last.
        order = [text.index(a) for a in ("arena 0x7f0000000000", "0x7f0000400000 small",
                                         "0x7f0000800000 span", "0x7f0000c00000 large",
                                         "arena 0x7f8000000000", "0x7f8000000000 medium")]
        self.assertEqual(order, sorted(order))
        self.assertIn("abandoned", text)
        self.assertIn("owner 0x0", text)
        self.assertIn("transparent huge pages", text)
        self.assertIn("huge blocks: 1, 16.0 MiB", text)
        # The legend names every colour the rows use, and the style has one.
        style = svg.find(SVG + "style").text
        for cls, word in (("S", "small page"), ("M", "medium page"), ("N", "span's large block"),
                          ("L", "large block"), ("C", "cached large block"),
                          ("H", "header or guard"), ("F", "free"), ("P", "purged")):
            self.assertIn(word, text)
            self.assertIn(".%s{" % cls, style)

    def test_map_html(self):
        with open(fixture("map.json")) as f:
            report = json.load(f)
        page = ET.fromstring(self.report("--html", fixture("map.json")))
        svgs = list(page.iter(SVG + "svg"))
        self.assertEqual(len(svgs), 1)
        self.check_svg(svgs[0], report)
        self.assertIn("freeway heap map, pid 4242", "".join(page.itertext()))

    def test_big_map(self):
        """Thousands of segments still make a well-formed SVG, quickly."""
        with open(fixture("map.json")) as f:
            report = json.load(f)
        base = report["segments"]
        report["arenas"] = [{"start": "0x7f0000000000", "size": 1 << 40}]
        report["segments"] = []
        for i in range(3000):
            s = json.loads(json.dumps(base[i % len(base)]))
            s["start"] = "0x%x" % (0x7f0000000000 + 2 * i * report["segment_size"])
            report["segments"].append(s)
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(report, f)
            f.flush()
            out = self.report("--svg", f.name)
        self.check_svg(ET.fromstring(out), report)
        runs = sum(len(s["slices"]) for s in report["segments"])
        # Each run a rect with its title; each row a label and a group.
        self.assertLess(len(out), 200 * (runs + len(report["segments"])))

    def test_real_reports(self):
        """Reports the library wrote (fixtures/real: a run of a program
        that left small blocks, a span block and large blocks live)."""
        real = os.path.join(FIXTURES, "real")
        out = self.report(real)
        self.assertEqual(out.count("==> "), 3)
        self.assertIn("= process.committed", out)
        self.assertNotIn("MISMATCH", out)
        self.assertRegex(out, r"112 B +18 +10197 +10000 +1\.1 MiB +98\.1%")
        self.assertIn("10000 blocks of 112 bytes", out)
        self.assertIn("1000 blocks of 320 bytes", out)
        self.assertRegex(out, r"span +1 +0 +5 +0 +0 +58 +4\.0 MiB")
        self.assertRegex(out, r"large +2 +0 +768 +0 +0 +0 +48\.0 MiB")
        path = os.path.join(real, "freeway-9926-map.json")
        with open(path) as f:
            report = json.load(f)
        self.check_svg(ET.fromstring(self.report("--svg", path)), report)
        ET.fromstring(self.report("--html", path))
        data = json.loads(self.report("--json", path))
        # The library spells a null owner "0" (a segment no thread owns).
        self.assertEqual([s["owner"] for s in data["segments"] if s["abandoned"]], ["0x0"])

    def test_json(self):
        data = json.loads(self.report("--json", fixture("leaks.json")))
        self.assertEqual(data["format"], "freeway-leaks")
        self.assertEqual([s["bytes"] for s in data["sites"]], [1000, 300])
        self.assertEqual(data["sites"][0]["stack"][1], "0x55d0c0a05678")
        data = json.loads(self.report("--json", fixture("stats.json"), fixture("map.json")))
        self.assertEqual([d["format"] for d in data], ["freeway-stats", "freeway-map"])
        self.assertEqual([c["block_size"] for c in data[0]["classes"]], [16, 1024, 0])
        self.assertEqual(data[0]["ledger"][-1], {
            "line": "unaccounted", "bytes": 0,
            "note": "committed memory the walk did not find, or found twice: other threads "
                    "changed the heap while it ran"})
        self.assertEqual([s["start"] for s in data[1]["segments"]],
                         ["0x7f0000400000", "0x7f0000800000", "0x7f0000c00000", "0x7f8000000000"])
        self.assertEqual(data[1]["segments"][3]["owner"], "0x0")
        self.assertEqual(data[1]["huge"], {"blocks": 1, "bytes": 16777216})

    def test_directory(self):
        with tempfile.TemporaryDirectory() as d:
            for src, name in (("stats.json", "freeway-9-stats.json"),
                              ("leaks.json", "freeway-9-leaks.json")):
                shutil.copy(fixture(src), os.path.join(d, name))
            out = self.report(d)
        self.assertLess(out.index("freeway-9-stats.json"), out.index("freeway-9-leaks.json"))
        self.assertIn("Ledger:", out)
        self.assertIn("Live blocks:", out)

    def test_errors(self):
        with tempfile.TemporaryDirectory() as d:
            def write(name, text):
                path = os.path.join(d, name)
                with open(path, "w") as f:
                    f.write(text)
                return path

            def load(name):
                with open(fixture(name)) as f:
                    return json.load(f)
            stats, leaks = load("stats.json"), load("leaks-sizes.json")
            old_huge = dict(load("map.json"), huge=[{"start": "0x7f2000000000", "size": 1 << 24}])
            bad_kind = load("map.json")
            bad_kind["segments"][1]["kind"] = "tiny"
            bad_state = load("map.json")
            bad_state["segments"][2]["slices"][2]["state"] = "lost"
            no_size = load("leaks-sizes.json")
            del no_size["sites"][1]["block_size"]
            cases = [
                (write("other.json", '{"format": "something-else", "version": 1}'),
                 "unknown report format \"something-else\""),
                (write("nojson.json", "not json"), "not a JSON file"),
                (write("v2.json", json.dumps(dict(stats, version=2))), "version 2"),
                (write("noledger.json", json.dumps({k: v for k, v in stats.items()
                                                    if k != "ledger"})),
                 "missing field 'ledger'"),
                (write("badopt.json", json.dumps(dict(stats, options={"purge_delay": [1]}))),
                 "options.purge_delay: is not a number, a string or null"),
                (write("oldhuge.json", json.dumps(old_huge)), "huge: is not an object"),
                (write("kind.json", json.dumps(bad_kind)),
                 "segments[1].kind: is 'tiny', not one of small, medium, span, large"),
                (write("state.json", json.dumps(bad_state)),
                 "segments[2].slices[2].state: is 'lost', not one of page, cached, free, purged"),
                (write("nosize.json", json.dumps(no_size)),
                 "sites[1]: missing field 'block_size'"),
                (write("nounlisted.json", json.dumps({k: v for k, v in leaks.items()
                                                      if k != "unlisted_blocks"})),
                 "missing field 'unlisted_blocks'"),
                (write("badaddr.json", json.dumps(dict(leaks, sites=[
                    {"blocks": 1, "bytes": 8, "block_size": 8, "stack": ["12"]}]))),
                 "sites[0].stack[0]: is not an address string"),
                (os.path.join(d, "absent.json"), "No such file"),
            ]
            for path, msg in cases:
                rc, out, err = freeway("report", path)
                self.assertEqual(rc, 1, path)
                self.assertIn(msg, err, path)
                self.assertIn(path, err)
            rc, _, err = freeway("report", "--svg", fixture("stats.json"))
            self.assertEqual(rc, 1)
            self.assertIn("heap maps", err)


class HelpersTest(unittest.TestCase):
    def test_human(self):
        tool = load_tool()
        self.assertEqual(tool.human(0), "0 B")
        self.assertEqual(tool.human(1023), "1023 B")
        self.assertEqual(tool.human(1536), "1.5 KiB")
        self.assertEqual(tool.human(3 << 20), "3.0 MiB")
        self.assertEqual(tool.human(5 << 30), "5.0 GiB")

    def test_option_number(self):
        # FREEWAY_DUMP_SIGNAL as the library reads it (src/options.c)
        tool = load_tool()
        for text, v in (("12", 12), (" 12 ", 12), ("+7", 7), ("yes", 1), ("ON", 1), ("off", 0),
                        ("usr2", None), ("12x", None), ("", None), ("0x0c", None)):
            self.assertEqual(tool.option_number(text), v, text)

    def test_top_rates(self):
        """freeway top's rates: the change between two samples over the
        time between their walks (time_ms), per line, class and thread."""
        tool = load_tool()
        with open(fixture(os.path.join("real", "freeway-9926-stats.json"))) as f:
            a = json.load(f)
        b = json.loads(json.dumps(a))
        b["time_ms"] = a["time_ms"] + 2000
        for line in b["ledger"]:
            if line["line"] == "live blocks":
                line["bytes"] += 4 << 20
            if line["line"] == "free page slots":
                line["bytes"] -= 1 << 20
        b["process"]["committed"] += 3 << 20
        b["classes"][0]["live_bytes"] += 4 << 20
        for r in (a, b):
            r["_got"], r["_pid"], r["_name"] = 0.0, 9926, "prog"
        first = "\n".join(tool.render_top(a, None, 1, 2.0, 8))
        self.assertNotIn("MiB/s", first)
        out = "\n".join(tool.render_top(b, a, 2, 2.0, 8))
        self.assertRegex(out, r"(?m)^  committed +\S+ MiB +\+1\.50 MiB/s ")
        self.assertRegex(out, r"(?m)^  live +\S+ MiB +\+2\.00 MiB/s ")
        self.assertRegex(out, r"(?m)^  rss +\S+ MiB +\+0\.00 MiB/s ")
        self.assertRegex(out, r"(?m)^  live blocks +.* \+2\.00 MiB/s$")
        self.assertRegex(out, r"(?m)^  free page slots +.* -0\.50 MiB/s$")
        self.assertRegex(out, r"(?m)^ +%d B +10000 +.* \+2\.00 MiB/s$" % a["classes"][0]["block_size"])
        self.assertIn("sample 2, every 2 s", out)
        # the size classes by live bytes: the large blocks first here
        self.assertLess(out.index("  large "), out.index(" 112 B "))
        self.assertIn("the top 1 of 4", "\n".join(tool.render_top(b, a, 2, 2.0, 1)))

    def test_top_activity(self):
        """freeway top's activity: allocations and frees per second from the
        counting flavour's counts, frees across threads and OS calls; a
        report of libfreeway.so has no allocation counts and says why."""
        tool = load_tool()
        with open(fixture(os.path.join("real", "freeway-9926-stats.json"))) as f:
            a = json.load(f)
        a["counts"] = {"counting": True, "allocs": 1000, "frees": 900, "live_blocks": 100, "remote_frees": 10,
                       "os_calls": {"map": 2, "unmap": 0, "purge": 4, "guard": 0, "huge_pages": 1}}
        b = json.loads(json.dumps(a))
        b["time_ms"] = a["time_ms"] + 2000
        b["counts"].update(allocs=5000, frees=4400, remote_frees=30)
        b["counts"]["os_calls"]["purge"] = 10
        for r in (a, b):
            r["_got"], r["_pid"], r["_name"] = 0.0, 9926, "prog"
        first = "\n".join(tool.render_top(a, None, 1, 2.0, 8))
        self.assertRegex(first, r"(?m)^  allocations +1000 *$")
        out = "\n".join(tool.render_top(b, a, 2, 2.0, 8))
        self.assertRegex(out, r"(?m)^  allocations +5000 +2000/s$")
        self.assertRegex(out, r"(?m)^  frees +4400 +1750/s$")
        self.assertRegex(out, r"(?m)^  frees across threads +30 +10/s$")
        self.assertRegex(out, r"(?m)^  OS calls +13 \(map 2, purge 10, huge_pages 1\) +3/s$")
        b["counts"] = {"counting": False, "live_blocks": 100, "remote_frees": 30, "os_calls": {"map": 2}}
        plain = "\n".join(tool.render_top(b, None, 1, 2.0, 8))
        self.assertIn("counting flavour", plain)
        self.assertNotRegex(plain, r"(?m)^  allocations")


def compiler():
    cc = os.environ.get("FWT_CC") or "cc"
    return shutil.which(cc)


def build_program(name, source, *flags):
    """Compiles source into a new temporary directory; returns (directory,
    executable), or skips the test class if it does not build."""
    tmp = tempfile.mkdtemp(prefix="fwt-cli-")
    src = os.path.join(tmp, name + ".c")
    with open(src, "w") as f:
        f.write(source)
    exe = os.path.join(tmp, name)
    p = subprocess.run([compiler()] + list(flags) + ["-o", exe, src], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    if p.returncode != 0:
        shutil.rmtree(tmp)
        raise unittest.SkipTest("cannot build the test program: %s" % p.stdout.decode()[-300:])
    return tmp, exe


LEAKY_C = r"""
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) void *fwt_cli_leaky_function(size_t n)
{
    void *p = malloc(n);
    if (p)
        ((volatile char *)p)[0] = 1;
    return p;
}

int main(void)
{
    char line[4096];
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f || !fwt_cli_leaky_function(100))
        return 1;
    while (fgets(line, sizeof line, f))
        fputs(line, stdout);
    printf("FUNC %p\n", (void *)&fwt_cli_leaky_function);
    return 0;
}
"""


@unittest.skipUnless(compiler(), "no C compiler: symbolisation not tested")
class SymbolTest(unittest.TestCase):
    """A leaks report whose stack holds an address inside a known function
    of a program names the function and its source file."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fwt-cli-")
        self.src = os.path.join(self.tmp, "leaky.c")
        with open(self.src, "w") as f:
            f.write(LEAKY_C)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def build(self, name, flags):
        exe = os.path.join(self.tmp, name)
        p = subprocess.run([compiler(), "-g", "-O0"] + flags + ["-o", exe, self.src],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            self.skipTest("cannot build with %s: %s" % (flags, p.stdout.decode()[-300:]))
        return exe

    def leak_fixture(self, exe):
        """(leaks report, address inside the function) from a run of exe."""
        if not shutil.which("nm"):
            self.skipTest("no nm")
        nm = subprocess.run(["nm", "-S", exe], stdout=subprocess.PIPE, check=True).stdout.decode()
        m = re.search(r"^([0-9a-f]+) ([0-9a-f]+) [Tt] fwt_cli_leaky_function$", nm, re.M)
        self.assertIsNotNone(m, nm)
        value, size = int(m.group(1), 16), int(m.group(2), 16)
        out = subprocess.run([exe], stdout=subprocess.PIPE, check=True,
                             env=dict(os.environ, LD_PRELOAD="")).stdout.decode()
        real = os.path.realpath(exe)
        maps = []
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 6 and f[5] == real:
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                maps.append((lo, hi, int(f[2], 16), "x" in f[1]))
        printed = int(re.search(r"^FUNC (0x[0-9a-f]+)$", out, re.M).group(1), 16)
        # The load bias: where the mapping at file offset 0 starts (0 for a
        # fixed-address executable, whose nm values are addresses).
        et_exec = load_tool().elf_info(exe)[0] == 2
        bias = 0 if et_exec else min(lo for lo, _, off, _ in maps if off == 0)
        self.assertEqual(bias + value, printed)
        inside = bias + value + size // 2
        report = {
            "format": "freeway-leaks", "version": 1, "freeway": "0.1.0", "pid": 1, "time_ms": 0,
            "exact": True, "blocks": 1, "bytes": 100, "unlisted_blocks": 0,
            "sites": [{"blocks": 1, "bytes": 100, "stack": ["0x%x" % inside]}],
            "mappings": [{"start": "0x%x" % lo, "end": "0x%x" % hi, "offset": "0x%x" % off,
                          "path": real} for lo, hi, off, x in maps if x],
        }
        path = os.path.join(self.tmp, "freeway-1-leaks.json")
        with open(path, "w") as f:
            json.dump(report, f)
        return path, inside, et_exec

    def check(self, exe, want_exec):
        path, inside, et_exec = self.leak_fixture(exe)
        self.assertEqual(et_exec, want_exec)
        rc, out, err = freeway("report", path)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"0x%x  fwt_cli_leaky_function at .*leaky\.c:\d+" % inside)
        # Without addr2line: the file and offset.
        rc, out, err = freeway("report", path, env={"PATH": self.tmp})
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"0x%x  %s\+0x[0-9a-f]+" % (inside, re.escape(os.path.realpath(exe))))
        self.assertIn("addr2line (binutils) not found", out)

    @unittest.skipUnless(shutil.which("addr2line"), "no addr2line")
    def test_pie(self):
        self.check(self.build("leaky-pie", ["-fPIE", "-pie"]), False)

    @unittest.skipUnless(shutil.which("addr2line"), "no addr2line")
    def test_fixed_address(self):
        self.check(self.build("leaky-nopie", ["-fno-pie", "-no-pie"]), True)


# A program that leaves known blocks live at exit: HOLD_BLOCKS blocks of
# HOLD_SIZE bytes (a size class of its own: the program allocates nothing
# else of that size) and one block of SPAN_SIZE bytes, which is over the
# largest size class and under 2 MiB, so in a span segment.
HOLD_BLOCKS, HOLD_SIZE, SPAN_SIZE = 777, 1792, 200000
HOLD_C = r"""
#include <stdlib.h>
#include <string.h>

static void *fwt_held[%(blocks)d + 1];

__attribute__((noinline)) void fwt_cli_hold_blocks(void)
{
    for (int i = 0; i < %(blocks)d; i++) {
        fwt_held[i] = malloc(%(size)d);
        if (!fwt_held[i])
            exit(1);
        memset(fwt_held[i], 0x5a, %(size)d);
    }
}

__attribute__((noinline)) void fwt_cli_hold_span(void)
{
    fwt_held[%(blocks)d] = malloc(%(span)d);
    if (!fwt_held[%(blocks)d])
        exit(1);
    memset(fwt_held[%(blocks)d], 0x5a, 64);
}

int main(void)
{
    fwt_cli_hold_blocks();
    fwt_cli_hold_span();
    return 0;
}
""" % {"blocks": HOLD_BLOCKS, "size": HOLD_SIZE, "span": SPAN_SIZE}


@unittest.skipUnless(LIB and os.path.isfile(LIB), "FREEWAY_LIB does not name the built library")
@unittest.skipUnless(compiler(), "no C compiler: the real library's reports not tested")
class RealRunTest(unittest.TestCase):
    """freeway run through the real library, on a program that leaves known
    blocks live: what the library writes renders, and shows them."""

    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.exe = build_program("hold", HOLD_C, "-g", "-O0", "-fno-omit-frame-pointer")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def run_hold(self, name, *flags):
        """Runs the program under freeway with flags; returns (stdout, the
        report directory, {kind: report})."""
        out_dir = os.path.join(self.tmp, name)
        rc, out, err = freeway("run", *flags, "--out", out_dir, "--", self.exe, cwd=self.tmp)
        self.assertEqual(rc, 0, err)
        self.assertNotIn("freeway: error", err)
        reports = {}
        for n in os.listdir(out_dir):
            m = re.match(r"^freeway-(\d+)-([a-z]+)\.json$", n)
            if m:
                self.assertNotIn(m.group(2), reports, "two %s reports" % m.group(2))
                with open(os.path.join(out_dir, n)) as f:
                    reports[m.group(2)] = json.load(f)
        return out, out_dir, reports

    def test_reports(self):
        out, out_dir, reports = self.run_hold("rep", "--stats", "--leaks", "--map")
        self.assertEqual(sorted(reports), ["leaks", "map", "stats"])
        self.assertEqual(out.count("==> "), 3, out)

        # The ledger adds up to the committed memory, with nothing unaccounted
        # (one thread: nothing moved during the walk).
        stats = reports["stats"]
        ledger = {line["line"]: line["bytes"] for line in stats["ledger"]}
        self.assertEqual(ledger["unaccounted"], 0)
        self.assertEqual(sum(ledger.values()), stats["process"]["committed"])
        self.assertGreaterEqual(ledger["live blocks"], HOLD_BLOCKS * HOLD_SIZE)
        self.assertRegex(out, r"unaccounted +0 B +0\.0% +0 ")
        self.assertRegex(out, r"total +\S+ \S+ +100\.0%% +%d += process\.committed"
                         % stats["process"]["committed"])
        self.assertNotIn("MISMATCH", out)
        # The held blocks in the classes table: block size, pages, blocks,
        # live blocks, live bytes.
        self.assertRegex(out, r"(?m)^ +%d B +\d+ +\d+ +%d +%s +\d+\.\d%%$"
                         % (HOLD_SIZE, HOLD_BLOCKS,
                            re.escape(load_tool().human(HOLD_BLOCKS * HOLD_SIZE))))

        # Without cautious mode, leaks by block size.
        leaks = reports["leaks"]
        self.assertIs(leaks["exact"], False)
        self.assertIn("%d blocks of %d bytes" % (HOLD_BLOCKS, HOLD_SIZE), out)

        # The map: every segment's slices covered once, in order; the held
        # blocks in small pages; the span block in a span segment.
        hmap = reports["map"]
        self.assertEqual(hmap["huge"], {"blocks": 0, "bytes": 0})
        slice_size = hmap["slice_size"]
        held = 0
        spans = []
        for s in hmap["segments"]:
            runs = sorted(s["slices"], key=lambda sl: sl["index"])
            ends = [0] + [sl["index"] + sl["count"] for sl in runs]
            self.assertEqual([sl["index"] for sl in runs], ends[:-1], s["start"])
            self.assertEqual(ends[-1], s["size"] // slice_size, s["start"])
            for sl in runs:
                if sl["state"] == "page" and sl["block_size"] == HOLD_SIZE:
                    self.assertIn(s["kind"], ("small", "medium"))
                    held += sl["used"]
                if s["kind"] == "span" and sl["state"] == "page" and sl["used"]:
                    spans.append(sl["block_size"])
        self.assertEqual(held, HOLD_BLOCKS)
        self.assertEqual(len(spans), 1, hmap)
        self.assertGreaterEqual(spans[0], SPAN_SIZE)
        self.assertEqual(spans[0] % slice_size, 0)
        self.assertIn("1 block of %d bytes" % spans[0], out)
        self.assertRegex(out, r"(?m)^  span +1 +0 ")

        # The drawings, written beside the reports.
        for name in ("map.svg", "map.html"):
            with open(os.path.join(out_dir, name)) as f:
                doc = ET.fromstring(f.read())
            svg = doc if doc.tag == SVG + "svg" else doc.find(".//" + SVG + "svg")
            self.assertIsNotNone(svg, name)
            text = "".join(svg.itertext())
            self.assertRegex(text, r"0x[0-9a-f]+ span", name)
            classes = [r.get("class") for r in svg.iter(SVG + "rect")
                       if r.find(SVG + "title") is not None]
            self.assertIn("Nf", classes, name)
            self.assertEqual(len(classes), sum(len(s["slices"]) for s in hmap["segments"]), name)

    def test_cautious_leaks(self):
        out, _, reports = self.run_hold("cautious", "--leaks", "--cautious")
        leaks = reports["leaks"]
        self.assertIs(leaks["exact"], True)
        by_count = {}
        for s in leaks["sites"]:
            self.assertNotIn("block_size", s)
            self.assertLessEqual(len(s["stack"]), 4)
            by_count.setdefault(s["blocks"], []).append(s)
        # Exact sites: each stack one call site, bytes the sizes requested.
        blocks = [s for s in by_count.get(HOLD_BLOCKS, []) if s["bytes"] == HOLD_BLOCKS * HOLD_SIZE]
        span = [s for s in by_count.get(1, []) if s["bytes"] == SPAN_SIZE]
        self.assertEqual((len(blocks), len(span)), (1, 1), leaks["sites"])
        blocks, span = blocks[0], span[0]
        self.assertTrue(blocks["stack"])
        self.assertTrue(span["stack"])
        self.assertNotEqual(blocks["stack"], span["stack"])
        self.assertIn("in %d blocks" % HOLD_BLOCKS, out)
        self.assertIn("%s in 1 block" % load_tool().sized(SPAN_SIZE), out)
        for a in blocks["stack"] + span["stack"]:
            self.assertIn("0x%x" % int(a, 16), out)
        if not leaks["mappings"]:
            self.assertIn("records no executable mappings", out)
            self.skipTest("the leaks report records no mappings yet: the symbolised stacks of a "
                          "real run are not checked")
        if not shutil.which("addr2line"):
            self.skipTest("no addr2line: the symbolised stacks of a real run are not checked")
        self.assertRegex(out, r"0x[0-9a-f]+  fwt_cli_hold_blocks at .*hold\.c:\d+")
        self.assertRegex(out, r"0x[0-9a-f]+  fwt_cli_hold_span at .*hold\.c:\d+")

    def test_profile(self):
        # --profile: the profiling flavour with FREEWAY_PROFILE=1; at rate 1
        # every allocation is a sample, so go tool pprof shows the exact count
        prof = os.path.join(os.path.dirname(os.path.abspath(LIB)), "libfreeway-prof.so")
        if not os.path.isfile(prof):
            self.skipTest("libfreeway-prof.so is not built beside the library")
        out_dir = os.path.join(self.tmp, "prof")
        rc, out, err = freeway("run", "--profile", "--rate", "1", "--quiet", "--out", out_dir, "--", self.exe,
                               cwd=self.tmp)
        self.assertEqual(rc, 0, err)
        pbs = [n for n in os.listdir(out_dir) if n.endswith("-heap.pb")]
        self.assertEqual(len(pbs), 1, os.listdir(out_dir))
        self.assertIn("go tool pprof", err)
        if not shutil.which("go"):
            self.skipTest("go is not installed: the profile is not read back")
        p = subprocess.run(["go", "tool", "pprof", "-top", "-nodefraction=0", "-sample_index=inuse_objects",
                            self.exe, os.path.join(out_dir, pbs[0])], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertRegex(p.stdout.decode(), r"(?m)^ +%d .*fwt_cli_hold_blocks$" % HOLD_BLOCKS)


# A program that holds known blocks while it runs, for freeway top:
# TOP_BLOCKS blocks of TOP_SIZE bytes (a size class) and one block of
# TOP_BIG bytes, written whole (resident). It prints "ready PID", then for
# each line "grow" on its stdin holds TOP_GROW more bytes (written whole)
# and prints "grown"; it exits at the end of its input.
TOP_BLOCKS, TOP_SIZE, TOP_BIG, TOP_GROW = 3000, 1792, 16 << 20, 8 << 20
TOP_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile fwt_top_held[%(blocks)d + 64];

int main(void)
{
    char line[64];
    int n = %(blocks)d;
    for (int i = 0; i < %(blocks)d; i++) {
        if (!(fwt_top_held[i] = malloc(%(size)d)))
            return 1;
        memset(fwt_top_held[i], 0x5a, %(size)d);
    }
    if (!(fwt_top_held[n] = malloc(%(big)d)))
        return 1;
    memset(fwt_top_held[n++], 0x5a, %(big)d);
    printf("ready %%d\n", (int)getpid());
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (strcmp(line, "grow\n") || n == %(blocks)d + 64)
            continue;
        if (!(fwt_top_held[n] = malloc(%(grow)d)))
            return 1;
        memset(fwt_top_held[n++], 0x5a, %(grow)d);
        printf("grown\n");
        fflush(stdout);
    }
    return 0;
}
""" % {"blocks": TOP_BLOCKS, "size": TOP_SIZE, "big": TOP_BIG, "grow": TOP_GROW}

SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def shown_size(out, name):
    """The size freeway top shows on its line NAME (e.g. 'live'), in bytes
    (to the precision shown: one decimal)."""
    m = re.search(r"(?m)^  %s +(-?[\d.]+) (B|KiB|MiB|GiB|TiB)\b" % re.escape(name), out)
    if not m:
        raise AssertionError("no line %r in:\n%s" % (name, out))
    return float(m.group(1)) * SIZE_UNITS[m.group(2)]


def shown_rate(out, name):
    """The change freeway top shows on line NAME, in MiB/s."""
    m = re.search(r"(?m)^  %s +\S+ \S+ +([+-]\d+\.\d\d) MiB/s" % re.escape(name), out)
    if not m:
        raise AssertionError("no rate on line %r in:\n%s" % (name, out))
    return float(m.group(1))


def no_such_pid():
    """A process number no process has: above the kernel's largest."""
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            return int(f.read()) + 1
    except (OSError, ValueError):
        return (1 << 22) + 1


@unittest.skipUnless(os.path.isdir("/proc/self"), "no /proc: freeway top not tested")
class TopErrorTest(unittest.TestCase):
    """freeway top refuses, saying why and how to start the process, what it
    cannot watch; and never sends the signal to a process that would not
    catch it."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fwt-cli-")
        self.addCleanup(shutil.rmtree, self.tmp)

    def sleeper(self, env=None):
        """A process (no freeway) with env added to a clean environment."""
        p = subprocess.Popen(["sleep", "60"], env=clean_env(env))
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        return p

    def test_no_such_pid(self):
        rc, out, err = freeway("top", "--once", str(no_such_pid()))
        self.assertEqual(rc, 1)
        self.assertEqual(out, "")
        self.assertIn("no process %d" % no_such_pid(), err)
        self.assertNotIn("Traceback", err)

    def test_not_started_with_the_signal(self):
        p = self.sleeper()
        rc, _, err = freeway("top", "--once", str(p.pid))
        self.assertEqual(rc, 1)
        self.assertIn("was not started with FREEWAY_DUMP_SIGNAL", err)
        self.assertIn("freeway run --top -- PROG", err)

    def test_signal_without_directory(self):
        p = self.sleeper({"FREEWAY_DUMP_SIGNAL": "12"})
        rc, _, err = freeway("top", "--once", str(p.pid))
        self.assertEqual(rc, 1)
        self.assertIn("no FREEWAY_REPORT_DIR", err)
        p = self.sleeper({"FREEWAY_DUMP_SIGNAL": "usr2", "FREEWAY_REPORT_DIR": self.tmp})
        rc, _, err = freeway("top", "--once", str(p.pid))
        self.assertEqual(rc, 1)
        self.assertIn("not a number", err)
        p = self.sleeper({"FREEWAY_DUMP_SIGNAL": "12",
                          "FREEWAY_REPORT_DIR": os.path.join(self.tmp, "missing")})
        rc, _, err = freeway("top", "--once", str(p.pid))
        self.assertEqual(rc, 1)
        self.assertIn("not a directory", err)

    def test_library_not_loaded(self):
        # the variables, but nothing to answer SIGUSR2: it would end the
        # process, so it is not sent
        p = self.sleeper({"FREEWAY_DUMP_SIGNAL": str(int(signal.SIGUSR2)),
                          "FREEWAY_REPORT_DIR": self.tmp})
        rc, _, err = freeway("top", "--once", str(p.pid))
        self.assertEqual(rc, 1)
        self.assertIn("library is not loaded", err)
        self.assertIsNone(p.poll(), "freeway top ended the process")
        self.assertEqual(os.listdir(self.tmp), [])

    def test_bad_arguments(self):
        for args in (["--interval", "0"], ["--count", "0"], ["--timeout", "-1"],
                     ["--rows", "-1"]):
            rc, _, err = freeway("top", *args, "1")
            self.assertEqual(rc, 1, args)
            self.assertIn(args[0], err)
        rc, _, err = freeway("top", "--once", "--count", "2", "1")
        self.assertEqual(rc, 2)
        rc, _, err = freeway("top", "nope")
        self.assertEqual(rc, 2)
        self.assertIn("PID", err)

    def test_permission(self):
        """A process of another user: freeway top says whose it is."""
        p = self.sleeper({"FREEWAY_DUMP_SIGNAL": "12", "FREEWAY_REPORT_DIR": self.tmp})
        if os.geteuid() != 0:
            try:
                with open("/proc/1/environ", "rb"):
                    self.skipTest("the environment of process 1 is readable")
            except PermissionError:
                pass
            except OSError:
                self.skipTest("no process 1 to try")
            cmd, pid = [], 1
        else:
            # as root: freeway top run as another user, on root's process
            setpriv = shutil.which("setpriv")
            if not setpriv:
                self.skipTest("running as root without setpriv: no other user to be")
            cmd, pid = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"], p.pid
            probe = subprocess.run(cmd + [sys.executable, TOOL, "--version"], env=clean_env(),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if probe.returncode != 0:
                self.skipTest("cannot run the command as another user: %s" % probe.stderr.decode())
        r = subprocess.run(cmd + [sys.executable, TOOL, "top", "--once", str(pid)],
                           env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=60)
        err = r.stderr.decode()
        self.assertEqual(r.returncode, 1, err)
        self.assertIn("permission denied", err)
        self.assertIn("another user", err)


@unittest.skipUnless(LIB and os.path.isfile(LIB), "FREEWAY_LIB does not name the built library")
@unittest.skipUnless(compiler(), "no C compiler: freeway top not tested on a real process")
@unittest.skipUnless(os.path.isdir("/proc/self"), "no /proc: freeway top not tested")
class TopTest(unittest.TestCase):
    """freeway top on a program started with freeway run --top that holds
    known amounts."""

    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.exe = build_program("top_hold", TOP_C, "-O1")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def start(self, *flags):
        """Starts the program with freeway run --top FLAGS; returns the run
        (a Popen: the program's stdin and stdout are its) and the program's
        pid. The library writes the ledger on the program's stderr at each
        sample: into a file, so that no pipe fills."""
        err = tempfile.TemporaryFile(dir=self.tmp)
        self.addCleanup(err.close)
        run = subprocess.Popen([sys.executable, TOOL, "run", "--top"] + list(flags) +
                               ["--", self.exe], env=clean_env(), cwd=self.tmp,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        run.err = err
        self.addCleanup(self.stop, run)
        line = run.stdout.readline().decode()
        self.assertRegex(line, r"^ready \d+$")
        return run, int(line.split()[1])

    def stop(self, run):
        """Ends the program (end of its input); returns freeway run's
        status, its further output in run.rest."""
        if not run.stdout.closed:
            try:
                run.rest, _ = run.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
                run.rest = b""
        return run.returncode

    def run_err(self, run):
        run.err.seek(0)
        return run.err.read().decode(errors="replace")

    def test_once(self):
        run, pid = self.start()
        rc, out, err = freeway("top", "--once", str(pid))
        self.assertEqual(rc, 0, err)
        self.assertNotIn("\x1b", out, "escape sequences when stdout is not a terminal")
        self.assertRegex(out, r"^freeway top  pid %d \(top_hold\)  .*sample 1" % pid)
        held = TOP_BLOCKS * TOP_SIZE + TOP_BIG
        # live: the block sizes of the held blocks; a large block takes a
        # run of slices or whole segments (4 MiB), the rest is stdio's
        live, committed, rss = (shown_size(out, k) for k in ("live", "committed", "rss"))
        tenth = 0.05 * (1 << 20)  # one decimal of MiB
        self.assertGreaterEqual(live, held - tenth)
        self.assertLessEqual(live, held + (5 << 20))
        self.assertGreaterEqual(committed, live - tenth)
        self.assertGreaterEqual(rss, held - tenth)  # every held byte was written
        # the held blocks' size class, with their count, and one thread
        self.assertRegex(out, r"(?m)^ +%d B +%d +\S+ \S+ +\d+\.\d%%$" % (TOP_SIZE, TOP_BLOCKS))
        self.assertRegex(out, r"(?m)^ +large +1 ")
        self.assertIn("1 thread", out)
        self.assertRegex(out, r"(?m)^  unaccounted +")
        # the first sample has no rates
        self.assertNotIn("MiB/s", out)
        self.assertEqual(self.stop(run), 0)
        self.assertIn("freeway top %d" % pid, self.run_err(run))

    def test_json(self):
        run, pid = self.start()
        rc, out, err = freeway("top", "--once", "--json", str(pid))
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(out.splitlines()), 1, out)
        r = json.loads(out)
        self.assertEqual((r["format"], r["version"], r["pid"]), ("freeway-stats", 1, pid))
        cls = {c["block_size"]: c for c in r["classes"]}
        self.assertEqual(cls[TOP_SIZE]["live_blocks"], TOP_BLOCKS)
        self.assertEqual(cls[0]["live_blocks"], 1)
        self.assertGreaterEqual(cls[0]["live_bytes"], TOP_BIG)
        ledger = {line["line"]: line["bytes"] for line in r["ledger"]}
        self.assertEqual(sum(ledger.values()), r["process"]["committed"])
        self.assertEqual(r["options"]["dump_signal"], int(signal.SIGUSR2))
        report_dir = r["options"]["report_dir"]
        self.assertTrue(os.path.isfile(os.path.join(report_dir, "freeway-%d-stats.json" % pid)))
        self.assertEqual(self.stop(run), 0)
        self.assertFalse(os.path.exists(report_dir))

    def test_rates(self):
        """Two samples, the program holding TOP_GROW more bytes in between:
        the second shows the change per second."""
        run, pid = self.start()
        top = subprocess.Popen([sys.executable, TOOL, "top", "--count", "2", "--interval", "2",
                                str(pid)], env=clean_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        self.addCleanup(top.wait)
        self.addCleanup(top.kill)
        first = []
        for line in top.stdout:
            first.append(line.decode())
            if line.startswith(b"Ledger:"):
                break
        run.stdin.write(b"grow\n")
        run.stdin.flush()
        self.assertEqual(run.stdout.readline(), b"grown\n")
        rest, err = top.communicate(timeout=60)
        self.assertEqual(top.returncode, 0, err.decode())
        first, second = "".join(first), rest.decode().split("\nfreeway top  ", 1)[1]
        self.assertIn("sample 1", first)
        self.assertIn("sample 2", second)
        grew = shown_size(second, "live") - shown_size(first, "live")
        self.assertGreaterEqual(grew, TOP_GROW - 0.1 * (1 << 20))
        self.assertLessEqual(grew, TOP_GROW + (5 << 20))
        # what it grew (a block size: whole segments for a large block)
        # over the 2 s between the two walks, a little more with the time a
        # walk takes
        mib = grew / float(1 << 20)
        self.assertGreater(shown_rate(second, "live"), mib / 3.0)
        self.assertLess(shown_rate(second, "live"), mib / 1.8)
        self.assertGreater(shown_rate(second, "rss"), 0)
        self.assertRegex(second, r"(?m)^ +large +2 +\S+ \S+ +\S+ +\+\d+\.\d\d MiB/s$")

    def test_until_the_process_exits(self):
        run, pid = self.start("--quiet")
        top = subprocess.Popen([sys.executable, TOOL, "top", "--interval", "0.2", str(pid)],
                               env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(top.wait)
        self.addCleanup(top.kill)
        top.stdout.readline()
        self.assertEqual(self.stop(run), 0)
        out, err = top.communicate(timeout=60)
        self.assertEqual(top.returncode, 0, err.decode())
        self.assertIn("process %d (top_hold) has exited" % pid, err.decode())
        self.assertNotIn("Traceback", err.decode())

    def test_interrupt(self):
        run, pid = self.start()
        top = subprocess.Popen([sys.executable, TOOL, "top", "--interval", "0.2", str(pid)],
                               env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(top.wait)
        self.addCleanup(top.kill)
        top.stdout.readline()
        top.send_signal(signal.SIGINT)
        out, err = top.communicate(timeout=60)
        self.assertEqual(top.returncode, 0, err.decode())
        self.assertEqual(err.decode(), "")
        self.assertIsNone(run.poll(), "the program ended with freeway top")
        self.assertEqual(self.stop(run), 0)
        # each sample also printed the ledger on the program's stderr
        self.assertIn("freeway", self.run_err(run))

    def test_out_directory(self):
        """With --out, the directory is kept; the stats freeway top asked
        for are not rendered as a report at exit (no --stats)."""
        out_dir = os.path.join(self.tmp, "rep")
        run, pid = self.start("--out", out_dir)
        rc, out, err = freeway("top", "--once", str(pid))
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.stop(run), 0)
        self.assertNotIn(b"==>", run.rest)
        self.assertIn("freeway-%d-stats.json" % pid, os.listdir(out_dir))


if __name__ == "__main__":
    unittest.main()
