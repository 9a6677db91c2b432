"""A Python server's loop over requests of random sequence length (issue 18): two copies of a zoo
TorchScript model, one planned with torch.ops.memoplan.plan, one not, each request run on both
(order alternating), outputs compared; prints the last half's total time of each and the
extension's counters.

    OPENBLAS_NUM_THREADS=1 [LD_PRELOAD=...allocator] /usr/bin/python3 bench/family_python_loop.py \
        bert_encoder 120
"""
import random
import sys
import time

import torch


def main():
    name, n = sys.argv[1], int(sys.argv[2])
    torch.ops.load_library("build/torch_ext/libmemoplan_torch.so")
    torch.set_num_threads(1)
    reference = torch.jit.load(f"models/{name}.pt").eval()
    planned = torch.jit.load(f"models/{name}.pt").eval()
    rng = random.Random(0)

    def make(length):
        return torch.randint(0, 30000, (1, length), generator=torch.Generator().manual_seed(length))

    planned_ms, unplanned_ms, same = [], [], 0
    with torch.inference_mode():
        torch.ops.memoplan.plan(planned._c, [make(128)])
        for _ in range(3):
            reference(make(128))
        for i in range(n):
            x = make(rng.randint(8, 256))
            order = [(planned, planned_ms), (reference, unplanned_ms)]
            if i % 2 == 0:
                order.reverse()
            outputs = []
            for module, times in order:
                start = time.perf_counter()
                outputs.append(module(x))
                times.append((time.perf_counter() - start) * 1e3)
            same += torch.equal(outputs[0], outputs[1])
        stats = torch.ops.memoplan.stats()
    half = n // 2
    print(f"{name}: identical {same}/{n}; last {n - half} requests: planned "
          f"{sum(planned_ms[half:]):.0f} ms, unplanned {sum(unplanned_ms[half:]):.0f} ms, ratio "
          f"{sum(planned_ms[half:]) / sum(unplanned_ms[half:]):.3f}")
    print(stats)


if __name__ == "__main__":
    main()
