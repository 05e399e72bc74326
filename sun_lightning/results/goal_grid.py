"""Where goals land in a picture: gridworld tiles, or bins of the first two goal dimensions (SPEC §7 heatmaps).

Every heatmap of a run (visits, goals selected and reached, V(s₀, g), selection score) is an
image over the same :class:`GoalGrid`, so that panels and runs line up cell for cell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium
import numpy as np
import torch

from sun_lightning.envconfig.layout import DOWN, LAYOUTS, UP
from sun_lightning.envs.registry import GoalSpace, goal_space
from sun_lightning.metrics.coverage import binned_cells
from sun_lightning.results.walls import Rect, wall_rectangles

#: Bins per axis of continuous goal spaces: the metrics' 50 bins per dimension (SPEC §7).
BINS = 50

#: Goal spaces drawn as angles, as the paper draws Pendulum's and Acrobot's heatmaps: env id → the picture's two
#: axes, each a goal dimension or a (cos, sin) pair of goal dimensions drawn as its angle atan2(sin, cos) in [−π, π].
#: Their goals are (cos θ, sin θ, θ̇) and (cos θ₁, sin θ₁, cos θ₂, sin θ₂): drawn as the first two dimensions, a
#: pendulum's states would lie on a circle, its velocity unseen.
#: (Registered ids only: a researcher's own Acrobot, docs/custom-envs.md, has goals of its own.)
ANGLE_AXES: dict[str, tuple[int | tuple[int, int], int | tuple[int, int]]] = {
    "sun_lightning/Pendulum-v0": ((0, 1), 2), "sun_lightning/Acrobot-v0": ((0, 1), (2, 3))}
ANGLE_LABELS = {"sun_lightning/Pendulum-v0": ("θ (rad)", "θ̇ (rad/s)"),
                "sun_lightning/Acrobot-v0": ("θ₁ (rad)", "θ₂ (rad)")}


@dataclass(frozen=True, eq=False)
class GoalGrid:
    """The image geometry of one environment's goal space.

    Gridworlds (exact goal spaces) are drawn as their tiles, row 0 on top as in SPEC §6; every other
    space as ``BINS × BINS`` bins of its first two goal dimensions within the metric bounds (SPEC §6),
    dimension 0 along x and dimension 1 along y. Goals outside the bounds fall into the edge bins, as in
    the metrics (:func:`~sun_lightning.metrics.coverage.binned_cells`).

    Attributes:
        env_id: the registered environment id.
        space: its goal space.
        tiles: drawn as gridworld tiles (else as bins).
        shape: ``(rows, cols)`` of the image.
        low, high: bounds of the two drawn dimensions (bins only).
        wall: ``[rows, cols]`` wall tiles (gridworlds), else ``None``.
        row_walls: rows ``r`` with a wall between rows ``r - 1`` and ``r`` (ThreeRoom's rooms).
        walls: the maze's wall rectangles in the plane of the two drawn dimensions (point and ant mazes;
            :mod:`~sun_lightning.results.walls`), else ``()``.
        axes: the two drawn axes (bins only): a goal dimension, or a (cos, sin) pair drawn as its angle
            (:data:`ANGLE_AXES`).
    """

    env_id: str
    space: GoalSpace
    tiles: bool
    shape: tuple[int, int]
    low: tuple[float, float] = (0.0, 0.0)
    high: tuple[float, float] = (1.0, 1.0)
    wall: np.ndarray | None = None
    row_walls: tuple[int, ...] = ()
    walls: tuple[Rect, ...] = ()
    axes: tuple[int | tuple[int, int], int | tuple[int, int]] = (0, 1)

    @classmethod
    def of(cls, env_id: str) -> GoalGrid:
        """The grid of a registered environment."""
        space = goal_space(env_id)
        if space.exact_counts and space.grid_shape is not None:
            layout = LAYOUTS[gymnasium.spec(env_id).kwargs["layout"]]
            return cls(env_id, space, True, space.grid_shape, wall=layout.wall.reshape(space.grid_shape),
                       row_walls=_row_walls(layout))
        low = space.metric_low or space.low
        high = space.metric_high or space.high
        axes = ANGLE_AXES.get(env_id, (0, 1))
        bounds = []
        for d in axes:
            if isinstance(d, tuple):
                bounds.append((-math.pi, math.pi))
                continue
            lo, hi = (low[d], high[d]) if d < min(len(low), len(high), space.goal_dim) else (-1.0, 1.0)
            # A side without a bound (none in SPEC §6's metric bounds, but the registry allows it): [-1, 1].
            bounds.append((lo, hi) if math.isfinite(lo) and math.isfinite(hi) and hi > lo else (-1.0, 1.0))
        return cls(env_id, space, False, (BINS, BINS), (bounds[0][0], bounds[1][0]), (bounds[0][1], bounds[1][1]),
                   walls=wall_rectangles(env_id), axes=axes)

    @property
    def num_cells(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def extent(self) -> tuple[float, float, float, float] | None:
        """``(x0, x1, y0, y1)`` of the bins for ``imshow`` (``origin="lower"``); ``None`` for tiles."""
        return None if self.tiles else (self.low[0], self.high[0], self.low[1], self.high[1])

    @property
    def axis_labels(self) -> tuple[str, str]:
        if self.tiles:
            return "column", "row"
        if self.env_id in ANGLE_LABELS:
            return ANGLE_LABELS[self.env_id]
        names = getattr(self.space, "goal_names", ())  # a goal space unpickled from before it had names: none
        if not names:
            names = tuple(f"goal dim {i} (obs[{d}])" for i, d in enumerate(self.space.goal_dims or range(self.space.goal_dim)))
        return names[0], names[1] if len(names) > 1 else "—"

    def plane(self, goals: torch.Tensor) -> torch.Tensor:
        """The drawn coordinates ``[N, 2]`` of goal projections ``[N, goal_dim]`` (bins): each of :attr:`axes`, a goal
        dimension (0 where the space has fewer) or the angle of a (cos, sin) pair."""
        goals = goals.reshape(-1, self.space.goal_dim).cpu()
        columns = []
        for d in self.axes:
            if isinstance(d, tuple):
                columns.append(torch.atan2(goals[:, d[1]], goals[:, d[0]]))
            else:
                columns.append(goals[:, d] if d < goals.shape[1] else torch.zeros(len(goals), dtype=goals.dtype))
        return torch.stack(columns, 1)

    def cells(self, goals: torch.Tensor) -> torch.Tensor:
        """Flat image index (``row * cols + col``) of goal projections ``[N, goal_dim]``."""
        goals = goals.reshape(-1, self.space.goal_dim).cpu()
        if self.tiles:
            return self.space.tile(goals)  # tile index r * cols + c: the image's own order
        xy = self.plane(goals)
        # binned_cells puts its first column most significant: (y, x) gives row * cols + col.
        return binned_cells(xy[:, [1, 0]], (self.low[1], self.low[0]), (self.high[1], self.high[0]), BINS)

    def counts(self, cells: torch.Tensor) -> np.ndarray:
        """Image ``[rows, cols]`` of how many of ``cells`` (flat image indices) fall in each cell."""
        cells = cells.reshape(-1).long().cpu()
        return torch.bincount(cells, minlength=self.num_cells).double().numpy().reshape(self.shape)

    def histogram(self, goals: torch.Tensor) -> np.ndarray:
        """Image ``[rows, cols]`` of goal counts."""
        return self.counts(self.cells(goals))

    def maximum(self, goals: torch.Tensor, values: torch.Tensor) -> np.ndarray:
        """Image ``[rows, cols]`` of the largest of ``values`` ``[N]`` per cell of ``goals``; NaN where none."""
        out = torch.full((self.num_cells,), -torch.inf, dtype=torch.float64)
        out.scatter_reduce_(0, self.cells(goals), values.reshape(-1).double().cpu(), "amax")
        out[torch.isinf(out) & (out < 0)] = torch.nan
        return out.numpy().reshape(self.shape)

    def centres(self) -> torch.Tensor:
        """A goal projection per image cell, in image order ``[rows * cols, goal_dim]``: each tile's one-hot
        observation, or each bin's centre (bins: two-dimensional goal spaces only)."""
        if self.tiles:
            return torch.eye(self.num_cells)
        if self.space.goal_dim != 2:
            raise ValueError(f"bin centres are goals only in a 2-D goal space, not in {self.space.goal_dim}-D")
        x = torch.linspace(self.low[0], self.high[0], BINS + 1, dtype=torch.float64)
        y = torch.linspace(self.low[1], self.high[1], BINS + 1, dtype=torch.float64)
        cx, cy = (x[:-1] + x[1:]) / 2, (y[:-1] + y[1:]) / 2
        rows, cols = torch.meshgrid(cy, cx, indexing="ij")  # row = y bin, col = x bin
        return torch.stack([cols.reshape(-1), rows.reshape(-1)], 1).float()

    def position(self, goal: torch.Tensor) -> tuple[float, float]:
        """Where a goal projection ``[goal_dim]`` is drawn: ``(x, y)`` in the image's coordinates."""
        if self.tiles:
            tile = int(self.space.tile(goal.reshape(-1)))
            return float(tile % self.shape[1]), float(tile // self.shape[1])
        x, y = self.plane(goal.reshape(1, -1))[0].tolist()
        return float(x), float(y)


def _row_walls(layout) -> tuple[int, ...]:
    """Rows ``r`` whose boundary with row ``r - 1`` no move crosses between free tiles (SPEC §6's ``-`` lines).

    Read from the dynamics, not the layout text: the walls the agent meets are the ones drawn.
    """
    out = []
    for r in range(1, layout.rows):
        pairs = [(layout.index(r - 1, c), layout.index(r, c)) for c in range(layout.cols)
                 if not layout.wall[layout.index(r - 1, c)] and not layout.wall[layout.index(r, c)]]
        if pairs and all(layout.next_tile[a, DOWN] == a and layout.next_tile[b, UP] == b for a, b in pairs):
            out.append(r)
    return tuple(out)
