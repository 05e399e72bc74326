#!/usr/bin/env bash
# Several comparison studies packed onto one lent GPU machine at once, each store brought back.
#
# Usage, from the repository root: MPS=1 bash bench/gpu_studies.sh SECONDS STUDIES-FILE [STUDIES-FILE-WITHOUT-MPS]
# Each non-empty line of STUDIES-FILE (not starting with '#') is NAME COMPARE-ARGS... [-- FIT-ARGS...]: the
# arguments of one `python -m sun_lightning.compare` (bench/gpu_study.sh runs one). Every study runs from a copy
# of the repository of its own (its own ./mlruns store, so no two runners share one SQLite file), all at once,
# every run on the GPU. After SECONDS every runner is stopped as Ctrl-C stops it (each running run saves a
# checkpoint; its MLflow run is marked KILLED). Back in $OUT: NAME.tar.gz (that copy's mlruns/ and the runner's
# log) per study; merge each into the local store with bench/merge_mlflow.py, then report with --report-only.
# With MPS=1 the runs share the GPU through CUDA's Multi-Process Service (kernels of many processes run side by
# side, no context switches between them: launch-bound runs pack many to a GPU); where its daemon does not start
# or a CUDA process cannot run under it, the daemon is stopped and the second studies file (if given) runs instead.
# Packages the machine lacks can be carried as wheels in .whl/ (bash bench/gpu_wheels.sh fetches them; installed to
# /tmp/site first).
set -uo pipefail
OUT=${OUT:-/tmp/gpu_studies}
PY=${PY:-python3}
mkdir -p "$OUT"
budget=$1 studies=$2 fallback=${3:-$2}
unset MUJOCO_GL
export PYTHONUNBUFFERED=1
if ! $PY -c "import torchrl, mlflow" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site"
fi
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
echo "cores: $(nproc)"
accel=(--trainer.accelerator gpu --trainer.devices 1)
$PY -c "import torch, sys; sys.exit(not torch.cuda.is_available())" || accel=()
mps=off
if [[ "${MPS:-0}" == 1 && -n "${accel[*]}" ]] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d && timeout 60 $PY -c "import torch; assert torch.ones(2, device='cuda').sum().item() == 2"; then
    mps=on
  else
    echo quit | nvidia-cuda-mps-control 2>/dev/null
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
fi
[[ $mps == on ]] || studies=$fallback
echo "MPS: $mps; studies: $studies"
repo=$PWD
names=()
while read -r name rest; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  read -r -a args <<<"$rest"
  if [[ " ${args[*]} " != *" -- "* ]]; then args+=(--); fi
  copy=/tmp/studies/$name
  rm -rf "$copy" && mkdir -p "$copy" && (cd "$repo" && tar --exclude=./.whl --exclude=./mlruns --exclude=./checkpoints -cf - .) | tar -xf - -C "$copy"
  (cd "$copy" && PYTHONPATH="$copy${PYTHONPATH:+:$PYTHONPATH}" timeout -s TERM -k 60 "$budget" \
     $PY -m sun_lightning.compare "${args[@]}" "${accel[@]}" >"$OUT/$name.log" 2>&1
   echo "=== $name: compare exit $? ===" >>"$OUT/$name.log") &
  names+=("$name")
done <"$studies"
start=$SECONDS
wait
echo "=== all studies ended after $((SECONDS - start)) s ==="
[[ $mps == on ]] && { echo quit | nvidia-cuda-mps-control; }
for name in "${names[@]}"; do
  tail -n 3 "$OUT/$name.log"
  (cd /tmp/studies/$name && tar -czf "$OUT/$name.tar.gz" mlruns -C "$OUT" "$name.log")
done
ls -la "$OUT"
