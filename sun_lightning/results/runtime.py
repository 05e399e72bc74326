"""How long runs took, and where: the paper's runtime table (its appendix "Source Code, Compute Details, and
Runtimes", Table "Average wall-clock runtime, in minutes").

Each run logs its wall-clock minutes and frames per second at its end (``perf/run/minutes``,
``perf/run/frames_per_second``, :class:`~sun_lightning.callbacks.exploration.ExplorationLogger`) and is tagged with the
CPU or GPU it ran on (``hardware``, :func:`~sun_lightning.tracking.naming.hardware`). From these, per environment and
method, the mean minutes over seeds with their 95 % interval (:mod:`~sun_lightning.results.intervals`), and the paper's
speed-up: "On Gridworlds and Classic control, SUN is nonetheless on average 3.54× faster than AdaGoal and 3.43× faster
than DISCOVER (2.41× on LunarLander(Full))". Its numbers are the mean over those eight environments of the baseline's
minutes over SUN's (AdaGoal: 192.1/56.6, 469.5/108.9, … average to 3.54), which :func:`speedups` computes the same way.
Minutes of runs on different hardware, or sharing a machine with other runs, are not comparable: the tables name the
hardware of each method's runs, and a speed-up divides minutes taken on one machine only. On one machine shared by several runs, the CPU minutes (a run's minutes × its CPU
share, ``perf/run/cpu_share``) are: the speed-ups are given by both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sun_lightning.results.domains import DQN_ENVS
from sun_lightning.results.intervals import Interval, format_interval, mean_interval, mean_ratio_interval
from sun_lightning.results.labels import label
from sun_lightning.results.runs import RunRecord
from sun_lightning.tracking.naming import env_name

#: The paper's speed-ups of SUN over each baseline on :data:`DQN_ENVS` (the baseline's minutes over SUN's).
PAPER_SPEEDUPS = {"adagoal": 3.54, "discover": 3.43}

Study = dict[str, dict[str, list[RunRecord]]]


def hardware_line(runs: dict[str, list[RunRecord]]) -> list[str]:
    """One line naming where each method's runs computed (methods grouped by hardware), if any run says."""
    where: dict[str, list[str]] = {}
    for method, records in runs.items():
        for place in dict.fromkeys(r.hardware or "not recorded" for r in records):
            where.setdefault(place, []).append(label(method))
    if set(where) <= {"not recorded"}:
        return []
    return ["Hardware: " + "; ".join(f"{', '.join(methods)}: {place}" for place, methods in where.items()) + "."]


def minutes(records: Sequence[RunRecord]) -> Interval | None:
    """Mean wall-clock minutes over the runs that recorded them, with its 95 % interval (``None``: none did)."""
    return mean_interval([r.minutes for r in records])


def wall_minutes(record: RunRecord) -> float | None:
    return record.minutes


def cpu_minutes(record: RunRecord) -> float | None:
    return record.cpu_minutes


def report_lines(runs: dict[str, list[RunRecord]]) -> list[str]:
    """The report's "Run time" section: per method its minutes and frames per second (mean, [95 % interval], n) and
    hardware; nothing where no run recorded its minutes."""
    if not any(r.minutes is not None for records in runs.values() for r in records):
        return []
    lines = ["", "Run time (wall clock from the start of `fit` to its end, warm-up and evaluation included; "
             "`perf/run/minutes`, `perf/run/frames_per_second`; CPU share: the run's CPU seconds per wall-clock "
             "second, `perf/run/cpu_share`, about its torch threads when it had its cores, below when it shared them):",
             "", "| method | minutes | frames/s | CPU share | CPU minutes | hardware |", "|---|---|---|---|---|---|"]
    for method, records in runs.items():
        places = ", ".join(dict.fromkeys(r.hardware or "not recorded" for r in records)) or "n/a"
        lines.append(f"| {label(method)} | {format_interval(minutes(records), 1)} | "
                     f"{format_interval(mean_interval([r.frames_per_second for r in records]), 1)} | "
                     f"{format_interval(mean_interval([_known(r.cpu_share) for r in records]), 2)} | "
                     f"{format_interval(mean_interval([r.cpu_minutes for r in records]), 1)} | {places} |")
    return lines


