#!/usr/bin/env bash
# A comparison study on a lent GPU machine, in one command, its MLflow store brought back.
#
# Usage, from the repository root: bash bench/gpu_study.sh SECONDS COMPARE-ARGS... [-- FIT-ARGS...]
# runs `python -m sun_lightning.compare COMPARE-ARGS` with every run on a GPU share (GPUS_PER_RUN, default 1;
# 0.25 packs four runs onto each GPU, and --jobs defaults to what fits); after SECONDS the runner is
# stopped as Ctrl-C stops it (each running run saves a checkpoint and its MLflow run is marked KILLED).
# The store (mlruns/: the SQLite database and the runs' artifacts), the runner's output and the runs'
# logs come back in $OUT/study.tar.gz; a finished run there is a FINISHED MLflow run like any other.
# Checkpoints stay on the machine (too large to bring back): what did not finish is run again elsewhere.
# Packages the machine lacks can be carried as wheels in .whl/ (bash bench/gpu_wheels.sh fetches them; installed to
# /tmp/site first).
set -uo pipefail
OUT=${OUT:-/tmp/gpu_study}
PY=${PY:-python3}
mkdir -p "$OUT"
budget=$1; shift
unset MUJOCO_GL
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! $PY -c "import torchrl, mlflow" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
nproc
args=("$@")
if $PY -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  args=(--gpus-per-run "${GPUS_PER_RUN:-1}" "${args[@]}")
fi
start=$SECONDS
timeout -s TERM -k 120 "$budget" $PY -m sun_lightning.compare "${args[@]}" 2>&1 | tee "$OUT/compare.log"
echo "=== compare exit ${PIPESTATUS[0]} after $((SECONDS - start)) s ==="
tar -czf "$OUT/study.tar.gz" mlruns $(ls -d results 2>/dev/null) "$OUT/compare.log" 2>/dev/null
ls -la "$OUT"
