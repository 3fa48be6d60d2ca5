"""Reads ptxas -v output (one translation unit, one arch) and fails on spills not allowed by
scripts/spill_allow.txt (see that file). Used by check_sass.sh; no GPU, no torch.

    python3 scripts/spill_check.py PTXAS_TXT ARCH ALLOW_FILE
Prints one line per spilling kernel (allowed or not); exits 1 if any is not allowed."""
from __future__ import annotations

import re
import sys


def allowed(path: str, arch: str) -> list[tuple[str, int, int]]:
    rows = []
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        a, name, st, ld = line.split()[:4]
        if a == arch:
            rows.append((name, int(st), int(ld)))
    return rows


def main(argv: list[str]) -> int:
    txt, arch, allow_file = argv
    allow = allowed(allow_file, arch)
    bad = 0
    name = None
    for line in open(txt):
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name is not None:
            st, ld = int(m.group(1)), int(m.group(2))
            if st or ld:
                ok = any(sub in name and st <= ms and ld <= ml for sub, ms, ml in allow)
                print(f"{'allowed' if ok else '!! SPILLS'}: {name} {arch}: {st} bytes spill stores, {ld} loads")
                bad |= not ok
            name = None
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
