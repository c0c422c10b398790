#!/bin/bash
# The evaluation engine's GPU measurements and tests, one part per device call (each fits a
# 10-minute call on an H100). Results go to $OUT; record them in docs/benchmarks.md.
#
#   carry: [".kb"] (a KernelBench checkout, for fidelity)
#   command: bash bench/gpu_checks.sh fidelity|throughput|tests|profile
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kforge-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation . 2>&1 | grep -v WARNING | tail -1
case ${1:-tests} in
  fidelity)    # eager times of problems 1-7 of each level: kforge vs a plain cold-L2 event loop
    (cd bench && python3 bench_fidelity.py ../.kb/KernelBench --per-level 7) 2>&1 | tee "$OUT/fidelity.log" ;;
  throughput)  # the 20 example kernels, compile cache cold then warm; their measured results
    (cd bench && python3 bench_throughput.py --limit 20 --passes cold,warm --compile-workers 16 \
      --write-measured "$OUT/measured.json") 2>&1 | tee "$OUT/throughput.log" ;;
  tests)       # every cheat on CUDA, crashes, ncu and sanitizer, the agent loop
    python3 -m pytest -q -m gpu -k "not example" -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" ;;
  profile)     # where one evaluation's time goes (cProfile summary per worker)
    KFORGE_PROFILE_WORKER="$OUT/profile" kforge eval examples/tasks/softmax.py \
      examples/candidates/softmax_triton.py --json > "$OUT/softmax_triton.json"
    head -60 "$OUT"/profile/*.txt ;;
  *) echo "usage: bash bench/gpu_checks.sh fidelity|throughput|tests|profile" >&2; exit 2 ;;
esac
