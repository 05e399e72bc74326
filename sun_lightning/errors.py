"""Errors a user can fix, and their one-line report on the command line.

A wrong value in a config or on the command line is not a bug of the program: it gets one line that
names the key and the bad value and says what to do, no traceback, and exit code 2 (argparse's code
for usage errors). Everything else keeps its traceback.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
import signal
import sys
from collections.abc import Iterable

USAGE_EXIT_CODE = 2
#: The signals that stop a run between two steps with a checkpoint: Ctrl-C, and SIGTERM as ``kill``, systemd and
#: batch schedulers send it.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
HELP_HINT = "see `python -m sun_lightning fit --help`"


class ConfigError(ValueError):
    """A config or input value that cannot be used; the message names the key and the value.

    A ``ValueError`` so that code catching those (and the tests that expect them) keeps working.
    """


class UsageError(SystemExit):
    """The command line or config file did not parse; raised where jsonargparse would print its usage.

    Attributes:
        message: jsonargparse's message.
        options: the option strings of the parser that failed (for "did you mean").
        line: the report's line where it is known already (:mod:`sun_lightning.run.precheck`).
    """

    def __init__(self, message: str, options: Iterable[str] = (), line: str | None = None) -> None:
        super().__init__(USAGE_EXIT_CODE)
        self.message, self.options, self.line = message, sorted(set(options)), line


def stopped_exit_code(signum: int) -> int:
    """The exit status of a run that ``signum`` stopped with a checkpoint: ``128 + signum`` (130 for Ctrl-C, 143 for
    SIGTERM), the shells' status of a process a signal ended, so that no caller takes it for a finished run."""
    return 128 + int(signum)


def stopping_signal(code: int | None) -> str | None:
    """The name of the signal that stopped a run exiting with ``code`` (``"SIGTERM"`` for 143), or ``None`` for an
    exit status that is not a stop (0, a failure, a process killed outright: a negative status)."""
    for sig in STOP_SIGNALS:
        if code == stopped_exit_code(sig):
            return sig.name
    return None


def no_goal_space(env_id: str) -> str:
    """The line for an id gymnasium knows given without ``data.goal``: the pre-check's and the live check's."""
    return (f"data.env_id: {env_id!r} is a gymnasium id without a goal space: give one in data.goal (its dims, low, "
            "high and reach: docs/custom-envs.md)")


#: The learner to name for each kind of actions (discrete: the DQN variant, SPEC §5a; a Box: the TD3 variant, §5b).
LEARNER_FOR = {True: "sun_lightning.learners.dqn.DQNSVF", False: "sun_lightning.learners.td3.TD3SVF"}


def cannot_act(learner: str, env_id: str, discrete: bool, size: int) -> str:
    """The line for a learner of the other family than ``env_id``'s actions (``size``: the number of discrete
    actions, or the Box's dimension): the pre-check's and the live check's."""
    actions = f"{size} discrete actions" if discrete else f"continuous actions (a Box of {size})"
    return (f"model.class_path: {learner} cannot act in {env_id}, which has {actions}: use {LEARNER_FOR[discrete]} "
            "(or its ensemble)")


def unknown_environment(env_id: str, registered: Iterable[str]) -> str:
    """The line for a package id (``sun_lightning/...``) nobody registered: the pre-check's and the live check's."""
    registered = sorted(registered)
    close = difflib.get_close_matches(env_id, registered, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"data.env_id: unknown environment {env_id!r} ({hint}registered: {', '.join(registered)})"


#: Constructor arguments that were removed rather than renamed (the last part of the key → why, and what to do):
#: a saved ``config.yaml`` that still sets one is refused with its reason, not a "did you mean" of a look-alike.
REMOVED_ARGUMENTS = {
    "actor_tau": ("was removed: the TD3 critic now bootstraps through the online actor as of the previous actor "
                  "step, as the paper's code does (SPEC §5b), so no setting moves a slow target actor any more; delete "
                  "the line (a checkpoint written with it resumes as before)"),
}


def unknown_key(key: str, options: Iterable[str]) -> str:
    """The line for a key no constructor takes: its removal's reason, or the closest valid key, or ``--help``."""
    removed = REMOVED_ARGUMENTS.get(key.rsplit(".", 1)[-1])
    if removed is not None and ".init_args." in key:
        return f"{key!r} {removed}"
    close = suggest(key, options)
    return f"unknown key {key!r} ({f'did you mean {close}?' if close else HELP_HINT})"


def suggest(name: str, options: Iterable[str]) -> str | None:
    """The valid option closest to a mistyped one (``--data.total_framez`` → ``--data.total_frames``)."""
    options = list(options)
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    if match:
        return match[0]
    # A key given without its group (``--total_frames``) or with the wrong one.
    leaf = name.rsplit(".", 1)[-1].lstrip("-")
    leaves = {option.rsplit(".", 1)[-1]: option for option in options if "." in option}
    match = difflib.get_close_matches(leaf, list(leaves), n=1, cutoff=0.8)
    return leaves[match[0]] if match else None


_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)", re.S)
_NOT_ACCEPTED = re.compile(r"(?:does not accept option|Option) '([^']+)'")
_CLASS_PATH = re.compile(r"class_path '([\w.]+)'")
_PARSER_KEY = re.compile(r'Parser key "([^"]+)"')
_EXPECTED = re.compile(r"Expected an? (<class '(\w+)'>|[^.]+)\. Got value: (.*)")
_IMPORT_PATH = re.compile(r"Expected a dot import path string: (\S+)")
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
_MISSING_FILE = re.compile(r"File does not exist: '([^']+)'")


def _init_options(class_path: str) -> list[str]:
    """The constructor arguments of a class named in a config (those under its ``init_args``)."""
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return []
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names += [p for p in inspect.signature(init).parameters if p not in ("self", "args", "kwargs")]
    return names


