# geometric mean of B / A per case (wall median and CPU median) from a run.py results.json
import json, collections, math, statistics, sys
d = json.load(open(sys.argv[1])); A, B = sys.argv[2], sys.argv[3]
wall = collections.defaultdict(lambda: collections.defaultdict(list))
cpu = collections.defaultdict(lambda: collections.defaultdict(list))
rss = collections.defaultdict(lambda: collections.defaultdict(list))
for r in d['records']:
    if not r.get('ok'): continue
    k = (r['exp'], r['case'])
    dd = r['data']
    m = dd.get('wall_ms') or dd.get('loop_ms') or dd.get('free_ms')
    if m: wall[k][r['alloc']].append(m)
    c = (r.get('run_user_ms') or 0) + (r.get('run_sys_ms') or 0)
    if c: cpu[k][r['alloc']].append(c)
    if dd.get('peak_rss_kb'): rss[k][r['alloc']].append(dd['peak_rss_kb'])
def gm(t, label):
    rs = []; per = collections.defaultdict(list)
    for k, v in t.items():
        if A in v and B in v:
            x = statistics.median(v[B]) / statistics.median(v[A]); rs.append(x); per[k[0]].append(x)
    g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
    print("%s: %s / %s geometric mean over %d cases: %.3f (min %.2f, max %.2f)" % (label, B, A, len(rs), g(rs), min(rs), max(rs)))
    return per, g
per, g = gm(wall, "time (the program's timed part)")
gm(cpu, "CPU time (user+sys of the process)")
gm(rss, "peak RSS")
print("| experiment | cases | %s / %s (time) |" % (B, A)); print("|---|---|---|")
for e, xs in sorted(per.items()): print("| %s | %d | %.3f |" % (e, len(xs), g(xs)))
