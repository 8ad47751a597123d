#!/usr/bin/env python3
"""Generates docs/options.md, the reference of freeway's tunables, from the
options table src/options.def.

Each row of the table is FW_OPTION(ID, "name", default, min, max, "doc"), where
the doc string begins with "live:" (changeable with fw_option_set()) or
"start-up:" (read once from the environment). Rows may span lines, strings may
be split into adjacent literals, and numbers may be negative.

Usage:
  tools/gen_options_doc.py            writes docs/options.md
  tools/gen_options_doc.py --check    exits 1 if docs/options.md is stale
  --def PATH / --out PATH             read or write other files than the
                                      repository's own (paths are otherwise
                                      relative to the repository, not the
                                      current directory)
"""
import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEF_PATH = ROOT / "src" / "options.def"
OUT_PATH = ROOT / "docs" / "options.md"
REGEN = "python3 tools/gen_options_doc.py"

WHEN_PREFIXES = (("live:", "live"), ("start-up:", "start-up"))


class DefError(Exception):
    pass


# ---- tokenizer for the small subset of C that options.def uses --------------

TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r\n\f\v]+|\\\n)
  | (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<number>(?:0[xX][0-9a-fA-F]+|[0-9]+)[uUlL]*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[(),+\-])
""", re.VERBOSE | re.DOTALL)


def tokenize(text, filename):
    tokens = []
    pos = 0
    line = 1
    at_line_start = True
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if not m:
            snippet = text[pos:pos + 20].split("\n")[0]
            if text[pos] == "#" and at_line_start:
                # A conditional row could not be shown truthfully in one table.
                raise DefError("%s:%d: preprocessor directives are not supported: %s"
                               % (filename, line, snippet))
            if text.startswith("/*", pos):
                raise DefError("%s:%d: unterminated comment" % (filename, line))
            if text[pos] == '"':
                raise DefError("%s:%d: unterminated string literal" % (filename, line))
            raise DefError("%s:%d: unexpected text: %s" % (filename, line, snippet))
        kind = m.lastgroup
        value = m.group()
        if kind not in ("ws", "comment"):
            tokens.append((kind, value, line))
            at_line_start = False
        elif "\n" in value:
            at_line_start = True
        line += value.count("\n")
        pos = m.end()
    return tokens


SIMPLE_ESCAPES = {
    "n": b"\n", "t": b"\t", "r": b"\r", "a": b"\a", "b": b"\b", "f": b"\f",
    "v": b"\v", "\\": b"\\", '"': b'"', "'": b"'", "?": b"?",
}


def decode_c_string(literal, filename, line):
    body = literal[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        e = body[i + 1]
        if e in SIMPLE_ESCAPES:
            out += SIMPLE_ESCAPES[e]
            i += 2
        elif e in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1:])
            out.append(int(m.group(), 8) & 0xFF)
            i += 1 + len(m.group())
        elif e == "x":
            m = re.match(r"[0-9a-fA-F]+", body[i + 2:])
            if not m:
                raise DefError("%s:%d: \\x without hex digits" % (filename, line))
            out.append(int(m.group(), 16) & 0xFF)
            i += 2 + len(m.group())
        else:
            raise DefError("%s:%d: unknown escape \\%s" % (filename, line, e))
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise DefError("%s:%d: string is not valid UTF-8" % (filename, line))


def parse_int(c_number):
    digits = c_number.rstrip("uUlL")
    if digits.lower().startswith("0x"):
        return int(digits, 16)
    if len(digits) > 1 and digits.startswith("0"):
        return int(digits, 8)
    return int(digits, 10)


# ---- rows --------------------------------------------------------------------

def split_args(tokens, i, filename):
    """tokens[i] is the '(' after FW_OPTION; returns (args, index after ')')."""
    start_line = tokens[i][2]
    args = [[]]
    depth = 0
    i += 1
    while i < len(tokens):
        kind, value, _ = tokens[i]
        if kind == "punct" and value == "(":
            depth += 1
        elif kind == "punct" and value == ")":
            if depth == 0:
                return args, i + 1
            depth -= 1
        elif kind == "punct" and value == "," and depth == 0:
            args.append([])
            i += 1
            continue
        args[-1].append(tokens[i])
        i += 1
    raise DefError("%s:%d: FW_OPTION( is never closed" % (filename, start_line))


def eval_integer(toks, what, filename, line):
    """A signed integer literal, possibly parenthesized: 10, -1, (-1), 0x40."""
    sign = 1
    toks = list(toks)
    while toks and toks[0][0] == "punct" and toks[0][1] in "+-(":
        if toks[0][1] == "(":
            if not (toks[-1][0] == "punct" and toks[-1][1] == ")"):
                break
            toks = toks[1:-1]
            continue
        if toks[0][1] == "-":
            sign = -sign
        toks = toks[1:]
    if len(toks) != 1 or toks[0][0] != "number":
        text = " ".join(t[1] for t in toks) or "(nothing)"
        raise DefError("%s:%d: %s must be an integer literal, found: %s"
                       % (filename, line, what, text))
    return sign * parse_int(toks[0][1])


def concat_strings(toks, what, filename, line):
    if not toks or any(t[0] != "string" for t in toks):
        text = " ".join(t[1] for t in toks) or "(nothing)"
        raise DefError("%s:%d: %s must be a string literal, found: %s"
                       % (filename, line, what, text))
    return "".join(decode_c_string(t[1], filename, t[2]) for t in toks)


def parse_def(text, filename):
    tokens = tokenize(text, filename)
    rows = []
    i = 0
    while i < len(tokens):
        kind, value, line = tokens[i]
        if kind != "ident" or value not in ("FW_OPTION", "FW_TEXT_OPTION"):
            raise DefError("%s:%d: expected FW_OPTION(...) or FW_TEXT_OPTION(...), found: %s"
                           % (filename, line, value))
        if i + 1 >= len(tokens) or tokens[i + 1][1] != "(":
            raise DefError("%s:%d: %s without '('" % (filename, line, value))
        args, i = split_args(tokens, i + 1, filename)
        if value == "FW_TEXT_OPTION":
            # FW_TEXT_OPTION(ID, name, doc): a text value (a path), unset by default
            if len(args) != 3:
                raise DefError("%s:%d: FW_TEXT_OPTION takes 3 arguments (ID, name, doc), found %d"
                               % (filename, line, len(args)))
            args = [args[0], args[1], None, None, None, args[2]]
        elif len(args) != 6:
            raise DefError("%s:%d: FW_OPTION takes 6 arguments (ID, name, default, min, max, doc), found %d"
                           % (filename, line, len(args)))
        ident = args[0]
        if len(ident) != 1 or ident[0][0] != "ident":
            raise DefError("%s:%d: the first argument of FW_OPTION must be an identifier" % (filename, line))
        text = args[2] is None
        row = {
            "id": ident[0][1],
            "name": concat_strings(args[1], "name", filename, line),
            "text": text,
            "default": 0 if text else eval_integer(args[2], "default", filename, line),
            "min": 0 if text else eval_integer(args[3], "min", filename, line),
            "max": 0 if text else eval_integer(args[4], "max", filename, line),
            "line": line,
        }
        doc = concat_strings(args[5], "doc", filename, line)
        for prefix, when in WHEN_PREFIXES:
            if doc.startswith(prefix):
                row["when"] = when
                row["doc"] = doc[len(prefix):].strip()
                break
        else:
            raise DefError('%s:%d: the doc of %s must start with "live:" or "start-up:"'
                           % (filename, line, row["id"]))
        if not row["min"] <= row["default"] <= row["max"]:
            raise DefError("%s:%d: the default of %s (%d) is outside its range %d..%d"
                           % (filename, line, row["id"], row["default"], row["min"], row["max"]))
        rows.append(row)
    if not rows:
        raise DefError("%s: no FW_OPTION rows" % filename)
    seen = {}
    for row in rows:
        key = row["id"].upper()
        if key in seen:
            raise DefError("%s:%d: %s is already defined on line %d"
                           % (filename, row["line"], row["id"], seen[key]))
        seen[key] = row["line"]
    return rows


# ---- markdown ------------------------------------------------------------------

def cell(text):
    return " ".join(text.split()).replace("|", "\\|")


def fmt_range(lo, hi):
    if hi == lo + 1:
        return "%d or %d" % (lo, hi)
    return "%d to %d" % (lo, hi)


INTRO = """\
# Options

