"""The package map of sun_lightning: each package's level, and the imports between packages read from the code.

``python -m tests.layers`` prints the generated part of docs/architecture.md; ``tests/unit/test_layers.py`` checks
that every import points down and that the document shows what the code does.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sun_lightning"

#: Each package (or top-level module) of sun_lightning on its own level; a module imports only from lower levels
#: and from its own package.
LEVELS: dict[str, tuple[int, str]] = {
    "_moved": (0, "the earlier import paths (modules and names), resolved to where the code lives now"),
    "keys": (0, "TensorDict keys, the one list"),
    "errors": (0, "the one-line errors and how they are reported"),
    "envconfig": (1, "what a config says of an env before it is built: gridworld maps, data.goal (no torch)"),
    "domains": (1, "the annotated domains of config values (positive ints, probabilities)"),
    "methods": (1, "the methods table: a method name → its config"),
    "losses": (1, "TD(λ) returns and losses, pure tensor functions (SPEC §5)"),
    "networks": (2, "Q networks, encoders, ensembles (SPEC §8)"),
    "native": (3, "the optional C kernels, each behind its torch reference"),
    "tracking": (4, "run naming, the MLflow store, the Lightning logger with its durable queue"),
    "checkpoints": (5, "checkpoint integrity, run identity, safe unpickling, RNG state, run folders"),
    "envs": (6, "the environments and their goal spaces (SPEC §6)"),
    "replay": (7, "the replay storage D, pseudocounts (SPEC §4), relabelling samplers (SPEC §5)"),
    "metrics": (8, "coverage, entropy, behaviour and goal-reaching evaluation (SPEC §7)"),
    "goals": (9, "the selection rules and the goal selection transform (SPEC §3)"),
    "learners": (10, "the SVF learners: DQN and TD3 variants, ensembles (SPEC §5, §8)"),
    "results": (11, "heatmaps, curves, reports and studies of finished runs"),
    "exploration": (12, "the agent–environment loop: build, step, record, events, resume state (SPEC §9)"),
    "callbacks": (13, "Lightning callbacks: checkpoints, logging, evaluation, heatmaps, progress"),
    "study": (14, "many runs: the local runner, Ray, the comparison report"),
    "run": (15, "the command line: the pre-check, LightningCLI, the runtime's settings"),
    "compare": (16, "the comparison runner (python -m sun_lightning.compare)"),
    "__main__": (16, "python -m sun_lightning"),
}


def owner(module: str) -> str | None:
    """The package (or top-level module) of sun_lightning a dotted module name belongs to; ``None`` outside."""
    parts = module.split(".")
    if parts[0] == "callbacks":  # the top-level compatibility name of sun_lightning.callbacks
        return "callbacks"
    if parts[0] != "sun_lightning" or len(parts) == 1:
        return None
    return parts[1]


def imports_of(path: Path) -> set[str]:
    """The project modules ``path`` imports (absolute imports; the project uses no relative ones)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in out if owner(name) is not None}


#: The packages that may read ``trainer.datamodule`` (or any ``.datamodule``): the exploration itself, whose
#: :func:`~sun_lightning.exploration.view.run_view` hands every other reader a typed view of the run.
DATAMODULE_READERS = {"exploration"}


def datamodule_reads(path: Path) -> list[int]:
    """The lines of ``path`` that reach through a ``.datamodule`` attribute (``trainer.datamodule.frames``, say)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Attribute) and node.attr == "datamodule")


def files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


def package_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def edges() -> dict[str, set[str]]:
    """Package → the packages its modules import (itself excluded)."""
    out: dict[str, set[str]] = {}
    for path in files():
        own = package_of(path)
        out.setdefault(own, set())
        for name in imports_of(path):
            other = owner(name)
            if other in LEVELS and other != own:
                out[own].add(other)
    return out


def architecture_table() -> str:
    """The generated package table of docs/architecture.md: level, package, what it holds, what it imports."""
    graph = edges()
    rows = ["| level | package | holds | imports |", "|---|---|---|---|"]
    for name, (level, holds) in sorted(LEVELS.items(), key=lambda item: (item[1][0], item[0])):
        kind = "" if (PACKAGE / name).is_dir() else ".py"
        deps = ", ".join(f"`{d}`" for d in sorted(graph.get(name, ()), key=lambda d: (-LEVELS[d][0], d)))
        rows.append(f"| {level} | `{name}{kind}` | {holds} | {deps or '—'} |")
    return "\n".join(rows) + "\n"


def step_order() -> str:
    """The loop of :func:`sun_lightning.exploration.loop.collect`, as a code block (its source)."""
    path = PACKAGE / "exploration" / "loop.py"
    source = path.read_text()
    stream = next(node for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.FunctionDef) and node.name == "collect")
    loop = next(node for node in stream.body if isinstance(node, ast.While))
    return "```python\n" + textwrap.dedent(" " * loop.col_offset + ast.get_source_segment(source, loop)) + "\n```\n"


#: The generated sections of docs/architecture.md: (begin marker, end marker, generator).
SECTIONS = [("<!-- packages: generated by python -m tests.layers -->", "<!-- end of the generated packages -->",
             architecture_table),
            ("<!-- step order: generated from exploration/loop.py -->", "<!-- end of the step order -->", step_order)]
DOC = ROOT / "docs" / "architecture.md"


def document_section(text: str, begin: str, end: str) -> str:
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"


def write_document() -> None:
    text = DOC.read_text()
    for begin, end, generate in SECTIONS:
        head, rest = text.split(begin, 1)
        text = head + begin + "\n" + generate() + end + rest.split(end, 1)[1]
    DOC.write_text(text)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_document()
    else:
        for _, _, generate in SECTIONS:
            print(generate())
