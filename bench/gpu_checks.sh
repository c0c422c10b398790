#!/bin/bash
# The evaluation engine's GPU measurements and tests, one part per device call (each fits a
# 10-minute call on an H100). Results go to $OUT; record them in docs/results.md and a docs/log/ entry.
#
#   carry: [".kb"] (a KernelBench checkout, for fidelity), [".whl/agent"] (wheels, for tests)
#   command: bash bench/gpu_checks.sh fidelity|launchbound|drift|throughput|tests|profile|kbprofile|convlayout|convs|resnetconvs|autotune|model|strategies|templates|pending|realistic
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kforge-out}
mkdir -p "$OUT"
[ -n "${KFORGE_INSTALLED:-}" ] ||  # set by a caller that installed kforge and runs beside it
  python3 -m pip install -q --no-deps --no-build-isolation . 2>&1 | grep -v WARNING | tail -1
case ${1:-tests} in
  fidelity)    # eager times of problems 1-7 of each level: kforge vs a plain cold-L2 event loop
    (cd bench && python3 bench_fidelity.py ../.kb/KernelBench --per-level 7 ${FIDELITY_ARGS:-}) 2>&1 | tee "$OUT/fidelity.log" ;;
  launchbound) # eager and torch.compile beside a candidate vs plain loops; large inputs (carry .kb)
    (cd bench && python3 bench_memory.py ../.kb/KernelBench --tasks 1/4,1/35,1/45 \
      && python3 bench_fidelity.py ../.kb/KernelBench --launch-bound --tasks 3/3,3/18,3/44) 2>&1 | tee "$OUT/launchbound.log" ;;
  drift)       # one process: plain loops and interleaved rounds alternated (the host's drift; carry .kb)
    (cd bench && python3 bench_drift.py ../.kb/KernelBench --task "${DRIFT_TASK:-3/22}") 2>&1 | tee "$OUT/drift.log" ;;
  throughput)  # the 20 example kernels, compile cache cold then warm; their measured results
    (cd bench && python3 bench_throughput.py --limit 20 --passes cold,warm --compile-workers 16 \
      --write-measured "$OUT/measured.json") 2>&1 | tee "$OUT/throughput.log" ;;
  tests)       # every cheat on CUDA, crashes, ncu and sanitizer, the agent loop (carry .whl/agent)
    [ -d .whl/agent ] && python3 -m pip install -q --no-index --find-links .whl/agent langgraph \
      langgraph-checkpoint-sqlite langchain-core openai 2>&1 | grep -v WARNING | tail -2
    python3 -m pytest -q -m gpu -k "not example" -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" ;;
  profile)     # where one evaluation's time goes (phases, cProfile summary per worker)
    python3 -c "import time; t=time.time(); import torch; a=time.time(); import triton; b=time.time(); torch.zeros(1, device='cuda'); print(f'import torch {a-t:.1f} s, triton {b-a:.1f} s, cuda init {time.time()-b:.1f} s')"
    for cand in softmax_triton softmax_cuda; do
      /usr/bin/time -f "$cand: %e s wall" env KFORGE_PROFILE_WORKER="$OUT/profile-$cand" kforge eval \
        examples/tasks/softmax.py examples/candidates/$cand.py --json > "$OUT/$cand.json"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['status'], [l for l in d.get('log','').splitlines() if 'phases' in l])" "$OUT/$cand.json"
      for f in "$OUT/profile-$cand"/*.txt; do echo "== $f"; grep -v "^ *$" "$f" | head -120 | cut -c1-200; done
    done ;;
  kbprofile)   # ncu of eager KernelBench forwards (carry .kb): which kernels bound each task; PROFILE_LEVEL=2
    (cd bench && python3 profile_kernelbench.py ../.kb/KernelBench --level "${PROFILE_LEVEL:-2}" \
      --json "$OUT/kbprofile-l${PROFILE_LEVEL:-2}.json" ${PROFILE_ARGS:-}) 2>&1 | tee "$OUT/kbprofile.log" ;;
  convlayout)  # torch.compile with and without Inductor's channels-last layout optimization (carry .kb):
               # every L2 1-30 task with a Conv2d/ConvTranspose2d, and L3 4, 6, ..., 20 (CONVLAYOUT_TASKS)
    (cd bench && python3 bench_conv_layout.py ../.kb/KernelBench --json "$OUT/convlayout.json" \
      --tasks "${CONVLAYOUT_TASKS:-2/1,2/2,2/4,2/5,2/10,2/11,2/16,2/17,2/19,2/21,2/25,3/4,3/6,3/8,3/10,3/12,3/14,3/16,3/18,3/20}" \
      --max-seconds "${CONVLAYOUT_SECONDS:-480}") 2>&1 | tee "$OUT/convlayout.log" ;;
  strategies)  # #34's fusions at task level: ResNet-50's bottleneck (conv + BN + ReLU folded into 3xTF32
               # convolutions) and GPT-2's MLP (GELU in the GEMM's epilogue), beside max-autotune
    (cd bench && python3 bench_strategies.py ${STRATEGY_ARGS:-}) 2>&1 | tee "$OUT/strategies.log" ;;
  convs)       # the 3xTF32 implicit-GEMM Conv2d against cuDNN FP32 at KernelBench shapes
    (cd bench && python3 bench_tf32x3.py --convs-only) 2>&1 | tee "$OUT/convs.log" ;;
  resnetconvs) # kforge's NHWC 3xTF32 convolution at ResNet-50's layers (old NCHW kernel, cuDNN NCHW and NHWC
               # beside it), then ResNet-50 whole with its convolutions on it (bench_resnet_convs.py)
    (cd bench && python3 bench_tf32x3.py --resnet && python3 bench_resnet_convs.py) 2>&1 | tee "$OUT/resnetconvs.log" ;;
  autotune)    # max-autotune on L3 ResNet18 (carry .kb, .whl/agent): verified in 24 s in session 3,
               # over 300 s in sessions 4-5. The same batch with the spare worker off, then on,
               # each with its own cold cache; prints each attempt's status and phases.
    python3 -m pip install -q --no-index --find-links .whl/agent langgraph langgraph-checkpoint-sqlite \
      langchain-core 2>&1 | grep -v WARNING | tail -2
    # AUTOTUNE_SPARES="1 0": the arms in that order; AUTOTUNE_TIMEOUT: each evaluation's limit.
    # Per attempt: status, phases (or the timeout), and Inductor's own autotuning totals from
    # the worker's log (SingleProcess AUTOTUNE lines: benchmarking and precompiling seconds).
    for spare in ${AUTOTUNE_SPARES:-1 0}; do
      /usr/bin/time -f "spare worker $spare: %e s wall" env KFORGE_SPARE_WORKER=$spare \
        KFORGE_CACHE=/tmp/kf-autotune-$spare timeout $(( ${AUTOTUNE_TIMEOUT:-420} + 120 )) kforge batch .kb \
        --level 3 --tasks "${AUTOTUNE_TASKS:-9}" --strategies compile-max-autotune --rounds 1 --candidates 1 \
        --no-confirm --eval-timeout "${AUTOTUNE_TIMEOUT:-420}" --quiet --out "/tmp/autotune-$spare" > /dev/null
      for db in /tmp/autotune-$spare/runs/*/*/trajectories.db; do
        python3 -c "import json,re,sqlite3,sys
