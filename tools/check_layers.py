#!/usr/bin/env python3
"""Checks that the allocator's source files call only downward, following the
layer table src/LAYERS.

The layer table
---------------
One line per layer, the bottom layer first:

    layer-name: file1 file2 ...

Paths are relative to src/. Headers and .def tables belong to a layer just as
.c and .cpp files do. A line that starts with white space continues the
layer above it; '#' starts a comment. Every source file under src/ (.c, .cc,
.cpp, .cxx, .h, .hh, .hpp, .def, .inc) must be listed exactly once, so that a
new file cannot escape the check.

What is checked
---------------
A file may use what its own layer and the layers below it define, never
what a higher layer defines:

 1. #include "x": x must be in the file's layer or a lower one. System
    includes (<...>) and the public headers in include/ are allowed
    everywhere. A quoted include that names no file is an error.
 2. Identifiers that start with fw_ (functions, global variables, macros):
    each one defined in a source file is attributed to that file, and a
    reference to it from a lower layer is an error. Definitions are
    non-static function definitions and global variable definitions in
    .c/.cpp files (visible everywhere), and function definitions (static
    inline, FW_INLINE) and #defines in headers (visible to every file).
    Static functions and variables, functions in an anonymous namespace and
    #defines of a .c/.cpp file are seen only by that file, so the same static
    name in two files is two different things. Prototypes and extern
    declarations are not definitions and not references: the table of
    contents in a low header may declare everything. The bodies of a
    header's macros and inline functions are the header's own references.
    Comments, string and character literals are ignored, and so are member
    names after '.' and '->'.

An identifier defined (not static) in more than one file is reported as a
warning. It is checked against the definition the referencing file sees: a
header it includes (a macro or inline function wins over a function), else
the lowest layer among the definitions.

Names produced by token pasting (fw_stat_##name) and code inside macro
arguments' expansions are not seen; the scanner is a tokenizer and a
top-level declaration splitter, not a preprocessor.

Usage
-----
  tools/check_layers.py              check; violations as
        src/a.c:12: calls fw_x (defined in b.c, layer L2) from layer L1 — upward
        (exit 1), or a summary of the layers (exit 0)
  tools/check_layers.py --graph      the file-level dependency edges
  tools/check_layers.py --cycles     strongly connected components among the
                                     files, whatever the table says (exit 1
                                     if there is any)
  --no-includes                      leave #include edges out of --graph and
                                     --cycles (references only)
  --root DIR                         the repository (default: the one this
                                     script is in); --layers FILE another table
  -v                                 also list the fw_ names referenced but
                                     defined nowhere under src/ (types,
                                     pasted names)
"""
import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SOURCE_EXTS = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".def", ".inc")
# Compiled on their own; everything else is text included by others.
UNIT_EXTS = (".c", ".cc", ".cpp", ".cxx")
PREFIX = "fw_"

# Groups that decorate a declaration rather than name it.
ATTRIBUTE_WORDS = {"__attribute__", "__attribute", "__declspec", "__asm__", "__asm", "asm",
                   "alignas", "_Alignas", "__extension__", "noexcept", "throw", "decltype",
                   "_Atomic", "__typeof__", "typeof", "__typeof", "sizeof", "_Alignof",
                   "alignof", "_Static_assert", "static_assert"}


TAG_WORDS = {"struct", "union", "enum", "class"}


class TableError(Exception):
    pass


# ---- tokenizer ------------------------------------------------------------------

TOKEN_RE = re.compile(r"""
    (?P<cont>\\\r?\n)
  | (?P<nl>\n)
  | (?P<ws>[ \t\r\f\v]+)
  | (?P<lcomment>//(?:[^\n\\]|\\\r?\n|\\.)*)
  | (?P<bcomment>/\*.*?(?:\*/|\Z))
  | (?P<rawstr>(?:u8|u|U|L)?R"(?P<delim>[^()\\ \t\n"]{0,16})\()
  | (?P<string>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.|\\\n)*"?)
  | (?P<char>(?:u8|u|U|L)?'(?:[^'\\\n]|\\.)*'?)
  | (?P<number>\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.]|'(?=[0-9A-Za-z]))*)
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<punct>->|::|\.\.\.|\#\#|.)
""", re.VERBOSE | re.DOTALL)


