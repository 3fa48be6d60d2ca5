"""Summarize an Nsight Compute report (made with ``--set full``) into a short text: per profiled
kernel the time, the throughputs, the scheduler figures and the warp-stall samples by reason, then
(--sass N) the N SASS instructions with the most stall samples and their main reasons.

    python scripts/ncu_summary.py REPORT.ncu-rep [--sass 30] [--ncu PATH]

Reads the report through ``ncu -i`` (its raw and source pages as CSV); nothing else is needed.
"""
from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys

RAW = {  # metric -> label
    "gpu__time_duration.sum": "duration",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM %",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM %",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2 %",
    "l1tex__throughput.avg.pct_of_peak_sustained_active": "L1 %",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue %",
    "smsp__warps_active.avg.per_cycle_active": "warps/sched",
    "smsp__warps_eligible.avg.per_cycle_active": "eligible/sched",
    "smsp__inst_executed.sum": "warp instr",
    "launch__registers_per_thread": "regs",
    "launch__grid_size": "grid",
    "launch__block_size": "block",
}
STALL = "smsp__pcsamp_warps_issue_stalled_"


def _csv(args: list[str]) -> list[list[str]]:
    out = subprocess.run(args, capture_output=True, text=True, check=False).stdout
    start = out.find('"')  # ncu prints a banner before the CSV
    return list(csv.reader(io.StringIO(out[start:] if start >= 0 else "")))


def _num(s: str) -> float | None:
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def raw_summary(ncu: str, rep: str) -> list[str]:
    rows = _csv([ncu, "-i", rep, "--page", "raw", "--csv"])
    if len(rows) < 3:
        return ["(no raw page)"]
    head, units, data = rows[0], rows[1], rows[2:]
    col = {h: i for i, h in enumerate(head)}
    lines = []
    for r in data:
        name = r[col["Kernel Name"]] if "Kernel Name" in col else "?"
        lines.append(f"== {r[col['ID']] if 'ID' in col else ''} {name[:110]}")
        parts = []
        for m, label in RAW.items():
            if m in col:
                parts.append(f"{label} {r[col[m]]}{(' ' + units[col[m]]) if m == 'gpu__time_duration.sum' else ''}")
        lines.append("   " + ", ".join(parts))
        stalls = []
        for h, i in col.items():
            if h.startswith(STALL) and h.endswith(".sum") and "not_issued" not in h:
                v = _num(r[i])
                if v:
                    stalls.append((v, h[len(STALL):-len(".sum")]))
        tot = sum(v for v, _ in stalls)
        if tot:
            stalls.sort(reverse=True)
            lines.append("   stall samples: " + ", ".join(f"{n} {100 * v / tot:.0f}%" for v, n in stalls[:9]))
    return lines


def sass_summary(ncu: str, rep: str, top: int) -> list[str]:
    rows = _csv([ncu, "-i", rep, "--page", "source", "--csv", "--print-source", "sass"])
    lines: list[str] = []
    seen: set[tuple] = set()  # (ncu may print a kernel's table twice)
    i = 0
    while i < len(rows):  # one table per kernel: a header row, then its instructions
        head = rows[i]
        if "Source" not in head:
            i += 1
            continue
        col = {h: j for j, h in enumerate(head)}
        samp = next((h for h in head if h.startswith("Warp Stall Sampling (All")), None)
        body = []
        i += 1
        while i < len(rows) and "Source" not in rows[i]:
            body.append(rows[i])
            i += 1
        key = tuple(tuple(r) for r in body)
        if key in seen:
            continue
        seen.add(key)
        if samp is None:
            lines.append("(no sampling column: " + ", ".join(head[:12]) + ")")
            continue
        # per-reason sample columns (the "(Not Issued)" twins only repeat them)
        reasons = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]
        tot = sum(_num(r[col[samp]]) or 0 for r in body)
        lines.append(f"-- SASS ({len(body)} instructions, {tot:.0f} samples); top {top}:")
        body.sort(key=lambda r: -(_num(r[col[samp]]) or 0))
        for r in body[:top]:
            n = _num(r[col[samp]]) or 0
            why = sorted(((_num(r[col[h]]) or 0, h) for h in reasons), reverse=True)[:3]
            addr = r[col["Address"]] if "Address" in col else ""
            lines.append(f"  {n:5.0f} {100 * n / max(tot, 1):4.1f}%  {addr:>6} {r[col['Source']][:60]:60} "
                         + " ".join(f"{h}={v:.0f}" for v, h in why if v))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report")
    ap.add_argument("--sass", type=int, default=0, help="also the top N SASS instructions by stall samples")
    ap.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    a = ap.parse_args(argv)
    out = raw_summary(a.ncu, a.report)
    if a.sass:
        out += sass_summary(a.ncu, a.report, a.sass)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
