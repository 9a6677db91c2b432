"""Statistics of bench/matrix_report.py: numbers from CSV cells, mean +- standard error of
per-round ratios, geometric means."""
import math
import statistics


def num(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def mean_se(values):
    if not values:
        return None, None
    m = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    return m, se


def fmt_ratio(m, se):
    if m is None:
        return "—"
    return f"{m:.2f} ± {se:.2f}" if se is not None else f"{m:.2f}"


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None
