#!/usr/bin/env bash
# Profiles the decode kernels with Nsight Compute (one launch each, after warm-up) into OUT/ncu.txt:
# speed of light, pipes, scheduler and warp-stall sections, the register/occupancy launch stats.
#   bash scripts/ncu_profile.sh OUT_DIR [CASE ...]   CASE = "name:args" as scripts/profile_kernels.py
# NCU_SOURCE=1: also a full-set report per case and its per-SASS-instruction table (stall samples per
# instruction) as OUT/<case>.sass.csv, summarized in OUT/<case>.summary.txt (scripts/ncu_summary.py).
# Default cases: nvfp4 34816x5120 at 1/16/32 rows, fp8 at 1 row, head at 1 row, GDN step/chain/tree.
set -uo pipefail
out=${1:?usage: ncu_profile.sh OUT_DIR [CASE ...]}; shift
cases=("$@")
[ ${#cases[@]} = 0 ] && cases=("nvfp4:1" "nvfp4:16" "nvfp4:32" "fp8:1" "head:1" "step:1" "chain:16" "tree:32")
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
sections="--section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats \
 --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats"
for c in "${cases[@]}"; do
  name=${c%%:*}; args=${c#*:}
  case $name in
    nvfp4) k="regex:nvfp4_(skinny|stream)" ;; fp8) k="regex:fp8_(block|stream)" ;; head) k="regex:head" ;;
    rms|add|gated) k="regex:norm" ;;
    *) k="regex:gdn_kernel" ;;
  esac
  echo "==== $c" >> "$out/ncu.txt"
  timeout 120 "$ncu_bin" --kernel-name "$k" --launch-skip 2 --launch-count 1 $sections \
    python3 scripts/profile_kernels.py $name ${args//:/ } >> "$out/ncu.txt" 2>&1 || echo "ncu failed for $c" >> "$out/ncu.txt"
  if [ "${NCU_SOURCE:-0}" = 1 ]; then
    tag=${c//:/_}
    timeout 180 "$ncu_bin" --kernel-name "$k" --launch-skip 2 --launch-count 1 --set full -f -o "$out/$tag" \
      python3 scripts/profile_kernels.py $name ${args//:/ } > /dev/null 2>&1 &&
      "$ncu_bin" -i "$out/$tag.ncu-rep" --page source --csv --print-source sass > "$out/$tag.sass.csv" 2>&1 &&
      python3 scripts/ncu_summary.py "$out/$tag.ncu-rep" --sass 40 --ncu "$ncu_bin" > "$out/$tag.summary.txt" 2>&1 ||
      echo "ncu source page failed for $c" >> "$out/ncu.txt"
    rm -f "$out/$tag.ncu-rep"
  fi
done
