"""libmemoplan_tuned.so is loaded on demand: a process that loads libmemoplan_torch.so and plans with
stock kernels never maps it; the first plan(..., kernels="tuned") loads it from beside
libmemoplan_torch.so and its kernels run; where it is missing, that plan fails with a message that
names the library, and stock planning still works.
Usage: /usr/bin/python3 kernel_library.py LIBMEMOPLAN_TORCH
Exits 1 on any failed check.
"""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    import torchvision
except ImportError as error:  # CTest's SKIP_RETURN_CODE
    print(f"SKIP: {error}")
    sys.exit(77)


def mapped(name):
    with open("/proc/self/maps") as maps:
        return any(name in line for line in maps)


def traced(x):
    """A model the user did not write, exported the way users export it."""
    torch.manual_seed(0)
    return torch.jit.trace(torchvision.models.resnet18(weights=None).eval(), x)


def main_process(library):
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    torch.ops.load_library(library)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        stock = traced(x)
        expected = stock(x)
        torch.ops.memoplan.plan(stock._c, [x])
        stock(x)
        check(torch.equal(stock(x), expected), "stock plan: outputs unchanged")
        check(not mapped("libmemoplan_tuned"), "stock plan: libmemoplan_tuned.so not mapped")
        check(torch.ops.memoplan.kernel_report() == "", "kernel_report() empty before tuned")

        tuned = traced(x)
        torch.ops.memoplan.plan(tuned._c, [x], kernels="tuned")
        out = tuned(x)
        check(torch.allclose(out, expected, rtol=1e-4, atol=1e-5), "tuned plan: outputs close")
        check(mapped("libmemoplan_tuned"), "tuned plan: libmemoplan_tuned.so mapped")
        report = torch.ops.memoplan.kernel_report()
        check("conv" in report or "linear" in report, "kernel_report() names tuned shapes")
    return failures


def missing_library_process(library):
    """Run with a copy of libmemoplan_torch.so alone in a directory: tuned must fail clearly."""
    torch.ops.load_library(library)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        module = traced(x)
        expected = module(x)
        try:
            torch.ops.memoplan.plan(module._c, [x], kernels="tuned")
        except RuntimeError as error:
            message = str(error)
            print(message)
            if "libmemoplan_tuned.so" not in message or "could not be loaded" not in message:
                print("FAIL the error does not name the missing library")
                return 1
        else:
            print("FAIL plan(kernels='tuned') succeeded without libmemoplan_tuned.so")
            return 1
        stock = traced(x)
        torch.ops.memoplan.plan(stock._c, [x])
        if not torch.equal(stock(x), expected):
            print("FAIL stock planning after the failed tuned plan")
            return 1
    print("ok   missing libmemoplan_tuned.so: a clear error, stock planning still works")
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--missing":
        return missing_library_process(sys.argv[2])
    library = sys.argv[1]
    failures = main_process(library)
    with tempfile.TemporaryDirectory() as alone:
        copy = os.path.join(alone, "libmemoplan_torch.so")
        shutil.copy(os.path.realpath(library), copy)
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        child = subprocess.run([sys.executable, __file__, "--missing", copy], env=env,
                               capture_output=True, text=True, timeout=300)
        print(child.stdout, end="")
        if child.returncode != 0:
            print(child.stderr[-2000:], end="")
            failures.append("missing library process")
    print("kernel_library: " + ("FAILED: " + "; ".join(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
