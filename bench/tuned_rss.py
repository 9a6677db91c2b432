"""Resident memory of one process that loads a model, plans it (tuned or stock kernels) and runs a
few passes: VmRSS / VmHWM from /proc/self/status after each step. One process per run, so the
numbers are that configuration's own.

    /usr/bin/python3 bench/tuned_rss.py models/resnet50.pt --kernels tuned
    /usr/bin/python3 bench/tuned_rss.py models/resnet50.pt --kernels stock
    /usr/bin/python3 bench/tuned_rss.py models/resnet50.pt --kernels tuned --plan-with-grad
    /usr/bin/python3 bench/tuned_rss.py models/bert_encoder.pt --shape 1x128 --token-ids 30522
    /usr/bin/python3 bench/tuned_rss.py models/resnet50.pt --kernels tuned --release-weights

--plan-with-grad plans with autograd on (as a script that forgets torch.no_grad would) and serves
under inference_mode: the tuned kernels then measure and pack in the served passes.
--release-weights holds the weights once (plan(..., release_weights=True): docs/KERNELS.md,
"Memory"; the weight file goes to $MEMOPLAN_WEIGHTS_DIR or ~/.cache/memoplan/weights).
"""
import argparse
import json

import torch


def memory_kb():
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
    return fields


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--kernels", choices=["stock", "tuned"], default="tuned")
    parser.add_argument("--shape", default="1x3x224x224", help="the input's sizes, NxCxHxW")
    parser.add_argument("--token-ids", type=int, metavar="HIGH",
                        help="an int64 input of token ids below HIGH (models/manifest.json's "
                             "input_high), not a float one")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lib", default="build/torch_ext/libmemoplan_torch.so")
    parser.add_argument("--plan-with-grad", action="store_true")
    parser.add_argument("--release-weights", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.ops.load_library(args.lib)
    model = torch.jit.load(args.model).eval()
    sizes = [int(d) for d in args.shape.split("x")]
    x = torch.randint(0, args.token_ids, sizes) if args.token_ids else torch.randn(sizes)
    steps = {"loaded": memory_kb()}
    if args.plan_with_grad:
        torch.ops.memoplan.plan(model._c, [x], kernels=args.kernels,
                                    release_weights=args.release_weights)
        steps["planned"] = memory_kb()
    with torch.inference_mode():
        if not args.plan_with_grad:
            torch.ops.memoplan.plan(model._c, [x], kernels=args.kernels,
                                    release_weights=args.release_weights)
            steps["planned"] = memory_kb()
        for _ in range(args.passes):
            model(x)
    steps["after %d passes" % args.passes] = memory_kb()
    print(json.dumps({"model": args.model, "kernels": args.kernels,
                      "plan_with_grad": args.plan_with_grad,
                      "release_weights": args.release_weights, "kb": steps}))


if __name__ == "__main__":
    main()
