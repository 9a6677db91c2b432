#!/usr/bin/python3
"""Whole programs under each allocator and under the shim with each fallback (issue 53).

    bench/run_shim_programs.py                                  # every program, 5 rounds
    bench/run_shim_programs.py --programs sqlite3,python3 --rounds 3
    bench/run_shim_programs.py --allocators glibc,mimalloc,shim --list

Programs are ones nobody here wrote (Debian's sqlite3, python3 with every object from malloc
(PYTHONMALLOC=malloc, the allocator's stress) and python3-pymalloc (the same work as Python runs by
default: its own allocator for objects of 512 bytes or less), perl, g++, xz; glibc's own malloc
benchmarks when bench/glibc_malloc_benchtests.sh can build them) plus bench/large_blocks (blocks of
5-25 MiB, the fallbacks' large-block paths). Each runs unchanged with LD_PRELOAD set per
configuration: glibc (nothing preloaded), jemalloc, tcmalloc, mimalloc, `shim` (the shim with its
default fallback), `shim-glibc` (fallback:next: glibc behind it), `shim-mimalloc`
(fallback:mimalloc), `shim-tcmalloc` and `shim-jemalloc` (the allocator preloaded after the shim:
fallback:next takes it). Every process runs alone; order is round-major, each round a program's
configurations back to back, rotated by one per round and program, so every configuration meets
every load. Per process: wall time, user+system CPU time, peak RSS (GNU time's %M) and a
hash of its output (every configuration must print the same). The table gives medians with
quartiles and, for each shim row, its time over its fallback's alone and over the best
allocator's. Raw rows go to bench/results/shim_programs_<stamp>.csv, the tables to .md beside it.

--perf adds one `perf record` run per program and configuration after the timed rounds (a sampling
profile, system-wide noise mostly cancels out): the share of the samples in the allocator's own
library (libmemoplan_preload.so, libmimalloc, libjemalloc, libtcmalloc; glibc's malloc cannot be
told apart from the rest of libc.so.6) and, for each shim row, the time over its fallback's that the
shares imply if the program's own work is the same under both: (1 - fallback's) / (1 - shim's),
given only where both shares are under half (above, it magnifies their noise).
It leaves out what an allocator costs elsewhere (page faults, caches), which wall time includes.

Standard library and GNU time (/usr/bin/time); needs `cmake --build build --target memoplan_preload large_blocks`
(and perf, Debian's linux-perf, for --perf).
"""
import argparse
import csv
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = "/usr/lib/x86_64-linux-gnu"
ALLOCATORS = {  # name: (preloaded libraries after the shim or alone, MEMOPLAN_CONF, fallback row)
    "glibc": ([], None, None),
    "jemalloc": ([f"{LIB}/libjemalloc.so.2"], None, None),
    "tcmalloc": ([f"{LIB}/libtcmalloc_minimal.so.4"], None, None),
    "mimalloc": ([f"{LIB}/libmimalloc.so.2"], None, None),
    "shim": (["SHIM"], "", "mimalloc"),
    "shim-glibc": (["SHIM"], "fallback:next", "glibc"),
    "shim-mimalloc": (["SHIM"], "fallback:mimalloc", "mimalloc"),
    "shim-nodetect": (["SHIM"], "detect:false", "mimalloc"),  # what pass detection costs
    "shim-tcmalloc": (["SHIM", f"{LIB}/libtcmalloc_minimal.so.4"], "", "tcmalloc"),
    "shim-jemalloc": (["SHIM", f"{LIB}/libjemalloc.so.2"], "", "jemalloc"),
    "shim-old": (["OLD"], "", "mimalloc"),  # --old-shim: another build of the shim, for before/after
}

PYTHON_WORK = r"""
import json, random
random.seed(7)
total = 0
for round_ in range(12):
    records = [{"id": i, "name": "item-%d-%d" % (round_, i), "tags": [str(j) for j in range(i % 7)],
                "score": random.random()} for i in range(40000)]
    text = json.dumps(records)
    back = json.loads(text)
    index = {r["name"]: r for r in back}
    total += len(text) + sum(len(r["tags"]) for r in index.values())
print(total)
"""
PERL_WORK = r"""
srand(7); my %h; my $total = 0;
for my $round (1..6) {
  %h = ();
  for my $i (1..150000) { my $k = "key-$round-$i-" . int(rand(1e6)); $h{$k} = [$i, "v" x ($i % 17)]; }
  my @keys = sort keys %h; $total += scalar(@keys) + length(join(",", @keys[0..999]));
}
print "$total\n";
"""


