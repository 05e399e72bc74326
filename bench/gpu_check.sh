#!/usr/bin/env bash
# The GPU checks in one command (at most 8 minutes) on a machine with a CUDA GPU:
# the CUDA tests, bench/bench_td3.py on CUDA (float32 and bf16, single and ensemble), and a short
# AntMaze-S fit on the GPU; ends with one summary. Logs go to $OUT (default /tmp/gpu_check).
#
# Usage, from the repository root: bash bench/gpu_check.sh
# Packages the machine lacks can be carried as wheels in .whl/ (installed to /tmp/site first).
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
unset MUJOCO_GL
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" | tee "$OUT/device.log"

start=$SECONDS
timeout 200 python3 -m pytest tests/system/test_cuda.py -q -p no:cacheprovider -W ignore 2>&1 | tee "$OUT/tests.log" | tail -20
tests=$(grep -E "passed|failed|error" "$OUT/tests.log" | tail -1)

(cd bench && timeout 170 python3 bench_td3.py --device cuda --updates 30 --threads 8) 2>&1 | tee "$OUT/bench_td3.log" | grep -v -i warn

timeout 100 python3 -m sun_lightning fit --config conf/antmaze.yaml --trainer.accelerator gpu --trainer.devices 1 \
  --data.total_frames 5000 --data.updates_per_frame 1 --metrics.log_every_frames 1000 --trainer.logger false \
  --trainer.enable_progress_bar false --trainer.enable_checkpointing false 2>&1 | tee "$OUT/fit.log" | grep -v -i warn | tail -8

echo "=== summary ($((SECONDS - start)) s) ==="
head -1 "$OUT/device.log"
echo "tests/system/test_cuda.py: ${tests:-no result}"
grep -A3 "^summary" "$OUT/bench_td3.log" | tail -3
grep -E "^precision|^done" "$OUT/fit.log" || echo "fit: no result (see $OUT/fit.log)"
