#!/usr/bin/env python3
"""One table per sweep directory under docs/results/waits: throughput and its paired ratio to
the first series, the journal's shared wait-lock time (State, FlushQueue), context switches
and CPU per 1,000 fsyncs and the time polling waits spun (median run of each point), and fsync
p99.9: of the median run, or (sweeps since the lab pools them) over every repetition's fsyncs
together, with its paired per-repetition ratio to the first series. Usage: docs/results/waits/summary.py [DIR...]"""
import json, os, sys

WAIT_LOCKS = {"State", "FlushQueue"}
here = os.path.dirname(os.path.abspath(__file__))
dirs = sys.argv[1:] or sorted(d for d in os.listdir(here) if os.path.isfile(os.path.join(here, d, "results.json")))
for d in dirs:
    path = d if os.path.isabs(d) else os.path.join(here, d)
    r = json.load(open(os.path.join(path, "results.json")))
    mc = r["machine"]
    machine = f"{mc['cpu']} x{mc['cores']}, kernel {mc['kernel']}" if isinstance(mc, dict) else mc
    print(f"#### {os.path.basename(path)}\n\n{machine} · seed {r['seed']} · {r['duration_secs']:.0f} s × {r['reps']} reps\n")
    pooled = any(p.get("fsync_pooled") for p in r["points"])
    if pooled:
        print("| workload | threads | series | ops/s | vs first [90 % CI] | wait-lock ms | ctx sw / 1k fsync | CPU s / 1k fsync | fsync p99.9 µs, all reps | p99.9 vs first [90 % CI] | spin ms |")
        print("|---|---:|---|---:|---|---:|---:|---:|---:|---|---:|")
    else:
        print("| workload | threads | series | ops/s | vs first [90 % CI] | wait-lock ms | ctx sw / 1k fsync | CPU s / 1k fsync | fsync p99.9 µs | spin ms |")
        print("|---|---:|---|---:|---|---:|---:|---:|---:|---:|")
    for p in r["points"]:
        m = p.get("median_run") or {}
        w = (m.get("waits") or {}).get("rows", [])
        lock = sum(x["wait_us"] for x in w if x["kind"] == "lock" and x["name"] in WAIT_LOCKS) / 1e3
        spin = sum(x["wait_us"] for x in w if x["kind"] == "spin") / 1e3
        n = (m.get("fsync_latency") or {}).get("count", 0)
        per_k = lambda x: f"{x * 1000 / n:.{0 if x > 10 else 3}f}" if n else "-"
        ratio = p.get("ratio")
        rs = f"{ratio['median']:.2f} [{ratio['lo']:.2f}–{ratio['hi']:.2f}]" if ratio else "1 (baseline)"
        series = p["series"].split("/", 1)[-1]
        head = f"| {p['workload']} | {p['threads']} | {series} | {p['ops_per_sec']:.0f} | {rs} | {lock:.0f} | {per_k(m.get('context_switches', 0))} | {per_k(m.get('cpu_secs', 0))}"
        if pooled:
            p999 = (p.get("fsync_pooled") or {}).get("p999", 0)
            pr = p.get("fsync_p999_ratio")
            prs = f"{pr['median']:.2f} [{pr['lo']:.2f}–{pr['hi']:.2f}]" if pr else "1 (baseline)"
            print(f"{head} | {p999:.0f} | {prs} | {spin:.0f} |")
        else:
            p999 = (m.get("fsync_latency") or {}).get("p999", 0)
            print(f"{head} | {p999:.0f} | {spin:.0f} |")
    print()