def programs(args, work):
    """name -> (argv, env additions, stdin path or None)."""
    sql = os.path.join(work, "inserts.sql")
    if not os.path.exists(sql):
        rng = random.Random(1)
        with open(sql, "w") as f:
            f.write("CREATE TABLE t(a INTEGER, b TEXT, c REAL);\nBEGIN;\n")
            for i in range(400000):
                f.write("INSERT INTO t VALUES(%d,'%016x',%f);\n" % (i, rng.getrandbits(64),
                                                                   rng.random()))
            f.write("COMMIT;\nCREATE INDEX tb ON t(b);\n"
                    "SELECT count(*), sum(a) FROM t WHERE b > '8';\n")
    blob = os.path.join(work, "blob.bin")
    if not os.path.exists(blob):
        rng = random.Random(2)
        words = [("%x" % rng.getrandbits(24)).encode() for _ in range(5000)]
        with open(blob, "wb") as f:
            f.write(b" ".join(rng.choice(words) for _ in range(800000)))
    out = {
        "sqlite3": (["sqlite3", ":memory:"], {}, sql),
        "python3": ([sys.executable, "-c", PYTHON_WORK], {"PYTHONMALLOC": "malloc"}, None),
        "python3-pymalloc": ([sys.executable, "-c", PYTHON_WORK], {"PYTHONMALLOC": "pymalloc"},
                             None),
        "perl": (["perl", "-e", PERL_WORK], {}, None),
        "g++": (["g++", "-std=c++17", "-O2", "-c", "-o", "/dev/null", "-I", f"{ROOT}/planner/include",
                 "-I", f"{ROOT}/planner/src", f"{ROOT}/planner/src/exact_search.cc"], {}, None),
        "xz": (["xz", "-6", "-T1", "-c", blob], {}, None),
        "large_blocks": ([os.path.join(ROOT, args.build_dir, "bench", "large_blocks")], {}, None),
    }
    if args.glibc_benchtests:
        built = subprocess.run([f"{ROOT}/bench/glibc_malloc_benchtests.sh", args.glibc_benchtests],
                               capture_output=True, text=True)
        paths = built.stdout.split()
        if built.returncode == 0 and len(paths) == 2:
            simple, thread = paths
            out["glibc-simple"] = ([simple, "64"], {}, None)
            out["glibc-thread"] = ([thread, "1"], {"BENCH_MALLOC_THREAD_DURATION": "2"}, None)
        else:
            print("run_shim_programs: glibc's benchtests did not build; skipped:\n" + built.stderr,
                  file=sys.stderr)
    return out


