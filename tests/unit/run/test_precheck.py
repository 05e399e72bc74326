"""The fast pre-check (sun_lightning/run/precheck.py) says what the live parser says, before the heavy imports, and
never refuses what the live parser accepts."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sun_lightning.run import precheck
from sun_lightning.errors import ConfigError, UsageError, report
from sun_lightning.methods import METHODS, method_args

ROOT = Path(__file__).resolve().parents[3]
THREE_ROOM = str(ROOT / "conf/three_room.yaml")
POINT_MAZE = str(ROOT / "conf/point_maze_s.yaml")
HEAVY = ("torch", "lightning", "mujoco", "gymnasium", "torchrl", "mlflow")


def _line(call) -> str | None:
    out = io.StringIO()
    try:
        call()
    except (UsageError, ConfigError) as error:
        report(error, out)
        return out.getvalue().strip()
    return None


def _live(argv: list[str]) -> str | None:
    """The live parser's line, as a fresh ``fit`` process would give it: with the package's own environments only
    (earlier tests in this process may have given gymnasium ids a goal space, which a fresh process does not know
    and an unknown id's line would list)."""
    from sun_lightning.envs import registry
    from sun_lightning.run.cli import main
    from sun_lightning.run.precheck_env import PACKAGE_IDS

    own = {env_id: space for env_id, space in registry._GOAL_SPACES.items() if env_id in PACKAGE_IDS}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "_GOAL_SPACES", own)
        return _line(lambda: main(argv))  # every case fails before the fit would start


BAD = [
    ["fit", "--config", THREE_ROOM, "--data.total_frames", "0"],
    ["fit", "--config", THREE_ROOM, "--data.total_frames", "100"],
    ["fit", "--config", THREE_ROOM, "--data.num_envs", "x"],
    ["fit", "--config", THREE_ROOM, "--data.num_envs=x"],
    ["fit", "--config", THREE_ROOM, "--data.total_framez", "1"],
    ["fit", "--config", THREE_ROOM, "--model.init_args.lrr", "1"],
    ["fit", "--config", THREE_ROOM, "--model.init_args.gamma", "1.5"],
    ["fit", "--config", THREE_ROOM, "--checkpoint.every_frames", "0"],
    ["fit", "--config", THREE_ROOM, "--trainer.max_epochz", "3"],
    ["fit", "--config", THREE_ROOM, "--data.env_id", "sun_lightning/ThreeRoomm-v0"],
    ["fit", "--config", THREE_ROOM, "--data.env_id", "sun_lightning/Nothing-v0"],
    ["fit", "--config", POINT_MAZE, "--model.init_args.critic_tau", "0"],
    ["fit", "--config", POINT_MAZE, "--data.rho", "-1"],
    ["fit", "--config", POINT_MAZE, "--checkpoint.keep", "many"],
    ["fitt"],
    ["fit", "--config", "nope.yaml"],
    ["fit", "--config", THREE_ROOM, "--data.env_id", "sun_lightning/Tiny-v0", "--data.layout", "S . X"],
    ["fit", "--config", THREE_ROOM, "--data.env_id", "sun_lightning/Tiny-v0", "--data.layout", ". .\n\nS"],
    ["fit", "--config", THREE_ROOM, "--data.env_id", "sun_lightning/GridMaze-v0", "--data.layout", "S ."],
    ["fit", "--config", THREE_ROOM, "--data.env_id", "Tiny", "--data.layout", "S ."],
    ["fit", "--config", THREE_ROOM, "--model", "sun_lightning.learners.ensemble_td3.EnsembleTD3SVF"],
    ["fit", "--config", POINT_MAZE, "--model", "sun_lightning.learners.dqn.DQNSVF"],
    ["fit", "--config", POINT_MAZE, "--model.init_args.actor_tau", "5e-7"],
]


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a[3:] if len(a) > 3 else a) for a in BAD])
def test_the_pre_check_says_what_the_live_parser_says(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fast = _line(lambda: precheck.check(argv))
    assert fast is not None and fast.startswith("error: "), fast
    assert fast == _live(argv)


def test_an_unknown_key_in_a_config_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  env_id: sun_lightning/ThreeRoom-v0\n  total_framez: 100\n")
    argv = ["fit", "--config", str(bad)]
    assert _line(lambda: precheck.check(argv)) == _live(argv) == \
        "error: unknown key 'data.total_framez' (did you mean data.total_frames?)"


def test_a_removed_argument_in_an_earlier_runs_config_names_its_removal(tmp_path, monkeypatch):
    """The config.yaml a TD3 run saved before the bootstrap actor followed the online actor sets ``actor_tau``: it is
    refused with the reason, not with a "did you mean critic_tau" that would change the run's critic."""
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "--config", str(ROOT / "tests" / "data" / "point_maze_s_earlier_config.yaml")]
    line = _line(lambda: precheck.check(argv))
    assert line == _live(argv)
    assert line.startswith("error: 'model.init_args.actor_tau' was removed: ") and "SPEC §5b" in line
    assert "did you mean" not in line


