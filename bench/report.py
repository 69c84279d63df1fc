#!/usr/bin/env python3
"""bench/report.py OUT: summarise a results directory written by bench/run.

Reads OUT/raw.csv (one line per run and figure), OUT/ratio_defs.csv, OUT/plots.csv,
OUT/notes.txt and OUT/meta.txt; writes

  OUT/results.csv   workload,test,config,metric,unit,n,median,min,max
  OUT/ratios.csv    the ratios' values (workload,ratio,n,median,min,max,
                    aim,met); their definitions are in OUT/ratio_defs.csv
  OUT/results.md    the tables, ratios, notes and plots in Markdown
  OUT/WORKLOAD.png  one plot per workload (gnuplot)

and prints the summary on standard output.  Ratios are computed per
repetition (the runs of one repetition ran close in time, so a load spike
on the shared machine touches both sides of a ratio alike) and reported as
the median with the min and max over the repetitions.
"""
import csv
import os
import statistics
import subprocess
import sys
import tempfile

out = sys.argv[1]


def path(name):
    return os.path.join(out, name)


def read_csv(name, ncols):
    rows = []
    if os.path.exists(path(name)):
        with open(path(name), newline='') as f:
            for r in csv.reader(f):
                if len(r) == ncols and not r[0].startswith('#'):
                    rows.append(r)
    return rows


meta = {}
if os.path.exists(path('meta.txt')):
    for line in open(path('meta.txt')):
        k, _, v = line.rstrip('\n').partition('=')
        meta[k] = v

raw = [r for r in read_csv('raw.csv', 7) if r[0] != 'workload']
order_w, order_t, order_c, order_m = [], {}, {}, {}
values = {}     # (w, t, c, m) -> {rep: value}
units = {}
for w, t, c, m, u, rep, v in raw:
    if w not in order_w:
        order_w.append(w)
    order_t.setdefault(w, [])
    if t not in order_t[w]:
        order_t[w].append(t)
    order_c.setdefault((w, t), [])
    if c not in order_c[(w, t)]:
        order_c[(w, t)].append(c)
    order_m.setdefault((w, t), [])
    if m not in order_m[(w, t)]:
        order_m[(w, t)].append(m)
    values.setdefault((w, t, c, m), {})[rep] = float(v)
    units[(w, t, m)] = u


def summary(vals):
    v = sorted(vals)
    return len(v), statistics.median(v), v[0], v[-1]


def fmt(x):
    if x != x:
        return 'nan'
    if abs(x) >= 1000:
        return '%.0f' % x
    return '%.3g' % x


def fmt_range(s):
    n, med, lo, hi = s
    if n == 1:
        return fmt(med)
    return '%s (%s–%s)' % (fmt(med), fmt(lo), fmt(hi))


# ---- results.csv -------------------------------------------------------------
results = {}
with open(path('results.csv'), 'w', newline='') as f:
    wr = csv.writer(f, lineterminator='\n')
    wr.writerow(['workload', 'test', 'config', 'metric', 'unit', 'n', 'median', 'min', 'max'])
    for w in order_w:
        for t in order_t[w]:
            for c in order_c[(w, t)]:
                for m in order_m[(w, t)]:
                    if (w, t, c, m) not in values:
                        continue
                    s = summary(values[(w, t, c, m)].values())
                    results[(w, t, c, m)] = s
                    wr.writerow([w, t, c, m, units[(w, t, m)], s[0]] + ['%.6g' % x for x in s[1:]])

# ---- ratios -------------------------------------------------------------------
# the definitions (workload,name,NUM,DEN,aim) are kept in ratio_defs.csv so
# that the report can be made again from the same directory
ratio_defs = [r for r in read_csv('ratio_defs.csv', 5) + read_csv('ratios.csv', 5)
              if r[0] != 'workload']
with open(path('ratio_defs.csv'), 'w', newline='') as f:
    csv.writer(f, lineterminator='\n').writerows(ratio_defs)
ratios = {}     # w -> [(name, summary or None, aim, met)]


def met(aim, x):
    if aim in ('', '-'):
        return '-'
    if aim.startswith('>='):
        return 'yes' if x >= float(aim[2:]) else 'NO'
    if aim.startswith('<='):
        return 'yes' if x <= float(aim[2:]) else 'NO'
    return '?'


for w, name, num, den, aim in ratio_defs:
    a = values.get(tuple([w] + num.split('/')), {})
    if den == '1':
        # a figure held against its aim as it is (seconds, bytes)
        per_rep = list(a.values())
    else:
        b = values.get(tuple([w] + den.split('/')), {})
        per_rep = [a[r] / b[r] for r in a if r in b and b[r] != 0]
    if per_rep:
        s = summary(per_rep)
        ratios.setdefault(w, []).append((name, s, aim, met(aim, s[1])))
    else:
        ratios.setdefault(w, []).append((name, None, aim, '-'))
    if w not in order_w:
        order_w.append(w)
        order_t[w] = []

with open(path('ratios.csv'), 'w', newline='') as f:
    wr = csv.writer(f, lineterminator='\n')
    wr.writerow(['workload', 'ratio', 'n', 'median', 'min', 'max', 'aim', 'met'])
    for w in order_w:
        for name, s, aim, ok in ratios.get(w, []):
            if s:
                wr.writerow([w, name, s[0], '%.4g' % s[1], '%.4g' % s[2], '%.4g' % s[3], aim, ok])
            else:
                wr.writerow([w, name, 0, '', '', '', aim, 'no data'])

notes = {}
if os.path.exists(path('notes.txt')):
    for line in open(path('notes.txt')):
        w, _, text = line.rstrip('\n').partition('\t')
        notes.setdefault(w, []).append(text)

