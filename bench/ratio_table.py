#!/usr/bin/env python3
"""Every workload x allocator as a ratio to one reference allocator (by
default the newest mimalloc), from a bench/run.py output directory: the
experiment's primary metric (summary.csv medians: time, or what the
experiment measures) and the peak RSS of each run (results.json medians).
A workload's cell is the geometric mean over its rows of allocator / ref;
the last line is the geometric mean over every row.

    python3 bench/ratio_table.py bench/results/quick [--ref mimalloc3] [--rows]

--rows prints one line per case instead of one per experiment. Below 1: the
allocator takes less time (or memory) than the reference.
"""
import argparse
import collections
import csv
import json
import math
import os
import statistics


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def load(outdir):
    metric = collections.defaultdict(dict)    # (exp, case) -> alloc -> median of the primary metric
    metric_name = {}
    with open(os.path.join(outdir, "summary.csv")) as f:
        for r in csv.DictReader(f):
            if r["median"]:
                metric[(r["exp"], r["case"])][r["alloc"]] = float(r["median"])
                metric_name[r["exp"]] = r["metric"]
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    with open(os.path.join(outdir, "results.json")) as f:
        data = json.load(f)
    order = [a["name"] if isinstance(a, dict) else a for a in data.get("allocators", [])]
    for r in data["records"]:
        if not r.get("ok"):
            continue
        v = r["data"].get("peak_rss_kb") or r.get("run_maxrss_kb")
        if v:
            runs[(r["exp"], r["case"])][r["alloc"]].append(v)
    rss = {k: {a: statistics.median(v) for a, v in d.items()} for k, d in runs.items()}
    return metric, metric_name, rss, order


def table(values, ref, allocs, by_row, title):
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    every = collections.defaultdict(list)
    for (exp, case), d in sorted(values.items()):
        if ref not in d or not d[ref]:
            continue
        key = "%s: %s" % (exp, case) if by_row else exp
        for a in allocs:
            if a in d and d[a] > 0:
                x = d[a] / d[ref]
                groups[key][a].append(x)
                every[a].append(x)
    lines = ["### %s, as a ratio to %s" % (title, ref), "",
             "| %s | %s |" % ("case" if by_row else "workload (rows)", " | ".join(allocs)),
             "|---|%s" % ("---|" * len(allocs))]
    for key, d in groups.items():
        n = max(len(v) for v in d.values())
        cells = ["%.2f" % gmean(d[a]) if d.get(a) else "-" for a in allocs]
        lines.append("| %s | %s |" % (key if by_row else "%s (%d)" % (key, n), " | ".join(cells)))
    cells = ["**%.3f**" % gmean(every[a]) if every.get(a) else "-" for a in allocs]
    lines.append("| **all rows** | %s |" % " | ".join(cells))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", help="a bench/run.py output directory (summary.csv and results.json)")
    ap.add_argument("--ref", default="mimalloc3", help="the reference allocator (default: mimalloc3)")
    ap.add_argument("--rows", action="store_true", help="one line per case rather than per experiment")
    args = ap.parse_args()
    metric, metric_name, rss, order = load(args.outdir)
    seen = {a for d in metric.values() for a in d} | {a for d in rss.values() for a in d}
    # the allocators the run names (summary.csv also holds rows of no
    # allocator, such as fastpath's bare loop)
    allocs = [a for a in order if a in seen]
    allocs = [a for a in allocs if a != args.ref]
    if not any(args.ref in d for d in metric.values()):
        raise SystemExit("%s: no run of %s" % (args.outdir, args.ref))
    out = table(metric, args.ref, allocs, args.rows,
                "Each experiment's primary metric (%s)" % ", ".join(sorted(set(metric_name.values()))))
    out += [""] + table(rss, args.ref, allocs, args.rows, "Peak RSS")
    print("\n".join(out))


if __name__ == "__main__":
    main()
