#!/usr/bin/env python3
"""Sums an Nsight Compute raw CSV (--csv --page raw --metrics gpu__time_duration.sum,dram__bytes_read.sum) by kernel.

Prints the kernel count, the total kernel time and bytes read, the kernels under 5 us, then per kernel (template
arguments kept, parameter list dropped): time in all, share, calls, time per call, MB read and GB/s, largest first;
then the twelve longest single kernels with their grids. Kernel times from Nsight Compute are of kernels run one at a
time (no overlap, no launch gaps). Usage: tools/device/ncu-summary.py FILE.csv [TOP]

The file may hold the program's own output before the table (ncu writes the table at the end); the table starts at
its header row ("ID", ..., "Kernel Name", ...). Values are scaled by the units row (nsecond/usecond/msecond/second
or ns/us/ms/s, byte/Kbyte/Mbyte/Gbyte and their binary forms), so both --print-units base and auto work; thousands
separators are dropped. A value that is missing or not a finite number ("n/a", "nan") counts as 0 and the summary says
how many there were.
"""
import collections
import csv
import math
import sys

TIME_NS = {'nsecond': 1, 'usecond': 1e3, 'msecond': 1e6, 'second': 1e9, 'ns': 1, 'us': 1e3, 'ms': 1e6, 's': 1e9}
BYTES = {'byte': 1, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9, 'Tbyte': 1e12,
         'Kibyte': 2**10, 'Mibyte': 2**20, 'Gibyte': 2**30, 'Tibyte': 2**40}


def num(x):
    """The value of a cell, or None where it is empty or not a number."""
    try:
        v = float(x.replace(',', ''))
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def base_name(k):
    """The kernel name without its parameter list (the last balanced parentheses) and without 'void '."""
    k = k.strip()
    if k.endswith(')'):
        depth = 0
        for i in range(len(k) - 1, -1, -1):
            depth += {')': 1, '(': -1}.get(k[i], 0)
            if depth == 0:
                k = k[:i]
                break
    return k[5:] if k.startswith('void ') else k


def scale(units, unit, column):
    if unit not in units:
        sys.exit(f'ncu-summary: unknown unit "{unit}" for {column}; profile with --print-units base')
    return units[unit]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    lines = open(sys.argv[1], newline='').read().splitlines()
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID",') and '"Kernel Name"' in l), None)
    if start is None:
        sys.exit(f'ncu-summary: no Nsight Compute raw table ("ID", ..., "Kernel Name") in {sys.argv[1]}')
    rows = [r for r in csv.reader(lines[start:]) if r]
    h = rows[0]
    need = ['ID', 'Kernel Name', 'Grid Size', 'Block Size', 'gpu__time_duration.sum', 'dram__bytes_read.sum']
    missing = [c for c in need if c not in h]
    if missing:
        sys.exit(f'ncu-summary: columns missing from the table: {", ".join(missing)}')
    i_id, kn, t, b, gs, bs = (h.index(c) for c in ('ID', 'Kernel Name', 'gpu__time_duration.sum',
                                                    'dram__bytes_read.sum', 'Grid Size', 'Block Size'))
    if len(rows) < 2 or rows[1][i_id] != '':
        sys.exit('ncu-summary: no units row under the header')
    tscale = scale(TIME_NS, rows[1][t], 'gpu__time_duration.sum')
    bscale = scale(BYTES, rows[1][b], 'dram__bytes_read.sum')
    data = [r for r in rows[2:] if len(r) == len(h) and r[i_id].replace(',', '').isdigit()]
    if not data:
        sys.exit('ncu-summary: the table has no kernels')
    print('kernels', len(data), 'units', rows[1][t], rows[1][b])
    no_t = sum(num(r[t]) is None for r in data)
    no_b = sum(num(r[b]) is None for r in data)
    if no_t or no_b:
        print(f'without a value (counted as 0): {no_t} kernel times, {no_b} byte counts')

    def ns(r):
        return (num(r[t]) or 0.0) * tscale

    def nbytes(r):
        return (num(r[b]) or 0.0) * bscale

    agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in data:
        a = agg[base_name(r[kn])]
        a[0] += 1
        a[1] += ns(r)
        a[2] += nbytes(r)
    tot = sum(a[1] for a in agg.values())
    byt = sum(a[2] for a in agg.values())
    print(f'total {tot / 1e6:.3f} ms kernel time, {byt / 1e9:.3f} GB read, {byt / max(tot, 1):.0f} GB/s')
    under = [ns(r) for r in data if ns(r) < 5000]
    print(f'kernels under 5 us: {len(under)} taking {sum(under) / 1e6:.3f} ms')
    for name, a in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f'{a[1] / 1000:9.1f}us {100 * a[1] / max(tot, 1):5.1f}% {a[0]:5d} {a[1] / a[0] / 1000:8.2f}us '
              f'{a[2] / 1e6:9.2f}MB {a[2] / max(a[1], 1):6.0f}GB/s {name[:80]}')
    print('largest single kernels:')
    for r in sorted(data, key=lambda r: -ns(r))[:12]:
        print(f'{ns(r) / 1000:8.2f}us {nbytes(r) / 1e6:8.2f}MB {nbytes(r) / max(ns(r), 1):6.0f}GB/s '
              f'grid {r[gs]} block {r[bs]} {base_name(r[kn])[:70]}')


if __name__ == '__main__':
    main()
