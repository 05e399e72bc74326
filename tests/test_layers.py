"""Imports run one way (SPEC §9): envs → replay → goals → learners → data, callbacks, cli.

The pure parts (keys, losses, networks, metrics' maths, native kernels) import none of the layers above them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEVEL = {
    "keys": -1, "errors": -1, "distributed": -1, "precision": -1, "losses": 0, "domains": 0, "safe_pickle": 0, "integrity": 0, "networks": 0, "native": 0,
    "envs": 1,
    "replay": 2,
    "goals": 3, "metrics": 3,
    "learners": 4, "results": 5,
    "data": 5, "cli": 5, "compare": 5, "methods": 5, "tracking": 5, "mlflow_logger": 5, "runtime": 5, "resume": 5,
    "__main__": 5, "callbacks": 5, "evaluation": 5, "study": 5, "identity": 5,
}


def layer(module: str) -> str | None:
    """The layer of a dotted module name of the project, or None for third-party modules."""
    parts = module.split(".")
    if parts[0] == "callbacks":
        return "callbacks"
    if parts[0] != "sun_lightning" or len(parts) == 1:
        return None
    return parts[1]


def project_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in out if layer(name) in LEVEL}


FILES = sorted(p for p in [*(ROOT / "sun_lightning").rglob("*.py"), *(ROOT / "callbacks").glob("*.py")])


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_imports_point_down_the_layers(path):
    rel = path.relative_to(ROOT)
    own = "callbacks" if rel.parts[0] == "callbacks" else (rel.parts[1].removesuffix(".py") if len(rel.parts) > 1 else None)
    if own not in LEVEL:  # the package's own __init__
        return
    for name in project_imports(path):
        other = layer(name)
        assert LEVEL[other] < LEVEL[own] or other == own or (LEVEL[other] == LEVEL[own] and LEVEL[own] >= 5), (
            f"{rel} (layer {own}) imports {name} (layer {other})")
