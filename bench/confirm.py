#!/usr/bin/env python3
"""Re-runs the rows of a bench/run.py pass where freeway looks behind, to
tell the rows that stay behind in an independent re-run from those that were
one pass's noise.

    python3 bench/confirm.py bench/results/quick [--out DIR] [--reps 11]
        [--time-limit 1.15] [--rss-limit 2.0] [--only EXP,...] [--alloc LIST] [--dry-run]

A row (experiment, case) of the pass is flagged when freeway's median over
the lowest median of the other allocators (every name not starting with
'freeway') is above --time-limit on the experiment's primary metric
(summary.csv: time, or what the experiment measures; lower is better, as in
bench/ratio_table.py and the report's 'freeway / best peer' column), or above
--rss-limit on the peak RSS of the runs (results.json). The flagged rows are
run again, experiment by experiment, with

    python3 bench/run.py --only EXP --cases '^(LABEL|...)$' --reps N --out DIR ...

into one directory (default: the pass's directory with '-confirm' appended),
under the allocators the pass ran on those rows (freeway's other modes and
variants left out; --alloc sets them). Then DIR/CONFIRM.md (also printed)
puts each flagged row's ratio in the pass beside its ratio in the re-run.
--only restricts the flagged rows to some experiments; --dry-run prints the
flagged rows and the commands and runs nothing.

Only the flagged rows are re-run: the re-run cannot lower the pass's own
count of rows above a limit, and rows below the limit in the pass are not
looked at again. It separates lasting gaps from one pass's noise among the
flagged rows only.
"""
import argparse
import collections
import csv
import datetime
import json
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.dirname(__file__))
from ratio_table import load  # noqa: E402
from run import md_table  # noqa: E402

# Primary metrics that are no cost to divide: frag32's loop of the first
# failed 8 MiB request (0: none failed). Their rows are only checked for RSS.
NOT_A_COST = {"probe_first_fail"}
KINDS = (("time", "time (each experiment's primary metric)"), ("rss", "peak RSS"))


def rel(path):
    """A path relative to the repository when it is inside it."""
    path = os.path.abspath(path)
    r = os.path.relpath(path, REPO)
    return path if r.startswith("..") else r


def is_peer(name):
    return not name.startswith("freeway") and name != "-"


def vs_best_peer(d):
    """(freeway / lowest peer, that peer) of one row's medians, or None."""
    fw = d.get("freeway")
    peers = [(v, a) for a, v in d.items() if is_peer(a) and v is not None]
    if fw is None or not peers:
        return None
    best, peer = min(peers)
    if best <= 0:
        return None
    return fw / best, peer


def row_ratios(outdir):
    """{"time"/"rss": {(exp, case): (ratio, peer)}} of an output directory."""
    metric, metric_name, rss, _ = load(outdir)
    out = {"time": {}, "rss": {}}
    for key, d in metric.items():
        if metric_name.get(key[0]) in NOT_A_COST:
            continue
        r = vs_best_peer(d)
        if r:
            out["time"][key] = r
    for key, d in rss.items():
        r = vs_best_peer(d)
        if r:
            out["rss"][key] = r
    return out


