#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Writes bench/gc_ycsb's mix A as sroute-sim scenarios, one per set-up
# (A_a.textproto .. A_d.textproto beside this script), to set the
# simulation beside the real run (bench/RESULTS.md, "Simulation vs a real
# run: GC coordination"). Run it again after changing it; the scenarios
# are committed.
import os

HEAD = '''# bench/gc_ycsb's mix A (workload=A seconds=20 threads=16 dilation=10
# rate=4000: 2 s of model time) as a sroute-sim scenario, set-up {setup},
# to set the simulation beside the real run (bench/results/sim/gc_ycsb/).
# Made by bench/sim/gc_ycsb/make.py; do not edit by hand.
# Two vSSDs (V0, V1: the bench's V1, V2) of the rackblox timing on 8 dies
# of 32 blocks of 64 pages and a 1024-page buffer, each warmed with a
# history of its own: 60 % of its logical pages hold data, as many again
# are over-written at random, then a GC pass. A replica set over them
# (reads at random, writes acknowledged by both). One host issues YCSB A
# (50 % reads, 50 % updates, Zipf 0.99 over 90 % of the records) at 4000
# operations a second, Poisson; the bench's clients pause 60 ms of every
# 250 ms and then catch up what they missed (each issuing at once until
# its schedule is current: about 240 operations within some 2.4 ms),
# hence a pause (factor 0) and a catch-up burst (factor 26 for 2.4 ms)
# every period. The host's cost per read, 10 us of model time, is the
# bench's read p50 (90 us) less the device's 80 us.
'''

# The bench's device (bench/gc_ycsb.cc's Device()): 16 384 raw pages, 15 %
# spare; 60 % of the logical pages are records, 90 % of them loaded.
LOGICAL = int(16384 * (1 - 0.15))
RECORDS = LOGICAL * 60 // 100
LOADED = RECORDS * 9 // 10
SECONDS = 2.0  # 20 s of wall time at dilation 10

SETUPS = {
    'a': ('self', 'gc: "off"'),  # GC-oblivious
    'b': ('self', 'gc: "redirect"'),
    'c': ('coordinated', 'gc: "delay" gc_poll_us: 100'),
    'd': ('coordinated', 'gc: "background" gc_poll_us: 100'),
}

here = os.path.dirname(os.path.abspath(__file__))
for setup, (mode, gc) in SETUPS.items():
    out = [HEAD.format(setup=setup)]
    out.append(f'name: "gc_ycsb_A_{setup}"')
    out.append('seed: 1')
    out.append(f'duration_s: {SECONDS:g}')
    out.append('stats_interval_s: 1')
    out.append('network { rack { link_gbps: 100 link_latency_us: 0.01 } }')
    out.append(
        'servers {\n  prefix: "V" count: 2 devices: 1\n'
        '  preset: "preset=rackblox,channels=4,dies_per_channel=2,'
        'blocks_per_die=32,pages_per_block=64,buffer_pages=1024,'
        f'mode={mode}"\n  warm_fill: 0.6 warm_overwrites: 1\n}}')
    out.append('hosts { prefix: "bench" count: 1 io_cost_us: 10 }')
    out.append('replica_sets { name: "rs" member: "V0" member: "V1" '
               f'read: "random" ack: "all" {gc} }}')
    out.append('rules: "<*, *, //home/*> -> <IO, stage:rs>"')
    flow = ['flows {',
            '  name: "ycsb" hosts: "bench0" file: "//home/ycsb" '
            'open_loop_iops: 4000',
            f'  ycsb: "A" file_bytes: {LOADED * 4096}']
    period = 0
    while 0.25 * period + 0.19 < SECONDS:
        flow.append(f'  bursts {{ start_s: {0.25 * period + 0.19:.4f} '
                    'duration_s: 0.06 factor: 0 }')
        if 0.25 * (period + 1) < SECONDS:
            flow.append(f'  bursts {{ start_s: {0.25 * (period + 1):.4f} '
                        'duration_s: 0.0024 factor: 26 }')
        period += 1
    flow.append('}')
    out.append('\n'.join(flow))
    with open(os.path.join(here, f'A_{setup}.textproto'), 'w') as f:
        f.write('\n'.join(out) + '\n')
