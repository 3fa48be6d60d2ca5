#!/usr/bin/env bash
# Prints the path of a cuobjdump: the one on PATH, the CUDA toolkit's, or the copy that Triton's
# wheel (a dependency of torch) carries. Exits 1 when there is none.
c=$(command -v cuobjdump 2>/dev/null) && { echo "$c"; exit 0; }
for d in "${CUDA_HOME:-}" /usr/local/cuda; do
  [ -n "$d" ] && [ -x "$d/bin/cuobjdump" ] && { echo "$d/bin/cuobjdump"; exit 0; }
done
t=$(python3 -c 'import os, triton; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))' 2>/dev/null)
[ -n "$t" ] && [ -x "$t" ] && { echo "$t"; exit 0; }
exit 1
