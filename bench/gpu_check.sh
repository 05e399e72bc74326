#!/usr/bin/env bash
# The GPU checks in one command (at most 8 minutes) on a machine with a CUDA GPU, ending with one summary:
#  1. the CUDA tests (tests/system/test_cuda.py: captured update = eager, no host reads, resume with graphs);
#  2. the TD3 update at AntMaze-S's sizes, eager and as CUDA graphs, single and 4-critic ensemble, fp32 and bf16;
#  3. the ant maze's env step on 1, 8 and 16 threads (the batched MuJoCo envs use every core by default), against
#     gymnasium's AsyncVectorEnv with a process per world;
#  4. AntMaze-S fits on the GPU: one update per frame, one per 4 frames, and 4 runs of the latter on one GPU at
#     once (the comparison runner's --gpus-per-run 0.25 packs runs the same way).
# Logs go to $OUT (default /tmp/gpu_check).
#
# Usage, from the repository root: bash bench/gpu_check.sh
# Packages the machine lacks can be carried as wheels in .whl/ (bash bench/gpu_wheels.sh fetches them; installed to
# /tmp/site first).
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}
PY=${PY:-python3}
mkdir -p "$OUT"
unset MUJOCO_GL
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! $PY -c "import torchrl, mlflow, mujoco" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" | tee "$OUT/device.log"
echo "$(nproc) cores" | tee -a "$OUT/device.log"
start=$SECONDS

timeout 150 $PY -m pytest tests/system/test_cuda.py -q -o addopts="" -p no:cacheprovider -W ignore 2>&1 | tee "$OUT/tests.log" | tail -20
tests=$(grep -E "passed|failed|error" "$OUT/tests.log" | tail -1)

(cd bench && timeout 110 $PY bench_td3.py --device cuda --configs conf/antmaze.yaml --updates 30 --threads 8) 2>&1 \
  | tee "$OUT/bench_td3.log" | grep -v -i warn

timeout 45 $PY bench/bench_mujoco.py --maze AntMazeS --worlds 16 64 --threads 1 8 16 --world-steps 3000 --repeat 2 --async \
  2>&1 | tee "$OUT/bench_mujoco.log"

fit() {  # fit SECONDS LOG FRAMES UPDATES_PER_FRAME [ARGS...]: AntMaze-S on the GPU, learning from frame 1 000
  local seconds=$1 log=$2 frames=$3 rate=$4
  shift 4
  timeout "$seconds" $PY -m sun_lightning fit --config conf/antmaze.yaml --trainer.accelerator gpu \
    --trainer.devices 1 --data.total_frames "$frames" --data.updates_per_frame "$rate" --eval.every_frames 0 \
    --metrics.log_every_frames 2000 --trainer.logger false --trainer.enable_progress_bar false \
    --checkpoint.every_frames 1000000 "$@" > "$log" 2>&1
}
fps() {  # the last logged window's env frames/s of each log (steady state, after the warm-up)
  for log in "$@"; do grep -o "fps=[0-9]*" "$log" | tail -1 | cut -d= -f2; done
}
fit 60 "$OUT/fit_upf1.log" 16000 1
fit 45 "$OUT/fit_upf025.log" 30000 0.25
for i in 0 1 2 3; do
  fit 60 "$OUT/fit_pack$i.log" 24000 0.25 --seed_everything "$i" --checkpoint.dirpath "/tmp/pack$i" &
done
wait

echo "=== summary ($((SECONDS - start)) s) ==="
cat "$OUT/device.log"
echo "tests/system/test_cuda.py: ${tests:-no result}"
grep -A2 "^summary" "$OUT/bench_td3.log" | tail -2
grep -E "^ *(16|64) " "$OUT/bench_mujoco.log" \
  | awk 'NF == 7 {print "ant env steps/s, " $1 " worlds, " $3 " threads: " $5} NF == 6 {print "ant env steps/s, " $1 " worlds, " $2 " threads: " $4}'
grep "async" "$OUT/bench_mujoco.log" | sed 's/^ */ant env steps\/s, worlds /'
echo "AntMaze-S fit, 1 update per frame: $(fps "$OUT/fit_upf1.log") env frames/s"
echo "AntMaze-S fit, 1 update per 4 frames: $(fps "$OUT/fit_upf025.log") env frames/s"
pack=$(fps "$OUT"/fit_pack*.log | paste -sd+ -)
total=$(fps "$OUT"/fit_pack*.log | awk '{s += $1} END {print s + 0}')
one=$(fps "$OUT/fit_upf025.log")
ratio=$(awk -v t="$total" -v s="${one:-0}" 'BEGIN {if (s > 0) printf "%.2f", t / s; else print "?"}')
echo "4 AntMaze-S runs on one GPU (1 update per 4 frames): ${pack:-none} = $total env frames/s in total, ${ratio}x one run"
grep -h "cuda_graph\|Error\|error:" "$OUT"/fit_*.log | sort | uniq -c | head -5
