"""scripts/spill_check.py: the resource check's spill rule (none, except by name on sm_90a)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "spill_check.py"


def _ptxas(tmp_path, name, stores, loads):
    p = tmp_path / "ptxas.txt"
    p.write_text(f"ptxas info    : Compiling entry function '{name}' for 'sm_90a'\n"
                 f"ptxas info    : Function properties for {name}\n"
                 f"    0 bytes stack frame, {stores} bytes spill stores, {loads} bytes spill loads\n"
                 f"ptxas info    : Used 128 registers\n")
    return p


def _run(ptxas, arch, allow):
    return subprocess.run([sys.executable, str(SCRIPT), str(ptxas), arch, str(allow)], capture_output=True, text=True)


def test_spills_fail_unless_allowed_by_name_arch_and_size(tmp_path):
    allow = tmp_path / "allow.txt"
    allow.write_text("# comment\nsm_90a  kernel_aI  72  36  why\n")
    assert _run(_ptxas(tmp_path, "_Z8kernel_aIiEv", 0, 0), "sm_90a", allow).returncode == 0
    r = _run(_ptxas(tmp_path, "_Z8kernel_aIiEv", 72, 36), "sm_90a", allow)
    assert r.returncode == 0 and "allowed" in r.stdout
    assert _run(_ptxas(tmp_path, "_Z8kernel_aIiEv", 80, 36), "sm_90a", allow).returncode == 1  # more than listed
    assert _run(_ptxas(tmp_path, "_Z8kernel_aIiEv", 72, 36), "sm_121a", allow).returncode == 1  # other arch
    r = _run(_ptxas(tmp_path, "_Z8kernel_bIiEv", 4, 4), "sm_90a", allow)
    assert r.returncode == 1 and "!! SPILLS" in r.stdout


def test_the_shipped_allowlist_names_sm_90a_only():
    rows = [line.split("#", 1)[0].split() for line in (ROOT / "scripts" / "spill_allow.txt").read_text().splitlines()]
    rows = [r for r in rows if r]
    assert rows and all(r[0] == "sm_90a" and int(r[2]) >= 0 and int(r[3]) >= 0 for r in rows)
