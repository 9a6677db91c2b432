"""Draws planning time against trace length, log-log, from bench/planner_scaling.cc's CSV: one line
per (trace, placer), an SVG with no dependencies beyond the standard library.

    /usr/bin/python3 bench/plot_scaling.py scaling.csv docs/images/planner_scaling.svg
"""
import csv
import math
import sys

WIDTH, HEIGHT = 720, 440
LEFT, RIGHT, TOP, BOTTOM = 70, 200, 20, 50
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def main():
    source, target = sys.argv[1], sys.argv[2]
    series = {}
    with open(source) as f:
        for row in csv.DictReader(f):
            key = f"{row['trace']} / {row['placer']}"
            series.setdefault(key, []).append((int(row["allocations"]), float(row["ms"])))
    xs = [x for points in series.values() for x, _ in points]
    ys = [max(y, 0.01) for points in series.values() for _, y in points]
    x_lo, x_hi = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    y_lo, y_hi = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))

    def px(x):
        return LEFT + (math.log10(x) - x_lo) / (x_hi - x_lo) * (WIDTH - LEFT - RIGHT)

    def py(y):
        y = max(y, 0.01)
        return HEIGHT - BOTTOM - (math.log10(y) - y_lo) / (y_hi - y_lo) * (HEIGHT - TOP - BOTTOM)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>']
    for e in range(x_lo, x_hi + 1):
        x = px(10 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                   f'{10 ** e:,}</text>')
    for e in range(y_lo, y_hi + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" '
                   'stroke="#ddd"/>')
        label = f"{10 ** e:g}"
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 12}" '
               'text-anchor="middle">allocations</text>')
    out.append(f'<text transform="translate(16,{(TOP + HEIGHT - BOTTOM) / 2:.0f}) rotate(-90)" '
               'text-anchor="middle">greedy_by_size placement, ms</text>')
    for i, (name, points) in enumerate(sorted(series.items())):
        color = COLORS[i % len(COLORS)]
        dash = ' stroke-dasharray="5,3"' if "OffsetPlacer" in name else ""
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(points))
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"'
                   f'{dash}/>')
        for x, y in points:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        ly = TOP + 16 + 18 * i
        out.append(f'<line x1="{WIDTH - RIGHT + 10}" y1="{ly - 4}" x2="{WIDTH - RIGHT + 30}" '
                   f'y2="{ly - 4}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{WIDTH - RIGHT + 34}" y="{ly}">{name}</text>')
    out.append("</svg>")
    with open(target, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