<!-- Generated from src/options.def by tools/gen_options_doc.py; do not edit.
     After changing the table, run: python3 tools/gen_options_doc.py -->

Every tunable of freeway is one row of [`src/options.def`](../src/options.def).

**Environment.** Each option is read once, from the environment variable
`FREEWAY_<ID>`, when the library is loaded (or at its first use, if that comes
first); changing the environment later has no effect. An unset or empty
variable leaves the default. The value is a decimal integer (surrounding white
space and a sign allowed) or exactly one of the words `on`, `true`, `yes` (1)
and `off`, `false`, `no` (0), in any case but without white space; the options
whose range says "a path" take the text as it is (up to 1023 bytes).

- A value that is neither (for example `10ms`, `0x10`, or `on` followed by a
  space) is ignored: the option keeps its default and `freeway: warning:
  ignoring FREEWAY_<ID>=<value> (not a number)` is written to stderr.
- A number outside the option's range is not rejected: it is clamped, silently,
  to the nearest bound (`FREEWAY_VERBOSE=5` gives 2). A number too large for a
  `long` first saturates to `LONG_MAX` or `LONG_MIN`, then is clamped the same
  way.

**While running.** `fw_option_get(name)` returns the current value;
`fw_option_set(name, value)` changes an option marked *live* below. `name` is
the variable's name with or without the `FREEWAY_` prefix, in any case (so
`"purge_delay"`, `"PURGE_DELAY"` and `"FREEWAY_PURGE_DELAY"` are the same).