CONFIGS = sorted(str(p) for p in (ROOT / "conf").rglob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=[Path(c).relative_to(ROOT / "conf").as_posix() for c in CONFIGS])
def test_every_shipped_config_and_method_passes(config):
    precheck.check(["fit", "--config", config])
    precheck.check(["fit", "--config", config, "--data.total_frames", "200000", "--trainer.logger", "false"])
    for method in METHODS:
        try:
            args = method_args(method, config)
        except ValueError:
            continue  # an ensemble method on a config whose learner has none
        precheck.check(["fit", "--config", config, *args])


def test_what_it_cannot_judge_is_left_to_the_live_parser():
    for argv in (["fit", "--help"], ["--config", THREE_ROOM, "fit"], ["fit", "--config", THREE_ROOM, "--print_config"],
                 ["fit", "--config", THREE_ROOM, "--data.selector.beta", "x"],
                 ["fit", "--config", THREE_ROOM, "--data.rho", "x"],  # a union type: jsonargparse words it
                 ["fit", "--config", THREE_ROOM, "--trainer.callbacks+=x.Y"],  # appended to a list
                 ["fit", "--config", THREE_ROOM, "--data.selector", "sun_lightning.goals.RandomActions",
                  "--data.total_frames", "100"]):  # a rule that does not learn: no warm-up to outlast
        precheck.check(argv)


def test_the_pre_check_imports_nothing_heavy():
    code = ("import sys; from sun_lightning import precheck; precheck.check(['fit', '--config', %r]); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & set(%r)))" % (THREE_ROOM, HEAVY))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_wrong_value_in_a_config_is_reported_in_seconds(tmp_path):
    config = yaml.safe_load(Path(THREE_ROOM).read_text())
    config["data"]["num_envs"] = "x"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sun_lightning", "fit", "--config", str(bad)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 2 and "data.num_envs: expected int, got 'x'" in proc.stderr, proc.stderr
    assert elapsed < 10, elapsed  # ≤ 3 s on a quiet machine (docs); generous here


def test_the_data_keys_are_read_from_the_data_configs_fields():
    """The ``data`` group is a frozen dataclass with no ``__init__`` of its own: its annotated fields, in order, with
    the literal defaults the live parser shows."""
    import dataclasses

    from sun_lightning.exploration.config import DataConfig

    params = precheck.signature(precheck.GROUPS["data"])
    fields = dataclasses.fields(DataConfig)
    assert list(params) == [field.name for field in fields]
    for field in fields:
        default = params[field.name].default
        assert params[field.name].annotation == field.type, field.name
        if field.name in ("env_id", "selector"):  # no default, and a call the sources cannot evaluate
            assert default is precheck._MISSING, field.name
        else:
            assert default == field.default, field.name


def test_a_dataclass_signature_takes_its_dataclass_bases_and_skips_class_variables(tmp_path, monkeypatch):
    package = tmp_path / "precheck_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "shapes.py").write_text(
        "from dataclasses import dataclass\nfrom typing import ClassVar\n\n\n"
        "@dataclass\nclass Base:\n    size: int = 3\n\n\n"
        "@dataclass(frozen=True)\nclass Box(Base):\n    KIND: ClassVar[str] = 'box'\n    name: str = 'b'\n\n\n"
        "class Plain:\n    def __init__(self, width: int = 1) -> None:\n        pass\n\n\n"
        "@dataclass\nclass OnPlain(Plain):\n    depth: int = 2\n\n\n"
        "@dataclass(init=False)\nclass Own:\n    depth: int = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    box = precheck.signature("precheck_probe.shapes.Box")
    assert {name: (p.annotation, p.default) for name, p in box.items()} == {"size": ("int", 3), "name": ("str", "b")}
    assert precheck.signature("precheck_probe.shapes.OnPlain") is None  # a base that is no dataclass: unknown
    assert precheck.signature("precheck_probe.shapes.Own") == {}  # no __init__ made from the fields: object's


