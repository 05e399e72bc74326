"""Run time as data: the report's minutes per method, the study's runtime table and SUN's speed-ups by hand."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from sun_lightning.results.report import write_report
from sun_lightning.results.runs import CPU_SHARE, FRAMES_PER_SECOND, MINUTES, RunRecord
from sun_lightning.results.runtime import PAPER_SPEEDUPS, cpu_minutes, speedups, study_lines

COV, ENT = "explore/visits/coverage", "explore/visits/entropy"
CPU = "cpu (AMD EPYC 9965, 2 cores)"


def timed(env: str, method: str, seed: int, minutes: float | None, frames: int = 2000,
          cpu_share: float | None = None) -> RunRecord:
    final = {COV: 0.5, ENT: 0.5}
    if minutes is not None:
        final |= {MINUTES: minutes, FRAMES_PER_SECOND: frames / (60 * minutes)}
    if cpu_share is not None:
        final[CPU_SHARE] = cpu_share
    return RunRecord(f"{env}-{method}-seed{seed}", f"id-{env}-{method}-{seed}", method, seed, final,
                     {COV: ([1000, frames], [0.4, 0.5]), ENT: ([1000, frames], [0.4, 0.5])}, 10.0, CPU)


def test_the_report_gives_each_methods_minutes_frames_per_second_and_hardware(tmp_path):
    runs = {"sun": [timed("ThreeRoom", "sun", 0, 2.0, cpu_share=1.0), timed("ThreeRoom", "sun", 1, 4.0, cpu_share=0.5)],
            "adagoal": [timed("ThreeRoom", "adagoal", 0, 10.0, cpu_share=float("nan"))],  # resumed from before it
            "random": [timed("ThreeRoom", "random", 0, None)]}  # a run from before the clock
    write_report(tmp_path, "sun_lightning/ThreeRoom-v0", runs, {})
    text = (tmp_path / "report.md").read_text()
    # two seeds: 3.0 [2.0, 4.0]; frames/s 2000/120 = 16.7 and 2000/240 = 8.3 → 12.5 [8.3, 16.7]; CPU share 0.75
    # CPU minutes 2.0 · 1.0 and 4.0 · 0.5: both 2.0
    assert (f"| SUN adaptive | 3.0 [2.0, 4.0] (n = 2) | 12.5 [8.3, 16.7] (n = 2) | 0.75 [0.50, 1.00] (n = 2) | "
            f"2.0 [2.0, 2.0] (n = 2) | {CPU} |") in text
    assert f"| AdaGoal | 10.0 (n = 1) | 3.3 (n = 1) | n/a | n/a | {CPU} |" in text
    assert f"| Random | n/a | n/a | n/a | n/a | {CPU} |" in text
    first, second, resumed = list(csv.DictReader(open(tmp_path / "runs.csv")))[:3]
    assert (first["minutes"], first["frames_per_second"], first["hardware"]) == ("2", "16.6667", CPU)
    assert (first["cpu_share"], second["cpu_share"], resumed["cpu_share"]) == ("1", "0.5", "n/a")
    # no run with minutes: no section
    write_report(tmp_path / "none", "sun_lightning/ThreeRoom-v0", {"random": [timed("ThreeRoom", "random", 0, None)]}, {})
    assert "Run time" not in (tmp_path / "none/report.md").read_text()


def test_speedups_are_the_papers_mean_of_per_environment_ratios():
    # the paper's own minutes on two of its environments: 192.1/56.6 and 469.5/108.9 average to 3.85
    study = {"sun_lightning/ThreeRoom-v0": {"sun": [timed("ThreeRoom", "sun", 0, 56.6)],
                                            "adagoal": [timed("ThreeRoom", "adagoal", 0, 192.1)],
                                            "discover": [timed("ThreeRoom", "discover", 0, 190.5)]},
             "sun_lightning/FourRoomStuck-v0": {"sun": [timed("FourRoomStuck", "sun", 0, 100.0),
                                                        timed("FourRoomStuck", "sun", 1, 117.8)],
                                                "adagoal": [timed("FourRoomStuck", "adagoal", 0, 469.5)]},
             # not a DQN environment of the paper: out of the average
             "sun_lightning/PointMazeS-v0": {"sun": [timed("PointMazeS", "sun", 0, 55.7)],
                                             "adagoal": [timed("PointMazeS", "adagoal", 0, 42.7)]}}
    ratios = speedups(study)
    adagoal, n = ratios["adagoal"]
    assert n == 2 and adagoal.value == pytest.approx((192.1 / 56.6 + 469.5 / 108.9) / 2)
    # SUN's two FourRoomStuck seeds resample to 100, 108.9, 117.8: the ratio's interval spans them
    low = (192.1 / 56.6 + 469.5 / 117.8) / 2
    high = (192.1 / 56.6 + 469.5 / 100.0) / 2
    assert (adagoal.low, adagoal.high) == (pytest.approx(low), pytest.approx(high))
    discover, n = ratios["discover"]
    assert n == 1 and discover.value == pytest.approx(190.5 / 56.6) and discover.low is None
    lines = study_lines(study)
    assert "| ThreeRoom | 56.6 (n = 1) | 192.1 (n = 1) | 190.5 (n = 1) |" in lines
    assert "| FourRoomStuck | 108.9 [100.0, 117.8] (n = 2) | 469.5 (n = 1) | n/a |" in lines
    assert (f"| AdaGoal | 2 | 3.85× [{low:.2f}, {high:.2f}] (n = 1 / 1 / 1 / 2) | n/a (0) | "
            f"{PAPER_SPEEDUPS['adagoal']:.2f}× |") in lines
    assert f"| DISCOVER | 1 | 3.37× (n = 1 / 1) | n/a (0) | 3.43× |" in lines
    assert not any(line.startswith("CPU minutes") for line in lines)  # no run recorded its CPU share
    assert study_lines({"sun_lightning/ThreeRoom-v0": {"sun": [timed("ThreeRoom", "sun", 0, None)]}}) == []


def test_runs_that_shared_a_machine_compare_by_cpu_minutes():
    # SUN took 10 min with half a core (5 CPU minutes), AdaGoal 20 min with a whole one (20): 2× by the clock, 4× by CPU
    study = {"sun_lightning/ThreeRoom-v0": {"sun": [timed("ThreeRoom", "sun", 0, 10.0, cpu_share=0.5)],
                                            "adagoal": [timed("ThreeRoom", "adagoal", 0, 20.0, cpu_share=1.0)],
                                            "discover": [timed("ThreeRoom", "discover", 0, 30.0, cpu_share=float("nan"))]}}
    assert study["sun_lightning/ThreeRoom-v0"]["sun"][0].cpu_minutes == 5.0
    wall, n = speedups(study)["adagoal"]
    cpu, cpu_n = speedups(study, measure=cpu_minutes)["adagoal"]
    assert (wall.value, n, cpu.value, cpu_n) == (pytest.approx(2.0), 1, pytest.approx(4.0), 1)
    assert speedups(study, measure=cpu_minutes)["discover"] == (None, 0)  # resumed from before the clock: unknown
    lines = study_lines(study)
    assert "| ThreeRoom | 5.0 (n = 1) | 20.0 (n = 1) | n/a |" in lines
    assert "| AdaGoal | 1 | 2.00× (n = 1 / 1) | 4.00× (n = 1 / 1) (1) | 3.54× |" in lines


def test_a_speed_up_divides_minutes_taken_on_one_machine():
    other = "cpu (Intel(R) Xeon(R) Processor, 2 cores)"

    def on(record: RunRecord, hardware: str) -> RunRecord:
        return dataclasses.replace(record, hardware=hardware)

    # SUN ran on the EPYC only; AdaGoal's seed 0 there (33 min), its seed 1 on a Xeon twice as fast (15 min):
    # 33 / 11 = 3.0 on the EPYC, not (33 + 15) / 2 / 11 = 2.18 across both
    study = {"sun_lightning/ThreeRoom-v0": {
        "sun": [timed("ThreeRoom", "sun", 0, 10.0), timed("ThreeRoom", "sun", 1, 12.0)],
        "adagoal": [timed("ThreeRoom", "adagoal", 0, 33.0), on(timed("ThreeRoom", "adagoal", 1, 15.0), other)],
        # DISCOVER only on the Xeon, where SUN never ran: no ratio
        "discover": [on(timed("ThreeRoom", "discover", 0, 16.0), other)]}}
    adagoal, n = speedups(study)["adagoal"]
    assert n == 1 and adagoal.value == pytest.approx(3.0) and adagoal.n == (1, 2)
    assert speedups(study)["discover"] == (None, 0)
    # both machines hold both methods: the one with more pairs (the Xeon: SUN 2 seeds, AdaGoal 2) decides
    study["sun_lightning/ThreeRoom-v0"]["sun"] += [on(timed("ThreeRoom", "sun", 2, 5.0), other),
                                                    on(timed("ThreeRoom", "sun", 3, 7.0), other)]
    study["sun_lightning/ThreeRoom-v0"]["adagoal"].append(on(timed("ThreeRoom", "adagoal", 2, 21.0), other))
    adagoal, n = speedups(study)["adagoal"]
    assert n == 1 and adagoal.value == pytest.approx(18.0 / 6.0) and adagoal.n == (2, 2)
