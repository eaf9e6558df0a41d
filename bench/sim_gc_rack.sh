#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GC coordination at rack scale (issue 50's study, RackBlox: the paper in
# /work/shared/papers): does sending reads away from a replica whose device
# collects garbage (replica_sets { gc: "redirect" }) cut the read tail, and
# by how much, as more of the rack's devices collect at once?
#
# The rack (bench/sim/studies/gc_rack.textproto.in): 48 servers of 2 healthy
# devices (96 devices) on 25 Gb/s links, in replica sets of 2 (24 sets) or 3
# (16 sets) consecutive servers; 32 hosts, each running an open-loop YCSB
# flow (4 KiB, Zipfian 0.99) on every set's volume, 96 000 IOs a second
# over the rack in all, for 4 simulated seconds (about 380 000 IOs a run).
# The GC spells are generated here and forced by events (each spell 100 to
# 300 ms; whole-device, each die erasing block after block), on a schedule:
#
#  - independent: every device collects on its own (an alternating renewal
#    process: spells U(100, 300) ms, gaps exponential with mean
#    200 ms x (1 - F) / F), so a fraction F of the devices collects on
#    average and all R members of a set at once about F^R of the time;
#  - correlated: a set's devices all collect together (the members get the
#    same writes, so their free space runs out together: RackBlox's reason
#    for delaying GC); redirection has nowhere to go;
#  - staggered: a set's members take turns (member i from phase + i P / R,
#    200 ms every P = 200 ms / F), what RackBlox's GC delay arranges; the
#    simulator has no GC delay, so the schedule stands in for it.
#
# Runs (one sroute-sim at a time, nice -n 10):
#  1. YCSB B, independent spells, F in FRACTIONS, R in SIZES, gc off and
#     redirect, read policy in POLICIES;
#  2. YCSB B, correlated and staggered spells, F in SCHED_FRACTIONS, R in
#     SIZES, gc off and redirect, read random;
#  3. YCSB A and C, independent spells, F in 0 and MIX_FRACTIONS, 2
#     replicas, read random (A at F = 0: the devices' own GC, from their
#     free space, with no forced spell).
# Each run's read latencies are the flows' read_cdf (sroute-sim --json)
# merged by their read counts (a mixture of the flows' distributions); for
# each run the script also computes from the events the mean and peak
# fraction of devices collecting and the share of time all the members'
# devices a read may go to collect at once (averaged over sets and the
# device each member's copy lands on), the exposure redirection cannot
# avoid.
#   -> OUT/gc_rack.{txt,tsv,png}, OUT/raw/*.json (each run's summary: the
#      merged quantiles, per-flow p50/p99, the iteration; the spells are
#      made again from their seeds), OUT/raw/example_*.textproto (two of the
#      scenarios, independent spells at F = 0.25, 2 replicas, read random).
# About 6 minutes on one core.
#
#   bench/sim_gc_rack.sh [OUT]        (OUT: bench/results/sim/studies/gc_rack)
#   PLOT_ONLY=1 bench/sim_gc_rack.sh [OUT]   (redraw OUT/gc_rack.png from the TSV)
#   SIM_BIN=/tmp/copy FRACTIONS="0 0.1" SIZES=2 POLICIES=random \
#     SCHED_FRACTIONS=0.25 MIX_FRACTIONS=0.25 DURATION_S=2 bench/sim_gc_rack.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/sim/studies/gc_rack}
bin=${SIM_BIN:-build/sim/sroute-sim}
tmpl=bench/sim/studies/gc_rack.textproto.in
[ -x "$bin" ] || { echo "build first: scripts/build.sh build ($bin)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "needs gnuplot (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$out/raw"
work=$(mktemp -d /tmp/sroute-sim-gc-rack-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$bin" "$work/sroute-sim"

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=0
while read -r f; do
  if [ -e "$f" ] && [ "$f" -ot "$bin" ]; then dirty=$((dirty + 1)); fi
done < <(git status --porcelain -- sim proto stages 2>/dev/null | cut -c4-)
if [ "$dirty" -gt 0 ]; then
  commit="$commit (+ $dirty uncommitted files in sim/ proto/ stages/ older than the binary)"
fi
binary="$(sha256sum "$bin" | cut -c1-12), built $(date -r "$bin" '+%F %T')"

if [ -z "${PLOT_ONLY:-}" ]; then
FRACTIONS=${FRACTIONS:-0 0.05 0.10 0.25 0.50} \
SIZES=${SIZES:-2 3} \
POLICIES=${POLICIES:-primary random least_loaded} \
SCHED_FRACTIONS=${SCHED_FRACTIONS:-0.10 0.25 0.50} \
MIX_FRACTIONS=${MIX_FRACTIONS:-0.10 0.25} \
DURATION_S=${DURATION_S:-4} \
python3 - "$out" "$work" "$tmpl" "$commit" "$binary" <<'PY'
import bisect, json, os, random, subprocess, sys, time

out, work, tmpl, commit, binary = sys.argv[1:6]
env = lambda k: os.environ[k].split()
FRACTIONS = [float(x) for x in env('FRACTIONS')]
SIZES = [int(x) for x in env('SIZES')]
POLICIES = env('POLICIES')
SCHED_FRACTIONS = [float(x) for x in env('SCHED_FRACTIONS')]
MIX_FRACTIONS = [float(x) for x in env('MIX_FRACTIONS')]
D = float(os.environ['DURATION_S'])
SERVERS, DEVICES, HOSTS, LINK_GBPS, TOTAL_IOPS, SEED = 48, 2, 32, 25, 96000, 1
SPELL = (0.1, 0.3)   # a spell's length, uniform (independent, correlated)
STAGGER_SPELL = 0.2  # a staggered spell's length
SLOW_US = 400        # a read this slow met GC (unloaded: about 140 us)
QS = [0.5, 0.9, 0.99, 0.999]

def renewal(rng, f):
    """Spells of an alternating renewal process with duty cycle f, [0, D)."""
    spells, t = [], -20.0
    mean_gap = (SPELL[0] + SPELL[1]) / 2 * (1 - f) / f
    while t < D:
        t += rng.expovariate(1 / mean_gap)
        n = rng.uniform(*SPELL)
        a, b = max(t, 0.0), min(t + n, D)
        if b > a:
            spells.append((a, b))
        t += n
    return spells

def schedule(kind, f, r):
    """{(server, device): [(from, to)]} for a schedule, F and set size."""
    sp = {(s, d): [] for s in range(SERVERS) for d in range(DEVICES)}
    if f <= 0:
        return sp
    sets = SERVERS // r
    if kind == 'independent':   # the same spells whatever r
        rng = random.Random(f'independent-{f}')
        for key in sorted(sp):
            sp[key] = renewal(rng, f)
    elif kind == 'correlated':
        rng = random.Random(f'correlated-{f}-{r}')
        for k in range(sets):
            spells = renewal(rng, f)
            for m in range(r):
                for d in range(DEVICES):
                    sp[(k * r + m, d)] = list(spells)
    elif kind == 'staggered':
        rng = random.Random(f'staggered-{f}-{r}')
        period = STAGGER_SPELL / f
        for k in range(sets):
            phase = rng.uniform(0, period)
            for m in range(r):
                start = phase + m * period / r - 2 * period
                spells = []
                while start < D:
                    a, b = max(start, 0.0), min(start + STAGGER_SPELL, D)
                    if b > a:
                        spells.append((a, b))
                    start += period
                for d in range(DEVICES):
                    sp[(k * r + m, d)] = list(spells)
    return sp

def exposure(sp, r):
    """Mean and peak fraction of devices collecting; share of time all of
    a set's members collect on the device a read's copy lands on (each
    member's device drawn independently: the mean over the DEVICES^r
    combinations and the sets). On a 1 ms grid."""
    steps = int(round(D * 1000))
    on = {}
    for key, spells in sp.items():
        v = bytearray(steps)
        for a, b in spells:
            for i in range(int(a * 1000), min(steps, int(b * 1000 + 0.999))):
                v[i] = 1
        on[key] = v
    per_step = [sum(on[k][i] for k in on) for i in range(steps)]
    n = len(on)
    mean = sum(per_step) / steps / n
    peak = max(per_step) / n
    sets = SERVERS // r
    total = 0.0
    for k in range(sets):
        members = [k * r + m for m in range(r)]
        # P(all collect) = mean over time of prod_m (share of m's devices on)
        acc = 0.0
        for i in range(steps):
            p = 1.0
            for s in members:
                p *= sum(on[(s, d)][i] for d in range(DEVICES)) / DEVICES
                if p == 0:
                    break
            acc += p
        total += acc / steps
    return mean, peak, total / sets

def scenario(name, r, read, gc, ycsb, kind, f, sp):
    sets = SERVERS // r
    per_host = TOTAL_IOPS / HOSTS / sets
    lines = []
    for k in range(sets):
        members = ' '.join(f'member: "S{k * r + m}"' for m in range(r))
        lines.append(f'replica_sets {{ name: "rs{k}" {members} read: "{read}" '
                     f'gc: "{gc}" }}')
        lines.append(f'rules: "<*, *, //v{k}/*> -> <IO, stage:rs{k}>"')
        lines.append(f'flows {{ name: "v{k}" hosts: "H" file: "//v{k}/db" '
                     f'open_loop_iops: {per_host:.6g} ycsb: "{ycsb}" '
                     f'file_bytes: 1073741824 }}')
    ev = []
    for (s, d), spells in sp.items():
        for a, b in spells:
            ev.append((a, f'events {{ at_s: {a:.6f} gc {{ device: "S{s}/d{d}" '
                          f'duration_s: {b - a:.6f} }} }}'))
    ev.sort()
    subst = dict(NAME=name, SEED=SEED, DURATION_S=f'{D:g}', SERVERS=SERVERS,
                 DEVICES=DEVICES, LINK_GBPS=LINK_GBPS, HOSTS=HOSTS,
                 REPLICAS=r, LAST_MEMBER=r - 1, READ=read, GC=gc, YCSB=ycsb,
                 TOTAL_IOPS=TOTAL_IOPS, SCHEDULE=kind, FRACTION=f'{f:g}',
                 SETS='\n'.join(lines),
                 EVENTS='\n'.join(e for _, e in ev) or '# no forced GC')
    text = open(tmpl).read()
    for k, v in subst.items():
        text = text.replace(f'@{k}@', str(v))
    if '@' in ''.join(l for l in text.splitlines() if not l.startswith('#')):
        sys.exit(f'{name}: placeholders left')
    return text

def merged(flows, kind):
    """Quantiles of the flows' distributions mixed by their counts."""
    curves = []
    for fl in flows:
        n = int(fl.get(kind + 's', 0))
        pts = [(float(q.get('fraction', 0)), float(q.get('us', 0)))
               for q in fl.get(kind + '_cdf', [])]
        if n and pts:
            curves.append((n, pts))
    total = sum(n for n, _ in curves)
    def cdf(x):  # P(latency <= x), each flow's quantiles interpolated
        acc = 0.0
        for n, pts in curves:
            us = [u for _, u in pts]
            i = bisect.bisect_right(us, x)
            if i == 0:
                p = 0.0
            elif i == len(pts):
                p = 1.0
            else:
                (f0, u0), (f1, u1) = pts[i - 1], pts[i]
                p = f0 + (f1 - f0) * (x - u0) / (u1 - u0) if u1 > u0 else f1
            acc += n * p
        return acc / total
    hi = max(u for _, pts in curves for _, u in pts)
    res = {}
    for q in QS:
        lo, up = 0.0, hi
        for _ in range(60):
            mid = (lo + up) / 2
            if cdf(mid) >= q:
                up = mid
            else:
                lo = mid
        res[q] = up
    return res, 1 - cdf(SLOW_US), total

runs = []
for r in SIZES:
    for f in FRACTIONS:
        for read in POLICIES:
            for gc in ('off', 'redirect'):
                runs.append(('B', 'independent' if f > 0 else 'none', f, r,
                             read, gc))
for kind in ('correlated', 'staggered'):
    for r in SIZES:
        for f in SCHED_FRACTIONS:
            for gc in ('off', 'redirect'):
                runs.append(('B', kind, f, r, 'random', gc))
for ycsb in ('A', 'C'):
    for f in [0.0] + MIX_FRACTIONS:
        for gc in ('off', 'redirect'):
            runs.append((ycsb, 'independent' if f > 0 else 'none', f, 2,
                         'random', gc))

start = time.time()
cache, rows = {}, []
for i, (ycsb, kind, f, r, read, gc) in enumerate(runs):
    name = f'gc_rack_{ycsb}_{kind}_{f:g}_r{r}_{read}_{gc}'
    if (kind, f, r) not in cache:
        sp = schedule(kind, f, r)
        cache[(kind, f, r)] = (sp, exposure(sp, r))
    sp, (fmean, fpeak, pall) = cache[(kind, f, r)]
    path = f'{work}/{name}.textproto'
    open(path, 'w').write(scenario(name, r, read, gc, ycsb, kind, f, sp))
    if (ycsb, kind, f, r, read) == ('B', 'independent', 0.25, 2, 'random'):
        open(f'{out}/raw/example_{name}.textproto', 'w').write(open(path).read())
    t0 = time.time()
    p = subprocess.run(['nice', '-n', '10', f'{work}/sroute-sim', '--json',
                        path], capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f'{name}: sroute-sim failed: {p.stderr.strip()}')
    d = json.loads(p.stdout)
    fl = d['flows']
    rq, slow, reads = merged(fl, 'read')
    wq, _, writes = merged(fl, 'write') if any(
        int(x.get('writes', 0)) for x in fl) else ({q: 0 for q in QS}, 0, 0)
    row = dict(ycsb=ycsb, schedule=kind, fraction=f, replicas=r, read=read,
               gc=gc, frac_mean=fmean, frac_peak=fpeak, all_members=pall,
               reads=reads, writes=writes, slow=slow,
               p50=rq[0.5], p90=rq[0.9], p99=rq[0.99], p999=rq[0.999],
               wp99=wq[0.99], errors=sum(int(x.get('errors', 0)) for x in fl),
               passes=len(d.get('iterations', [])),
               converged=bool(d.get('converged', False)),
               stopped=d.get('stopped', ''), requests=int(d['requests']),
               wall=wall, spells=sum(len(v) for v in sp.values()))
    rows.append(row)
    summary = dict(row, scenario=name, commit=commit, binary=binary,
                   read_quantiles_us={str(q): rq[q] for q in QS},
                   flows=[{k: x.get(k) for k in ('name', 'reads', 'writes',
                           'read_p50_us', 'read_p99_us', 'write_p99_us')}
                          for x in fl],
                   iterations=d.get('iterations', []),
                   slowest_devices=d.get('devices', [])[:5])
    json.dump(summary, open(f'{out}/raw/{name}.json', 'w'), indent=0)
    print(f'[{i + 1}/{len(runs)}] {name}: {wall:.1f} s, read p99 '
          f'{rq[0.99]:.0f} us, p99.9 {rq[0.999]:.0f} us', file=sys.stderr)
total = time.time() - start

cols = ['ycsb', 'schedule', 'fraction', 'replicas', 'read', 'gc',
        'frac_mean', 'frac_peak', 'all_members', 'reads', 'writes',
        'read_p50_us', 'read_p90_us', 'read_p99_us', 'read_p999_us',
        'write_p99_us', 'slow_share', 'errors', 'passes', 'converged',
        'requests', 'spells', 'wall_s', 'stopped']
keys = ['ycsb', 'schedule', 'fraction', 'replicas', 'read', 'gc',
        'frac_mean', 'frac_peak', 'all_members', 'reads', 'writes', 'p50',
        'p90', 'p99', 'p999', 'wp99', 'slow', 'errors', 'passes',
        'converged', 'requests', 'spells', 'wall', 'stopped']
with open(f'{out}/gc_rack.tsv', 'w') as fo:
    fo.write('\t'.join(cols) + '\n')
    for row in rows:
        fo.write('\t'.join(
            v if isinstance(v, str) else str(int(v)) if isinstance(v, bool)
            else '%.6g' % v for v in (row[k] for k in keys)) + '\n')

def get(**kw):
    for row in rows:
        if all(row[k] == v for k, v in kw.items()):
            return row
    return None

L = ['GC redirection at rack scale (issue 50, RackBlox), bench/sim_gc_rack.sh',
     f'commit {commit}; sroute-sim {binary}',
     f'{SERVERS} servers x {DEVICES} healthy devices, {LINK_GBPS} Gb/s rack, '
     f'{HOSTS} hosts, {TOTAL_IOPS} IOs/s in all (open loop, 4 KiB, Zipfian '
     f'0.99), {D:g} s a run, seed {SEED};',
     'replica sets of R consecutive servers; forced GC spells of 100-300 ms '
     '(staggered: 200 ms) per device.',
     f'study wall time {total:.0f} s, {len(rows)} runs (one sroute-sim at a '
     'time, nice -n 10)',
     '',
     'F: target fraction of devices collecting; MEAN/PEAK: measured from the '
     'spells; ALL: share of time all members',
     'collect where a read would go (what redirection cannot avoid); '
     f'SLOW: share of reads over {SLOW_US} us;',
     'latencies: reads of all flows merged (us).',
     '']
hdr = ('%-4s %-11s %2s %-12s %-8s %5s %5s %5s %6s %7s %7s %8s %8s %6s %5s' %
       ('YCSB', 'SCHEDULE', 'R', 'READ', 'GC', 'F', 'MEAN', 'PEAK', 'ALL',
        'P50', 'P90', 'P99', 'P99.9', 'SLOW', 'WALL'))
def line(row):
    return ('%-4s %-11s %2d %-12s %-8s %5.2f %5.3f %5.3f %6.4f %7.0f %7.0f '
            '%8.0f %8.0f %6.4f %5.1f' %
            (row['ycsb'], row['schedule'], row['replicas'], row['read'],
             row['gc'], row['fraction'], row['frac_mean'], row['frac_peak'],
             row['all_members'], row['p50'], row['p90'], row['p99'],
             row['p999'], row['slow'], row['wall']))
L += ['1. YCSB B, independent spells, by F, replication and read policy:',
      hdr]
L += [line(row) for row in rows
      if row['ycsb'] == 'B' and row['schedule'] in ('none', 'independent')]
L += ['', '2. YCSB B, read random: spells correlated within a set / staggered '
      '(RackBlox\'s GC delay, as a schedule), with independent beside them:',
      hdr]
for r in SIZES:
    for f in SCHED_FRACTIONS:
        for kind in ('independent', 'correlated', 'staggered'):
            for gc in ('off', 'redirect'):
                row = get(ycsb='B', schedule=kind, fraction=f, replicas=r,
                          read='random', gc=gc)
                if row:
                    L.append(line(row))
L += ['', '3. Other mixes (YCSB A: 50 % updates; C: reads only), 2 replicas, '
      'read random (F = 0: only the devices\' own GC):', hdr]
L += [line(row) for row in rows if row['ycsb'] in ('A', 'C')]
L += ['', 'Redirect over off, read p99 and p99.9 (independent spells, YCSB B):',
      '%2s %-12s %5s %9s %9s %6s %9s %9s %6s' %
      ('R', 'READ', 'F', 'P99_OFF', 'P99_RED', 'X', 'P999_OFF', 'P999_RED',
       'X')]
for r in SIZES:
    for read in POLICIES:
        for f in FRACTIONS:
            a = get(ycsb='B', fraction=f, replicas=r, read=read, gc='off',
                    schedule='independent' if f > 0 else 'none')
            b = get(ycsb='B', fraction=f, replicas=r, read=read, gc='redirect',
                    schedule='independent' if f > 0 else 'none')
            if a and b:
                L.append('%2d %-12s %5.2f %9.0f %9.0f %6.2f %9.0f %9.0f %6.2f' %
                         (r, read, f, a['p99'], b['p99'], a['p99'] / b['p99'],
                          a['p999'], b['p999'], a['p999'] / b['p999']))
bad = [row for row in rows if not row['converged'] or row['errors']]
L += ['', 'Every run converged, no errors.' if not bad else
      'NOT converged or with errors: ' + ', '.join(
          f"{r['ycsb']}/{r['schedule']}/{r['fraction']}/{r['replicas']}/"
          f"{r['read']}/{r['gc']}: {r['stopped']} ({r['errors']} errors)"
          for r in bad)]
open(f'{out}/gc_rack.txt', 'w').write('\n'.join(L) + '\n')
print('\n'.join(L))
PY
fi

# The plot: read p99 and p99.9 against the measured fraction of devices
# collecting, gc off vs redirect (independent spells, YCSB B, read random),
# and the correlated and staggered schedules with redirect.
tsv=$out/gc_rack.tsv
sel() {  # sel YCSB SCHEDULE R READ GC: rows (F=0 under "none" too)
  awk -F'\t' -v y="$1" -v s="$2" -v r="$3" -v p="$4" -v g="$5" \
    'NR > 1 && $1 == y && ($2 == s || $2 == "none") && $4 == r && $5 == p && $6 == g' "$tsv" |
    sort -t$'\t' -k7,7g >"$work/$1_$2_$3_$4_$5.tsv"
  echo "$work/$1_$2_$3_$4_$5.tsv"
}
i2o=$(sel B independent 2 random off); i2r=$(sel B independent 2 random redirect)
i3o=$(sel B independent 3 random off); i3r=$(sel B independent 3 random redirect)
c2r=$(sel B correlated 2 random redirect); s2r=$(sel B staggered 2 random redirect)
c3r=$(sel B correlated 3 random redirect); s3r=$(sel B staggered 3 random redirect)
gnuplot <<GP
set terminal pngcairo size 1300,640 noenhanced
set output '$out/gc_rack.png'
set datafile separator tab
set key below maxrows 4 font ',9'
set logscale y
set grid
set xrange [-0.02:0.55]
set yrange [100:3000]
set xlabel 'fraction of the devices collecting (time mean, from the spells)'
set ylabel 'read latency (us)'
set multiplot layout 1,2 title 'sroute-sim: GC redirection (RackBlox) in a rack of 48 servers x 2 healthy devices, YCSB B, 96k IOs/s, read random; independent spells unless said'
set title 'read p99'
plot '$i2o' using 7:14 with linespoints lw 2 pt 5 lc 1 dt 2 title '2 replicas, gc off', \
     '$i2r' using 7:14 with linespoints lw 2 pt 5 lc 1 title '2 replicas, redirect', \
     '$i3o' using 7:14 with linespoints lw 2 pt 7 lc 2 dt 2 title '3 replicas, gc off', \
     '$i3r' using 7:14 with linespoints lw 2 pt 7 lc 2 title '3 replicas, redirect', \
     '$c2r' using 7:14 with points pt 4 ps 1.5 lc 1 title '2, redirect, correlated', \
     '$s2r' using 7:14 with points pt 9 ps 1.5 lc 1 title '2, redirect, staggered', \
     '$c3r' using 7:14 with points pt 6 ps 1.5 lc 2 title '3, redirect, correlated', \
     '$s3r' using 7:14 with points pt 11 ps 1.5 lc 2 title '3, redirect, staggered'
set title 'read p99.9'
plot '$i2o' using 7:15 with linespoints lw 2 pt 5 lc 1 dt 2 title '2 replicas, gc off', \
     '$i2r' using 7:15 with linespoints lw 2 pt 5 lc 1 title '2 replicas, redirect', \
     '$i3o' using 7:15 with linespoints lw 2 pt 7 lc 2 dt 2 title '3 replicas, gc off', \
     '$i3r' using 7:15 with linespoints lw 2 pt 7 lc 2 title '3 replicas, redirect', \
     '$c2r' using 7:15 with points pt 4 ps 1.5 lc 1 title '2, redirect, correlated', \
     '$s2r' using 7:15 with points pt 9 ps 1.5 lc 1 title '2, redirect, staggered', \
     '$c3r' using 7:15 with points pt 6 ps 1.5 lc 2 title '3, redirect, correlated', \
     '$s3r' using 7:15 with points pt 11 ps 1.5 lc 2 title '3, redirect, staggered'
unset multiplot
GP
echo "gc_rack: $out/gc_rack.txt $out/gc_rack.tsv $out/gc_rack.png" >&2
