#!/usr/bin/env bash
# Resource usage of every kernel for sm_90a and sm_121a (registers, spills, stack, shared memory)
# from ptxas, plus SASS facts from cuobjdump where it is installed. Needs nvcc only (no GPU, no
# torch): the kernel translation units (csrc/**/*_kernel.cu) are torch-free.
#   bash scripts/check_sass.sh REPORT_FILE
set -uo pipefail
report=${1:?usage: check_sass.sh REPORT_FILE}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$report"
fail=0
cuobjdump=$(bash "$here/scripts/find_cuobjdump.sh") || cuobjdump=""
for cu in $(find "$here/csrc" -name '*_kernel.cu' | sort); do
  name=$(basename "$cu" .cu)
  for sm in 90a 121a; do
    cubin="$tmp/${name}.sm_${sm}.cubin"
    echo "## $name sm_$sm" >> "$report"
    if ! nvcc -std=c++20 -O3 --expt-relaxed-constexpr -arch=sm_$sm -cubin -Xptxas -v \
        -I "$here/csrc" "$cu" -o "$cubin" > "$tmp/ptxas.txt" 2>&1; then
      cat "$tmp/ptxas.txt" >> "$report"; fail=1; continue
    fi
    # one line per kernel: demangled-ish name, registers, spills, stack, shared memory
    grep -E "Compiling entry|Used [0-9]+ registers|spill|stack frame" "$tmp/ptxas.txt" >> "$report"
    # spills: none, except those scripts/spill_allow.txt lets through by name (sm_90a only)
    if ! python3 "$here/scripts/spill_check.py" "$tmp/ptxas.txt" "sm_$sm" "$here/scripts/spill_allow.txt" \
        >> "$report"; then
      echo "!! SPILLS in $name sm_$sm" >> "$report"; fail=1
    fi
    smem=$(grep -oE "Used [0-9]+ registers, [0-9]+ bytes smem" "$tmp/ptxas.txt" | awk '{print $5}' | sort -n | tail -1)
    [ -n "${smem:-}" ] && [ "$smem" -gt 101376 ] && { echo "!! static shared memory $smem > 99 KB" >> "$report"; fail=1; }
    if [ -n "$cuobjdump" ]; then
      "$cuobjdump" --dump-sass "$cubin" > "$tmp/sass.txt" 2>&1
      echo "   SASS: $(grep -c 'LDG.E.128' "$tmp/sass.txt") LDG.E.128, $(grep -c 'STG.E.128' "$tmp/sass.txt") STG.E.128, $(grep -cE 'LDL|STL' "$tmp/sass.txt") local-memory ops, $(grep -c 'F2FP' "$tmp/sass.txt") F2FP, $(grep -c 'HMMA' "$tmp/sass.txt") HMMA" >> "$report"
    fi
  done
done
echo "resource check: $([ $fail = 0 ] && echo OK || echo PROBLEMS)" >> "$report"
exit $fail
