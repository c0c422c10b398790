#!/bin/bash
# The judge boundary (#33) on a GPU, one device call: where an evaluation's time goes (cProfile
# of both workers), the GPU cheat and attack tests, and throughput. Results go to $OUT.
#   command: bash bench/judge_device.sh profile|tests|throughput|fidelity
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KFORGE_CACHE=/tmp/kforge-cache
OUT=${OUT:-/tmp/kforge-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation . 2>&1 | grep -v WARNING | tail -1
for part in "$@"; do
  case $part in
    profile)  # one example twice (cold, warm) with both workers profiled; phases and the wall-clock line
      for run in cold warm; do
        /usr/bin/time -f "matmul_bias_relu_cuda $run: %e s wall" env KFORGE_PROFILE_WORKER="$OUT/prof-$run" \
          kforge eval examples/tasks/matmul_bias_relu.py examples/candidates/matmul_bias_relu_cuda.py --json > "$OUT/eval-$run.json"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['status'], d.get('cheats'), d.get('speedup_vs_eager')); print('\n'.join(l for l in d['log'].splitlines() if 'phases' in l or 'wall-clock' in l))" "$OUT/eval-$run.json"
      done
      for f in "$OUT"/prof-warm/*.txt; do echo "== $f"; grep -v "^ *$" "$f" | sed -n 1,45p | cut -c1-180; done
      kforge eval tests/fixtures/tasks/scale_relu.py tests/fixtures/candidates/scale_relu_torch.py --json --no-compile-baseline > "$OUT/small.json"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('small:', d['status'], d.get('cheats'), d.get('speedup_vs_eager')); print('\n'.join(l for l in d['log'].splitlines() if 'wall-clock' in l or 'phases' in l))" "$OUT/small.json" ;;
    tests)
      timeout 400 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cheats_gpu.py -k "not example and not ncu and not sanitiz" 2>&1 | tee "$OUT/gpu_tests.log" | tail -30 ;;
    throughput)
      (cd bench && timeout ${THROUGHPUT_TIMEOUT:-420} python3 bench_throughput.py --limit ${THROUGHPUT_LIMIT:-20} --passes cold,warm --compile-workers 16) 2>&1 | tee "$OUT/throughput.log" | tail -50 ;;
    fidelity)
      (cd bench && timeout ${FIDELITY_TIMEOUT:-560} python3 bench_fidelity.py ../.kb/KernelBench --launch-bound --tasks ${FIDELITY_TASKS:-3/20} --repeat ${FIDELITY_REPEAT:-2}) 2>&1 | tee "$OUT/fidelity.log" | tail -40 ;;
  esac
done