class Tok:
    __slots__ = ("kind", "text", "line", "space")

    def __init__(self, kind, text, line, space):
        self.kind = kind      # ident, number, string, char, punct
        self.text = text      # for strings: the contents, used by #include only
        self.line = line
        self.space = space    # white space (or a comment) before it

    def __repr__(self):
        return "Tok(%s %r @%d)" % (self.kind, self.text, self.line)


def tokenize(text):
    """Returns (code tokens, directives). A directive is a list of tokens of
    one logical '#' line. Comments and literals never produce identifiers."""
    code, directives = [], []
    pos, line, n = 0, 1, len(text)
    at_bol = True          # no token yet on this logical line
    current = None         # tokens of the directive being read
    space = True
    while pos < n:
        m = TOKEN_RE.match(text, pos)
        kind = m.lastgroup
        s = m.group(0)
        end = m.end()
        if kind == "rawstr":
            close = ")" + m.group("delim") + '"'
            j = text.find(close, end)
            end = n if j < 0 else j + len(close)
            s = text[pos:end]
            kind = "string"
        if kind == "cont":
            line += 1
            pos = end
            continue
        if kind == "nl":
            line += 1
            pos = end
            if current is not None:
                directives.append(current)
                current = None
            at_bol = True
            space = True
            continue
        if kind in ("ws", "lcomment", "bcomment"):
            line += s.count("\n")
            pos = end
            space = True
            continue
        if kind == "string":
            q = s.index('"')
            tok = Tok("string", s[q + 1:-1] if s.endswith('"') else s[q + 1:], line, space)
        elif kind == "char":
            tok = Tok("char", "", line, space)
        else:
            tok = Tok(kind, s, line, space)
        line += s.count("\n")
        space = False
        pos = end
        if at_bol and tok.text == "#" and tok.kind == "punct":
            current = []
            at_bol = False
            continue
        at_bol = False
        if current is not None:
            current.append(tok)
        else:
            code.append(tok)
    if current is not None:
        directives.append(current)
    return code, directives


# ---- one file --------------------------------------------------------------------

class Definition:
    __slots__ = ("name", "file", "line", "kind", "local")

    def __init__(self, name, file, line, kind, local):
        self.name = name
        self.file = file      # path relative to src/ (or include/... for public ones)
        self.line = line
        self.kind = kind      # function, variable, macro, function-macro
        self.local = local    # seen only by its own file

    def is_callable(self):
        return self.kind in ("function", "function-macro")


class FileInfo:
    def __init__(self, rel, path):
        self.rel = rel
        self.path = path
        self.is_unit = rel.endswith(UNIT_EXTS)
        self.defs = {}        # name -> Definition (first one in the file)
        self.refs = []        # (name, line)
        self.includes = []    # (line, "x.h")


def _match_close(toks, i, open_, close):
    """Index of the token closing toks[i] (== open_), or len(toks)."""
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j].text
        if toks[j].kind != "punct":
            continue
        if t == open_:
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return j
    return len(toks)


def _is_member(toks, i):
    return i > 0 and toks[i - 1].kind == "punct" and toks[i - 1].text in (".", "->")


def _add_refs(info, toks, lo, hi, skip=()):
    for i in range(lo, hi):
        t = toks[i]
        if t.kind == "ident" and t.text.startswith(PREFIX) and i not in skip and not _is_member(toks, i):
            info.refs.append((t.text, t.line))


def _add_def(info, name, line, kind, local):
    if name not in info.defs:
        info.defs[name] = Definition(name, info.rel, line, kind, local)


def _depth0_positions(toks, lo, hi):
    """Yields (index, token) of the tokens of toks[lo:hi] that are not inside
    a (), [] or {} group; a group's opening token is yielded, its contents
    are not."""
    i = lo
    while i < hi:
        t = toks[i]
        if t.kind == "punct" and t.text in "([{":
            close = {"(": ")", "[": "]", "{": "}"}[t.text]
            yield i, t
            i = min(_match_close(toks, i, t.text, close), hi - 1) + 1
            continue
        yield i, t
        i += 1