def fmt(r):
    return "-" if r is None else "%.3fx (%s)" % r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="a bench/run.py output directory (summary.csv, results.json, runs.csv)")
    ap.add_argument("--out", default="", help="where the re-run goes (default: OUTDIR-confirm)")
    ap.add_argument("--reps", type=int, default=11, help="repetitions per point in the re-run (default: 11)")
    ap.add_argument("--time-limit", type=float, default=1.15,
                    help="flag a row when freeway / the best peer on the primary metric is above this (default: 1.15)")
    ap.add_argument("--rss-limit", type=float, default=2.0,
                    help="flag a row when freeway / the lowest peer's peak RSS is above this (default: 2.0)")
    ap.add_argument("--only", default="", help="comma-separated experiments: flag rows of these only")
    ap.add_argument("--alloc", default="",
                    help="comma-separated allocators of the re-run (default: those the pass ran on the flagged "
                         "rows, but freeway's other modes and variants)")
    ap.add_argument("--dry-run", action="store_true", help="print the flagged rows and the commands, run nothing")
    args = ap.parse_args()
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    limits = {"time": args.time_limit, "rss": args.rss_limit}
    pass_dir = args.outdir.rstrip("/") or args.outdir
    out_dir = args.out or pass_dir + "-confirm"
    if os.path.abspath(out_dir) == os.path.abspath(pass_dir):
        ap.error("--out must not be the pass's own directory")

    with open(os.path.join(pass_dir, "results.json")) as f:
        pass_data = json.load(f)
    pass_meta, pass_exps = pass_data.get("meta", {}), pass_data.get("experiments", {})
    pass_order = [a["name"] if isinstance(a, dict) else a for a in pass_data.get("allocators", [])]
    del pass_data
    before = row_ratios(pass_dir)
    only = [x for x in args.only.split(",") if x]
    known = {k[0] for d in before.values() for k in d}
    for x in only:
        if x not in known:
            ap.error("--only: no experiment %r in %s (have: %s)" % (x, pass_dir, ", ".join(sorted(known))))

    # The flagged rows, in the pass's order (its summary.csv, then its records).
    order = {}
    for kind, _ in KINDS:
        for key in before[kind]:
            order.setdefault(key, len(order))
    flagged = {kind: sorted((k for k, (r, _) in before[kind].items()
                             if r > limits[kind] and (not only or k[0] in only)), key=order.get)
               for kind, _ in KINDS}
    rows = sorted({k for v in flagged.values() for k in v}, key=order.get)
    row_set = set(rows)
    by_exp = collections.OrderedDict()
    for exp, case in rows:
        by_exp.setdefault(exp, []).append(case)

    # The allocators of the re-run.
    explicit = [x for x in args.alloc.split(",") if x]
    if explicit and "freeway" not in explicit:
        ap.error("--alloc must name freeway (the ratios are freeway's)")
    ran = collections.defaultdict(set)
    with open(os.path.join(pass_dir, "runs.csv"), newline="") as f:
        for r in csv.DictReader(f):
            if (r["exp"], r["case"]) in row_set:
                ran[r["exp"]].add(r["alloc"])
    wanted = {}
    for exp in by_exp:
        names = pass_order + sorted(ran[exp] - set(pass_order))
        wanted[exp] = explicit or [a for a in names if a in ran[exp] and (a == "freeway" or is_peer(a))]

    commands = []
    for exp, cases in by_exp.items():
        mode = pass_exps.get(exp, {}).get("mode") or pass_meta.get("mode", "quick")
        cmd = ["bench/run.py", "--only", exp, "--cases", "^(%s)$" % "|".join(re.escape(c) for c in cases),
               "--reps", str(args.reps), "--alloc", ",".join(wanted[exp])]
        if mode == "full":
            cmd.append("--full")
        scale = pass_exps.get(exp, {}).get("scale")
        if scale:
            # the pass's own (the labels hold the scaled counts)
            cmd += ["--scale", "%g" % scale]
        cmd += ["--out", rel(out_dir)]
        commands.append((exp, cmd))

    def show(cmd, fresh):
        return "python3 " + " ".join(shlex.quote(a) for a in cmd + (["--no-merge"] if fresh else []))

    print("%s: %d row(s) above %gx on the primary metric, %d above %gx on peak RSS%s; %d row(s) to re-run "
          "in %d experiment(s)" % (rel(pass_dir), len(flagged["time"]), args.time_limit, len(flagged["rss"]),
                                   args.rss_limit, (" (experiments: %s)" % ", ".join(only)) if only else "",
                                   len(rows), len(by_exp)), flush=True)
    if not rows:
        return 0
    if args.dry_run:
        for kind, title in KINDS:
            print("\nflagged on %s (above %gx):" % (title, limits[kind]))
            for exp, case in flagged[kind]:
                print("  %-12s %-40s %s" % (exp, case, fmt(before[kind][(exp, case)])))
            if not flagged[kind]:
                print("  none")
        n = sum(len(by_exp[exp]) * len(wanted[exp]) * (1 if exp == "fastpath" else args.reps) for exp in by_exp)
        print("\ncommands (%d runs in all):" % n)
        for i, (_, cmd) in enumerate(commands):
            print("  " + show(cmd, i == 0))
        return 0

    # One experiment after the other into one directory: the first starts it
    # afresh (--no-merge), the next ones are partial runs, which keep the
    # experiments already there.
    fresh = True
    failed = []
    ran_cmds = []
    for exp, cmd in commands:
        print("confirm: " + show(cmd, fresh), file=sys.stderr, flush=True)
        ran_cmds.append(show(cmd, fresh))
        rc = subprocess.call([sys.executable] + cmd + (["--no-merge"] if fresh else []), cwd=REPO)
        if rc != 0:
            failed.append((exp, rc))
        else:
            fresh = False
    if fresh:
        print("confirm: every run.py command failed; nothing to compare", file=sys.stderr)
        return 1

    after = row_ratios(out_dir)
    with open(os.path.join(out_dir, "results.json")) as f:
        out_meta = json.load(f).get("meta", {})
    cmdline = ["bench/confirm.py", rel(pass_dir), "--out", rel(out_dir), "--reps", str(args.reps),
               "--time-limit", "%g" % args.time_limit, "--rss-limit", "%g" % args.rss_limit]
    if only:
        cmdline += ["--only", ",".join(only)]
    if explicit:
        cmdline += ["--alloc", ",".join(explicit)]
    # When and at which commit the pass ran the experiments re-run.
    pass_runs = collections.OrderedDict()
    for exp in by_exp:
        em = pass_exps.get(exp, {})
        pass_runs.setdefault((em.get("date", "?"), (em.get("freeway_commit") or "?")[:10]), []).append(exp)
    later = [exp for exp in by_exp if pass_exps.get(exp, {}).get("partial_reruns")]
    md = ["# Re-run of the rows of %s where freeway looks behind" % rel(pass_dir), "",
          "Command: `python3 %s`, %s." % (" ".join(shlex.quote(a) for a in cmdline),
                                          datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
          "",
          "The pass ran these experiments on %s%s. The re-run: %d repetition(s) per point, interleaved across "
          "the allocators as in any pass, freeway commit %s%s; its own results are in this directory "
          "(RESULTS.md)." % (
              "; ".join("%s at freeway commit %s (%s)" % (d, c, ", ".join(e)) for (d, c), e in pass_runs.items()),
              " (some of their rows or columns re-run later: %s; see the pass's RESULTS.md)" % ", ".join(later)
              if later else "", args.reps, (out_meta.get("freeway_commit") or "?")[:10],
              " (working tree not clean)" if out_meta.get("freeway_tree_dirty") else ""), "",
          "A row is flagged when, in the pass, freeway's median over the lowest median of the other allocators "
          "(names not starting with 'freeway') is above %gx on the experiment's primary metric (lower is better) "
          "or above %gx on peak RSS. Each cell: that ratio, and the other allocator with the lowest median."
          % (args.time_limit, args.rss_limit), "",
          "Only the flagged rows were re-run, so the re-run cannot lower the pass's own count of rows above a "
          "limit; and the rows below the limit in the pass were not re-run, so noise that hid a gap there is not "
          "looked for. The re-run separates lasting gaps from one pass's noise among the flagged rows only.", ""]
    if failed:
        md += ["Failed: %s (bench/run.py's exit status); their rows have no result in the re-run." % ", ".join(
            "%s (%d)" % f for f in failed), ""]
    counts = []
    for kind, title in KINDS:
        table = []
        still = missing = 0
        for key in flagged[kind]:
            r = after[kind].get(key)
            if r is None:
                verdict = "no result in the re-run"
                missing += 1
            elif r[0] > limits[kind]:
                verdict = "still above"
                still += 1
            else:
                verdict = "not above in the re-run"
            table.append([key[0], key[1], fmt(before[kind][key]), fmt(r), verdict])
        md += ["## %s%s: above %gx in the pass" % (title[0].upper(), title[1:], limits[kind]), ""]
        md += (md_table(["experiment", "case", "pass: freeway / best peer", "re-run: freeway / best peer",
                         "verdict"], table).split("\n") if table else ["None."]) + [""]
        counts.append("- %s%s: %d row(s) above %gx in the pass, of which %d still above in the re-run%s." % (
            title[0].upper(), title[1:], len(flagged[kind]), limits[kind], still,
            (" (%d without a result in the re-run)" % missing) if missing else ""))
    md += ["## Counts", ""] + counts + [""]
    md += ["## The re-run's commands", ""] + ["    " + c for c in ran_cmds] + [""]
    text = "\n".join(md)
    with open(os.path.join(out_dir, "CONFIRM.md"), "w") as f:
        f.write(text)
    print(text)
    print("written: %s" % rel(os.path.join(out_dir, "CONFIRM.md")), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
