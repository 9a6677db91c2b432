"""The loop of issue 18 for the LD_PRELOAD shim: a TorchScript (or eager) torch.nn.TransformerEncoder
(d 256, 4 heads, 4 layers, batch_first) fed a random sequence length of 8-256 every pass, one
intra-op thread (or INTRA); prints the mean time of the last half of the passes. Random weights,
seeded.

    OPENBLAS_NUM_THREADS=1 MEMOPLAN_CONF=stats_print:true \
      LD_PRELOAD=build/interpose/libmemoplan_preload.so \
      /usr/bin/python3 bench/shim_varlen_workload.py scripted|eager PASSES [INTRA]
(the same without the shim's MEMOPLAN_CONF, or with another allocator preloaded, for comparison)
"""
import random
import sys
import time

import torch


def main():
    kind, passes = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(256, 4, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).eval()
    if kind == "scripted":
        model = torch.jit.script(model)
    rng = random.Random(0)
    inputs = [torch.randn(1, rng.randint(8, 256), 256,
                          generator=torch.Generator().manual_seed(i)) for i in range(passes)]
    times = []
    with torch.inference_mode():
        for x in inputs:
            start = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - start)
    half = times[passes // 2:]
    print(f"{kind} last {len(half)} passes: {sum(half) * 1e3 / len(half):.2f} ms/pass, "
          f"median {sorted(half)[len(half) // 2] * 1e3:.2f}")


if __name__ == "__main__":
    main()
