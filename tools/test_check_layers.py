#!/usr/bin/env python3
"""Tests of tools/check_layers.py on small source trees made in a temporary
directory. Run: python3 tools/test_check_layers.py"""
import io
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import check_layers  # noqa: E402

BASE_H = """\
#ifndef BASE_H
#define BASE_H
#include <stddef.h>
#include "freeway.h"
#define fw_likely(x) __builtin_expect(!!(x), 1)
static inline size_t fw_round(size_t x) { return (x + 7) & ~(size_t)7; }
/* every cross-file function is declared here, whatever its layer */
void *fw_low_get(size_t n);
void fw_high_run(void);
extern int fw_high_count;
#endif
"""

LOW_C = """\
#include "base.h"
void *fw_low_get(size_t n) { return fw_likely(n) ? (void *)fw_round(n) : NULL; }
"""

HIGH_C = """\
#include "base.h"
int fw_high_count;
void fw_high_run(void) { fw_high_count += fw_low_get(3) != NULL; }
"""

PUBLIC_H = """\
#ifndef FREEWAY_H
#define FREEWAY_H
void *fw_malloc(unsigned long size);
#endif
"""

LAYERS = """\
# test table
base: base.h
low: low.c
high: high.c
"""


class Tree:
    """A repository with src/, include/ and src/LAYERS in a temporary directory."""

    def __init__(self, files, layers=LAYERS):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        (self.root / "include").mkdir()
        (self.root / "include" / "freeway.h").write_text(PUBLIC_H)
        for rel, text in files.items():
            p = self.root / "src" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(textwrap.dedent(text))
        if layers is not None:
            (self.root / "src" / "LAYERS").write_text(textwrap.dedent(layers))

    def run(self, *args):
        out = io.StringIO()
        rc = check_layers.main(["--root", str(self.root)] + list(args), out=out)
        return rc, out.getvalue()

    def close(self):
        self.tmp.cleanup()