# ---- an environment given by its gymnasium id: data.goal and data.env_id ---------------------------------------
MCC = str(ROOT / "conf/custom/mountain_car_continuous.yaml")
GOAL_BAD = [
    ["--data.goal.reach", "-0.5"],
    ["--data.goal.rho", "-1"],
    ["--data.goal.low", "[0.7, 0]"],
    ["--data.goal.dims", "[0, 0]"],
    ["--data.env_id", "MountainCarContinous-v0"],
    ["--data.env_id", "CartPole-v1", "--data.goal", "null"],
    ["--data.goal.dims", "[0, 5]"],
    ["--data.goal.dims", "achieved_goal"],
    ["--model", "sun_lightning.learners.dqn.DQNSVF"],
    ["--model", "sun_lightning.learners.ensemble_dqn.EnsembleDQNSVF"],
]


@pytest.mark.parametrize("args", GOAL_BAD, ids=[" ".join(a) for a in GOAL_BAD])
def test_a_goal_space_or_gymnasium_id_error_is_the_live_line(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "--config", MCC, *args]
    fast = _line(lambda: precheck.check(argv))
    assert fast is not None and fast == _live(argv), fast


def test_a_goal_key_is_named_as_written():
    """The live parser names a misspelt key ``data.goal.init_args.reachh``; the pre-check, which comes first, the
    key the user wrote, in a file or on the command line."""
    line = _line(lambda: precheck.check(["fit", "--config", MCC, "--data.goal.reachh", "0.5"]))
    assert line == "error: unknown key 'data.goal.reachh' (did you mean data.goal.reach?)"
    assert _line(lambda: precheck.check(["fit", "--config", MCC, "--data.goal.rho", "x"])) == \
        "error: data.goal.rho: expected float, got 'x' (see `python -m sun_lightning fit --help`)"
    assert _line(lambda: precheck.check(["fit", "--config", MCC, "--data.goal", "{with_action: 3}"])) == \
        "error: data.goal.with_action: expected bool, got 3 (see `python -m sun_lightning fit --help`)"
    # (the live parser: "data.goal.init_args.low: Given value: NestedArg(key='low', val='abc')")
    assert _line(lambda: precheck.check(["fit", "--config", MCC, "--data.goal.low", "abc"])) == \
        "error: data.goal.low must be a list of numbers or auto, got 'abc' (see `python -m sun_lightning fit --help`)"


def test_the_gymnasium_id_check_imports_no_torch_and_no_mujoco():
    code = ("import sys; from sun_lightning.run import precheck\n"
            "try: precheck.check(['fit', '--config', %r, '--data.env_id', 'MountainCarContinous-v0'])\n"
            "except Exception as e: print(type(e).__name__)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'mujoco', 'Box2D'}))" % MCC)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["ConfigError", "[]"], out.stdout


def test_the_package_ids_the_pre_check_knows_are_the_registered_ones():
    # A fresh interpreter: other tests of the session register gridworlds of their own layouts.
    code = ("import json, gymnasium, sun_lightning.envs\n"
            "from sun_lightning.envs.registry import env_ids, goal_space\n"
            "ids = sorted(i for i in gymnasium.registry if i.startswith('sun_lightning/'))\n"
            "assert ids == env_ids(), ids\n"
            "print(json.dumps({i: [goal_space(i).discrete, goal_space(i).num_actions or goal_space(i).action_dim] "
            "for i in ids}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    from sun_lightning.run.precheck_env import PACKAGE_ACTIONS

    assert json.loads(out.stdout) == {env_id: list(actions) for env_id, actions in PACKAGE_ACTIONS.items()}


def test_a_learner_family_is_read_through_its_bases():
    assert precheck._family("sun_lightning.learners.ensemble_dqn.EnsembleDQNSVF") is True
    assert precheck._family("sun_lightning.learners.td3.TD3SVF") is False
    assert precheck._family("sun_lightning.learners.base.Learner") is None  # neither family: the live check's
    assert precheck._family("nowhere.Thing") is None


def test_an_env_gymnasium_cannot_make_is_left_to_the_live_check(monkeypatch):
    import gymnasium

    from sun_lightning.run import precheck_env

    def broken(*args, **kwargs):
        raise gymnasium.error.DependencyNotInstalled("box2d is not installed")

    monkeypatch.setattr(gymnasium, "make", broken)
    monkeypatch.setattr(precheck_env, "_SPACES", {})
    precheck.check(["fit", "--config", MCC, "--data.goal.dims", "[0, 5]"])  # no error here: the live check says why
