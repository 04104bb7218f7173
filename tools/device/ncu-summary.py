#!/usr/bin/env python3
"""Sums an Nsight Compute raw CSV (--csv --page raw --metrics gpu__time_duration.sum,dram__bytes_read.sum) by kernel.

Prints the kernel count, the total kernel time and bytes read, the kernels under 5 us, then per kernel (template
arguments kept, parameter list dropped): time in all, share, calls, time per call, MB read and GB/s, largest first;
then the twelve longest single kernels with their grids. Kernel times from Nsight Compute are of kernels run one at a
time (no overlap, no launch gaps). Usage: tools/device/ncu-summary.py FILE.csv [TOP]
"""
import collections
import csv
import re
import sys


def num(x):
    try:
        return float(x.replace(',', ''))
    except ValueError:
        return 0.0


def main():
    rows = [r for r in csv.reader(open(sys.argv[1])) if r]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    hdr = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
    h = rows[hdr]
    data = [r for r in rows[hdr + 1:] if len(r) == len(h) and r[h.index('ID')].isdigit()]
    kn, t, b = h.index('Kernel Name'), h.index('gpu__time_duration.sum'), h.index('dram__bytes_read.sum')
    gs, bs = h.index('Grid Size'), h.index('Block Size')
    print('kernels', len(data), 'units', rows[hdr + 1][t], rows[hdr + 1][b])
    agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in data:
        name = re.sub(r'\(.*', '', r[kn]).replace('void ', '')
        a = agg[name]
        a[0] += 1
        a[1] += num(r[t])
        a[2] += num(r[b])
    tot = sum(a[1] for a in agg.values())
    byt = sum(a[2] for a in agg.values())
    print(f'total {tot / 1e6:.3f} ms kernel time, {byt / 1e9:.3f} GB read, {byt / max(tot, 1):.0f} GB/s')
    under = [num(r[t]) for r in data if num(r[t]) < 5000]
    print(f'kernels under 5 us: {len(under)} taking {sum(under) / 1e6:.3f} ms')
    for name, a in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f'{a[1] / 1000:9.1f}us {100 * a[1] / tot:5.1f}% {a[0]:5d} {a[1] / a[0] / 1000:8.2f}us '
              f'{a[2] / 1e6:9.2f}MB {a[2] / max(a[1], 1):6.0f}GB/s {name[:80]}')
    print('largest single kernels:')
    for r in sorted(data, key=lambda r: -num(r[t]))[:12]:
        print(f'{num(r[t]) / 1000:8.2f}us {num(r[b]) / 1e6:8.2f}MB {num(r[b]) / max(num(r[t]), 1):6.0f}GB/s '
              f'grid {r[gs]} block {r[bs]} {re.sub(r"[(].*", "", r[kn])[:70]}')


if __name__ == '__main__':
    main()
