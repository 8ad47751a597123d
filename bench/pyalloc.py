"""A real program under LD_PRELOAD: the Python interpreter building and
dropping millions of objects.

Each round builds a list of records (a dict with a string, a tuple, a list
and a float each), an index dict over them and a joined text, then drops
everything. The interpreter's own small-object allocator can be bypassed with
PYTHONMALLOC=malloc (set by the runner for the "malloc" variant) so that
every object goes through the allocator under test.

    python3 bench/pyalloc.py --records 200000 --rounds 5

Prints one JSON line: time, peak RSS, objects built.
"""
import argparse
import json
import os
import resource
import time


def build(n, seed):
    records = []
    for i in range(n):
        key = "k%08d-%d" % (i, seed)
        records.append({
            "key": key,
            "pair": (i, i * 2),
            "vals": [i, i + 1, i + 2],
            "score": i / 7.0,
        })
    index = {r["key"]: r for r in records}
    text = ",".join(r["key"] for r in records[::16])
    return records, index, text


def peak_rss_kb():
    """VmHWM: the peak RSS of this address space (ru_maxrss would also keep
    the high-water mark of the process before its exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    start = time.perf_counter()
    cpu0 = os.times()
    checksum = 0
    for r in range(args.rounds):
        records, index, text = build(args.records, r)
        checksum += len(index) + len(text) + records[-1]["pair"][1]
        del records, index, text
    wall = (time.perf_counter() - start) * 1e3
    cpu1 = os.times()
    user = (cpu1.user - cpu0.user) * 1e3
    system = (cpu1.system - cpu0.system) * 1e3
    ncpus = len(os.sched_getaffinity(0))
    print(json.dumps({
        "bench": "pyalloc",
        "records": args.records,
        "rounds": args.rounds,
        "objects": args.records * args.rounds * 7,
        "pymalloc": os.environ.get("PYTHONMALLOC", "default"),
        "checksum": checksum,
        "wall_ms": wall,
        "user_ms": user,
        "sys_ms": system,
        "cpu_util": (user + system) / (wall * ncpus) if wall > 0 else 0,
        "ncpus": ncpus,
        "peak_rss_kb": peak_rss_kb(),
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }))


if __name__ == "__main__":
    main()
