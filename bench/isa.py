"""CPU kernel tables side by side (HEARTH_ISA=avx2 vs avx512 by default):
each of REPEATS rounds runs every workload once per table, the tables
alternating, so that all see the same machine load; prints the medians of
the rounds, the ratio of the last table to the first, and the load average
(/proc/loadavg, 1 minute) before each run.

    python3 bench/isa.py [BUILD_DIR] [GGUF ...]

Workloads: the demo model (`hearth bench --threads THREADS --repeats 3`:
prefill of 512 tokens, decode of 128); the speculative verify rows
(`bench_forward models/hearth-demo 1 256 ROUNDS 1,4,8`: one thread, so the
figure is the calling thread's CPU time, which a loaded machine's stalls
do not add to); a 256-token prefill the same way (`bench_forward
models/hearth-demo 1 1 5 256`); and each GGUF file (`hearth bench --prompt-len 128
--gen-len 32 --repeats 1`).
env: ISAS ("avx2 avx512") REPEATS (3) THREADS (2) ROUNDS (50)"""
import json
import os
import statistics
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build")
ggufs = sys.argv[2:]
isas = os.environ.get("ISAS", "avx2 avx512").split()
repeats = int(os.environ.get("REPEATS", "3"))
threads = os.environ.get("THREADS", "2")
rounds = os.environ.get("ROUNDS", "50")
demo = os.path.join(root, "models", "hearth-demo")


def run(isa, argv):
    env = dict(os.environ, HEARTH_ISA=isa)
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    return out.stdout


def bench(isa, model, extra):
    j = json.loads(run(isa, [os.path.join(build, "hearth"), "bench", "--model", model,
                             "--threads", threads, "--json"] + extra))
    assert j["isa"] == isa, f"asked {isa}, ran {j['isa']}"
    return {"prefill tok/s": j["prefill_tokens_per_s"], "decode tok/s": j["decode_tokens_per_s"]}


def forward(isa, ctx, reps, shapes, what):
    out = run(isa, [os.path.join(build, "bench_forward"), demo, "1", ctx, reps, shapes])
    r = {}
    for line in out.splitlines():
        f = line.split()
        if f and f[0].startswith("T=") and "cpu" in f:
            r[f"{what} {f[0]} cpu ms"] = float(f[f.index("cpu") + 1])
    return r


workloads = [("demo bf16", lambda isa: bench(isa, demo, ["--repeats", "3"])),
             ("demo verify", lambda isa: forward(isa, "256", rounds, "1,4,8", "verify")),
             ("demo prefill", lambda isa: forward(isa, "1", "5", "256", "prefill"))]
for g in ggufs:
    workloads.append((os.path.basename(g),
                      lambda isa, g=g: bench(isa, g, ["--prompt-len", "128", "--gen-len", "32",
                                                      "--repeats", "1"])))

res = {}  # (workload, metric, isa) -> [values]
loads = {}  # (workload, isa) -> [load averages]
for r in range(repeats):
    for name, fn in workloads:
        for isa in isas:
            with open("/proc/loadavg") as f:
                loads.setdefault((name, isa), []).append(f.read().split()[0])
            for metric, v in fn(isa).items():
                res.setdefault((name, metric, isa), []).append(v)
        print(f"round {r + 1}/{repeats}: {name} done", file=sys.stderr, flush=True)

print(f"medians of {repeats} rounds, {threads} threads (verify: 1), load average before each run")
print("| workload | metric | " + " | ".join(isas) + f" | {isas[-1]}/{isas[0]} |")
print("|---|---|" + "---|" * (len(isas) + 1))
for name, _ in workloads:
    metrics = [m for (w, m, i) in res if w == name and i == isas[0]]
    for m in metrics:
        med = [statistics.median(res[(name, m, i)]) for i in isas]
        cells = [f"{v:.2f} (load {', '.join(loads[(name, i)])})" for v, i in zip(med, isas)]
        print(f"| {name} | {m} | " + " | ".join(cells) + f" | {med[-1] / med[0]:.3f} |")