rows = sqlite3.connect(sys.argv[1]).execute('select a.strategy, r.status, r.result_json from attempts a join results r using (run_id, attempt_id)')
for strategy, status, result in rows:
    log = json.loads(result).get('log') or ''
    tuned = [(float(b), float(p)) for b, p in re.findall(r'AUTOTUNE benchmarking takes ([0-9.]+) seconds and ([0-9.]+) seconds precompiling', log)]
    print(sys.argv[2], strategy, status, re.findall('phases:.*|timed out.*', log)[:1],
          f'autotune lines in the log tail: {len(tuned)}, benchmarking {sum(b for b, _ in tuned):.1f} s, precompiling {sum(p for _, p in tuned):.1f} s')" "$db" "spare=$spare"
      done
    done 2>&1 | tee "$OUT/autotune.log" ;;
  model)       # kforge model end to end on the example models (carry .whl/agent): MODELS="resnet50 gpt2",
               # MODEL_PRECISION, MODEL_ROUNDS, MODEL_MIN_SHARE, MODEL_MAX_REGIONS, MODEL_COMPILE_MODES, MODEL_STRATEGIES,
               # MODEL_SECONDS (each model's limit);
               # each model's summary, e2e figures, events and report come back in model-NAME-PREC.tar.gz.
               # A model cut off by its limit resumes on a fresh machine: put its tarball in .model-runs/
               # (ignored) and carry that folder too; the finished extraction and tasks are kept.
    python3 -m pip install -q --no-index --find-links .whl/agent langgraph langgraph-checkpoint-sqlite \
      langchain-core 2>&1 | grep -v WARNING | tail -2
    mkdir -p /tmp/kforge-bench-model
    for name in ${MODELS:-resnet50 vit_b16 gpt2 llama bert}; do
      earlier=".model-runs/model-$name-${MODEL_PRECISION:-fp32}.tar.gz"
      [ -f "$earlier" ] && tar xzf "$earlier" -C /tmp/kforge-bench-model && echo "$name: resuming from $earlier"
      /usr/bin/time -f "$name: %e s wall" timeout "${MODEL_SECONDS:-540}" python3 bench/bench_model.py \
        "examples/models/$name.py:full" --precision "${MODEL_PRECISION:-fp32}" --rounds "${MODEL_ROUNDS:-4}" \
        --candidates "${MODEL_CANDIDATES:-2}" --compile-modes "${MODEL_COMPILE_MODES:-default,reduce-overhead,max-autotune}" \
        --min-share "${MODEL_MIN_SHARE:-0.03}" ${MODEL_MAX_REGIONS:+--max-regions "$MODEL_MAX_REGIONS"} \
        ${MODEL_STRATEGIES:+--strategies "$MODEL_STRATEGIES"} \
        --out /tmp/kforge-bench-model
      (cd /tmp/kforge-bench-model && tar czf "$OUT/model-$name-${MODEL_PRECISION:-fp32}.tar.gz" \
        --exclude='*.so' --exclude='*.o' --exclude='*.cubin' "$name-${MODEL_PRECISION:-fp32}")
    done 2>&1 | tee "$OUT/model.log" ;;
  templates)   # kforge's memory-bound Triton templates (norms, cross-entropy) and its 3xTF32 flash attention
               # against eager and torch.compile: fraction of the measured copy bandwidth, error vs float64
    (cd bench && python3 bench_templates.py && python3 bench_norm_tiles.py && python3 bench_tf32x3_attention.py && python3 bench_tf32x3_attention.py --masks) 2>&1 | tee "$OUT/templates.log" ;;
  pending)     # what the CPU changed and no GPU has run yet (2026-11-28b; the rest ran that day, docs/data/pending-2026-11-28b/):
               # device-factories as one mode that leaves 0-dim tensors of numbers and pinned buffers on the CPU and
               # builds the FX rewrites' tables on the device (RAFT's graphs: capture failed on both), the index
               # copies the features now count (SAM's graphs), the skipped mask blocks' GPU test at one tile;
               # SAM's decomposed relative positions on the flash kernel (its block first, then its --relpos table)
               # Each step under its own timeout (PENDING_STEP_S, 240 s), so that one slow compile leaves the rest their time.
    step="timeout ${PENDING_STEP_S:-240}"
    ($step python3 -m pytest -q -m gpu tests/test_device_factories.py tests/test_tf32x3_attention.py -p no:cacheprovider; \
      cd bench && $step python3 bench_strategies.py ../bench/realistic/unseen6/sam_vit_b_encoder_window_global_blocks.py --match tf32x3-gemm; \
      $step python3 bench_strategies.py ../bench/realistic/dev/raft_large_correlation_lookup_motion_encoder.py \
        --match device-factories,tf32x3-conv; \
      $step python3 bench_tf32x3_attention.py --relpos) 2>&1 | tee "$OUT/pending.log" ;;
  realistic)   # issue #34's realistic blocks (bench/realistic/README.md; carry .whl/agent): REALISTIC_SET=dev|heldout|unseen|...|unseen5 (or a list file there, e.g. after-unseen5.txt),
               # REALISTIC_ROUNDS (2), REALISTIC_STRATEGIES (families, as --strategies), REALISTIC_SECONDS (no new
               # task after it; 420), REALISTIC_TIMEOUT (the batch stopped, resumable; REALISTIC_SECONDS + 100). The batch folder comes back in
               # realistic-SET.tar.gz; to finish it on a fresh machine put that tarball in .model-runs/ and carry it.
    python3 -m pip install -q --no-index --find-links .whl/agent langgraph langgraph-checkpoint-sqlite \
      langchain-core 2>&1 | grep -v WARNING | tail -2
    set_name=${REALISTIC_SET:-dev}
    mkdir -p /tmp/kforge-realistic
    earlier=".model-runs/realistic-$set_name.tar.gz"
    {
      [ -f "$earlier" ] && tar xzf "$earlier" -C /tmp/kforge-realistic && echo "resuming from $earlier"
      # --max-time starts no task after it, but a task under way runs on: the timeout stops the batch
      # (it resumes) so that the tarball below is always written inside a 10-minute call
      stop="timeout -s INT ${REALISTIC_TIMEOUT:-$(( ${REALISTIC_SECONDS:-420} + 100 ))}"
      if [ -d "/tmp/kforge-realistic/$set_name" ]; then
        $stop kforge batch --resume "/tmp/kforge-realistic/$set_name" --max-time "${REALISTIC_SECONDS:-420}" --quiet
      else
        $stop kforge batch "bench/realistic/$set_name" --rounds "${REALISTIC_ROUNDS:-2}" --candidates 3 --confirm \
          ${REALISTIC_STRATEGIES:+--strategies "$REALISTIC_STRATEGIES"} \
          --max-time "${REALISTIC_SECONDS:-420}" --quiet --out "/tmp/kforge-realistic/$set_name"
      fi
      echo "kforge batch exit $?"
      cat "/tmp/kforge-realistic/$set_name/summary.md" 2>/dev/null
      (cd /tmp/kforge-realistic && tar czf "$OUT/realistic-$set_name.tar.gz" --exclude='*.so' --exclude='*.o' \
        --exclude='*.cubin' "$set_name")
    } 2>&1 | tee "$OUT/realistic.log" ;;
  *) echo "usage: bash bench/gpu_checks.sh fidelity|launchbound|drift|throughput|tests|profile|kbprofile|convlayout|convs|resnetconvs|autotune|model|strategies|templates|pending|realistic" >&2; exit 2 ;;
esac
