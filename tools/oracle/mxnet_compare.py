#!/usr/bin/env python3
"""dnnmem against MXNet 1.9 on the CPU (tests/validation/mxnet-cpu-1.9.jsonl,
written by tools/oracle/mxnet_measure.py): each symbolic-executor row
estimated with --framework mxnet --device cpu, the error (estimate -
measured) / measured of the peak over the whole run.

  mxnet_compare.py [--dnnmem build/dnnmem] [--misses FILE] [--check] [REF]

With --check it exits 1 when a row misses by more than 3% without being
listed in --misses, or when a listed row no longer misses. Gluon rows
(no symbol file dnnmem reads) are printed as measured only, and so are the
rows measured with the oneDNN kernels (MXNET_MKLDNN_ENABLED=1, the pip
build's default), which dnnmem does not model.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

BAR = 3.0
MODELS = 'tests/models/mxnet'

def row_id(r):
    return '%s-%s-%s%s' % (r['model'].replace('-symbol.json', ''), r['mode'],
                           'x'.join(str(d) for d in r['shape']), '-onednn' if r['mkldnn'] else '')

def estimate(dnnmem, r):
    cmd = [dnnmem, 'estimate', os.path.join(MODELS, r['model']), '--framework', 'mxnet',
           '--device', 'cpu', '--input-shape', 'data=' + ','.join(str(d) for d in r['shape']),
           '--mode', r['mode'], '--iterations', str(r['iterations']), '--json']
    if r['mode'] == 'train':
        cmd += ['--optimizer', 'sgd-momentum']
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return None, p.stderr.strip()
    return json.loads(p.stdout)['peak_allocated_bytes'], None

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('ref', nargs='?', default='tests/validation/mxnet-cpu-1.9.jsonl')
    ap.add_argument('--dnnmem', default='build/dnnmem')
    ap.add_argument('--misses', default='tests/validation/mxnet-expected-misses.txt')
    ap.add_argument('--check', action='store_true')
    a = ap.parse_args()
    misses = {}
    if os.path.exists(a.misses):
        with open(a.misses) as f:
            for line in f:
                if line.strip() and not line.startswith('#'):
                    k, _, why = line.partition('#')
                    misses[k.strip()] = why.strip()
    rows = [json.loads(l) for l in open(a.ref) if l.strip()]
    errs, bad, seen = [], 0, set()
    for r in rows:
        if r['kind'] != 'symbol':
            print('%-48s measured %12d  (Gluon: not estimated)' % (
                '%s-%s-gluon%s' % (r['model'], r['mode'], '-onednn' if r['mkldnn'] else ''),
                r['peak_bytes']))
            continue
        rid = row_id(r)
        seen.add(rid)
        est, why = estimate(a.dnnmem, r)
        if est is None:
            print('%-48s ERROR %s' % (rid, why))
            bad += 1
            continue
        e = 100.0 * (est - r['peak_bytes']) / r['peak_bytes']
        mark = ''
        if r['mkldnn']:  # the oneDNN kernels' scratch and fused weights: not modelled
            print('%-48s measured %12d estimate %12d %+7.2f%%  (oneDNN kernels: printed, not '
                  'checked)' % (rid, r['peak_bytes'], est, e))
            continue
        errs.append(e)
        if abs(e) > BAR and rid not in misses:
            mark, bad = '  MISS (not listed)', bad + 1
        elif abs(e) > BAR:
            mark = '  miss: ' + misses[rid]
        elif rid in misses:
            mark, bad = '  listed as a miss but within %g%%' % BAR, bad + 1
        print('%-48s measured %12d estimate %12d %+7.2f%%%s' % (rid, r['peak_bytes'], est, e, mark))
    for m in sorted(set(misses) - seen):
        print('%s: listed in %s but not a row' % (m, a.misses))
        bad += 1
    if errs:
        within = sum(1 for e in errs if abs(e) <= BAR)
        print('%d rows (MXNet %s): median |error| %.2f%%, %d within +-%g%%, worst under %.2f%%, '
              'worst over %+.2f%%' % (len(errs), rows[0]['mxnet'],
                                      statistics.median(abs(e) for e in errs), within, BAR,
                                      min(errs), max(errs)))
    if a.check and bad:
        sys.exit(1)

if __name__ == '__main__':
    main()
