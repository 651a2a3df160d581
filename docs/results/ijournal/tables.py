#!/usr/bin/env python3
"""Summary tables of docs/results/ijournal from the results.json files `cjfs bench run` wrote.

    python3 docs/results/ijournal/tables.py [DIR]   # prints markdown (run.sh writes tables.md)
    LOAD=alone python3 docs/results/ijournal/tables.py DIR   # a run that had the machine to itself
"""
import json
import os
import sys

base = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
# What else ran on the machine (LOAD=alone for a quiet run).
LOAD = os.environ.get("LOAD", "shared: a niced crash suite running beside")


def load(name):
    path = os.path.join(base, name, "results.json")
    return json.load(open(path)) if os.path.exists(path) else None


def ms(us):
    return f"{us / 1e3:.1f}" if us < 1e5 else f"{us / 1e3:.0f}"


def point(r, series, threads=None):
    for p in r["points"]:
        if p["series"] == series and (threads is None or p["threads"] == threads):
            return p
    return None


def header(r):
    m = r["machine"]
    return (f"machine: {m['cpu']} ×{m['cores']}, kernel {m['kernel']} ({LOAD}) · seed {r['seed']} · "
            f"{r['duration_secs']:.0f} s per run · "
            f"{r['reps']} interleaved repetitions · command `{r['command'].split('release/')[-1]}`")