def glibc_figure(stdout):
    """ns per malloc+free pair from glibc's benchtests: bench-malloc-thread's time_per_iteration,
    or the mean of bench-malloc-simple's twelve *_time fields."""
    values = json.loads(stdout)["functions"]["malloc"][""]
    if "time_per_iteration" in values:
        return float(values["time_per_iteration"])
    times = [float(v) for k, v in values.items() if k.endswith("_time")]
    return sum(times) / len(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--programs", default="sqlite3,python3,python3-pymalloc,perl,g++,xz,"
                   "large_blocks,glibc-simple,glibc-thread")
    p.add_argument("--allocators", default="glibc,jemalloc,tcmalloc,mimalloc,shim,shim-glibc,"
                   "shim-tcmalloc")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--glibc-benchtests", default=os.path.join(tempfile.gettempdir(),
                                                              "memoplan-glibc-benchtests"),
                   help="where bench/glibc_malloc_benchtests.sh builds them ('' to skip)")
    p.add_argument("--old-shim", help="libmemoplan_preload.so of another commit: allocator shim-old")
    p.add_argument("--out", help="default bench/results/shim_programs_<stamp>")
    p.add_argument("--list", action="store_true", help="print the commands and stop")
    p.add_argument("--perf", action="store_true",
                   help="one perf record run each: the allocator's share of the samples")
    args = p.parse_args()

    if args.perf and not shutil.which("perf"):
        sys.exit("run_shim_programs: --perf needs perf (Debian's linux-perf)")
    shim = os.path.join(ROOT, args.build_dir, "interpose", "libmemoplan_preload.so")
    work = os.path.join(tempfile.gettempdir(), "memoplan-shim-programs")
    os.makedirs(work, exist_ok=True)
    wanted = args.programs.split(",")
    available = programs(args, work)
    names = [n for n in wanted if n in available]
    allocs = args.allocators.split(",")
    for a in allocs:
        if a not in ALLOCATORS:
            sys.exit(f"run_shim_programs: unknown allocator {a} ({', '.join(ALLOCATORS)})")
        if a == "shim-old" and not args.old_shim:
            sys.exit("run_shim_programs: shim-old needs --old-shim PATH")

    def environment(alloc, extra):
        preload, conf, _ = ALLOCATORS[alloc]
        env = dict(os.environ, **extra)
        env.pop("LD_PRELOAD", None)
        env.pop("MEMOPLAN_CONF", None)
        if preload:
            named = {"SHIM": shim, "OLD": args.old_shim}
            env["LD_PRELOAD"] = ":".join(named.get(x, x) for x in preload)
        if conf is not None and conf:
            env["MEMOPLAN_CONF"] = conf
        return env

    if args.list:
        for n in names:
            argv, extra, stdin = available[n]
            print(n + ": " + " ".join(argv) + (f" < {stdin}" if stdin else ""),
                  " ".join(f"{k}={v}" for k, v in extra.items()))
        return

    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or os.path.join(ROOT, "bench", "results", f"shim_programs_{stamp}")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    rows = []
    rss_file = os.path.join(work, "peak_rss")
    for r in range(args.rounds):
        for pi, n in enumerate(names):
            argv, extra, stdin = available[n]
            k = (r + pi) % len(allocs)
            for alloc in allocs[k:] + allocs[:k]:
                env = environment(alloc, extra)
                start = time.perf_counter()
                stdin_file = open(stdin) if stdin else subprocess.DEVNULL
                # GNU time measures the peak RSS: a child forked from this interpreter would count
                # the interpreter's pages (ru_maxrss spans the fork before exec).
                proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", rss_file] + argv,
                                        env=env, stdin=stdin_file, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
                stdout = proc.stdout.read()
                stderr = proc.stderr.read()
                _, status, usage = os.wait4(proc.pid, 0)
                wall = time.perf_counter() - start
                with open(rss_file) as f:
                    peak_kib = int(f.read().split()[-1]) if os.waitstatus_to_exitcode(
                        status) == 0 else 0
                if stdin:
                    stdin_file.close()
                ok = os.waitstatus_to_exitcode(status) == 0
                row = dict(round=r, program=n, allocator=alloc, wall_s=round(wall, 4),
                           cpu_s=round(usage.ru_utime + usage.ru_stime, 4),
                           peak_rss_kib=peak_kib, ok=int(ok),
                           output=hashlib.sha1(stdout).hexdigest()[:12])
                if n.startswith("glibc-"):  # their own figure: ns per pair, printed as JSON
                    row["output"] = "json"
                    row["ns_per_pair"] = round(glibc_figure(stdout), 2) if ok else ""
                rows.append(row)
                print(f"round {r} {n:13s} {alloc:14s} {wall:8.3f} s {row.get('ns_per_pair', '')} "
                      f"{peak_kib / 1024:7.1f} MiB"
                      f"{'' if ok else ' FAILED: ' + stderr.decode()[-300:]}", flush=True)
    shares = {}
    if args.perf:
        for n in names:
            argv, extra, stdin = available[n]
            for alloc in allocs:
                shares[(n, alloc)] = allocator_share(argv, environment(alloc, extra), stdin, work)
                print(f"perf {n:13s} {alloc:14s} allocator {shares[(n, alloc)]}", flush=True)
        for row in rows:
            share = shares.get((row["program"], row["allocator"]))
            row["allocator_share_pct"] = "" if share is None else share
    with open(out + ".csv", "w", newline="") as f:
        f.write(f"# {' '.join(sys.argv)}\n# {platform.node()} {platform.processor()} "
                f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}\n")
        fields = list(dict.fromkeys(key for row in rows for key in row))  # ns_per_pair: glibc-*
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)
    table = report(rows, names, allocs)
    if shares:
        table += "\n" + share_report(shares, names, allocs)
    with open(out + ".md", "w") as f:
        f.write(table)
    print(table)
    print(f"wrote {out}.csv and {out}.md")