def _declarator_names(toks, lo, hi, function_def):
    """Indices of the names a top-level declaration toks[lo:hi] declares."""
    follow_ok = {"(", "[", "=", ",", ";", ")", ":", "{"}
    names = []
    if function_def:
        # The last fw_ name at depth 0 followed by a parameter list.
        best = None
        for i, t in _depth0_positions(toks, lo, hi):
            if (t.kind == "ident" and t.text.startswith(PREFIX) and i + 1 < hi
                    and toks[i + 1].text == "(" and not _is_member(toks, i)):
                best = i
        return [best] if best is not None else []
    # Declarators are separated by commas at depth 0.
    pieces, start = [], lo
    for i, t in _depth0_positions(toks, lo, hi):
        if t.kind == "punct" and t.text == ",":
            pieces.append((start, i))
            start = i + 1
    pieces.append((start, hi))
    for a, b in pieces:
        found = None
        for i, t in _depth0_positions(toks, a, b):
            if t.kind == "punct" and t.text == "=":
                break
            if t.kind == "ident" and t.text.startswith(PREFIX):
                if i > a and toks[i - 1].text in TAG_WORDS:
                    continue    # struct fw_x_s: a type, not an object
                nxt = toks[i + 1] if i + 1 < b else None
                if nxt is None or nxt.text in follow_ok or nxt.text in ATTRIBUTE_WORDS:
                    found = i
                    break
            if t.kind == "punct" and t.text == "(" and i + 2 < b and toks[i + 1].text == "*":
                # function pointer: (*name)(...)
                if toks[i + 2].kind == "ident" and toks[i + 2].text.startswith(PREFIX):
                    found = i + 2
                    break
        if found is not None:
            names.append(found)
    return names


def scan_file(info, text, static_words):
    code, directives = tokenize(text)
    header = not info.is_unit
    for d in directives:
        _scan_directive(info, d, header)
    _scan_code(info, code, header, static_words)


def _scan_directive(info, d, header):
    if not d or d[0].kind != "ident":
        return
    word = d[0].text
    if word == "include" and len(d) > 1 and d[1].kind == "string":
        info.includes.append((d[0].line, d[1].text))
        return
    if word != "define" or len(d) < 2 or d[1].kind != "ident":
        return
    name = d[1].text
    body = 2
    params = set()
    function_like = len(d) > 2 and d[2].text == "(" and not d[2].space
    if function_like:
        close = _match_close(d, 2, "(", ")")
        params = {t.text for t in d[3:close] if t.kind == "ident"}
        body = close + 1
    if name.startswith(PREFIX):
        _add_def(info, name, d[1].line, "function-macro" if function_like else "macro",
                 local=not header)
    skip = {i for i in range(body, len(d)) if d[i].text in params}
    _add_refs(info, d, body, len(d), skip)


def _scan_code(info, toks, header, static_words):
    n = len(toks)
    i = 0
    scopes = []            # 'extern' / 'anon' / 'ns' for braces that are not blocks
    while i < n:
        t = toks[i]
        if t.kind == "punct" and t.text == "}":
            if scopes:
                scopes.pop()
            i += 1
            continue
        if t.kind == "punct" and t.text == ";":
            i += 1
            continue
        # namespace [name] { ... }  and  extern "C" { ... }
        if t.text == "namespace" and t.kind == "ident":
            j = i + 1
            while j < n and (toks[j].kind == "ident" or toks[j].text == "::"):
                j += 1
            if j < n and toks[j].text == "{":
                scopes.append("anon" if j == i + 1 else "ns")
                i = j + 1
                continue
        if (t.text == "extern" and i + 2 < n and toks[i + 1].kind == "string"
                and toks[i + 2].text == "{"):
            scopes.append("extern")
            i += 3
            continue
        i = _scan_statement(info, toks, i, header, static_words, "anon" in scopes)


def _scan_statement(info, toks, start, header, static_words, in_anon):
    """Reads one top-level declaration or definition from toks[start:];
    returns the index after it."""
    n = len(toks)
    i = start
    saw_assign = False
    saw_call_parens = False
    type_bodies = []       # (lo, hi) of struct/union/enum bodies: neither defs nor refs
    while i < n:
        t = toks[i]
        if t.kind == "punct":
            if t.text == ";":
                return _finish_declaration(info, toks, start, i, type_bodies, header,
                                           static_words, in_anon) + 1
            if t.text == "}":
                # a '}' closing an enclosing scope ends a statement missing its ';'
                _finish_declaration(info, toks, start, i, type_bodies, header, static_words, in_anon)
                return i
            if t.text == "=":
                saw_assign = True
            elif t.text in "([":
                if t.text == "(" and not (i > start and toks[i - 1].text in ATTRIBUTE_WORDS):
                    saw_call_parens = True
                i = _match_close(toks, i, t.text, ")" if t.text == "(" else "]") + 1
                continue
            elif t.text == "{":
                close = _match_close(toks, i, "{", "}")
                if saw_assign:
                    i = close + 1          # initializer: scanned with the statement
                    continue
                if saw_call_parens:
                    _finish_function(info, toks, start, i, close, header, static_words, in_anon)
                    return close + 1
                type_bodies.append((i, close + 1))
                i = close + 1
                continue
        i += 1
    _finish_declaration(info, toks, start, n, type_bodies, header, static_words, in_anon)
    return n


