#!/bin/bash
# One device call of the KernelBench measurement with the embedded policy. Run it again (with
# the returned folder carried back in) until it prints "batch complete".
#
#   carry: [".kb", ".whl/agent", ".carry/kb"]     (.carry/kb holds the batch folders between calls)
#   .kb is a KernelBench checkout's root (the folder holding KernelBench/level1 ...), e.g.
#   git --git-dir=KERNELBENCH.git archive HEAD | tar x -C .kb   (one level deeper, no task is found)
#   command: bash bench/kernelbench_device.sh kb-fp32 fp32 420
#   then here: mkdir -p .carry/kb && tar xzf <files_at>/kb-fp32.tgz -C .carry/kb
#   (before the next call: it resumes from the carried folder, so a call made without
#   unpacking the last one's redoes that call's tasks in a second lineage)
#   Several GPUs (nvidia-h200-x8): KB_GPUS=0,1,...,7, one batch worker per GPU.
#   Two batches in one call, one GPU each (each with its own KB_CODE, output and .tgz):
#     (KB_GPUS=0 bash bench/kernelbench_device.sh A tf32 420 > $OUT/A.log 2>&1) &
#     KB_GPUS=1 bash bench/kernelbench_device.sh B fp32 420; wait
#   KB_GPUS=0,1,2 KB_TESTS_GPU=3: the GPU test suite on the fourth GPU meanwhile;
#   KB_SIDE="tests convs kbprofile": these parts of bench/gpu_checks.sh there, one after another.
#   KB_CODE=.carry/kforge-REV: the batch runs that snapshot of the package (see below).
#
# Arguments: batch name, precision class (fp32 or tf32), seconds after which no new task starts.
# The selection (fixed when the batch is created): levels 1-3, the first 30 tasks of each level
# by problem number (--limit 30 per level), whatever their results.
set -u
cd "$(dirname "$0")/.."
NAME=${1:-kb-fp32}
PRECISION=${2:-fp32}
BUDGET=${3:-420}
EXTRA=${KB_EXTRA:-}   # KB_LIMIT=N: N tasks per level (default 30). KB_EXTRA e.g. KB_EXTRA="--rounds 1 --no-confirm" to spend less device time per task
GPUS=${KB_GPUS:+--gpus $KB_GPUS}   # KB_GPUS=0,1,2: these GPUs only, one worker each (default: every visible GPU)
# flock: two batches of one call (one per GPU, run side by side) install one at a time
LOCK=$(command -v flock > /dev/null && echo "flock /tmp/kforge-pip.lock")
$LOCK python3 -m pip install -q --no-index --find-links .whl/agent langgraph langgraph-checkpoint-sqlite langchain-core 2>&1 | tail -2
# KernelBench's level-3 Mamba2 problems import einops: installed when its wheel was carried
if ls .whl/agent/einops-*.whl > /dev/null 2>&1; then
  $LOCK python3 -m pip install -q --no-index --find-links .whl/agent einops 2>&1 | tail -2
fi
# KB_CODE=.carry/kforge-5d4a33c: run the batch on that snapshot of the package (carry it), so a
# measurement started with one commit finishes with it while the working tree moves on; made
# here with  mkdir -p .carry/kforge-REV && git archive REV | tar x -C .carry/kforge-REV
CODE=$PWD${KB_CODE:+/$KB_CODE}
[ -f "$CODE/agent/cli.py" ] || { echo "KB_CODE=$KB_CODE: no kforge package there (carry it)" >&2; exit 2; }
KFPATH=/tmp/kfpath-$NAME   # per batch: two batches side by side may run different code
mkdir -p "$KFPATH" && ln -sfn "$CODE" "$KFPATH/kforge"
echo "kforge code: ${KB_CODE:-working tree}"
export PYTHONPATH=$KFPATH PYTHONUNBUFFERED=1 KFORGE_CACHE=/tmp/kforge-cache
# KB_TESTS_GPU=3: the GPU test suite (bench/gpu_checks.sh tests, which installs what the agent
# tests import) runs on that GPU meanwhile; keep it out of KB_GPUS. Its log is $OUT/gpu_tests.log.
if [ -n "${KB_TESTS_GPU:-}" ]; then
  (end=$(( $(date +%s) + BUDGET + 120 ))
   for part in ${KB_SIDE:-tests}; do
     left=$(( end - $(date +%s) )); [ "$left" -gt 30 ] || break
     # the working tree (gpu_checks.sh installs it), not a KB_CODE snapshot
     env -u PYTHONPATH CUDA_VISIBLE_DEVICES=$KB_TESTS_GPU timeout "$left" bash bench/gpu_checks.sh "$part" > /dev/null 2>&1
   done) &
  TESTS_PID=$!
fi
KFORGE="python3 -c 'from kforge.agent.cli import main; main()'"
DIR=.carry/kb/$NAME
mkdir -p .carry/kb
if [ -f "$DIR/batch.json" ]; then
  ARGS="--resume $DIR ${KB_RESUME_EXTRA:-}"   # e.g. KB_RESUME_EXTRA="--eval-timeout 150" (recorded per task)
else
  # KB_SELECT: another selection, e.g. a list file of task paths (relative to the file)
  ARGS="${KB_SELECT:-.kb --level 1,2,3 --limit ${KB_LIMIT:-30}} --precision $PRECISION --out $DIR $EXTRA"
fi
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
t0=$(date +%s)
eval timeout --kill-after=30 $((BUDGET + 150)) $KFORGE batch $ARGS $GPUS --max-time "$BUDGET" --quiet
echo "batch call rc=$? after $(( $(date +%s) - t0 )) s"
python3 - "$DIR" <<'PY'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
meta = json.loads((d / "batch.json").read_text())
done = [json.loads(t)["task"] for t in (d / "results.jsonl").read_text().splitlines() if t.strip()]
left = len(meta["tasks"]) - len(set(done))
print(f"{len(set(done))} of {len(meta['tasks'])} tasks done" + ("; batch complete" if left == 0 else f"; {left} left"))
PY
(cd bench && python3 bench_kernelbench.py "../$DIR" --md "$OUT/$NAME.md" > /dev/null)
if [ -n "${TESTS_PID:-}" ]; then wait "$TESTS_PID"; echo "gpu tests: $(tail -1 "$OUT/gpu_tests.log" 2>/dev/null)"; fi
tar czf "$OUT/$NAME.tgz" -C .carry/kb "$NAME"
ls -la "$OUT"
