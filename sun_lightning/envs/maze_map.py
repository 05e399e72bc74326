"""The map of a maze environment from outside the package (Gymnasium-Robotics' PointMaze and AntMaze families).

A Gymnasium-Robotics maze keeps its layout on ``env.unwrapped.maze``: ``maze_map`` (rows of cells, 1 a wall, anything
else free: 0 or the ``g``/``r``/``c`` markers of its diverse maps), the cell size ``maze_size_scaling`` and the map's
centre ``(x_map_center, y_map_center)``. Cell ``(i, j)`` is the square of that size centred at
``x = (j + 0.5)·s − x_c``, ``y = y_c − (i + 0.5)·s`` (``Maze.cell_rowcol_to_xy``), and the goal of these envs,
``achieved_goal``, is that ``(x, y)``. :class:`~sun_lightning.envs.custom.CustomEnv` reads the map once when it checks
the env and records it under the run's env id, so that the goal bounds (``data.goal.low: auto``), the evaluation
goals (free-cell centres) and the heatmaps' walls come from the maze itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class MazeMap:
    """A maze layout in its goal plane.

    Attributes:
        wall: ``[rows, cols]`` bool, True for wall cells.
        scaling: the side of a cell.
        x_center, y_center: the map's centre offsets (``x = (j + 0.5)·s − x_center``, ``y = y_center − (i + 0.5)·s``).
    """

    wall: np.ndarray
    scaling: float
    x_center: float
    y_center: float

    def centres(self, cells: np.ndarray) -> np.ndarray:
        """``[n, 2]`` the (x, y) centres of cells ``[n, 2]`` given as (row, column)."""
        cells = np.asarray(cells, dtype=np.float64).reshape(-1, 2)
        x = (cells[:, 1] + 0.5) * self.scaling - self.x_center
        y = self.y_center - (cells[:, 0] + 0.5) * self.scaling
        return np.stack([x, y], axis=1)

    def free_centres(self) -> np.ndarray:
        """``[n_free, 2]`` the centre of every free cell, row-major (the evaluation goals of the maze)."""
        return self.centres(np.argwhere(~self.wall))

    def free_bounds(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """``(low, high)`` of the free cells' extent: the box every position the agent can hold lies in."""
        centres, half = self.free_centres(), self.scaling / 2
        return (tuple(float(v) for v in centres.min(0) - half), tuple(float(v) for v in centres.max(0) + half))

    def wall_rectangles(self) -> tuple[tuple[float, float, float, float], ...]:
        """Each wall cell as ``(x0, y0, width, height)`` in the goal plane."""
        half = self.scaling / 2
        return tuple((float(x - half), float(y - half), self.scaling, self.scaling)
                     for x, y in self.centres(np.argwhere(self.wall)))


def maze_map_of(env: Any) -> MazeMap | None:
    """The :class:`MazeMap` of a gymnasium env whose unwrapped env carries a Gymnasium-Robotics ``maze``, else None."""
    maze = getattr(getattr(env, "unwrapped", env), "maze", None)
    if maze is None or not hasattr(maze, "maze_map"):
        return None
    rows = [[cell == 1 for cell in row] for row in maze.maze_map]
    return MazeMap(np.array(rows, dtype=bool), float(maze.maze_size_scaling), float(maze.x_map_center),
                   float(maze.y_map_center))


_MAPS: dict[str, MazeMap] = {}


def record_maze(env_id: str, maze: MazeMap | None) -> None:
    """Record (or forget, for ``None``) the maze map of the env the run knows as ``env_id``."""
    if maze is None:
        _MAPS.pop(env_id, None)
    else:
        _MAPS[env_id] = maze


def recorded_maze(env_id: str) -> MazeMap | None:
    return _MAPS.get(env_id)
