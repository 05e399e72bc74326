"""Maze walls in the goal plane, for drawing under the heatmaps of the point and ant mazes (the paper's figures).

A heatmap of a continuous goal space is drawn over its first two goal dimensions
(:class:`~sun_lightning.results.goal_grid.GoalGrid`); in the mazes those are positions, so the map's wall cells
are rectangles of that plane. Point mazes (SPEC §6): cell ``c`` along an axis is ``int(p) + offset``, so the
centre cell spans ``(-1, 1)`` and the others one unit. Ant mazes: cell ``(i, j)`` is the square of side 5
centred at ``(5i - c, 5j - c)``. A maze of more than two dimensions (PointMaze-H) shows its walls'
projection: a column ``(c_0, c_1)`` is drawn as wall where no free cell projects into it.
"""

from __future__ import annotations

import gymnasium
import numpy as np

from sun_lightning.envs import ant_maze, point_maze
from sun_lightning.envs.maze_map import recorded_maze

#: A wall rectangle ``(x0, y0, width, height)`` in the plane of goal dimensions 0 (x) and 1 (y).
Rect = tuple[float, float, float, float]


def point_cell_extent(cell: int, offset: int) -> tuple[float, float]:
    """``(low, high)`` of point-maze cell ``cell`` along one axis (truncation toward zero: the centre cell is 2 wide)."""
    k = cell - offset
    if k == 0:
        return -1.0, 1.0
    return (float(k), k + 1.0) if k > 0 else (k - 1.0, float(k))


def wall_rectangles(env_id: str) -> tuple[Rect, ...]:
    """The wall rectangles of a point or ant maze in its goal plane (dims 0, 1), or of a maze from outside the package
    whose map the run read (:mod:`sun_lightning.envs.maze_map`); ``()`` for every other environment."""
    recorded = recorded_maze(env_id)
    if recorded is not None:
        return recorded.wall_rectangles()
    maze = (gymnasium.spec(env_id).kwargs or {}).get("maze")
    if maze in point_maze.MAZES:
        wall, offset = point_maze.maze_wall(maze), point_maze.MAZES[maze][1]
        projected = wall.all(axis=tuple(range(2, wall.ndim))) if wall.ndim > 2 else wall
        rects = []
        for i, j in np.argwhere(projected):
            (x0, x1), (y0, y1) = point_cell_extent(int(i), offset), point_cell_extent(int(j), offset)
            rects.append((x0, y0, x1 - x0, y1 - y0))
        return tuple(rects)
    if maze in ant_maze.MAPS:
        centres, half = ant_maze.cell_centres(maze), ant_maze.CELL_SIZE / 2
        return tuple((float(centres[i, j, 0] - half), float(centres[i, j, 1] - half), ant_maze.CELL_SIZE,
                      ant_maze.CELL_SIZE) for i, j in np.argwhere(ant_maze.maze_wall(maze)))
    return ()
