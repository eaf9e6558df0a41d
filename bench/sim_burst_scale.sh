#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 50's study "tail_latency's burst absorption at 100 and 1 000
# servers": sroute-sim scenarios made from bench/sim/studies/
# burst_scale.textproto.in (a flow and its rule per server, generated here),
# each run without and with the tail_latency app, one at a time, niced:
#
#   rack100   100 servers on a 25 Gb/s rack, 20 hosts (5 flows each)
#   clos1000  1 000 servers on SNIS's Clos doubled (8 pods x 2 leaves x 4
#             ToRs x 64; 10 Gb/s down, 40 Gb/s up), 100 hosts (10 each)
#
# Every flow issues QUIET IOs a second (25); 1 % or 5 % of them (b1, b5),
# spread evenly over servers and hosts, burst FACTOR times (20) for
# BURST_S seconds (10) from BURST_AT (5 s), all at once, or (b5s, rack
# only) one after another, STAGGER seconds (1) apart. The run lasts
# DURATION seconds (40: the bursts, the app's reclaims, and their end).
# APP is the app's line (the x20 bench's arguments but rate=16M);
# rack100_b5_spread8 is b5 with spread=8.
#
# Per configuration the table gives the bursting flows' read and write p99
# with and without the app, the other flows' (those homed on the servers
# that took off-loaded writes, "absorbers", and the rest), the app's
# decisions (off-loads of bursting flows and of others, reclaims begun and
# ended), the iteration's passes and whether the apps' changes settled, and
# the run's own wall time and peak memory (the report's, and /usr/bin/time's
# for the whole process).
#   -> OUT/burst_scale.{txt,tsv}, OUT/burst_scale_timeline.{tsv,png},
#      OUT/raw/CONFIG.json (each --json report, the curves kept only for
#      the bursting and absorbing flows; the study's own facts as "study").
# About 510 s on two shared cores: the clos1000 runs with the app take 194
# and 254 s (20 passes each), those without 16-19 s, the rack's 1-10 s.
#
#   bench/sim_burst_scale.sh [OUT]   (OUT: bench/results/sim/studies/burst_scale)
#   CONFIGS="rack100_b1_none rack100_b1_app ..." SIM=/path/to/sroute-sim
#   COMMIT=... (what the binary was built from, when HEAD moved since) ...
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/sim/studies/burst_scale}
all="rack100_b1_none rack100_b1_app rack100_b5_none rack100_b5_app
rack100_b5s_none rack100_b5s_app rack100_b5_spread8
clos1000_b1_none clos1000_b5_none clos1000_b1_app clos1000_b5_app"
configs=${CONFIGS:-$all}
duration=${DURATION:-40}
quiet=${QUIET:-25}
factor=${FACTOR:-20}
burst_at=${BURST_AT:-5}
burst_s=${BURST_S:-10}
stagger=${STAGGER:-1}
app=${APP:-tail_latency:alpha=3,end=1.5,window=20,min_ops=50,hold=5,cooldown=30,rate=16M,queue=32,spread=2}
bin=${SIM:-build/sim/sroute-sim}
tmpl=bench/sim/studies/burst_scale.textproto.in
[ -x "$bin" ] || { echo "build first: scripts/build.sh build ($bin)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time" >&2; exit 1; }
if ! command -v gnuplot >/dev/null; then
  apt-get install -y -qq gnuplot-nox >/dev/null
