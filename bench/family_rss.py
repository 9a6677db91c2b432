"""RSS over time with shapes that vary (issue 18): one process runs a zoo TorchScript model on a
random sequence length (or batch) per pass, planned with torch.ops.memoplan.plan or not, and
samples its VmRSS every few passes; the planned process should stay flat once the largest shapes
have been seen, not grow with the number of distinct shapes.

    /usr/bin/python3 bench/family_rss.py MODEL planned|unplanned PASSES OUT.json [--every 20]
        [--low 8] [--high 256] [--library build/torch_ext/libmemoplan_torch.so]

Run it under the allocator to compare against (LD_PRELOAD=...libtcmalloc_minimal.so.4); one
intra-op thread, OPENBLAS_NUM_THREADS=1 recommended.
"""
import argparse
import json
import random
import time

import torch


def vm_rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("mode", choices=["planned", "unplanned"])
    p.add_argument("passes", type=int)
    p.add_argument("out")
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--low", type=int, default=8)
    p.add_argument("--high", type=int, default=256)
    p.add_argument("--library", default="build/torch_ext/libmemoplan_torch.so")
    args = p.parse_args()
    torch.set_num_threads(1)
    module = torch.jit.load(args.model).eval()
    rng = random.Random(0)

    def make(length):
        generator = torch.Generator().manual_seed(length)
        return torch.randint(0, 30000, (1, length), generator=generator)

    samples, seen = [], set()
    start = time.time()
    with torch.inference_mode():
        if args.mode == "planned":
            torch.ops.load_library(args.library)
            torch.ops.memoplan.plan(module._c, [make(128)])
        for i in range(args.passes):
            length = rng.randint(args.low, args.high)
            seen.add(length)
            module(make(length))
            if (i + 1) % args.every == 0:
                samples.append({"pass": i + 1, "distinct_shapes": len(seen),
                                "rss_mib": round(vm_rss_kib() / 1024, 1)})
        stats = torch.ops.memoplan.stats() if args.mode == "planned" else ""
    with open(args.out, "w") as f:
        json.dump({"model": args.model, "mode": args.mode, "passes": args.passes,
                   "seconds": round(time.time() - start, 1), "samples": samples,
                   "memoplan_stats": stats}, f)
    print(json.dumps(samples))


if __name__ == "__main__":
    main()