class CheckLayersTest(unittest.TestCase):
    def check(self, files, layers=LAYERS, args=()):
        base = {"base.h": BASE_H, "low.c": LOW_C, "high.c": HIGH_C}
        base.update(files)
        base = {k: v for k, v in base.items() if v is not None}
        tree = Tree(base, layers)
        self.addCleanup(tree.close)
        return tree.run(*args)

    def violations(self, output):
        return [line for line in output.splitlines() if line.startswith("src/")]

    # ---- the check ---------------------------------------------------------
    def test_clean_tree_passes(self):
        rc, out = self.check({})
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.violations(out), [])
        self.assertIn("ok: 3 files in 3 layers", out)
        # summary: layer, files, definitions, references, upward
        self.assertRegex(out, r"\n  base +1 +2 +0 +0  base.h\n")
        self.assertRegex(out, r"\n  high +1 +2 +1 +0  high.c\n")

    def test_upward_call_fails(self):
        rc, out = self.check({"low.c": LOW_C + "void fw_low_more(void) {\n  fw_high_run();\n}\n"})
        self.assertEqual(rc, 1, out)
        dash = check_layers._dash(io.StringIO())
        self.assertEqual(self.violations(out), [
            "src/low.c:4: calls fw_high_run (defined in high.c, layer high) from layer low %s upward" % dash])
        self.assertIn("FAILED: 1 upward", out)

    def test_upward_variable_use_fails(self):
        rc, out = self.check({"low.c": LOW_C + "int fw_low_peek(void) { return fw_high_count; }\n"})
        self.assertEqual(rc, 1, out)
        self.assertEqual(len(self.violations(out)), 1, out)
        self.assertIn("src/low.c:3: uses fw_high_count (defined in high.c, layer high)", out)

    def test_every_use_is_reported_with_its_line(self):
        low = LOW_C + "void fw_low_a(void) { fw_high_run(); }\n\nvoid fw_low_b(void) {\n  fw_high_run();\n}\n"
        rc, out = self.check({"low.c": low})
        self.assertEqual(rc, 1)
        self.assertEqual([v.split(":")[1] for v in self.violations(out)], ["3", "6"])

    def test_upward_include_fails(self):
        rc, out = self.check({"high.h": "#define FW_HIGH 1\n",
                              "low.c": '#include "base.h"\n#include "high.h"\n' + LOW_C.split("\n", 1)[1]},
                             layers=LAYERS.replace("high: high.c", "high: high.c high.h"))
        self.assertEqual(rc, 1, out)
        self.assertEqual(self.violations(out), [
            "src/low.c:2: includes high.h (layer high) from layer low %s upward"
            % check_layers._dash(io.StringIO())])

    def test_public_header_and_system_includes_allowed_everywhere(self):
        # base.h, the lowest layer, includes freeway.h and <stddef.h>.
        rc, out = self.check({"low.c": '#include "freeway.h"\n#include <stdlib.h>\n' + LOW_C
                              + "void *fw_low_m(void) { return fw_malloc(1); }\n"})
        self.assertEqual(rc, 0, out)

    def test_unknown_include_fails(self):
        rc, out = self.check({"low.c": '#include "nowhere.h"\n' + LOW_C})
        self.assertEqual(rc, 1, out)
        self.assertIn('src/low.c:1: includes "nowhere.h", which is neither under src/ nor include/', out)

    def test_unlisted_file_fails(self):
        rc, out = self.check({"extra.c": '#include "base.h"\nvoid fw_extra(void) {}\n',
                              "sub/more.h": "#define fw_more 1\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("src/extra.c: not listed in src/LAYERS", out)
        self.assertIn("src/sub/more.h: not listed in src/LAYERS", out)

    def test_listed_missing_file_fails(self):
        rc, out = self.check({}, layers=LAYERS + "top: gone.c\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("src/LAYERS:5: gone.c is listed but there is no src/gone.c", out)

    def test_table_errors(self):
        rc, out = self.check({}, layers="base: base.h\nlow: low.c base.h\nhigh high.c\nlow: x.c\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("src/LAYERS:2: base.h is already in layer base", out)
        self.assertIn("src/LAYERS:3: expected 'layer-name: file ...'", out)
        self.assertIn("src/LAYERS:4: layer low is defined twice", out)
        self.assertIn("src/high.c: not listed", out)

    def test_missing_table(self):
        rc, out = self.check({}, layers=None)
        self.assertEqual(rc, 2)
        self.assertIn("cannot read the layer table", out)

    def test_continuation_lines_and_comments_in_table(self):
        rc, out = self.check({"low2.c": '#include "base.h"\nvoid fw_low2(void) { fw_low_get(1); }\n'},
                             layers="base: base.h  # the bottom\nlow: low.c\n   low2.c\n# done\nhigh: high.c\n")
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"\n  low +2 .* low.c low2.c\n")

    def test_comments_and_strings_are_not_references(self):
        low = LOW_C + textwrap.dedent("""\
            /* fw_high_run(); fw_high_count
               fw_high_run() over two lines */
            // fw_high_run();
            void fw_low_c(void) {
              // a continued line comment \\
                 fw_high_run();
            }
            const char *fw_low_name(void) { return "fw_high_run()" "\\" fw_high_run"; }
            char fw_low_quote(void) { return '"'; } /* a quote char must not open a string: fw_high_run */
            #if 0 /* fw_high_run */
            #endif
            """)
        rc, out = self.check({"low.c": low})
        self.assertEqual(rc, 0, out)

    def test_code_after_literals_is_seen(self):
        low = LOW_C + ("int fw_low_q(void) { return '\"' == fw_high_count; }\n"
                       "int fw_low_r(void) { return '\\'' + \"\\\"\" [0] + fw_high_count; }\n")
        rc, out = self.check({"low.c": low})
        self.assertEqual(rc, 1, out)
        self.assertEqual([v.split(":")[1] for v in self.violations(out)], ["3", "4"], out)

    def test_line_numbers_survive_comments_and_continuations(self):
        low = LOW_C + "/* one\n   two\n   three */\n#define FW_X \\\n  1\nstatic const char *s = \"a\";\nvoid fw_low_z(void) { fw_high_run(); }\n"
        rc, out = self.check({"low.c": low})
        self.assertEqual(rc, 1)
        self.assertEqual([v.split(":")[1] for v in self.violations(out)], ["9"])

    def test_member_names_are_not_references(self):
        low = LOW_C + ("struct s { int fw_high_count; };\n"
                       "int fw_low_m(struct s *p, struct s q) { return p->fw_high_count + q.fw_high_count; }\n")
        rc, out = self.check({"low.c": low})
        self.assertEqual(rc, 0, out)

    def test_same_static_name_in_two_files_is_not_confused(self):
        low = LOW_C + "static int fw_helper(void) { return 1; }\nint fw_low_h(void) { return fw_helper(); }\n"
        high = HIGH_C + "static int fw_helper(void) { return 2; }\nint fw_high_h(void) { return fw_helper(); }\n"
        rc, out = self.check({"low.c": low, "high.c": high})
        self.assertEqual(rc, 0, out)
        self.assertNotIn("warning", out)

    def test_static_name_elsewhere_is_not_a_definition(self):
        # high.c's static fw_hidden cannot be what low.c refers to.
        low = LOW_C + "int fw_hidden(void);\nint fw_low_h(void) { return fw_hidden(); }\n"
        high = HIGH_C + "static int fw_hidden(void) { return 2; }\nstatic int fw_hidden_v = 3;\n"
        rc, out = self.check({"low.c": low + "int fw_low_v(void) { return fw_hidden_v; }\n", "high.c": high})
        self.assertEqual(rc, 0, out)

    def test_static_via_macro_is_local(self):
        # FW_INLINE expands to 'static inline': a .c file's FW_INLINE
        # function is its own.
        base = BASE_H.replace("#endif", "#define FW_INLINE static inline __attribute__((always_inline))\n#endif")
        low = LOW_C + "FW_INLINE int fw_twin(void) { return 1; }\nint fw_low_t(void) { return fw_twin(); }\n"
        high = HIGH_C + "FW_INLINE int fw_twin(void) { return 2; }\nint fw_high_t(void) { return fw_twin(); }\n"
        rc, out = self.check({"base.h": base, "low.c": low, "high.c": high})
        self.assertEqual(rc, 0, out)
        self.assertNotIn("warning", out)

    def test_struct_tags_are_not_definitions(self):
        high = HIGH_C + "struct fw_node { int v; };\nstruct fw_leaf;\n"
        low = LOW_C + "struct fw_node;\nint fw_low_n(struct fw_node *n, struct fw_leaf *l);\n"
        rc, out = self.check({"low.c": low, "high.c": high})
        self.assertEqual(rc, 0, out)

    def test_macro_parameters_are_not_references(self):
        low = LOW_C + "#define FW_TWICE(fw_high_run) ((fw_high_run) * 2)\nint fw_low_t(void) { return FW_TWICE(3); }\n"
        rc, out = self.check({"low.c": low})
        self.assertEqual(rc, 0, out)

    def test_local_macro_shadows(self):
        low = LOW_C + "#define fw_high_run() ((void)0)\nvoid fw_low_r(void) { fw_high_run(); }\n"
        rc, out = self.check({"low.c": low})
        self.assertEqual(rc, 0, out)

    def test_declarations_are_neither_definitions_nor_references(self):
        # base.h declares fw_high_run and fw_high_count (defined in high.c)
        # and is the lowest layer: no violation. A prototype in low.c is no
        # definition that would make high.c's call local or ambiguous.
        low = LOW_C + "void fw_high_run(void);\nextern int fw_high_count, fw_other;\n"
        rc, out = self.check({"low.c": low})
        self.assertEqual(rc, 0, out)
        self.assertNotIn("warning", out)

    def test_header_macro_and_inline_bodies_are_the_headers_references(self):
        base = BASE_H.replace("#endif", "#define fw_count() (fw_high_count)\n"
                              "static inline void fw_kick(void) { fw_high_run(); }\n#endif")
        rc, out = self.check({"base.h": base})
        self.assertEqual(rc, 1, out)
        v = self.violations(out)
        self.assertEqual(len(v), 2, out)
        self.assertIn("src/base.h:11: uses fw_high_count (defined in high.c, layer high) from layer base", v[0])
        self.assertIn("src/base.h:12: calls fw_high_run (defined in high.c, layer high) from layer base", v[1])

    def test_header_inline_belongs_to_the_header(self):
        # high.h's inline function, used from low.c, is high's.
        high_h = '#include "base.h"\nstatic inline int fw_high_inline(void) { return 1; }\n'
        low = LOW_C + "int fw_low_i(void) { return fw_high_inline(); }\n"
        rc, out = self.check({"high.h": high_h, "low.c": low},
                             layers=LAYERS.replace("high: high.c", "high: high.c high.h"))
        self.assertEqual(rc, 1, out)
        self.assertIn("src/low.c:3: calls fw_high_inline (defined in high.h, layer high)", out)

    def test_ambiguous_definition_is_reported(self):
        low = LOW_C + "void fw_both(void) {}\n"
        high = HIGH_C + "void fw_both(void) {}\n"
        mid = '#include "base.h"\nvoid fw_mid(void) { fw_both(); }\n'
        rc, out = self.check({"low.c": low, "high.c": high, "mid.c": mid},
                             layers="base: base.h\nlow: low.c\nmid: mid.c\nhigh: high.c\n")
        self.assertIn("warning: fw_both is defined in several files: high.c (layer high), low.c (layer low)", out)
        # mid.c is checked against the lowest definition, which is below it
        self.assertEqual(rc, 0, out)

    def test_ambiguous_macro_in_included_header_wins(self):
        high_h = '#define fw_both() fw_high_run()\n'
        low = LOW_C + "void fw_both(void) {}\n"
        mid = '#include "base.h"\n#include "high.h"\nvoid fw_mid(void) { fw_both(); }\n'
        rc, out = self.check({"high.h": high_h, "low.c": low, "mid.c": mid},
                             layers="base: base.h\nlow: low.c\nmid: mid.c\nhigh: high.c high.h\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("src/mid.c:3: calls fw_both (defined in high.h, layer high)", out)
        self.assertIn("warning: fw_both is defined in several files", out)

    def test_initializers_and_function_pointers(self):
        low = LOW_C + ("void (*fw_low_hook)(void) = fw_high_run;\n"
                       "int *fw_low_tab[] = { &fw_high_count, 0 };\n")
        rc, out = self.check({"low.c": low})
        self.assertEqual(rc, 1, out)
        self.assertEqual([v.split(":")[1] for v in self.violations(out)], ["3", "4"])
        # the names being defined are low.c's own
        self.assertIn("src/low.c:3: calls fw_high_run", out)

    def test_cplusplus(self):
        cpp = textwrap.dedent("""\
            #include <new>
            #include "freeway.h"
            extern "C" {
            __attribute__((visibility("hidden"))) void *fw_low_get(unsigned long n) noexcept;
            void fw_high_run(void) noexcept;
            }
            namespace {
            inline void *fw_cxx_get(unsigned long n) { return fw_low_get(n); }
            }
            void *operator new(unsigned long n) { return fw_cxx_get(n); }
            void operator delete(void *p) noexcept { (void)p; fw_high_run(); }
            const char *fw_cxx_s = R"d(
            fw_high_run() ")"
            )d";
            int fw_cxx_n() { return fw_high_count; }
            """)
        # the anonymous namespace is file-local, like static
        cpp2 = "namespace {\ninline void *fw_cxx_get(unsigned long n) { return 0; }\n}\n"
        rc, out = self.check({"cxx.cpp": cpp, "cxx2.cpp": cpp2},
                             layers=LAYERS.replace("low: low.c", "low: low.c cxx.cpp") + "top: cxx2.cpp\n")
        self.assertEqual(rc, 1, out)
        self.assertNotIn("warning", out)
        v = self.violations(out)
        self.assertEqual(len(v), 2, out)
        self.assertIn("src/cxx.cpp:11: calls fw_high_run (defined in high.c, layer high) from layer low", v[0])
        self.assertIn("src/cxx.cpp:15: uses fw_high_count (defined in high.c, layer high) from layer low", v[1])

    # ---- --graph and --cycles ---------------------------------------------------
    def test_graph(self):
        rc, out = self.check({}, args=("--graph",))
        self.assertEqual(rc, 0)
        lines = out.splitlines()
        self.assertIn("low.c -> base.h: #include, fw_likely, fw_round", lines)
        self.assertIn("high.c -> low.c: fw_low_get", lines)
        rc, out = self.check({"low.c": LOW_C + "void fw_low_x(void) { fw_high_run(); }\n"},
                             args=("--graph", "--no-includes"))
        self.assertIn("low.c -> high.c: fw_high_run  [upward]", out.splitlines())
        self.assertIn("low.c -> base.h: fw_likely, fw_round", out.splitlines())

    def test_cycles(self):
        rc, out = self.check({}, args=("--cycles",))
        self.assertEqual(rc, 0, out)
        self.assertIn("no cycles among 3 files", out)
        rc, out = self.check({"low.c": LOW_C + "void fw_low_x(void) { fw_high_run(); }\n"}, args=("--cycles",))
        self.assertEqual(rc, 1, out)
        self.assertIn("cycle 1 (2 files): low.c high.c", out)
        self.assertIn("    low.c -> high.c -> low.c", out)

    def test_cycles_without_table(self):
        rc, out = self.check({"low.c": LOW_C + "void fw_low_x(void) { fw_high_run(); }\n"},
                             layers=None, args=("--cycles",))
        self.assertEqual(rc, 1, out)
        self.assertIn("cycle 1 (2 files): high.c low.c", out)

    def test_strongly_connected(self):
        edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"), ("f", "f")]
        self.assertEqual(check_layers.strongly_connected("abcdef", edges), [["a", "b", "c"], ["d", "e"]])

    # ---- the command line ----------------------------------------------------
    def test_command_line(self):
        tree = Tree({"base.h": BASE_H, "low.c": LOW_C + "void fw_low_x(void) { fw_high_run(); }\n",
                     "high.c": HIGH_C})
        self.addCleanup(tree.close)
        env = dict(os.environ, LC_ALL="C", PYTHONIOENCODING="ascii")
        p = subprocess.run([sys.executable, str(HERE / "check_layers.py"), "--root", str(tree.root)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("src/low.c:3: calls fw_high_run (defined in high.c, layer high) from layer low -- upward",
                      p.stdout)


if __name__ == "__main__":
    unittest.main()
