"""Plots of bench/matrix_report.py (gnuplot PNGs: ratio to jemalloc against threads, RSS over time)
and its heap maps (memoplan heapmap SVGs of committed traces)."""
import glob
import math
import os
import shutil
import subprocess

from matrix_stats import geomean, mean_se
from run_matrix import BASELINE, ROOT, TRACE_DIR

HEAPMAP_MODELS = ["resnet18", "mobilenet_v2", "inception_v3"]


def gnuplot(script):
    if not shutil.which("gnuplot"):
        return False
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    return True


def plot_ratios(m, img_dir, rel):
    """Per model: the ratio to jemalloc against thread count (geomean over batch and size)."""
    out = []
    threads = sorted({p[3] for p in m.points})
    for model in m.models:
        data = os.path.join(img_dir, f"ratio_{model}.dat")
        configs = [c for c in m.configs if c != BASELINE]
        with open(data, "w") as f:
            for c in configs:
                f.write(f'# {c}\n')
                for t in threads:
                    pts = [p for p in m.points if p[0] == model and p[3] == t]
                    means = [mean_se(m.ratios(p, c)) for p in pts]
                    g = geomean([x[0] for x in means])
                    ses = [x[1] / x[0] for x in means if x[0] and x[1] is not None]
                    rel_se = math.sqrt(sum(s * s for s in ses)) / len(ses) if ses else 0
                    if g:
                        f.write(f"{t} {g:.4f} {g * rel_se:.4f}\n")
                f.write("\n\n")
        png = os.path.join(img_dir, f"ratio_{model}.png")
        plots = ", ".join(f"'{data}' index {i} with yerrorlines title '{c}'"
                          for i, c in enumerate(configs))
        ok = gnuplot(f"""set terminal pngcairo noenhanced size 900,500 font ',10'
set output '{png}'
set title '{model}: pass time / jemalloc (geometric mean over batch and input size)'
set logscale x 2
set xlabel 'inference threads (2 cores)'
set ylabel 'ratio to jemalloc'
set key outside right
set grid
set xtics ({', '.join(str(t) for t in threads)})
set yrange [0:*]
plot {plots}, 1 with lines dt 2 lc rgb 'black' notitle
""")
        if ok:
            out.append(f"![{model}: ratio to jemalloc]({rel}/ratio_{model}.png)")
    return "\n\n".join(out)


def plot_memory(run_dir, img_dir, rel, threads):
    """Per model: RSS over time during the phase with `threads` threads, every configuration."""
    out = []
    models = sorted({os.path.basename(p).split("__")[0]
                     for p in glob.glob(os.path.join(run_dir, "memory", "*.csv"))})
    for model in models:
        series = []
        paths = sorted(glob.glob(os.path.join(run_dir, "memory", f"{model}__*.csv")))
        phase = threads or max(int(l.split(",")[3]) for p in paths for l in open(p) if l.strip())
        for path in paths:
            config = os.path.basename(path)[len(model) + 2:-4]
            rows = [l.split(",") for l in open(path).read().splitlines()]
            rows = [r for r in rows if len(r) == 9 and int(r[3]) == phase]
            if not rows:
                continue
            data = os.path.join(img_dir, f"memory_{model}__{config}.dat")
            with open(data, "w") as f:
                for r in rows:
                    f.write(f"{float(r[4]) / 1000:.3f} {int(r[6]) / 2**20:.1f}\n")
            series.append((config, data))
        if not series:
            continue
        png = os.path.join(img_dir, f"memory_{model}.png")
        plots = ", ".join(f"'{d}' using 1:2 with lines title '{c}'" for c, d in series)
        if gnuplot(f"""set terminal pngcairo noenhanced size 900,450 font ',10'
set output '{png}'
set title '{model}: resident set over time, {phase} threads (warm-up, then timed passes)'
set xlabel 'seconds since the phase started'
set ylabel 'RSS MiB'
set key outside right
set grid
plot {plots}
"""):
            out.append(f"![{model}: RSS over time]({rel}/memory_{model}.png)")
    return "\n\n".join(out)


def heapmaps(img_dir, rel):
    memoplan = os.path.join(ROOT, "build-bench", "src", "memoplan")
    out = []
    for model in HEAPMAP_MODELS:
        trace = os.path.join(ROOT, TRACE_DIR, f"{model}.json.gz")
        if not os.path.exists(trace) or not os.path.exists(memoplan):
            continue
        svg = os.path.join(img_dir, f"heapmap_{model}.svg")
        subprocess.run([memoplan, "heapmap", trace, "-s", "greedy_by_size", "-o", svg,
                        "--width", "1200", "--height", "500"], check=True, capture_output=True)
        out.append(f"**{model}** (`memoplan heapmap {TRACE_DIR}/{model}.json.gz -s "
                   f"greedy_by_size -o {rel}/heapmap_{model}.svg --width 1200 --height 500`)\n\n"
                   f"![{model} heap map]({rel}/heapmap_{model}.svg)")
    return "\n\n".join(out)