def speedups(study: Study, baselines: Sequence[str] = tuple(PAPER_SPEEDUPS), envs: Sequence[str] = DQN_ENVS,
             measure: Callable[[RunRecord], float | None] = wall_minutes) -> dict[str, tuple[Interval | None, int]]:
    """Baseline → (the mean over ``envs`` of the baseline's minutes over SUN's, with its stratified 95 % interval;
    the number of environments it averages), over the environments of ``study`` where both recorded minutes on one
    machine (``measure``: wall-clock minutes, or :func:`cpu_minutes`; :func:`same_hardware`)."""
    out = {}
    for baseline in baselines:
        pairs = [same_hardware(runs.get(baseline, []), runs.get("sun", []), measure)
                 for env_id, runs in study.items() if env_name(env_id) in envs]
        pairs = [(b, s) for b, s in pairs if b and s]
        out[baseline] = (mean_ratio_interval(pairs), len(pairs))
    return out


def same_hardware(baseline: Sequence[RunRecord], sun: Sequence[RunRecord],
                  measure: Callable[[RunRecord], float | None]) -> tuple[list[float], list[float]]:
    """The two methods' measured minutes on the one hardware where both have the most runs (then the most in all;
    then by name): a ratio of minutes taken on two machines would measure the machines. Empty where no hardware
    has both."""
    def on(records: Sequence[RunRecord]) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        for record in records:
            value = measure(record)
            if value is not None and value == value:
                found.setdefault(record.hardware or "not recorded", []).append(value)
        return found

    b, s = on(baseline), on(sun)
    shared = sorted(set(b) & set(s))
    if not shared:
        return [], []
    place = max(shared, key=lambda h: (min(len(b[h]), len(s[h])), len(b[h]) + len(s[h])))
    return b[place], s[place]


def _known(value: float | None) -> float | None:
    """A recorded figure, ``None`` where it is missing or unknown (NaN: a run resumed from before the clock)."""
    return None if value is None or value != value else value


def study_lines(study: Study) -> list[str]:
    """The study's "Run time" section: the paper's table (environment × method, minutes) and SUN's speed-ups over
    AdaGoal and DISCOVER beside the paper's 3.54× and 3.43×; nothing where no run recorded its minutes."""
    if not any(r.minutes is not None for runs in study.values() for records in runs.values() for r in records):
        return []
    methods = list(dict.fromkeys(m for runs in study.values() for m in runs))
    places = sorted({r.hardware or "not recorded" for runs in study.values() for records in runs.values()
                     for r in records})
    lines = ["", "## Run time", "",
             "Wall-clock minutes per run (mean, [95 % bootstrap interval], n), as the paper's Table \"Average "
             "wall-clock runtime, in minutes\". Hardware: " + "; ".join(places) + ". Runs that shared a machine, or "
             "ran on different hardware, are not comparable; each environment's report names each method's.", "",
             "| environment | " + " | ".join(label(m) for m in methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for env_id, runs in study.items():
        lines.append(f"| {env_name(env_id)} | " + " | ".join(format_interval(minutes(runs.get(m, [])), 1)
                                                              for m in methods) + " |")
    if any(r.cpu_minutes is not None for runs in study.values() for records in runs.values() for r in records):
        lines += ["", "CPU minutes per run (minutes × CPU share): what runs that shared a machine compare by.", "",
                  "| environment | " + " | ".join(label(m) for m in methods) + " |", "|---" * (len(methods) + 1) + "|"]
        for env_id, runs in study.items():
            lines.append(f"| {env_name(env_id)} | " + " | ".join(
                format_interval(mean_interval([r.cpu_minutes for r in runs.get(m, [])]), 1) for m in methods) + " |")
    ratios, by_cpu = speedups(study), speedups(study, measure=cpu_minutes)
    if any(n for _, n in ratios.values()):
        lines += ["", "SUN's speed-up on the paper's DQN environments (Gridworlds and Classic control, LunarLanderFull "
                  "apart): the mean over environments of the baseline's minutes over SUN's, each environment's from "
                  "the runs of both on one hardware (where both ran most), with its 95 % interval, beside the "
                  "paper's; by wall-clock minutes, and by CPU minutes.", "",
                  "| baseline | envs | speed-up here | by CPU minutes (envs) | paper |", "|---|---|---|---|---|"]
        for baseline, (ratio, n) in ratios.items():
            cpu_ratio, cpu_n = by_cpu[baseline]
            lines.append(f"| {label(baseline)} | {n} | {format_interval(ratio, 2, '×')} | "
                         f"{format_interval(cpu_ratio, 2, '×')} ({cpu_n}) | {PAPER_SPEEDUPS[baseline]:.2f}× |")
    return lines
