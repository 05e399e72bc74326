"""The command line the figures drawn from run checkpoints share (:mod:`~sun_lightning.results.radius_maps`,
:mod:`~sun_lightning.results.svf_maps`): checkpoints in, one PNG out, a checkpoint that cannot be drawn named in one
line (exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from matplotlib.figure import Figure

from sun_lightning.results.heatmaps import save_png

T = TypeVar("T")


def checkpoint_parser(module: str, doc: str, each: str) -> argparse.ArgumentParser:
    """A parser for ``python -m <module> CKPT [CKPT ...] --out FILE`` (``each``: what one checkpoint becomes)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path,
                        help=f"run checkpoints (a finished run's last.ckpt), one {each} each")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    return parser


def read_each(parser: argparse.ArgumentParser, paths: Sequence[Path], read: Callable[[Path], T]) -> list[T]:
    """``read`` of each checkpoint; a missing file or a ``ValueError`` of ``read`` ends the command in one line."""
    out = []
    for path in paths:
        if not path.is_file():
            parser.error(f"no checkpoint at {path}")
        try:
            out.append(read(path))
        except ValueError as error:
            parser.error(str(error))
    return out


def write(figure: Figure, out: Path) -> None:
    """Save ``figure`` as ``out`` (its folder created) and print the path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    print(save_png(figure, out))