fi
mkdir -p "$out/raw"
work=$(mktemp -d /tmp/sroute-sim-burst-scale-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$bin" "$work/sroute-sim"
sim=$work/sroute-sim

commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
dirty=0
while read -r f; do
  if [ -e "$f" ] && [ "$f" -ot "$bin" ]; then dirty=$((dirty + 1)); fi
done < <(git status --porcelain -- sim proto stages controller rules 2>/dev/null | cut -c4-)
if [ "$dirty" -gt 0 ]; then
  commit="$commit (+ $dirty uncommitted files in sim/ proto/ stages/ controller/ rules/ older than the binary)"
fi
binary="$(sha256sum "$bin" | cut -c1-12), built $(date -r "$bin" '+%F %T')"

# gen CONFIG: writes $work/CONFIG.textproto and $work/CONFIG.meta.json.
gen() {
  python3 - "$1" "$tmpl" "$work" "$duration" "$quiet" "$factor" \
    "$burst_at" "$burst_s" "$stagger" "$app" <<'PY'
import json, re, sys
config, tmpl, work = sys.argv[1:4]
duration, quiet, factor, at, dur, stagger = map(float, sys.argv[4:10])
app = sys.argv[10]
topo, burst, mode = config.split('_')[:3]
if topo == 'rack100':
    servers, hosts = 100, 20
    network = 'rack { link_gbps: 25 link_latency_us: 2 }'
elif topo == 'clos1000':
    servers, hosts = 1000, 100
    network = ('clos { pods: 8 leaves_per_pod: 2 tors_per_pod: 4 '
               'machines_per_tor: 64 down_gbps: 10 up_gbps: 40 '
               'link_latency_us: 1 }')
else:
    sys.exit(f'{config}: no topology {topo} (rack100, clos1000)')
m = re.fullmatch(r'b(\d+)(s?)', burst)
if not m:
    sys.exit(f'{config}: {burst} is not bN or bNs')
pct, staggered = int(m.group(1)), m.group(2) == 's'
if mode.startswith('spread'):
    app = re.sub(r'spread=\d+', 'spread=' + mode[6:], app)
    mode = 'app'
if mode not in ('app', 'none'):
    sys.exit(f'{config}: {mode} is not app, none or spreadN')
nburst = max(1, servers * pct // 100)
step = servers // nburst
per_host = servers // hosts
bursting = {}  # flow -> (start, duration)
for i in range(nburst):
    k = i * step + step // 2
    bursting[k] = (at + (i * stagger if staggered else 0), dur)
num = lambda x: '%g' % x
rules, flows = [], []
for k in range(servers):
    rules.append(f'rules: "<*, *, //home/f{k}> -> <IO, //S{k}/vol/f{k}>"')
    b = ''
    if k in bursting:
        s, d = bursting[k]
        b = (f' bursts {{ start_s: {num(s)} duration_s: {num(d)} '
             f'factor: {num(factor)} }}')
    flows.append(f'flows {{ name: "f{k}" hosts: "H{k // per_host}" '
                 f'file: "//home/f{k}" open_loop_iops: {num(quiet)} '
                 f'read_percent: 40 file_bytes: 16777216{b} }}')
text = open(tmpl).read()
fill = dict(NAME=config, DURATION_S=num(duration), NETWORK=network,
            SERVERS=servers, HOSTS=hosts,
            APPS=f'apps: "{app}"' if mode == 'app' else '',
            RULES='\n'.join(rules), FLOWS='\n'.join(flows))
for key, v in fill.items():
    text = text.replace(f'@{key}@', str(v))
left = re.findall(r'@[A-Z_]+@', text)
if left:
    sys.exit(f'{config}: placeholders left: {left}')
open(f'{work}/{config}.textproto', 'w').write(text)
json.dump(dict(config=config, topology=topo, servers=servers, hosts=hosts,
               network=network, burst_percent=pct, staggered=staggered,
               app=app if mode == 'app' else '', quiet_iops=quiet,
               factor=factor, duration_s=duration,
               bursting={f'f{k}': v for k, v in bursting.items()}),
          open(f'{work}/{config}.meta.json', 'w'))
PY
}

start=$(date +%s.%N)
for c in $configs; do
  gen "$c"
  t0=$(date +%s.%N)
  /usr/bin/time -f '%e %M' -o "$work/$c.time" \
    nice -n 10 "$sim" --json "$work/$c.textproto" >"$work/$c.json"
  echo "$c: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s" >&2
done
total=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')

python3 - "$work" "$out" "$commit" "$binary" "$total" $configs <<'PY'
import json, re, statistics, sys
work, out, commit, binary, total = sys.argv[1:6]
configs = sys.argv[6:]
runs = {}
for c in configs:
    d = json.load(open(f'{work}/{c}.json'))
    meta = json.load(open(f'{work}/{c}.meta.json'))
    wall, rss_kb = open(f'{work}/{c}.time').read().split()[-2:]
    meta['process_wall_s'] = float(wall)
    meta['process_peak_rss_bytes'] = int(rss_kb) * 1024
    runs[c] = (d, meta)

HOME = re.compile(r'//home/(f\d+)')
TARGET = re.compile(r'//(S\d+)/\.sroute-tl-')

def decisions(d):
    """Off-loads (flow, at, targets), reclaims begun and ended, by flow."""
    off, begun, ended = [], {}, {}
    for x in d.get('decisions', []):
        at = float(x.get('at_s', 0))
        for rule in x.get('insert', []):
            if 'track_writes(home)' in rule:
                begun.setdefault(HOME.search(rule).group(1), at)
            elif 'track_writes(' in rule:
                off.append((HOME.search(rule).group(1), at,
                            TARGET.findall(rule)))
        if x.get('reclaiming'):
            begun.setdefault(HOME.search(x['reclaiming']).group(1), at)
        if x.get('reclaimed'):
            ended[HOME.search(x['reclaimed']).group(1)] = at
    return off, begun, ended

def pair(c):
    """The run with the app that goes with c (itself when it has one)."""
    if runs[c][1]['app']:
        return c
    a = c.replace('_none', '_app')
    return a if a in runs else None

def absorbers(c):
    """Flows homed on servers that took a bursting flow's writes."""
    a = pair(c)
    if a is None:
        return set()
    d, meta = runs[a]
    off, _, _ = decisions(d)
    ts = set()
    for f, at, targets in off:
        if f in meta['bursting']:
            ts.update(targets)
    return {'f' + t[1:] for t in ts} - set(meta['bursting'])

def p(f, k):
    return float(f.get(k, 0) or 0)

rows = []
timeline = {}
sets = {}
for c in configs:
    d, meta = runs[c]
    flows = {f['name']: f for f in d['flows']}
    burst = [flows[n] for n in meta['bursting']]
    ab = absorbers(c)
    absorb = [flows[n] for n in sorted(ab)]
    rest = [f for n, f in flows.items()
            if n.startswith('f') and n not in meta['bursting'] and n not in ab]
    off, begun, ended = decisions(d)
    burst_off = [(f, at, t) for f, at, t in off if f in meta['bursting']]
    other_off = [(f, at, t) for f, at, t in off if f not in meta['bursting']]
    caught, delays = 0, []
    for n, (s, dur) in meta['bursting'].items():
        ats = [at for f, at, t in burst_off if f == n and s <= at <= s + dur]
        if ats:
            caught += 1
            delays.append(min(ats) - s)
    per_target = {}
    for f, at, t in burst_off:
        for s in t:
            per_target[s] = per_target.get(s, 0) + 1
    offloaded = {f for f, _, _ in off}
    unfinished = sorted(f for f in offloaded if f not in ended)
    # Other off-loads whose server had taken a bursting flow's writes
    # (cascades) or not (the quiet rate's noise, or else).
    cascade = sum(1 for f, at, t in other_off if f in ab)
    its = d.get('iterations', [])
    med = lambda xs: statistics.median(xs) if xs else 0
    r = dict(
        config=c, topology=meta['topology'], servers=meta['servers'],
        hosts=meta['hosts'], bursting=len(burst),
        staggered=int(meta['staggered']), app=meta['app'],
        requests=int(d.get('requests', 0)),
        burst_read_p99_med=med([p(f, 'read_p99_us') for f in burst]),
        burst_write_p99_med=med([p(f, 'write_p99_us') for f in burst]),
        burst_write_p99_max=max([p(f, 'write_p99_us') for f in burst]),
        absorbers=len(absorb),
        absorb_read_p99_max=max([p(f, 'read_p99_us') for f in absorb],
                                default=0),
        absorb_write_p99_max=max([p(f, 'write_p99_us') for f in absorb],
                                 default=0),
        rest_read_p99_med=med([p(f, 'read_p99_us') for f in rest]),
        rest_write_p99_med=med([p(f, 'write_p99_us') for f in rest]),
        rest_write_p99_max=max([p(f, 'write_p99_us') for f in rest]),
        rest_write_p99_max_flow=max(rest, key=lambda f: p(f, 'write_p99_us'))[
            'name'],
        offloads=len(off), burst_offloads=len(burst_off),
        other_offloads=len(other_off), cascade_offloads=cascade,
        bursts_caught=caught,
        first_offload_delay_s=max(delays) if delays else -1,
        targets=len(per_target),
        max_bursts_per_target=max(per_target.values(), default=0),
        reclaims_begun=len(begun), reclaims_ended=len(ended),
        unfinished=len(unfinished), unfinished_list=','.join(unfinished),
        decisions=len(d.get('decisions', [])),
        passes=len(its), converged=int(bool(d.get('converged', False))),
        settled=int(bool(its and its[-1].get('decisions_settled', False))),
        stopped=d.get('stopped', ''),
        wall_s=float(d.get('wall_s', 0)),
        peak_rss_mib=int(d.get('peak_rss_bytes', 0)) / 2**20,
        process_wall_s=meta['process_wall_s'],
        process_rss_mib=meta['process_peak_rss_bytes'] / 2**20,
        reclaim_flow_ios=int(flows.get('(reclaim)', {}).get('reads', 0)) +
        int(flows.get('(reclaim)', {}).get('writes', 0)))
    rows.append(r)
    sets[c] = (list(meta['bursting']), sorted(ab),
               [f['name'] for f in rest])
    # The timeline: per interval, the worst p99 (of the IOs, reads and
    # writes, that ended in it) of the bursting flows and of the absorbers'.
    step = float(d.get('interval_s', 0))
    def worst(fs):
        by = {}
        for f in fs:
            for i in f.get('intervals', []):
                t = round(float(i.get('from_s', 0)), 6)
                by[t] = max(by.get(t, 0), float(i.get('p99_us', 0) or 0))
        return by
    timeline[c] = (step, worst(burst), worst(absorb))
    # The raw report, curves kept only where they are used.
    keep = set(meta['bursting']) | ab | {'(reclaim)'}
    for f in d['flows']:
        if f['name'] not in keep:
            for k in ('read_cdf', 'write_cdf', 'intervals'):
                f.pop(k, None)
    d['study'] = meta
    json.dump(d, open(f'{out}/raw/{c}.json', 'w'), separators=(',', ':'))

# With the app against without it, over the same flows (the absorbers are
# those of the run with the app).
for r in rows:
    c = r['config']
    if not runs[c][1]['app']:
        continue
    base = c.replace('_app', '_none').replace('_spread8', '_none')
    if base not in runs:
        continue
    mine = {f['name']: f for f in runs[c][0]['flows']}
    theirs = {f['name']: f for f in runs[base][0]['flows']}
    burst, ab, rest = sets[c]
    med = lambda xs: statistics.median(xs) if xs else 0
    def ratio(names, k, agg):
        a = agg([p(mine[n], k) for n in names])
        b = agg([p(theirs[n], k) for n in names])
        return a / b if b else 0
    r['burst_read_p99_med_vs_none'] = ratio(burst, 'read_p99_us', med)
    r['burst_write_p99_med_vs_none'] = ratio(burst, 'write_p99_us', med)
    r['absorb_write_p99_max_vs_none'] = ratio(ab, 'write_p99_us', max) if ab else 0
    r['rest_write_p99_med_vs_none'] = ratio(rest, 'write_p99_us', med)
for r in rows:
    for k in ('burst_read_p99_med_vs_none', 'burst_write_p99_med_vs_none',
              'absorb_write_p99_max_vs_none', 'rest_write_p99_med_vs_none'):
        r.setdefault(k, 0)

cols = list(rows[0].keys())
with open(f'{out}/burst_scale.tsv', 'w') as f:
    f.write('\t'.join(cols) + '\n')
    for r in rows:
        f.write('\t'.join(v if isinstance(v, str) else '%.6g' % v
                          for v in r.values()) + '\n')

with open(f'{out}/burst_scale_timeline.tsv', 'w') as f:
    f.write('config\tfrom_s\tburst_p99_us\tabsorb_p99_us\n')
    for c, (step, b, a) in timeline.items():
        for t in sorted(set(b) | set(a)):
            f.write('%s\t%g\t%g\t%g\n' % (c, t, b.get(t, 0), a.get(t, 0)))
        f.write('\n\n')

ms = lambda us: '%.1f' % (us / 1000) if us < 1e6 else '%.2fs' % (us / 1e6)
L = []
L.append("tail_latency's burst absorption at 100 and 1 000 servers, "
         'bench/sim_burst_scale.sh')
L.append(f'commit {commit}; sroute-sim {binary}')
m0 = runs[configs[0]][1]
L.append(f"flows: {m0['quiet_iops']:g} IOs/s each (4 KiB, 40 % reads), one"
         f" per server; bursts x{m0['factor']:g}; {m0['duration_s']:g} s"
         ' simulated; slow flash (x20 bench words), 1 device a server')
apps = sorted({runs[c][1]['app'] for c in configs if runs[c][1]['app']})
for a in apps:
    L.append(f'app: {a}')
L.append(f'study wall time {total} s (one sroute-sim at a time, nice 10,'
         ' on 2 shared cores)')
L.append('')
L.append('Latencies in ms (or s). BURST: the bursting flows, median of their'
         ' p99s (and the worst write p99); ABSORB: the flows homed on the'
         ' servers that took bursting writes, worst p99; REST: the other'
         ' flows, median p99 (worst write p99). x = with the app / without.')
h = ('%-20s %3s %9s %9s %9s %6s | %3s %8s %9s %6s | %7s %7s %8s %6s' %
     ('CONFIG', 'N', 'B_RD_P99', 'B_WR_P99', 'B_WR_MAX', 'x_WR',
      'AB', 'AB_RD', 'AB_WR', 'x_AB', 'RST_RD', 'RST_WR', 'RST_WMAX',
      'x_RST'))
L.append(h)
for r in rows:
    L.append('%-20s %3d %9s %9s %9s %6s | %3d %8s %9s %6s | %7s %7s %8s %6s' % (
        r['config'], r['bursting'], ms(r['burst_read_p99_med']),
        ms(r['burst_write_p99_med']), ms(r['burst_write_p99_max']),
        '%.3g' % r['burst_write_p99_med_vs_none'] if r['app'] else '-',
        r['absorbers'], ms(r['absorb_read_p99_max']),
        ms(r['absorb_write_p99_max']),
        '%.3g' % r['absorb_write_p99_max_vs_none'] if r['app'] else '-',
        ms(r['rest_read_p99_med']), ms(r['rest_write_p99_med']),
        ms(r['rest_write_p99_max']),
        '%.3g' % r['rest_write_p99_med_vs_none'] if r['app'] else '-'))
L.append('')
L.append('Decisions (the last pass\'s), the iteration and the run\'s cost:')
L.append('%-20s %7s %6s %5s %6s %7s %7s %6s %6s %7s %7s %8s %8s %8s' %
         ('CONFIG', 'CAUGHT', 'DELAY', 'OFFL', 'OTHER', 'TARGETS', 'PER_TGT',
          'RCL_BEG', 'RCL_END', 'PASSES', 'SETTLED', 'WALL_S', 'RSS_MIB',
          'PROC_S'))
for r in rows:
    if not r['app']:
        L.append('%-20s %7s %6s %5s %6s %7s %7s %6s %6s %7d %7s %8.1f %8.0f %8.1f' % (
            r['config'], '-', '-', '-', '-', '-', '-', '-', '-', r['passes'],
            '-', r['wall_s'], r['peak_rss_mib'], r['process_wall_s']))
        continue
    L.append('%-20s %7s %6.1f %5d %6s %7d %7d %6d %6d %7d %7s %8.1f %8.0f %8.1f' % (
        r['config'], '%d/%d' % (r['bursts_caught'], r['bursting']),
        r['first_offload_delay_s'], r['burst_offloads'],
        '%d(%d)' % (r['other_offloads'], r['cascade_offloads']),
        r['targets'], r['max_bursts_per_target'], r['reclaims_begun'],
        r['reclaims_ended'], r['passes'], 'yes' if r['settled'] else 'NO',
        r['wall_s'], r['peak_rss_mib'], r['process_wall_s']))
L.append('CAUGHT: bursts off-loaded while they lasted; DELAY: the latest'
         ' first off-load after its burst began (s); OFFL: off-loads of'
         ' bursting flows; OTHER: of other flows (of them, flows on servers'
         ' that took bursting writes); TARGETS: servers that took bursting'
         ' writes; PER_TGT: the most bursting flows one of them took;'
         ' RCL_BEG/END: reclaims begun / ended in the run; SETTLED: the last'
         " pass's replay made exactly the changes it was routed by; WALL_S,"
         " RSS_MIB: the report's; PROC_S: the process's wall time")
L.append('')
L.append('Per run: why the iteration stopped; off-loads never reclaimed:')
for r in rows:
    L.append('%-20s %s%s' % (r['config'], r['stopped'],
                             ('; not reclaimed: ' + r['unfinished_list'])
                             if r['unfinished_list'] else ''))
open(f'{out}/burst_scale.txt', 'w').write('\n'.join(L) + '\n')
print('\n'.join(L))
PY

# One panel a configuration run with the app: per interval, the worst p99
# (reads and writes) of the bursting flows with and without it, and of the
# flows homed on the servers that took their writes; up to 1.5 x the run
# (the queues of some runs drain for minutes after it).
python3 - "$out" "$duration" $configs >"$work/plot.gp" <<'PY'
import sys
out, duration, configs = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
index = {c: i for i, c in enumerate(configs)}
panels = [c for c in configs if '_none' not in c]
cols = 3 if len(panels) > 4 else 2
rows = (len(panels) + cols - 1) // cols
print(f"set terminal pngcairo size {cols * 520},{rows * 380} noenhanced")
print(f"set output '{out}/burst_scale_timeline.png'")
print("set datafile separator tab")
print("set logscale y")
print("set format y '%g'")
print("set grid")
print(f"set xrange [0:{duration * 1.5:g}]")
print("set key top right font ',8'")
print("set xlabel 'simulated time (s)'")
print("set ylabel 'p99 of the IOs ending in the interval (ms)'")
print(f"set multiplot layout {rows},{cols} title \"sroute-sim: tail_latency,"
      " bursts of 20x onto slow flash, worst flow's IO p99 per interval"
      f" (to {duration * 1.5:g} s; the IOs that end later are not shown)\"")
f = f"'{out}/burst_scale_timeline.tsv'"
for c in panels:
    base = c.replace('_app', '_none').replace('_spread8', '_none')
    print(f"set title '{c}'")
    parts = [f"{f} index {index[c]} using 2:($3 > 0 ? $3 / 1000 : 1/0) "
             "with lines lw 2 title 'bursting flows, app'"]
    if base in index:
        parts.append(f"{f} index {index[base]} using 2:($3 > 0 ? $3 / 1000"
                     " : 1/0) with lines lw 2 dt 2 title 'bursting flows,"
                     " no app'")
    parts.append(f"{f} index {index[c]} using 2:($4 > 0 ? $4 / 1000 : 1/0) "
                 "with lines lw 2 title 'flows homed on the absorbing servers, app'")
    print('plot ' + ', \\\n     '.join(parts))
print("unset multiplot")
PY
gnuplot "$work/plot.gp"
echo "burst_scale: $out/burst_scale.txt $out/burst_scale_timeline.png" >&2