plots = {}
if os.path.exists(path('plots.csv')):
    # workload,test,metric,title: the title may hold commas
    for line in open(path('plots.csv')):
        f = line.rstrip('\n').split(',', 3)
        if len(f) == 4:
            plots.setdefault(f[0], []).append(tuple(f[1:]))


# ---- plots --------------------------------------------------------------------
def make_plot(w):
    panels = [(t, m, title) for t, m, title in plots.get(w, [])
              if any((w, t, c, m) in results for c in order_c.get((w, t), []))]
    if not panels:
        return None
    cols = 1 if len(panels) == 1 else 2
    rows = (len(panels) + cols - 1) // cols
    tmp = tempfile.mkdtemp(prefix='bench-plot.')
    script = [
        'set terminal pngcairo size %d,%d font "sans,9"' % (520 * cols, 330 * rows),
        'set output "%s"' % path(w + '.png'),
        'set multiplot layout %d,%d title "%s (median, bars: min to max over %s runs)"'
        % (rows, cols, w, meta.get('reps', '?')),
        'set style data histogram',
        'set style histogram errorbars gap 1 lw 1',
        'set style fill solid 0.7 border -1',
        'set boxwidth 0.8',
        'set yrange [0:*]',
        'set grid ytics',
        'set xtics rotate by -25 nomirror',
        'set key off',
        'set bmargin 6',
    ]
    for i, (t, m, title) in enumerate(panels):
        dat = os.path.join(tmp, '%d.dat' % i)
        with open(dat, 'w') as f:
            for c in order_c[(w, t)]:
                s = results.get((w, t, c, m))
                if s:
                    f.write('"%s" %g %g %g\n' % (c, s[1], s[2], s[3]))
        script += ['set title "%s"' % title.replace('"', "'"),
                   'plot "%s" using 2:3:4:xtic(1) lc rgb "#3b75af"' % dat]
    script.append('unset multiplot')
    try:
        subprocess.run(['gnuplot'], input='\n'.join(script) + '\n', text=True, check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.stderr.write('report: gnuplot failed for %s: %s\n' % (w, getattr(e, 'stderr', e)))
        return None
    finally:
        for name in os.listdir(tmp):
            os.unlink(os.path.join(tmp, name))
        os.rmdir(tmp)
    return w + '.png'


# ---- results.md and the summary ----------------------------------------------------
md = []
txt = []
md.append('# tiercache benchmarks: %s' % os.path.basename(out.rstrip('/')))
md.append('')
for k, label in (('date', 'Date'), ('scale', 'Scale'), ('reps', 'Repetitions'),
                 ('commit', 'Commit'), ('machine', 'Machine'), ('cpu', 'CPU'),
                 ('tools', 'Tools'), ('spindle', 'Emulated spindle'),
                 ('load_start', 'Load average at start'), ('load_end', 'Load average at end')):
    if k in meta:
        md.append('- %s: %s' % (label, meta[k]))
times = [(k[5:], v) for k, v in meta.items() if k.startswith('time_') and k != 'time_total']
if times:
    md.append('- Run time: ' + ', '.join('%s %.0f s' % (w, float(v)) for w, v in times)
              + ('; total %.0f s (%.1f min)' % (float(meta['time_total']), float(meta['time_total']) / 60)
                 if 'time_total' in meta else ''))
for k, v in meta.items():
    if k.startswith('rerun_'):
        md.append('- Workload %s: %s' % (k[6:], v))
failed = [k[7:] for k in meta if k.startswith('failed_')]
if failed:
    md.append('- **Failed workloads: %s** (see the log of the run)' % ', '.join(failed))
md.append('')
md.append('Figures are medians over the repetitions, with the minimum and maximum '
          'in parentheses.  Ratios are computed within each repetition and summarised '
          'the same way; "aim" is the target of the issue, "met" compares the median.')
txt.append('bench summary (%s scale, %s repetitions, medians with min-max)'
           % (meta.get('scale', '?'), meta.get('reps', '?')))

for w in order_w:
    md.append('')
    md.append('## %s' % w)
    txt.append('')
    txt.append('== %s' % w)
    for t in order_t.get(w, []):
        ms = order_m[(w, t)]
        md.append('')
        md.append('**%s**' % t)
        md.append('')
        md.append('| configuration | ' + ' | '.join('%s (%s)' % (m, units[(w, t, m)]) for m in ms) + ' |')
        md.append('|---|' + '---:|' * len(ms))
        txt.append('  %s' % t)
        for c in order_c[(w, t)]:
            cells = [fmt_range(results[(w, t, c, m)]) if (w, t, c, m) in results else ''
                     for m in ms]
            md.append('| %s | %s |' % (c, ' | '.join(cells)))
            txt.append('    %-22s ' % c + '  '.join('%s %s' % (m, cell) for m, cell in zip(ms, cells) if cell))
    if ratios.get(w):
        md.append('')
        md.append('| ratio | median (min–max) | aim | met |')
        md.append('|---|---:|:---:|:---:|')
        txt.append('  ratios')
        for name, s, aim, ok in ratios[w]:
            val = fmt_range(s) if s else 'no data'
            md.append('| %s | %s | %s | %s |' % (name, val, aim if aim != '-' else '', ok if ok != '-' else ''))
            txt.append('    %-58s %-24s %s' % (name, val, ('aim %s: %s' % (aim, ok)) if aim != '-' else ''))
    for n in notes.get(w, []):
        md.append('')
        md.append(n)
    png = make_plot(w)
    if png:
        md.append('')
        md.append('![%s](%s)' % (w, png))

with open(path('results.md'), 'w') as f:
    f.write('\n'.join(md) + '\n')
print('\n'.join(txt))
