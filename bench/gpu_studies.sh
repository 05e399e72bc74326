#!/usr/bin/env bash
# Several comparison studies packed onto one lent GPU machine at once, each store brought back.
#
# Usage, from the repository root: bash bench/gpu_studies.sh SECONDS STUDIES-FILE
# Each non-empty line of STUDIES-FILE (not starting with '#') is NAME COMPARE-ARGS... [-- FIT-ARGS...]: the
# arguments of one `python -m sun_lightning.compare` (bench/gpu_study.sh runs one). Every study runs from a copy
# of the repository of its own (its own ./mlruns store, so no two runners share one SQLite file), all at once,
# every run on the GPU. After SECONDS every runner is stopped as Ctrl-C stops it (each running run saves a
# checkpoint; its MLflow run is marked KILLED). Back in $OUT: NAME.tar.gz (that copy's mlruns/ and the runner's
# log) per study; merge each into the local store with bench/merge_mlflow.py, then report with --report-only.
# Packages the machine lacks can be carried as wheels in .whl/ (installed to /tmp/site first).
set -uo pipefail
OUT=${OUT:-/tmp/gpu_studies}
PY=${PY:-python3}
mkdir -p "$OUT"
budget=$1 studies=$2
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
repo=$PWD
names=()
while read -r name rest; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  read -r -a args <<<"$rest"
  if [[ " ${args[*]} " != *" -- "* ]]; then args+=(--); fi
  copy=/tmp/studies/$name
  rm -rf "$copy" && mkdir -p "$copy" && (cd "$repo" && tar --exclude=./.whl --exclude=./mlruns --exclude=./checkpoints -cf - .) | tar -xf - -C "$copy"
  (cd "$copy" && PYTHONPATH="$copy${PYTHONPATH:+:$PYTHONPATH}" timeout -s TERM -k 120 "$budget" \
     $PY -m sun_lightning.compare "${args[@]}" "${accel[@]}" >"$OUT/$name.log" 2>&1
   echo "=== $name: compare exit $? ===" >>"$OUT/$name.log") &
  names+=("$name")
done <"$studies"
start=$SECONDS
wait
echo "=== all studies ended after $((SECONDS - start)) s ==="
for name in "${names[@]}"; do
  tail -n 3 "$OUT/$name.log"
  (cd /tmp/studies/$name && tar -czf "$OUT/$name.tar.gz" mlruns -C "$OUT" "$name.log")
done
ls -la "$OUT"