- An out-of-range `value` is clamped to the nearest bound, as above, and the call
  succeeds (returns 0).
- An unknown `name` makes both functions return -1 with `errno = EINVAL`.
- `fw_option_set()` on a *start-up* option returns -1 with `errno = EPERM` and
  changes nothing: those are only read from the environment.

`fw_stats_print()` (and `FREEWAY_SHOW_STATS=1` at exit) lists the value in
effect of every option.
"""


def render(rows):
    out = [INTRO, "| environment variable | default | range | when | meaning |",
           "|---|---|---|---|---|"]
    for r in rows:
        var = "`FREEWAY_%s`" % r["id"]
        # fw_option_set() also accepts the row's name, which the intro only
        # promises to be the ID in lower case.
        if r["name"].lower() != r["id"].lower():
            var += " (also `%s`)" % cell(r["name"])
        if r["text"]:
            out.append("| %s | unset | a path | %s | %s |" % (var, r["when"], cell(r["doc"])))
            continue
        out.append("| %s | %d | %s | %s | %s |" % (
            var, r["default"], fmt_range(r["min"], r["max"]), r["when"], cell(r["doc"])))
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description="Generate docs/options.md from src/options.def.")
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 if the output file differs from what would be written")
    ap.add_argument("--def", dest="def_path", type=Path, default=DEF_PATH,
                    help="options table to read (default: src/options.def of this repository)")
    ap.add_argument("--out", type=Path, default=OUT_PATH,
                    help="markdown file to write or check (default: docs/options.md of this repository)")
    args = ap.parse_args(argv)

    try:
        text = args.def_path.read_text(encoding="utf-8")
        rows = parse_def(text, str(args.def_path))
    except (OSError, DefError) as e:
        print("gen_options_doc: %s" % e, file=sys.stderr)
        return 2
    want = render(rows)
    regen = REGEN
    if args.def_path != DEF_PATH:
        regen += " --def %s" % args.def_path
    if args.out != OUT_PATH:
        regen += " --out %s" % args.out

    if args.check:
        try:
            have = args.out.read_text(encoding="utf-8")
        except FileNotFoundError:
            print("gen_options_doc: %s does not exist; generate it with: %s"
                  % (args.out, regen), file=sys.stderr)
            return 1
        if have == want:
            return 0
        print("gen_options_doc: %s is out of date with %s; regenerate it with: %s\n"
              "(differences, '-' is the file, '+' what would be written):"
              % (args.out, args.def_path, regen), file=sys.stderr)
        diff = difflib.unified_diff(have.splitlines(True), want.splitlines(True),
                                    str(args.out), "generated", n=1)
        sys.stderr.writelines(diff)
        return 1

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(want, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
