#!/usr/bin/env bash
# A/B of source files against another revision, on the GPU machine, in one call (a lab): builds the
# extension with FILES as they are at REV, runs CMD (output into OUT_DIR/base.txt), puts the working
# tree's FILES back, builds again, runs CMD (OUT_DIR/new.txt). The .cu files of csrc/ are touched
# before each build, since a header's change does not rebuild them. FILES must be tracked at REV.
#
#   bash benchmarks/lab/rev_ab.sh OUT_DIR REV FILE [FILE ...] -- CMD [ARGS ...]
#
# e.g. a header edited in the working tree against HEAD's, timed on 5120x17408 (session 43's FP8 launch
# bounds: benchmarks/results/h200/NOTES.md, the first device step):
#   bash benchmarks/lab/rev_ab.sh $OUT HEAD csrc/gemm/fp8_stream_kernel.cuh -- \
#       python3 benchmarks/lab/fp8_dtype_ab.py --shapes 5120x17408 --rows 1,4,8,16,17,24,32
# REV resolves in the GPU machine's copy of the repository, whose history may end at the last landed main
# rather than at a commit made since (session 44: HEAD there was the landed main): the script prints what REV
# named there; name a landed commit, or keep the base as its own file set.
# Environment: TORCH_CUDA_ARCH_LIST (default 9.0a), MAX_JOBS (default 16). Exits non-zero if a build
# fails; the working tree's files are restored either way.
set -uo pipefail
out=${1:?usage: rev_ab.sh OUT_DIR REV FILE [FILE ...] -- CMD [ARGS ...]}
rev=${2:?usage: rev_ab.sh OUT_DIR REV FILE [FILE ...] -- CMD [ARGS ...]}
shift 2
files=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do files+=("$1"); shift; done
[ $# -gt 1 ] && [ ${#files[@]} -gt 0 ] || { echo "rev_ab.sh: give FILES, then -- and a command" >&2; exit 2; }
shift
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16}
mkdir -p "$out"
keep=$(mktemp -d)
for f in "${files[@]}"; do
  git cat-file -e "$rev:$f" 2>/dev/null || { echo "rev_ab.sh: $f is not tracked at $rev" >&2; exit 2; }
  mkdir -p "$keep/$(dirname "$f")" && cp "$f" "$keep/$f"
done
restore() { for f in "${files[@]}"; do cp "$keep/$f" "$f"; done; }
trap restore EXIT

build() {  # $1: log name
  find csrc -name '*.cu' -exec touch {} +
  if ! python3 -m pip install --no-build-isolation --no-deps --no-index -e . > "$out/$1" 2>&1; then
    tail -30 "$out/$1"
    return 1
  fi
}

echo "rev_ab.sh: $rev is $(git log -1 --format='%h %s' "$rev" 2>/dev/null | cut -c1-100)"
for f in "${files[@]}"; do git show "$rev:$f" > "$f"; done
build build_base.txt || exit 1
echo "== base ($rev)"
"$@" 2>&1 | tee "$out/base.txt"
restore
build build_new.txt || exit 1
echo "== new (working tree)"
"$@" 2>&1 | tee "$out/new.txt"
