#!/usr/bin/python3
"""One process of bench/run_shim_effect.py: a zoo model's forward in a loop, as a Python server
would run it, timed pass by pass.

    /usr/bin/python3 bench/shim_effect_workload.py MODEL MODE PASSES INTRA INFER OUT.json [--work]

MODE: eager (the torch.nn module, built as bench/models/zoo_models.py builds it), traced (that
module through torch.jit.trace(model, example) and nothing else, as users export), scripted (the
zoo's TorchScript file, models/MODEL.pt, as made by bench/models/make_zoo.py), frozen
(torch.jit.freeze(torch.jit.script(module)) as bench/models/graph_forms.py makes it, saved to
/tmp/memoplan_frozen_MODEL.pt by the first run that lacks it, loaded from there), compiled (PyTorch
2.x: the eager module through torch.compile, Inductor's generated C++ on CPU; its first pass
compiles) or aoti (PyTorch 2.x: AOTInductor, the module exported and compiled ahead of time into a
package, /tmp/memoplan_aoti_MODEL.pt2, made by the first run that lacks it: make it before timed
runs, e.g. with PASSES 1, so that no timed process compiles). INTRA: intra-op
threads (torch.set_num_threads). INFER: inference threads, each running PASSES passes of the
same model. --work: between passes each thread does other work, as a server does: builds a
request (a Python list of token ids and a JSON string of a few KiB whose length varies from
request to request) and a response (the output's first values as text).
Writes pass times (ms, per thread), the output digest of the last pass, peak RSS and the RSS
after loading to OUT.json. Random weights and inputs with a fixed seed; nothing is downloaded.
"""
import hashlib
import json
import os
import random
import resource
import sys
import threading
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def load(name, mode):
    torch.manual_seed(0)
    if mode == "frozen":  # made once, then loaded as a server loads its file
        path = os.path.join("/tmp", f"memoplan_frozen_{name}.pt")
        if not os.path.exists(path):
            import graph_forms
            from zoo_models import MODELS
            builder, high = MODELS[name]
            model, example = builder()
            graph_forms.write(model.eval(), example, "frozen", path + ".part", high)
            os.rename(path + ".part", path)
            del model, example
        extra = {"input_shape": "", "input_dtype": "", "input_high": ""}
        model = torch.jit.load(path, _extra_files=extra).eval()
        extra = {k: v.decode() for k, v in extra.items()}
        shape = [int(d) for d in extra["input_shape"].split("x")]
        if extra["input_high"]:
            return model, torch.randint(0, int(extra["input_high"]), shape)
        return model, torch.randn(*shape, dtype=getattr(torch, extra["input_dtype"]))
    if mode in ("eager", "traced", "compiled", "aoti"):
        from zoo_models import MODELS
        model, example = MODELS[name][0]()
        if mode == "traced":
            # check_trace off, as bench/models/make_zoo.py: PyTorch 1.13's check re-traces
            # TransformerEncoder and finds its class name mangled the second time (every allocator)
            model = torch.jit.trace(model.eval(), example, check_trace=False)
        if mode == "compiled":
            model = torch.compile(model)
        if mode == "aoti":
            package = os.path.join("/tmp", f"memoplan_aoti_{name}.pt2")
            if not os.path.exists(package):
                exported = torch.export.export(model.eval(), (example,))
                partial = package[:-len(".pt2")] + ".part.pt2"  # the name must end in .pt2
                torch._inductor.aoti_compile_and_package(exported, package_path=partial)
                os.rename(partial, package)
            model = torch._inductor.aoti_load_package(package)
        return model, example
    manifest = json.load(open(os.path.join(ROOT, "models", "manifest.json")))
    entry = next(m for m in manifest["models"] if m["name"] == name)
    model = torch.jit.load(os.path.join(ROOT, "models", entry["file"])).eval()
    shape = entry["input_shape"]
    if entry.get("input_high"):
        example = torch.randint(0, entry["input_high"], shape)
    else:
        example = torch.randn(*shape)
    return model, example


def other_work(rng, out):
    """A request's parsing and a response's formatting: allocations of varying sizes."""
    words = rng.randint(200, 1200)
    request = json.dumps({"inputs": [rng.randint(0, 30000) for _ in range(words)]})
    ids = json.loads(request)["inputs"]
    response = json.dumps({"outputs": out.flatten()[:64].tolist(), "tokens": len(ids)})
    return len(response)


def main():
    name, mode, passes, intra, infer, out_path = sys.argv[1:7]
    passes, intra, infer = int(passes), int(intra), int(infer)
    work = "--work" in sys.argv[7:]
    torch.set_num_threads(intra)
    model, example = load(name, mode)
    rss_loaded = rss_kib()
    times = [[] for _ in range(infer)]
    digests = [None] * infer

    def run(index):
        rng = random.Random(index)
        with torch.inference_mode():
            for _ in range(passes):
                start = time.perf_counter()
                out = model(example)
                if isinstance(out, (tuple, list)):
                    out = out[0]
                if work:
                    other_work(rng, out)
                times[index].append((time.perf_counter() - start) * 1e3)
            digests[index] = hashlib.sha256(out.contiguous().numpy().tobytes()).hexdigest()[:16]

    if infer == 1:
        run(0)
    else:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(infer)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    result = {"model": name, "mode": mode, "passes": passes, "intra": intra, "infer": infer,
              "work": work, "times_ms": times, "digests": digests,
              "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              "rss_after_load_kib": rss_loaded}
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
