#!/usr/bin/env bash
# Fetches into .whl/ (git-ignored) the wheels that the lent GPU machines lack, for their Python 3.12: the packages
# below at the versions this project's environment resolved (the active python's), so that the GPU runs the same
# stack as the CPU. bench/gpu_check.sh and bench/gpu_study.sh install .whl/ into /tmp/site when they start; the
# `run` call names .whl in its carry (36 MB of the 64 MiB it may carry).
#
# Usage, from the repository root, with the project's venv active: bash bench/gpu_wheels.sh
set -euo pipefail
PY=${PY:-python}
# What the GPU machine's Python lacks (its torch, lightning and numpy stay): this project's own dependencies and
# theirs, as `pip show` on that machine found them missing.
NAMES="torchrl tensordict gymnasium farama-notifications mujoco mujoco-core glfw jsonargparse docstring-parser typeshed-client
  mlflow-skinny mlflow-tracing alembic mako sqlalchemy sqlparse gitpython gitdb smmap cachetools databricks-sdk
  fastapi starlette pydantic pydantic-core annotated-types typing-inspection importlib-metadata orjson cryptography
  cffi pycparser opentelemetry-api opentelemetry-sdk opentelemetry-proto opentelemetry-semantic-conventions pyvers"
pins=$($PY - $NAMES <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

missing = []
for name in sys.argv[1:]:
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        missing.append(name)
if missing:
    sys.exit(f"not installed here (install the project first: pip install -e '.[test]'): {' '.join(missing)}")
EOF
)
mkdir -p .whl
# pip matches manylinux_2_N exactly: the tags these wheels are published under.
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl $pins
echo "$(ls .whl/*.whl | wc -l) wheels in .whl/ ($(du -sh .whl | cut -f1))"
