"""The paper's count ablations: true counts of 50-bin cells (``data.counts: binned``) against a
brute-force histogram, and ``data.rho`` reaching the radius pseudocount."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import sun_lightning.envs  # noqa: F401  (registers the environments)
from sun_lightning import keys
from sun_lightning.run.cli import main
from sun_lightning.exploration.build import build_pseudocount
from sun_lightning.envs.registry import _GOAL_SPACES
from sun_lightning.errors import ConfigError
from sun_lightning.replay.binned_count import BinnedCount

ROOT = Path(__file__).resolve().parents[3]


def brute_counts(xs: list[list[float]], actions: list[int] | None, low, high, bins: int = 50) -> list[int]:
    """Each entry's count: the entries (itself included) in its (bin per dimension, action) cell, by hand."""
    def cell(i):
        bins_of = tuple(min(max(math.floor((x - lo) / (hi - lo) * bins), 0), bins - 1)
                        for x, lo, hi in zip(xs[i], low, high))
        return bins_of + ((actions[i],) if actions is not None else ())
    cells = [cell(i) for i in range(len(xs))]
    return [sum(c == other for other in cells) for c in cells]


@pytest.mark.parametrize("num_actions", [0, 3])
def test_binned_counts_equal_a_brute_force_histogram_through_fifo_eviction(num_actions):
    generator = torch.Generator().manual_seed(0)
    low, high, capacity = (-1.0, 0.0), (1.0, 0.2), 48
    count = BinnedCount(low, high, capacity, num_actions, sigma_every=4)  # σ̃ after every step
    stored_x: dict[int, list[float]] = {}
    stored_a: dict[int, int] = {}
    position = 0
    for step in range(40):  # 40 steps of 4 entries: the storage wraps more than twice
        # few distinct cells (coarse values) so that counts above 1 are common; some outside the bounds
        x = torch.stack([torch.randint(-6, 7, (4,), generator=generator) / 5.0,
                         torch.randint(-1, 6, (4,), generator=generator) / 25.0], 1)
        action = torch.randint(0, num_actions, (4,), generator=generator) if num_actions else None
        index = torch.arange(position, position + 4) % capacity
        position += 4
        count.insert(index, x, action)
        for k, i in enumerate(index.tolist()):
            stored_x[i] = x[k].tolist()
            if action is not None:
                stored_a[i] = int(action[k])
        positions = sorted(stored_x)
        expected = brute_counts([stored_x[i] for i in positions],
                                [stored_a[i] for i in positions] if num_actions else None, low, high)
        assert count.counts(torch.tensor(positions)).tolist() == [float(n) for n in expected], step
        assert len(count) == len(positions)
    assert max(expected) > 1  # the test saw shared cells
    # σ̃ is the population std over the stored entries, floored by its median (SPEC §4)
    std = torch.tensor([stored_x[i] for i in sorted(stored_x)], dtype=torch.float64).std(0, unbiased=False)
    floor = std.median() if len(std) % 2 else std.sort().values[len(std) // 2 - 1:len(std) // 2 + 1].mean()
    assert count.scale().tolist() == pytest.approx(torch.maximum(std, floor).tolist(), rel=1e-5)


def test_every_continuous_env_has_binned_counts():
    continuous = [env_id for env_id, space in _GOAL_SPACES.items() if not space.exact_counts]
    assert len(continuous) >= 9, continuous
    for env_id in continuous:
        space = _GOAL_SPACES[env_id]
        count = build_pseudocount(space, 64, 10, torch.device("cpu"), counts="binned")
        assert isinstance(count, BinnedCount), env_id
        low = torch.tensor(space.metric_low or space.low)
        count.insert(torch.arange(2), torch.stack([low, low]),
                     torch.tensor([0, 0]) if space.num_actions else None)
        assert count.counts(torch.arange(2)).tolist() == [2.0, 2.0], env_id


def _tiny_fit(tmp_path, monkeypatch, config: str, *extra: str):
    monkeypatch.chdir(tmp_path)
    return main(["fit", "--config", str(ROOT / config), "--data.num_envs", "2", "--metrics.verbose", "false",
                 "--metrics.log_every_frames", "1000", "--trainer.logger", "false",
                 "--trainer.enable_checkpointing", "false", "--seed_everything", "0", *extra])


def test_a_run_with_binned_counts_counts_its_replay_buffer_exactly(tmp_path, monkeypatch):
    cli = _tiny_fit(tmp_path, monkeypatch, "conf/mountain_car.yaml", "--data.counts", "binned",
                    "--data.total_frames", "1064", "--data.warmup_frames", "1000")
    run = cli.datamodule.exploration
    assert isinstance(run.pseudocount, BinnedCount) and run.frames == 1064 and cli.model.updates > 0
    entries = run.storage.get(torch.arange(len(run.storage)))
    space = run.goal_space
    expected = brute_counts(space.project(entries[keys.OBS]).tolist(), entries[keys.ACTION].reshape(-1).tolist(),
                            space.metric_low or space.low, space.metric_high or space.high)
    assert run.pseudocount.counts(torch.arange(len(run.storage))).tolist() == [float(n) for n in expected]
    assert max(expected) > 1


def test_data_rho_reaches_the_pseudocount(tmp_path, monkeypatch):
    # a warm-up only run (no updates): the pseudocount is built in setup and counts what was collected
    cli = _tiny_fit(tmp_path, monkeypatch, "conf/mountain_car.yaml", "--data.rho", "0.37",
                    "--data.total_frames", "1000", "--data.warmup_frames", "1000", "--data.updates_per_frame", "0")
    run = cli.datamodule.exploration
    assert run.pseudocount.rho == 0.37 and run.goal_space.rho == 0.1  # the reach rule keeps the env's
    assert len(run.pseudocount) == 1000
    default = build_pseudocount(run.goal_space, 64, 10, torch.device("cpu"))
    assert default.rho == 0.1


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--data.counts", "true", "data.counts"), ("--data.rho", "0", "data.rho must be positive, got 0")])
def test_bad_count_options_fail_in_one_line(option, value, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises((ConfigError, SystemExit)) as error:
        main(["--config", str(ROOT / "conf/point_maze_s.yaml"), option, value, "--trainer.logger", "false"], run=False)
    if isinstance(error.value, ConfigError):
        assert message in str(error.value)