def _has_word(toks, lo, hi, words):
    return any(t.kind == "ident" and t.text in words for _, t in _depth0_positions(toks, lo, hi))


def _finish_function(info, toks, start, brace, close, header, static_words, in_anon):
    names = _declarator_names(toks, start, brace, function_def=True)
    local = not header and (in_anon or _has_word(toks, start, brace, static_words))
    for k in names:
        _add_def(info, toks[k].text, toks[k].line, "function", local)
    _add_refs(info, toks, start, brace, set(names))
    _add_refs(info, toks, brace + 1, close)


def _finish_declaration(info, toks, start, end, type_bodies, header, static_words, in_anon):
    if start >= end:
        return end
    # Drop struct/union/enum bodies: member names are not references.
    keep = []
    pos = start
    for lo, hi in type_bodies:
        keep.extend(range(pos, lo))
        pos = hi
    keep.extend(range(pos, end))
    sub = [toks[k] for k in keep]
    m = len(sub)
    if _has_word(sub, 0, m, {"typedef"}):
        _add_refs(info, sub, 0, m)
        return end
    names = _declarator_names(sub, 0, m, function_def=False)
    is_extern = _has_word(sub, 0, m, {"extern"})
    local = not header and (in_anon or _has_word(sub, 0, m, static_words))
    for k in names:
        is_function = k + 1 < m and sub[k + 1].text == "("
        if is_extern or is_function:
            continue        # a declaration: neither a definition nor a reference
        _add_def(info, sub[k].text, sub[k].line, "variable", local)
    _add_refs(info, sub, 0, m, set(names))
    return end


def static_macro_words(texts):
    """Object-like macros that expand to something with 'static' in it
    (FW_INLINE): a definition that starts with one is static too."""
    words = {"static"}
    define_re = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)(?!\()\s+(.*)$", re.M)
    for text in texts:
        for m in define_re.finditer(text):
            if re.search(r"\bstatic\b", m.group(2)):
                words.add(m.group(1))
    return words


# ---- the table ------------------------------------------------------------------

class Layers:
    def __init__(self):
        self.names = []       # bottom first
        self.files = {}       # rel path -> layer index
        self.members = []     # per layer: [rel paths]
        self.lines = {}       # rel path -> line in the table

    def name_of(self, rel):
        return self.names[self.files[rel]]


def parse_table(path):
    layers = Layers()
    errors = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TableError("%s: cannot read the layer table (%s)" % (path, e.strerror))
    current = None
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0]
        if not line.strip():
            continue
        if line[0] in " \t":
            if current is None:
                errors.append("%s:%d: continuation line before any layer" % (path, no))
                continue
            names = line.split()
        else:
            if ":" not in line:
                errors.append("%s:%d: expected 'layer-name: file ...'" % (path, no))
                continue
            name, rest = line.split(":", 1)
            name = name.strip()
            if not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
                errors.append("%s:%d: bad layer name %r" % (path, no, name))
                continue
            if name in layers.names:
                errors.append("%s:%d: layer %s is defined twice" % (path, no, name))
                continue
            layers.names.append(name)
            layers.members.append([])
            current = len(layers.names) - 1
            names = rest.split()
        for f in names:
            f = os.path.normpath(f).replace(os.sep, "/")
            if f in layers.files:
                errors.append("%s:%d: %s is already in layer %s" % (path, no, f, layers.name_of(f)))
                continue
            layers.files[f] = current
            layers.members[current].append(f)
            layers.lines[f] = no
    if not layers.names and not errors:
        errors.append("%s: no layer defined" % path)
    return layers, errors


# ---- the whole tree -----------------------------------------------------------