def _key_path(message: str) -> str:
    """``model.init_args.lr`` from jsonargparse's nested "Parser key" lines (``model`` then ``lr``)."""
    keys = _PARSER_KEY.findall(message)
    if len(keys) > 1 and _CLASS_PATH.search(message):
        return f"{keys[0]}.init_args.{'.'.join(keys[1:])}"
    return ".".join(keys)


def usage_line(error: UsageError) -> str:
    """One line for a parse error: the offending key and value, and the closest valid key or a pointer to ``--help``."""
    if error.line:
        return error.line
    message = error.message.strip()
    if match := _UNRECOGNIZED.search(message):
        tokens = match.group(1).split()
        flags = [token.split("=", 1)[0] for token in tokens if token.startswith("--")]
        if not flags:
            return f"unexpected argument {' '.join(tokens)!r} ({HELP_HINT})"
        hints = [f"{flag} (did you mean {close}?)" if (close := suggest(flag, error.options)) else flag for flag in flags]
        return f"unknown option {', '.join(hints)} ({HELP_HINT})"
    if match := _NOT_ACCEPTED.search(message):
        key = match.group(1)
        owner = _CLASS_PATH.search(message)
        if owner:
            group = _PARSER_KEY.search(message)
            prefix = f"{group.group(1)}.init_args." if group else ""
            options = [prefix + name for name in _init_options(owner.group(1))]
            key = prefix + key
        else:
            options = [option.removeprefix("--") for option in error.options]
        return unknown_key(key, options)
    if match := _INVALID_CHOICE.search(message):
        choices = re.findall(r"'([^']*)'", match.group(2))
        close = difflib.get_close_matches(match.group(1), choices, n=1)
        hint = f"did you mean {close[0]}?" if close else f"choose from {', '.join(choices)}"
        return f"unknown subcommand {match.group(1)!r} ({hint})"
    if match := _MISSING_FILE.search(message):
        return f"config file not found: {match.group(1)}"
    key = _key_path(message)
    where = f"{key}: " if key else ""
    if match := _EXPECTED.search(message):
        expected = match.group(2) or match.group(1)
        return f"{where}expected {expected}, got {match.group(3).strip()!r} ({HELP_HINT})"
    if match := _IMPORT_PATH.search(message):
        return f"{where}no class {match.group(1)!r}: give a class name or its full import path ({HELP_HINT})"
    lines = [line.strip(" -") for line in message.splitlines() if line.strip(" -")]
    return f"{where}{lines[-1] if lines else message} ({HELP_HINT})"


def config_files(argv: Iterable[str]) -> list[str]:
    """The files a command line gives as ``--config FILE`` or ``--config=FILE``."""
    argv, files = list(argv), []
    for i, token in enumerate(argv):
        if token == "--config" and i + 1 < len(argv):
            files.append(argv[i + 1])
        elif token.startswith("--config="):
            files.append(token.split("=", 1)[1])
    return files


def check_config_files(argv: Iterable[str]) -> None:
    """Raise :class:`ConfigError` ``conf/x.yaml:3:1: expected ',' or ']', but got ...`` for a config file that is
    not valid YAML: its name, the line and column of the problem (1-based, as editors count) and the parser's
    reason (jsonargparse's own message names neither the file nor the problem)."""
    import yaml

    for name in config_files(argv):
        try:
            with open(name) as file:
                yaml.safe_load(file)
        except OSError:
            continue  # a missing file is reported by the parser ("config file not found")
        except yaml.MarkedYAMLError as error:
            mark = error.problem_mark or error.context_mark
            where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
            raise ConfigError(f"{where}: {error.problem or error.context or 'not valid YAML'}") from None
        except yaml.YAMLError as error:
            raise ConfigError(f"{name}: {str(error).splitlines()[0]}") from None


def report(error: BaseException, file=None) -> int:
    """Print the one-line report of a user error and return the exit code."""
    file = file or sys.stderr
    if isinstance(error, UsageError):
        text = usage_line(error)
    else:
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if "--help" not in text:
            text = f"{text} ({HELP_HINT})"
    print(f"error: {text}", file=file, flush=True)
    return USAGE_EXIT_CODE


class NonFiniteLossError(FloatingPointError):
    """A loss term became NaN or infinite; raised before its gradient step (``applied`` False), so the
    networks are still the last good ones, or, where the check is read once per training step on an
    accelerator, after it (``applied`` True: the last good state is the last checkpoint written before).

    Attributes:
        term: the loss's metric name (``train/loss/td``, ``train/loss/actor``).
        value: the non-finite value.
        update: the learner's update count when it happened.
        applied: whether the networks took the bad update's step.
    """

    def __init__(self, term: str, value: float, update: int, applied: bool = False) -> None:
        when = "after this update's step" if applied else "before this update's step"
        super().__init__(f"{term} is {value} at update {update}: the run stopped {when} "
                         "(lower the learning rate, or check the environment's observations for inf/NaN)")
        self.term, self.value, self.update, self.applied = term, value, update, applied
        self.frames: int | None = None  # env frames collected when it happened (set by the checkpoint callback)
        self.checkpoint: str | None = None  # where the last good state was saved

    def describe(self) -> str:
        """One line: the loss term, where it happened, and the checkpoint of the last good state."""
        where = f"update {self.update}" + (f", env frame {self.frames}" if self.frames is not None else "")
        saved = f"; the last good state is in {self.checkpoint}" if self.checkpoint else ""
        stopped = "after its training step" if self.applied else "before applying it"
        return (f"{self.term} became {self.value} at {where}: the run stopped {stopped}{saved} "
                "(lower model.init_args.lr, or check the environment's observations for inf/NaN)")