out = []
# 1. fsync tester
levels = [(pct, load(f"fsync-tester-bg{pct}")) for pct in (0, 30, 60)]
levels = [(pct, r) for pct, r in levels if r]
if levels:
    r0 = levels[0][1]
    out.append("### fsync tester: fsync latency, ms (p50 / p95 of the median repetition; n = fsyncs in it)\n")
    out.append(header(levels[-1][1]) + "\n")
    names = [s["name"] for s in r0["series"]]
    devs = {s["name"]: s["device"] for s in r0["series"]}
    out.append("| series | bg share | bg MB/s asked → reached | p50 | p95 | p99 | n | p95 vs jbd2 | p95 vs no bg |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        dev = name.split("/")[0]
        for pct, r in levels:
            p = point(r, name)
            if not p or not p["median_run"]:
                out.append(f"| {name} | {pct} % | - | error | | | | | |")
                continue
            m = p["median_run"]
            f = m["fsync_latency"]
            reached = dict(m["extra"]).get("background_mb_s", 0.0)
            asked = pct / 100.0 * (float(devs[name].split(" MB/s")[0].split()[-1]) if "MB/s" in devs[name]
                                   else float(r["command"].split("--disk-mb-s ")[1].split()[0]))
            vs = "-"
            if name.endswith("/ijournal"):
                b = point(r, f"{dev}/jbd2")
                if b and b["median_run"]:
                    vs = f"{f['p95'] / b['median_run']['fsync_latency']['p95']:.2f}×"
            base0 = point(levels[0][1], name)
            rise = f"{f['p95'] / base0['median_run']['fsync_latency']['p95']:.1f}×" if base0 and pct else "-"
            out.append(f"| {name} | {pct} % | {asked:.0f} → {reached:.0f} | {ms(f['p50'])} | {ms(f['p95'])} | "
                       f"{ms(f['p99'])} | {f['count']} | {vs} | {rise} |")
    out.append("")
    out.append("How the fsyncs were served (median repetition): cjfs `ijournal` share served by an "
               "i-transaction and the mean time a served fsync spent on its data and on its record; "
               "kernel: JBD2 transactions and fast commits during the run.\n")
    out.append("| series | bg share | fsyncs | served / fast commits | data ms | record ms | full commits |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        if name.endswith("/jbd2"):
            continue
        for pct, r in levels:
            p = point(r, name)
            if not p or not p["median_run"]:
                continue
            m = p["median_run"]
            ij, k = m.get("ijournal"), m.get("kernel_journal")
            if ij:
                out.append(f"| {name} | {pct} % | {ij['fsyncs']} | {ij['served_share'] * 100:.0f} % | "
                           f"{ij['data_us'] / 1e3:.1f} | {ij['record_us'] / 1e3:.1f} | "
                           f"{m['journal_summary']['transactions']} |")
            elif k:
                n = m["fsync_latency"]["count"]
                out.append(f"| {name} | {pct} % | {n} | {k['fc_commits']} | - | - | {k['transactions']} |")
    out.append("")

# 2. append + fsync
r = load("append-fsync")
if r:
    out.append("### Append 4 KiB + fsync on one small file (1 thread)\n")
    out.append(header(r) + "\n")
    out.append("| series | ops/s | fsync p50 µs | fsyncs | served by i-transactions | ijournal blocks per fsync | "
               "fallbacks (normal commits on the fsync path) | normal commits in the run (periodic) |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in r["series"]:
        p = point(r, s["name"])
        m = p["median_run"]
        ij = m.get("ijournal")
        tx = m["journal_summary"]["transactions"]
        if ij:
            fb = sum(n for _, n in ij["fallbacks"])
            out.append(f"| {s['name']} | {p['ops_per_sec']:.0f} | {m['fsync_latency']['p50']:.0f} | {ij['fsyncs']} | "
                       f"{ij['served_share'] * 100:.1f} % | {ij['blocks_per_fsync']:.2f} | {fb} | {tx} |")
        else:
            out.append(f"| {s['name']} | {p['ops_per_sec']:.0f} | {m['fsync_latency']['p50']:.0f} | "
                       f"{m['fsync_latency']['count']} | - | - | every fsync | {tx} |")
    out.append("")


def sweep(r, title, extra=True):
    out.append(f"### {title}\n")
    out.append(header(r) + "\n")
    names = [s["name"] for s in r["series"]]
    out.append("| threads | " + " | ".join(names) + " |")
    out.append("|---:|" + "---:|" * len(names))
    for t in r["threads"]:
        cells = []
        for n in names:
            p = point(r, n, t)
            if not p:
                cells.append("-")
            elif p.get("error"):
                cells.append("error")
            elif p.get("ratio"):
                c = p["ratio"]
                cells.append(f"{p['ops_per_sec']:.0f} ({c['median']:.2f}× [{c['lo']:.2f}–{c['hi']:.2f}])")
            else:
                cells.append(f"{p['ops_per_sec']:.0f}")
        out.append(f"| {t} | " + " | ".join(cells) + " |")
    out.append("")
    if not extra:
        return
    out.append("Journal KiB written per fsync (normal log + ijournal) and share of fsyncs served by "
               "i-transactions (grouped: by a concurrent fsync of the same file), median repetition; CPU seconds of the run (2 cores: 2 s of CPU per "
               "second at most):\n")
    out.append("| threads | " + " | ".join(names) + " |")
    out.append("|---:|" + "---:|" * len(names))
    for t in r["threads"]:
        cells = []
        for n in names:
            p = point(r, n, t)
            m = p and p.get("median_run")
            if not m:
                cells.append("-")
                continue
            j, ij = m.get("journal_summary"), m.get("ijournal")
            fs = ij["fsyncs"] if ij else m["fsync_latency"]["count"]
            kib = ((j["log_blocks"] if j else 0) + (ij["blocks"] if ij else 0)) * 4 / max(fs, 1)
            served = ""
            if ij:
                served = f", {ij['served_share'] * 100:.0f} % served"
                if ij.get("grouped_share", 0) > 0:
                    served += f" + {ij['grouped_share'] * 100:.0f} % grouped"
            cells.append(f"{kib:.1f} KiB{served}, {m['cpu_secs']:.1f} CPU s")
        out.append(f"| {t} | " + " | ".join(cells) + " |")
    out.append("")


r = load("ramdisk-sysbench-fig9")
if r:
    sweep(r, "Fig. 9 sysbench (sysbench-seq) on the RAM disk: ops/s (a write and its fsync are two ops), ratio to jbd2")
for w in ("varmail-shared", "dbench", "oltp-insert"):
    r = load(f"nvme-{w}")
    if r:
        sweep(r, f"{w} on the emulated NVMe SSD: ops/s, ratio to jbd2")
print("\n".join(out))