class Project:
    def __init__(self, root, table_path, need_table=True):
        self.root = Path(root)
        self.src = self.root / "src"
        self.include = self.root / "include"
        self.table_path = Path(table_path) if table_path else self.src / "LAYERS"
        self.errors = []      # (sort key, message): fail the check
        self.warnings = []
        self.layers = None
        if self.table_path.exists() or need_table:
            self.layers, errs = parse_table(self.table_path)
            self.errors.extend(((0, "", 0), e) for e in errs)
        self.files = {}
        self.public = {}      # name -> Definition in include/
        self._scan()

    def _walk(self, base):
        out = []
        if not base.is_dir():
            return out
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXTS):
                    p = Path(dirpath) / f
                    out.append((p.relative_to(base).as_posix(), p))
        return out

    def _scan(self):
        found = self._walk(self.src)
        texts = {}
        for rel, p in found:
            texts[rel] = p.read_text(encoding="utf-8", errors="replace")
        public_texts = {}
        for rel, p in self._walk(self.include):
            public_texts[rel] = p.read_text(encoding="utf-8", errors="replace")
        static_words = static_macro_words(list(texts.values()) + list(public_texts.values()))
        for rel, p in found:
            info = FileInfo(rel, p)
            scan_file(info, texts[rel], static_words)
            self.files[rel] = info
        for rel, text in public_texts.items():
            info = FileInfo("include/" + rel, self.include / rel)
            info.is_unit = False
            scan_file(info, text, static_words)
            for name, d in info.defs.items():
                self.public.setdefault(name, d)
        if self.layers is not None:
            for rel in self.files:
                if rel not in self.layers.files:
                    self.errors.append(((0, rel, 0), "src/%s: not listed in %s" % (rel, self._table_name())))
            for rel in self.layers.files:
                if rel not in self.files:
                    self.errors.append(((0, rel, 0), "%s:%d: %s is listed but there is no src/%s"
                                        % (self._table_name(), self.layers.lines[rel], rel, rel)))
        # name -> [Definition] visible beyond their own file
        self.globals = {}
        for info in self.files.values():
            for d in info.defs.values():
                if not d.local:
                    self.globals.setdefault(d.name, []).append(d)
        self._resolve()

    def _table_name(self):
        try:
            return self.table_path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(self.table_path)

    def layer(self, rel):
        if self.layers is None or rel not in self.layers.files:
            return None
        return self.layers.files[rel]

    def _resolve_include(self, info, name):
        """('src', rel) or ('public', rel) or None."""
        here = info.path.parent
        for base, kind in ((here, "src"), (self.src, "src"), (self.include, "public")):
            p = base / name
            if p.is_file():
                rp = p.resolve()
                for root, k in ((self.src.resolve(), "src"), (self.include.resolve(), "public")):
                    try:
                        return k, rp.relative_to(root).as_posix()
                    except ValueError:
                        pass
                return "outside", str(p)
        return None

    def _closure(self, rel, seen=None):
        """Files rel includes, directly or not (src/ only)."""
        if seen is None:
            seen = set()
        for _, target in self.include_edges.get(rel, ()):
            if target not in seen:
                seen.add(target)
                self._closure(target, seen)
        return seen

    def _resolve(self):
        # includes
        self.include_edges = {}   # rel -> [(line, target rel in src)]
        for rel, info in self.files.items():
            edges = []
            for line, name in info.includes:
                r = self._resolve_include(info, name)
                if r is None:
                    self.errors.append(((1, rel, line), "src/%s:%d: includes \"%s\", which is neither "
                                        "under src/ nor include/" % (rel, line, name)))
                elif r[0] == "src":
                    edges.append((line, r[1]))
                elif r[0] == "outside":
                    self.errors.append(((1, rel, line), "src/%s:%d: includes \"%s\" from outside the "
                                        "source tree" % (rel, line, name)))
            self.include_edges[rel] = edges
        # ambiguities
        self.ambiguous = {}
        for name, defs in self.globals.items():
            files = sorted({d.file for d in defs})
            if len(files) > 1:
                self.ambiguous[name] = files
        # references
        self.ref_edges = {}       # rel -> {target rel: [(name, line)]}
        self.unresolved = {}      # name -> count
        self.nrefs = {}           # rel -> references resolved to another file
        for rel, info in self.files.items():
            edges = {}
            count = 0
            included = None
            for name, line in info.refs:
                if name in info.defs:
                    continue
                defs = self.globals.get(name)
                if not defs:
                    if name not in self.public:
                        self.unresolved[name] = self.unresolved.get(name, 0) + 1
                    continue
                if len(defs) > 1:
                    if included is None:
                        included = self._closure(rel)
                    d = self._choose(defs, included)
                else:
                    d = defs[0]
                count += 1
                edges.setdefault(d.file, []).append((name, line, d))
            self.ref_edges[rel] = edges
            self.nrefs[rel] = count

    def _choose(self, defs, included):
        seen = [d for d in defs if d.file in included and not d.file.endswith(UNIT_EXTS)]
        if seen:
            return seen[0]

        def key(d):
            lay = self.layer(d.file)
            return (lay if lay is not None else 1 << 30, d.file)
        return min(defs, key=key)

    # ---- checks ---------------------------------------------------------------
    def violations(self, dash):
        out = []
        if self.layers is None:
            return out
        for rel in self.files:
            mine = self.layer(rel)
            if mine is None:
                continue
            for line, target in self.include_edges[rel]:
                theirs = self.layer(target)
                if theirs is not None and theirs > mine:
                    out.append(((mine, rel, line), "src/%s:%d: includes %s (layer %s) from layer %s %s upward"
                                % (rel, line, target, self.layers.names[theirs],
                                   self.layers.names[mine], dash)))
            seen = set()
            for target, uses in self.ref_edges[rel].items():
                theirs = self.layer(target)
                if theirs is None or theirs <= mine:
                    continue
                for name, line, d in uses:
                    if (name, line) in seen:
                        continue
                    seen.add((name, line))
                    verb = "calls" if d.is_callable() else "uses"
                    out.append(((mine, rel, line), "src/%s:%d: %s %s (defined in %s, layer %s) from layer %s %s upward"
                                % (rel, line, verb, name, target, self.layers.names[theirs],
                                   self.layers.names[mine], dash)))
        out.sort(key=lambda x: (x[0][1], x[0][2], x[1]))
        return out

    def graph(self, with_includes=True):
        """{(a, b): [labels]} over files; labels are '#include' and names."""
        edges = {}
        for rel in self.files:
            if with_includes:
                for _, target in self.include_edges[rel]:
                    if target != rel:
                        labels = edges.setdefault((rel, target), [])
                        if "#include" not in labels:
                            labels.insert(0, "#include")
            for target, uses in self.ref_edges[rel].items():
                if target == rel:
                    continue
                labels = edges.setdefault((rel, target), [])
                for name, _, _ in uses:
                    if name not in labels:
                        labels.append(name)
        return edges


