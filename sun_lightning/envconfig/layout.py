"""Gridworld maps as tables (SPEC §6): the ASCII layouts of ThreeRoom, FourRoomStuck and GridMaze, a user's own
map (:func:`parse_layout`, checked for the mistakes that would make a bad run), and :class:`GridLayout`, the whole
dynamics of one map as arrays.

numpy only: the pre-check (:mod:`sun_lightning.run.precheck`) parses ``data.layout`` with this module before torch is
imported; the environments that step through these tables are :mod:`sun_lightning.envs.gridworlds`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from sun_lightning.errors import ConfigError

#: The namespace of the package's gymnasium ids (``sun_lightning/ThreeRoom-v0``).
NAMESPACE = "sun_lightning"

# Action indices. The 4-action worlds use the first four; GridMaze uses all nine.
LEFT, RIGHT, UP, DOWN, UP_LEFT, UP_RIGHT, DOWN_LEFT, DOWN_RIGHT, STAY = range(9)
# (d_row, d_col) per action; row 0 is the top row, so "up" decreases the row.
MOVES: tuple[tuple[int, int], ...] = (
    (0, -1), (0, 1), (-1, 0), (1, 0), (-1, -1), (-1, 1), (1, -1), (1, 1), (0, 0),
)

WALL, FREE, RANDOM, START, GOAL = "W", ".", "Q", "S", "G"
# A layout line made only of this character is an impassable wall *between* the
# rows above and below it (ThreeRoom's rooms share no wall tile, SPEC §6).
ROW_WALL = "-"

TerminalRule = Literal["none", "enter", "stay"]

#: What each symbol of a layout string means (SPEC §6), for its error messages.
LEGEND = (f"{WALL} wall, {FREE} free, {RANDOM} move replaced by a random one half the time, {START} start, "
          f"{GOAL} terminal; tiles separated by spaces; a line of {ROW_WALL} alone is a wall between two rows")


@dataclass(frozen=True, eq=False)
class GridLayout:
    """Tabular dynamics of one gridworld, built from its ASCII layout (SPEC §6).

    Attributes:
        name: environment name, e.g. ``"FourRoomStuck"``.
        rows, cols: grid shape; tile ``(r, c)`` has flat index ``r * cols + c``.
        num_actions: 4 (L, R, U, D) or 9 (8 moves + stay).
        horizon: episode length before truncation.
        chars: ``[rows, cols]`` layout characters (``W . Q S G``).
        wall: ``[num_tiles]`` bool, tile is a wall.
        next_tile: ``[num_tiles, num_actions]`` int, tile reached by taking the
            (effective) action on a tile; walls, edges, row walls and one-way
            tiles leave the agent in place.
        random_tile: ``[num_tiles]`` bool, Q tile: with probability
            ``replace_prob`` the chosen action is replaced by a uniformly random
            one of all ``num_actions``.
        replace_prob: probability of that replacement on a Q tile.
        terminal: ``[num_tiles, num_actions]`` bool, taking the (effective)
            action on the tile ends the episode.
        start_probs: ``[num_tiles]`` spawn distribution.
        coverable: flat indices of the tiles where an action can be taken: free
            tiles, minus goal tiles that end the episode on entry.
    """

    name: str
    rows: int
    cols: int
    num_actions: int
    horizon: int
    chars: np.ndarray
    wall: np.ndarray
    next_tile: np.ndarray
    random_tile: np.ndarray
    replace_prob: float
    terminal: np.ndarray
    start_probs: np.ndarray
    coverable: tuple[int, ...]

    @property
    def num_tiles(self) -> int:
        return self.rows * self.cols

    def index(self, row: int, col: int) -> int:
        """Flat tile index of ``(row, col)``."""
        return row * self.cols + col

    def one_hot(self, tiles: np.ndarray) -> np.ndarray:
        """Observations ``[..., num_tiles]`` (float32) of a batch of tile indices (a new array)."""
        return self._eye[tiles]

    @cached_property
    def _eye(self) -> np.ndarray:
        # built once, not at every step (writes to __dict__, which the frozen dataclass allows)
        eye = np.eye(self.num_tiles, dtype=np.float32)
        eye.flags.writeable = False
        return eye

    def sample_starts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` start tiles from ``start_probs`` (always ``n`` uniforms)."""
        cdf = np.cumsum(self.start_probs)
        # Dividing by the total makes the last spawn tile's cdf exactly 1, so no
        # uniform in [0, 1) can fall past it onto a zero-probability tile.
        cdf /= cdf[-1]
        return np.searchsorted(cdf, rng.random(n), side="right")

    def transition(
        self, tiles: np.ndarray, actions: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """One step for a batch of agents.

        Args:
            tiles: ``[n]`` current tile indices.
            actions: ``[n]`` chosen actions.
            rng: source of the Q-tile randomness.

        Returns:
            ``(next_tiles, terminated)``, both ``[n]``.
        """
        if self.random_tile.any():
            # Draw for every agent, on a Q tile or not, so the number of draws per
            # step depends only on the batch size (reproducible across envs).
            replace = rng.random(tiles.shape) < self.replace_prob
            random_actions = rng.integers(self.num_actions, size=tiles.shape)
            actions = np.where(self.random_tile[tiles] & replace, random_actions, actions)
        return self.next_tile[tiles, actions], self.terminal[tiles, actions]


def build_layout(
    name: str,
    ascii_layout: str,
    *,
    num_actions: int,
    horizon: int,
    one_way: Mapping[tuple[int, int], int] | None = None,
    start_weights: Mapping[tuple[int, int], float] | None = None,
    terminal_rule: TerminalRule = "none",
    replace_prob: float = 0.5,
) -> GridLayout:
    """Parse an ASCII layout into a :class:`GridLayout` (SPEC §6).

    Args:
        name: environment name.
        ascii_layout: one line per row, tiles separated by spaces; a line of
            ``-`` marks a wall between the neighbouring rows.
        num_actions: 4 or 9; actions index :data:`MOVES`.
        horizon: episode length.
        one_way: ``{(row, col): action}``; on such a tile only ``action`` moves
            the agent, every other action leaves it in place.
        start_weights: ``{(row, col): probability}`` over the ``S`` tiles;
            uniform over them when omitted.
        terminal_rule: ``"enter"``: entering a ``G`` tile ends the episode;
            ``"stay"``: taking "stay" on a ``G`` tile ends it; ``"none"``.
        replace_prob: action-replacement probability on ``Q`` tiles.

    Returns:
        The layout with read-only tables.
    """
    grid: list[list[str]] = []
    row_walls: set[int] = set()  # r in row_walls: wall between rows r - 1 and r
    for line in ascii_layout.strip().splitlines():
        tokens = line.split()
        if set("".join(tokens)) == {ROW_WALL}:
            row_walls.add(len(grid))
        else:
            grid.append(tokens)
    chars = np.array(grid)
    rows, cols = chars.shape

    def blocked(r: int, c: int, nr: int, nc: int) -> bool:
        if not (0 <= nr < rows and 0 <= nc < cols) or chars[nr, nc] == WALL:
            return True
        # Only the destination tile matters for diagonals (SPEC §6), but a row
        # wall still cuts every move that crosses it.
        return any(min(r, nr) < w <= max(r, nr) for w in row_walls)

    one_way = dict(one_way or {})
    num_tiles = rows * cols
    next_tile = np.empty((num_tiles, num_actions), dtype=np.int64)
    for r in range(rows):
        for c in range(cols):
            for a, (dr, dc) in enumerate(MOVES[:num_actions]):
                nr, nc = r + dr, c + dc
                # Wall tiles are never occupied; mapping them to themselves keeps
                # the tables free of phantom moves (e.g. a wall "entering" G).
                stuck = chars[r, c] == WALL or ((r, c) in one_way and a != one_way[(r, c)])
                stays = stuck or blocked(r, c, nr, nc)
                next_tile[r * cols + c, a] = r * cols + c if stays else nr * cols + nc

    flat = chars.reshape(-1)
    wall = flat == WALL
    is_goal = flat == GOAL
    terminal = np.zeros((num_tiles, num_actions), dtype=bool)
    if terminal_rule == "enter":
        terminal = is_goal[next_tile]
    elif terminal_rule == "stay":
        terminal[is_goal, STAY] = True

    start_probs = np.zeros(num_tiles)
    starts = list(zip(*np.nonzero(chars == START)))
    weights = start_weights or {(int(r), int(c)): 1.0 / len(starts) for r, c in starts}
    if {(int(r), int(c)) for r, c in starts} != set(weights):
        raise ValueError(f"{name}: start weights {sorted(weights)} do not match the S tiles {starts}")
    for (r, c), p in weights.items():
        start_probs[r * cols + c] = p
    if not np.isclose(start_probs.sum(), 1.0):
        raise ValueError(f"{name}: start probabilities sum to {start_probs.sum()}, not 1")

    ends_on_entry = is_goal if terminal_rule == "enter" else np.zeros_like(is_goal)
    coverable = tuple(int(i) for i in np.flatnonzero(~wall & ~ends_on_entry))

    arrays = (chars, wall, next_tile, flat == RANDOM, terminal, start_probs)
    for array in arrays:
        array.setflags(write=False)  # shared by every env instance
    chars, wall, next_tile, random_tile, terminal, start_probs = arrays
    return GridLayout(
        name=name,
        rows=rows,
        cols=cols,
        num_actions=num_actions,
        horizon=horizon,
        chars=chars,
        wall=wall,
        next_tile=next_tile,
        random_tile=random_tile,
        replace_prob=replace_prob,
        terminal=terminal,
        start_probs=start_probs,
        coverable=coverable,
    )


def parse_layout(
    text: str,
    *,
    name: str = "Custom",
    num_actions: int = 4,
    horizon: int = 200,
    terminal_rule: TerminalRule | None = None,
    replace_prob: float = 0.5,
) -> GridLayout:
    """A gridworld from a layout string in SPEC §6's symbols, checked for the mistakes that would make a bad run.

    The map is :func:`build_layout`'s: one line per row, tiles separated by spaces (``W`` wall, ``.`` free,
    ``Q`` random move, ``S`` start, ``G`` terminal), a line of ``-`` alone for a wall between two rows;
    blank lines are skipped. Episodes start on the ``S`` tiles, each equally likely.

    Args:
        text: the map.
        name: the world's name.
        num_actions: 4 (left, right, up, down) or 9 (the 8 moves and stay).
        horizon: episode length.
        terminal_rule: how a ``G`` tile ends an episode; ``None``: on entry with 4 actions (as FourRoomStuck),
            by "stay" on it with 9 (as GridMaze).
        replace_prob: action-replacement probability on ``Q`` tiles.

    Raises:
        ConfigError: naming the problem: an empty map, an unknown symbol (with its row and column), rows of
            different lengths, no start, or a terminal that no start can reach.
    """
    if num_actions not in (4, 9):
        raise ConfigError(f"a gridworld has 4 or 9 actions, got {num_actions}")
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if not lines:
        raise ConfigError(f"data.layout is empty: give one line per row ({LEGEND})")
    grid: list[list[str]] = []
    for tokens in lines:
        if set("".join(tokens)) == {ROW_WALL}:
            continue
        for col, token in enumerate(tokens):
            if token not in (WALL, FREE, RANDOM, START, GOAL):
                raise ConfigError(f"data.layout: unknown symbol {token!r} at row {len(grid)}, column {col} ({LEGEND})")
        grid.append(tokens)
    if not grid:
        raise ConfigError(f"data.layout has no tiles, only walls between rows ({LEGEND})")
    for row, tokens in enumerate(grid):
        if len(tokens) != len(grid[0]):
            raise ConfigError(f"data.layout: row {row} has {len(tokens)} tiles, row 0 has {len(grid[0])}: every row "
                              "needs the same number (tiles are separated by spaces)")
    if not any(START in tokens for tokens in grid):
        raise ConfigError(f"data.layout has no start tile {START}: mark where episodes begin (several {START}: each "
                          "equally likely)")
    rule = terminal_rule or ("enter" if num_actions == 4 else "stay")
    layout = build_layout(name, "\n".join(" ".join(tokens) for tokens in lines), num_actions=num_actions,
                          horizon=horizon, terminal_rule=rule, replace_prob=replace_prob)
    reached = _reachable(layout)
    for tile in np.flatnonzero(layout.chars.reshape(-1) == GOAL):
        if not reached[tile]:
            row, col = divmod(int(tile), layout.cols)
            raise ConfigError(f"data.layout: the terminal {GOAL} at row {row}, column {col} cannot be reached from any "
                              f"start {START} (walls, {ROW_WALL} lines or the grid's edge cut it off)")
    return layout


def layout_name(env_id: str, built_in: Collection[str]) -> str:
    """The world's name in ``env_id``, the id given to the gridworld of ``data.layout``.

    Raises:
        ConfigError: the id is not of the form ``sun_lightning/<Name>-v<N>``, or it is one of ``built_in``.
    """
    if not re.fullmatch(rf"{NAMESPACE}/[A-Za-z]\w*-v\d+", env_id):
        raise ConfigError(f"data.env_id: the gridworld of data.layout needs an id of the form {NAMESPACE}/<Name>-v0, "
                          f"got {env_id!r}")
    if env_id in built_in:
        raise ConfigError(f"data.env_id: {env_id} is a built-in environment; give the gridworld of data.layout an id "
                          f"of its own, e.g. {NAMESPACE}/MyGrid-v0")
    return env_id.split("/", 1)[1].rsplit("-v", 1)[0]


def _reachable(layout: GridLayout) -> np.ndarray:
    """``[num_tiles]`` bool: tiles some sequence of actions leads to from a start tile (breadth-first search).

    ``next_tile`` covers every action, so the random moves of ``Q`` tiles reach nothing more."""
    reached = layout.start_probs > 0
    frontier = np.flatnonzero(reached)
    while frontier.size:
        successors = np.unique(layout.next_tile[frontier])
        frontier = successors[~reached[successors]]
        reached[frontier] = True
    return reached


THREE_ROOM = """
. . . . . . . .
. . . . . . . .
S . . . . . . .
- - - - - - - -
S . . . . . . .
. . . . . . . .
. . . . . . . .
- - - - - - - -
. . . . . . . .
. . . . . . . .
S . . . . . . .
"""

FOUR_ROOM_STUCK = """
W W W W W W W W W W W W W
W S . . . . W . . . . . W
W . . . . . W . . . . . W
W Q Q Q . . . . . . . . W
W W . W W W W W . . . . W
W . . . . . . W . . . . W
W . . . . . . W . . . . W
W . . . . . . W W W . W W
W . . . . . . W . . . . W
W . . . . . . W . . . . W
W . . . . . . . . . . . W
W . . . . . . W . . . G W
W W W W W W W W W W W W W
"""

# The bottom-left room's trap (SPEC §6): entered through (4,2), and its inner
# one-way tiles only ever lead back into it.
FOUR_ROOM_ONE_WAY: dict[tuple[int, int], int] = {
    (4, 2): DOWN,
    **{(r, 3): LEFT for r in range(5, 11)},
    (5, 4): LEFT,
    **{(r, 4): RIGHT for r in range(6, 11)},
    (11, 3): RIGHT,
    (11, 4): RIGHT,
    (10, 7): LEFT,
}

GRID_MAZE = """
. . . . . . . . . . . .
. W . . . . . . . . G .
W . . . . W W W W . W .
. W . . W W . . . . W .
. . . W W . . . . . W .
. . W W . . . . . . W .
. W W . . . . . W W W .
. . W . . . . . . . W .
. . . . . W W W . . W .
W W . . W . . . . . W .
. . W . W . . . . . W .
S . W . . . . . . . . .
"""

LAYOUTS: dict[str, GridLayout] = {
    "ThreeRoom": build_layout(
        "ThreeRoom",
        THREE_ROOM,
        num_actions=4,
        horizon=100,
        start_weights={(2, 0): 0.475, (3, 0): 0.475, (8, 0): 0.05},
    ),
    "FourRoomStuck": build_layout(
        "FourRoomStuck",
        FOUR_ROOM_STUCK,
        num_actions=4,
        horizon=200,
        one_way=FOUR_ROOM_ONE_WAY,
        terminal_rule="enter",
    ),
    "GridMaze": build_layout(
        "GridMaze", GRID_MAZE, num_actions=9, horizon=200, terminal_rule="stay"
    ),
}