# perf's dso names of each allocator's code (the shim's includes its compiled-in mimalloc).
ALLOCATOR_DSOS = ("libmemoplan_preload.so", "libmimalloc.so", "libjemalloc.so",
                  "libtcmalloc_minimal.so")


def allocator_share(argv, env, stdin, work):
    """Percent of a perf record run's samples in allocator libraries; None where perf failed or the
    allocator is glibc's (inside libc.so.6)."""
    data = os.path.join(work, "perf.data")
    with open(stdin) if stdin else open(os.devnull) as stdin_file:
        recorded = subprocess.run(["perf", "record", "-q", "-o", data, "--"] + argv, env=env,
                                  stdin=stdin_file, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    if recorded.returncode != 0:
        return None
    report_run = subprocess.run(["perf", "report", "-i", data, "--sort", "dso", "--stdio", "-q"],
                                capture_output=True, text=True)
    total, found = 0.0, False
    for line in report_run.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0].endswith("%"):
            if any(fields[1].startswith(d) for d in ALLOCATOR_DSOS):
                total += float(fields[0].rstrip("%"))
                found = True
    preloaded = env.get("LD_PRELOAD", "")
    return round(total, 2) if found or preloaded else None


def share_report(shares, names, allocs):
    lines = ["| program | allocator | allocator's share of samples % | implied / its fallback |",
             "|---|---|---|---|"]
    for n in names:
        for a in allocs:
            share = shares.get((n, a))
            fb = ALLOCATORS[a][2]
            fb_share = shares.get((n, fb)) if fb else None
            # Where the allocator is most of the time (glibc's benchtests) the ratio magnifies
            # the shares' noise many times over: left out above half.
            implied = (f"{(100 - fb_share) / (100 - share):.3f}"
                       if share is not None and fb_share is not None and max(share, fb_share) < 50
                       else "")
            lines.append(f"| {n} | {a} | {'' if share is None else share} | {implied} |")
    return "\n".join(lines) + "\n"


def quartiles(values):
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def figure(row):
    """What a row is compared by: glibc's benchtests' ns per pair, else wall seconds."""
    return row["ns_per_pair"] if row.get("ns_per_pair") not in (None, "") else row["wall_s"]


def report(rows, names, allocs):
    lines = ["| program | allocator | wall s (glibc-*: ns/pair), median (q1-q3) | peak RSS MiB "
             "| / its fallback | / best allocator | output |", "|---|---|---|---|---|---|---|"]
    for n in names:
        med = {}
        for a in allocs:
            cell = [r for r in rows if r["program"] == n and r["allocator"] == a and r["ok"]]
            if cell:
                med[a] = statistics.median(figure(r) for r in cell)
        plain = [a for a in med if not a.startswith("shim")]
        best = min((med[a] for a in plain), default=None)
        outputs = {r["output"] for r in rows if r["program"] == n and r["ok"]}
        for a in allocs:
            cell = [r for r in rows if r["program"] == n and r["allocator"] == a]
            good = [r for r in cell if r["ok"]]
            if not good:
                lines.append(f"| {n} | {a} | failed | | | | |")
                continue
            q1, m, q3 = quartiles([figure(r) for r in good])
            rss = statistics.median(r["peak_rss_kib"] for r in good) / 1024
            fb = ALLOCATORS[a][2]
            own = f"{m / med[fb]:.3f}" if fb and fb in med else ""
            vs_best = f"{m / best:.3f}" if best and a.startswith("shim") else ""
            same = "same" if len(outputs) == 1 else "DIFFERS"
            lines.append(f"| {n} | {a} | {m:.3f} ({q1:.3f}-{q3:.3f}) | {rss:.1f} | {own} | "
                         f"{vs_best} | {same} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