def strongly_connected(nodes, edges):
    """Tarjan's algorithm, iteratively; components of more than one node."""
    succ = {v: [] for v in nodes}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    for v in succ:
        succ[v].sort()
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = 0
    for root in sorted(succ):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, k = work.pop()
            if k == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            if k < len(succ[v]):
                work.append((v, k + 1))
                w = succ[v][k]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    result.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    result.sort()
    return result


def shortest_cycles(nodes, edges):
    """For each node in turn, a shortest cycle through it (breadth-first);
    each cycle once, starting at its earliest node in the order given."""
    succ = {v: [] for v in nodes}
    for a, b in edges:
        succ[a].append(b)
    rank = {v: i for i, v in enumerate(nodes)}
    found, result = set(), []
    for v in nodes:
        parent = {}
        queue = [v]
        path = None
        while queue and path is None:
            nxt = []
            for u in queue:
                for w in succ[u]:
                    if w == v:
                        path = [u]
                        while path[-1] != v:
                            path.append(parent[path[-1]])
                        path.reverse()
                        break
                    if w not in parent:
                        parent[w] = u
                        nxt.append(w)
                if path is not None:
                    break
            queue = nxt
        if path is None:
            continue
        first = min(range(len(path)), key=lambda i: rank[path[i]])
        cyc = tuple(path[first:] + path[:first])
        if cyc not in found:
            found.add(cyc)
            result.append(list(cyc))
    return result


# ---- output ---------------------------------------------------------------------

def _dash(out):
    enc = getattr(out, "encoding", None) or "utf-8"
    try:
        "\u2014".encode(enc)
        return "\u2014"
    except (UnicodeEncodeError, LookupError):
        return "--"


def _order(project, rel):
    lay = project.layer(rel)
    return (lay if lay is not None else 1 << 30, rel)


