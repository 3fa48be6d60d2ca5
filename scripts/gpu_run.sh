#!/usr/bin/env bash
# The one GPU job: build for this GPU, run the main job, the GPU tests and the benchmarks, and
# write logs and results into one folder. Works on a machine with no network (nothing is fetched).
#
#   bash scripts/gpu_run.sh OUT_DIR [--arch 9.0a] [--quick] [--no-tests] [--no-bench] [-k PYTEST_EXPR]
#                               [--bench NAME]   (only benchmarks/bench_NAME.py; default: all)
#                               [--tests FILES]  (test files; default: tests)  [--all-tests] (CPU ones too)
#                               [--sweep]        (tile-table sweep first: writes tables/<arch>/, kept in OUT)
#                               [--no-sass]      (skip the resource report: CI makes it on every landing)
# Environment: TEST_TIMEOUT / BENCH_TIMEOUT (seconds, 0 = none) bound the test run and each benchmark
# (the test run is interrupted with SIGINT, so pytest still prints its summary); XDIST_N: test workers.
# --bench takes one name or a comma-separated list (nvfp4,fp8,head).
#
# OUT_DIR receives: run.log (everything), main.json (python -m qwen38_kernels --json),
# sass.txt (per-kernel registers/spills/shared memory for sm_90a and sm_121a, and SASS notes),
# results.tar (benchmarks/results/<gpu>/ as written by the benchmarks), junit.xml (pytest).
set -uo pipefail
out=${1:?usage: gpu_run.sh OUT_DIR [options]}; shift
arch=9.0a quick=0 tests=1 benches=1 kexpr="" only="*" tfiles=tests marker="-m gpu" sweep=0 sass=1
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch=$2; shift ;;
    --quick) quick=1 ;;
    --no-tests) tests=0 ;;
    --no-bench) benches=0 ;;
    -k) kexpr=$2; shift ;;
    --bench) only=$2; shift ;;
    --tests) tfiles=$2; shift ;;
    --all-tests) marker="" ;;
    --sweep) sweep=1 ;;
    --no-sass) sass=0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
log="$out/run.log"
: > "$log"
export PYTHONUNBUFFERED=1
status=0
step() { echo; echo "==== $* ($(date -u +%H:%M:%S))" | tee -a "$log"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$log"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' 2>&1 | tee -a "$log"

step "build (TORCH_CUDA_ARCH_LIST=$arch)"
export TORCH_CUDA_ARCH_LIST="$arch" MAX_JOBS=${MAX_JOBS:-$(nproc)}
if ! python3 -m pip install --no-build-isolation --no-deps --no-index -e . >> "$log" 2>&1; then
  echo "BUILD FAILED (see run.log)"; tail -40 "$log"; exit 1
fi

if [ $sass = 1 ]; then
  step "resource usage and SASS (sm_90a, sm_121a)"
  bash scripts/check_sass.sh "$out/sass.txt" >> "$log" 2>&1 || status=1
  tail -3 "$out/sass.txt" 2>/dev/null
fi

step "main job"
python3 -m qwen38_kernels --no-bench --json "$out/main.json" 2>&1 | tee -a "$log" || status=1

if [ $sweep = 1 ]; then
  step "tile-table sweep (tables/ of this GPU's arch)"
  qs=""; [ $quick = 1 ] && qs="--quick"
  python3 -m qwen38_kernels.sweep --out tables $qs 2>&1 | tee -a "$log" | tail -8 || status=1
  tar -cf "$out/tables.tar" tables
fi

if [ $tests = 1 ]; then
  step "tests (GPU and CPU)"
  # pytest-xdist where installed: a crashing worker is replaced and its test reported as failed
  par=""; python3 -c 'import xdist' 2>/dev/null && par="-n ${XDIST_N:-8}"
  # GPU tests only unless --all-tests: CI runs the CPU ones on every landing
  timeout -s INT ${TEST_TIMEOUT:-0} python3 -m pytest -q $par $marker --junitxml="$out/junit.xml" ${kexpr:+-k "$kexpr"} $tfiles 2>&1 | tee -a "$log" | tail -30 || status=1
fi

if [ $benches = 1 ]; then
  step "benchmarks"
  qflag=""; [ $quick = 1 ] && qflag="--quick"
  for name in ${only//,/ }; do
    for b in benchmarks/bench_$name.py; do
      timeout ${BENCH_TIMEOUT:-0} python3 "$b" $qflag 2>&1 | tee -a "$log" | tail -40 || status=1
      tar -cf "$out/results.tar" benchmarks/results  # what is done so far comes back even if cut
    done
  done
  tar -cf "$out/results.tar" benchmarks/results
fi

step "done: status $status"
exit $status
