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
    # The grid as one path, each axis's labels in one group: the same picture in fewer bytes.
    grid, x_labels, y_labels = [], [], []
    for e in range(x_lo, x_hi + 1):
        x = px(10 ** e)
        grid.append(f"M{x:.1f} {TOP}V{HEIGHT - BOTTOM}")
        x_labels.append(f'<text x="{x:.1f}">{10 ** e:,}</text>')
    for e in range(y_lo, y_hi + 1):
        y = py(10 ** e)
        grid.append(f"M{LEFT} {y:.1f}H{WIDTH - RIGHT}")
        y_labels.append(f'<text y="{y + 4:.1f}">{10 ** e:g}</text>')
    out.append(f'<path d="{"".join(grid)}" fill="none" stroke="#ddd"/>')
    out.append(f'<g text-anchor="middle" transform="translate(0,{HEIGHT - BOTTOM + 16})">')
    out += x_labels + ["</g>", f'<g text-anchor="end" transform="translate({LEFT - 6},0)">']
    out += y_labels + ["</g>"]
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