def print_graph(project, out, with_includes):
    edges = project.graph(with_includes)
    for (a, b) in sorted(edges, key=lambda e: (_order(project, e[0]), _order(project, e[1]))):
        la, lb = project.layer(a), project.layer(b)
        mark = "  [upward]" if la is not None and lb is not None and lb > la else ""
        print("%s -> %s: %s%s" % (a, b, ", ".join(edges[(a, b)]), mark), file=out)


def print_cycles(project, out, with_includes):
    edges = project.graph(with_includes)
    comps = strongly_connected(project.files.keys(), edges.keys())
    if not comps:
        print("no cycles among %d files" % len(project.files), file=out)
        return 0
    for k, comp in enumerate(comps, 1):
        members = set(comp)
        order = sorted(comp, key=lambda r: _order(project, r))
        print("cycle %d (%d files): %s" % (k, len(comp), " ".join(order)), file=out)
        inner = sorted((e for e in edges if e[0] in members and e[1] in members),
                       key=lambda e: (_order(project, e[0]), _order(project, e[1])))
        print("  the shortest cycle through each of them:", file=out)
        for cyc in shortest_cycles(order, inner):
            print("    " + " -> ".join(cyc + [cyc[0]]), file=out)
        print("  the edges among them:", file=out)
        for (a, b) in inner:
            print("    %s -> %s: %s" % (a, b, ", ".join(edges[(a, b)])), file=out)
    print("%d cycle(s)" % len(comps), file=out)
    return 1


def print_check(project, out, verbose):
    dash = _dash(out)
    problems = sorted(project.errors, key=lambda e: e[0]) + project.violations(dash)
    for _, msg in problems:
        print(msg, file=out)
    for name in sorted(project.ambiguous):
        where = ", ".join("%s (layer %s)" % (f, project.layers.name_of(f) if project.layer(f) is not None
                                             else "none") for f in project.ambiguous[name])
        print("warning: %s is defined in several files: %s" % (name, where), file=out)
    if verbose and project.unresolved:
        print("fw_ names referenced but defined nowhere under src/: %s"
              % " ".join(sorted(project.unresolved)), file=out)
    lay = project.layers
    upward = {}
    for (mine, rel, _), _ in project.violations(dash):
        upward[mine] = upward.get(mine, 0) + 1
    print("layers, bottom first (files, fw_ definitions, references to other files, upward):", file=out)
    width = max(len(n) for n in lay.names) if lay.names else 0
    for idx, name in enumerate(lay.names):
        members = [f for f in lay.members[idx] if f in project.files]
        ndefs = sum(len(project.files[f].defs) for f in members)
        nrefs = sum(project.nrefs[f] for f in members)
        print("  %-*s  %2d %4d %5d %4d  %s" % (width, name, len(members), ndefs, nrefs,
                                              upward.get(idx, 0), " ".join(lay.members[idx])), file=out)
    nviol = sum(upward.values())
    nerr = len(project.errors)
    if nviol or nerr:
        print("FAILED: %d upward reference(s) or include(s), %d other error(s)" % (nviol, nerr), file=out)
        return 1
    print("ok: %d files in %d layers, every call and include goes downward"
          % (len(project.files), len(lay.names)), file=out)
    return 0


def main(argv=None, out=None):
    out = out or sys.stdout
    ap = argparse.ArgumentParser(description="Checks that src/ calls only downward (see src/LAYERS).")
    ap.add_argument("--root", default=str(ROOT), help="repository root (default: %(default)s)")
    ap.add_argument("--layers", help="layer table (default: ROOT/src/LAYERS)")
    ap.add_argument("--graph", action="store_true", help="print the file-level dependency edges")
    ap.add_argument("--cycles", action="store_true", help="print the cycles among files (exit 1 if any)")
    ap.add_argument("--no-includes", action="store_true", help="--graph/--cycles: references only")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    check = not (args.graph or args.cycles)
    try:
        project = Project(args.root, args.layers, need_table=check)
    except TableError as e:
        print(str(e), file=out)
        return 2
    rc = 0
    if args.graph:
        print_graph(project, out, not args.no_includes)
    if args.cycles:
        rc = print_cycles(project, out, not args.no_includes)
    if check:
        rc = print_check(project, out, args.verbose)
    return rc


if __name__ == "__main__":
    sys.exit(main())
