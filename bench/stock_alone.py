"""Stock PyTorch alone, as a user runs it: one sweep model exported in one form
(bench/models/graph_forms.py), `torch.set_num_threads(THREADS)`, 5 untimed then 15 timed passes
under inference mode; prints the median and quartiles in ms. What the conformance sweep's stock
copy is checked against (docs/results/CONFORMANCE.md, two intra-op threads).

Usage: /usr/bin/python3 bench/stock_alone.py MODEL FORM THREADS [--size 128]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
import graph_forms  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("form", choices=graph_forms.FORMS)
    parser.add_argument("threads", type=int)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()
    torch.manual_seed(0)
    model, example = graph_forms.build(args.model, 1, args.size)
    module = graph_forms.export(model, example, args.form)
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        for _ in range(5):
            module(example)
        times = []
        for _ in range(15):
            start = time.perf_counter()
            module(example)
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    print(f"{args.model} {args.form} {args.threads} threads: median {statistics.median(times):.2f} ms, "
          f"quartiles {times[3]:.2f}-{times[11]:.2f}")


if __name__ == "__main__":
    main()
