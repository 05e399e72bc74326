"""Unattended soak: a fit killed with SIGKILL again and again, resumed each time with ``--ckpt_path last``.

For each config, an uninterrupted run gives the reference; the soaked run is then launched ``cycles`` times and
killed at a random moment each time (every other cycle: while a checkpoint is being written, i.e. while a ``.part``
file exists, after the launch's first new checkpoint so that the run moves on), and finally run to its end. Checks:

* the soaked run's metrics (every step of every metric but the wall-clock ``perf/*``) equal the reference's;
* every checkpoint left is intact (:func:`sun_lightning.checkpoints.integrity.verify`) and no ``.part`` is left;
* the MLflow store holds one run, FINISHED, with each metric step logged once;
* memory: each launch killed while writing checkpoint N peaks within 10 % of the uninterrupted run's RSS up to
  writing N (the same point of the run), and no launch exceeds the uninterrupted run's peak by more than 10 %.

``python bench/soak.py [--cycles 20] [--configs three_room point_maze_s] [--out bench/soak.json]`` prints one line
per config and writes the figures as JSON (they go into BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Small runs that still learn, checkpoint often and log often: (env name in the run folder, arguments).
CONFIGS = {
    "three_room": ("ThreeRoom-sun-seed0", ["--data.total_frames", "4400", "--data.warmup_frames", "400",
                                           "--data.updates_per_frame", "0.25", "--metrics.log_every_frames", "200",
                                           "--checkpoint.every_frames", "200"]),
    "point_maze_s": ("PointMazeS-sun-seed0", ["--data.total_frames", "8000", "--data.warmup_frames", "800",
                                              "--metrics.log_every_frames", "320", "--checkpoint.every_frames", "320"]),
}
COMMON = ["--metrics.verbose", "false", "--trainer.enable_progress_bar", "false", "--checkpoint.keep", "2"]


def _command(config: str) -> list[str]:
    return [sys.executable, "-m", "sun_lightning", "fit", "--config", str(ROOT / "conf" / f"{config}.yaml"),
            *CONFIGS[config][1], *COMMON]


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _launch(command: list[str], cwd: Path) -> subprocess.Popen:
    """Start ``command`` in ``cwd``; its stderr goes to ``cwd/stderr.log`` (a pipe nobody reads could block it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cwd.mkdir(parents=True, exist_ok=True)
    with open(cwd / "stderr.log", "a") as log:
        log.write(f"--- launch at {time.time():.3f}\n")
        log.flush()
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)


def _stderr_since_launch(cwd: Path) -> str:
    return (cwd / "stderr.log").read_text().rsplit("--- launch at ", 1)[-1]


def reference(config: str, workdir: Path) -> tuple[float, float, dict[int, int]]:
    """Run ``config`` uninterrupted in ``workdir``; returns its wall time and the time to its first checkpoint (s),
    and its peak RSS (KiB) up to each checkpoint it wrote, by the checkpoint's frames."""
    workdir.mkdir(parents=True, exist_ok=True)
    folder = workdir / "checkpoints" / CONFIGS[config][0]
    start, first, peak, peaks = time.monotonic(), None, 0, {}
    proc = _launch(_command(config), workdir)
    while proc.poll() is None:
        peak = max(peak, _rss_kib(proc.pid))
        written = sorted(folder.glob("frames=*.ckpt")) if folder.exists() else []
        if written and first is None:
            first = time.monotonic() - start
        for path in written:
            peaks.setdefault(int(path.name.split("=")[1].split(".")[0]), peak)
        time.sleep(0.01)
    err = _stderr_since_launch(workdir)
    if proc.returncode != 0:
        raise RuntimeError(f"the reference run of {config} failed ({proc.returncode}): {err[-2000:]}")
    total = time.monotonic() - start
    return total, first or total, peaks


def cycle(command: list[str], cwd: Path, folder: Path, rng: random.Random, during_write: bool,
          horizon_s: float) -> dict:
    """One launch, killed at a random moment (or while writing a checkpoint); its kill time, peak RSS and outcome."""
    before = set(folder.glob("frames=*.ckpt")) if folder.exists() else set()
    deadline = rng.uniform(1.0, horizon_s)
    proc = _launch(command, cwd)
    start, peak, moment, frames = time.monotonic(), 0, "random", None
    while proc.poll() is None:
        peak = max(peak, _rss_kib(proc.pid))
        elapsed = time.monotonic() - start
        if during_write:
            wrote = folder.exists() and set(folder.glob("frames=*.ckpt")) - before
            parts = sorted(folder.glob("*.part")) if wrote else []
            if parts:  # frames=<N>.ckpt.part (serializing), or last.ckpt.part (copying frames=<N>.ckpt)
                named = [p for p in parts if p.name.startswith("frames=")] or sorted(folder.glob("frames=*.ckpt"))
                moment, frames = "checkpoint write", int(named[-1].name.split("=")[1].split(".")[0])
                break
            if elapsed > 4 * horizon_s:
                break  # no second checkpoint in sight: kill anyway
        elif elapsed >= deadline:
            break
        time.sleep(0.002)
    if proc.poll() is not None:
        err = _stderr_since_launch(cwd)
        return {"ended": proc.returncode, "seconds": time.monotonic() - start, "peak_rss_kib": peak, "err": err[-500:]}
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return {"killed_at_s": round(time.monotonic() - start, 3), "moment": moment, "frames": frames, "peak_rss_kib": peak}


def _histories(store: Path) -> tuple[list, dict[str, list[tuple[int, float]]]]:
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{store}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments)
    histories = {}
    if runs:
        for key in runs[0].data.metrics:
            histories[key] = [(m.step, m.value) for m in client.get_metric_history(runs[0].info.run_id, key)]
    return runs, histories


def soak(config: str, workdir: Path, cycles: int = 20, seed: int = 0) -> dict:
    """Reference run, ``cycles`` killed launches and a last one to the end; the checks' figures (see the module)."""
    from sun_lightning.checkpoints.integrity import verify

    rng = random.Random(seed)
    name = CONFIGS[config][0]
    base_s, first_s, base_peaks = reference(config, workdir / "reference")
    command = [*_command(config), "--ckpt_path", "last"]
    run_dir = workdir / "soak"
    run_dir.mkdir(parents=True, exist_ok=True)
    folder = run_dir / "checkpoints" / name
    launches, notes = [], 0
    soak_start = time.monotonic()
    for k in range(cycles):
        # random kills fall before or around a launch's first new checkpoint, so that 20 of them fit in one run
        launches.append(cycle(command, run_dir, folder, rng, during_write=k % 2 == 1, horizon_s=1.2 * first_s))
        if "ended" in launches[-1]:
            break  # the run reached its end before this kill
    final = _launch(command, run_dir)
    final.wait()
    err = _stderr_since_launch(run_dir)
    notes = sum(line.startswith("note: ") for line in err.splitlines())
    soak_s = time.monotonic() - soak_start

    _, ref = _histories(workdir / "reference" / "mlruns" / "mlflow.db")
    runs, got = _histories(run_dir / "mlruns" / "mlflow.db")
    compared = sorted(key for key in ref if not key.startswith("perf/"))
    differ = [key for key in compared if got.get(key) != ref[key]]
    repeated = [key for key, history in got.items() if len({step for step, _ in history}) != len(history)]
    damaged = {str(path): verify(path)[0] for path in sorted(folder.glob("*.ckpt")) if verify(path)[0] is not None}
    parts = [str(path) for path in folder.glob("*.part")]
    # Memory, at the same point of the run: a launch killed while writing checkpoint N against the uninterrupted
    # run's peak up to writing N (a process's RSS grows as it trains, so launches killed at different frames differ
    # by that growth, not by resuming). State that grew with each resume would show here.
    pairs = [(launch["peak_rss_kib"], base_peaks[launch["frames"]]) for launch in launches
             if launch.get("moment") == "checkpoint write" and launch.get("frames") in base_peaks]
    ratios = [mine / theirs - 1.0 for mine, theirs in pairs]
    rss_spread = max(ratios, default=0.0)
    over_reference = max(launch["peak_rss_kib"] for launch in launches) / max(base_peaks.values()) - 1.0
    report = {
        "config": config, "cycles": sum("killed_at_s" in launch for launch in launches),
        "killed_during_write": sum(launch.get("moment") == "checkpoint write" for launch in launches),
        "reference_s": round(base_s, 1), "soak_s": round(soak_s, 1), "final_rc": final.returncode,
        "fallback_notes": notes, "metrics_compared": len(compared), "metrics_differing": differ,
        "steps_logged_twice": repeated, "mlflow_runs": len(runs),
        "mlflow_status": [run.info.status for run in runs], "damaged_checkpoints": damaged, "part_files": parts,
        "reference_peak_rss_mib": round(max(base_peaks.values()) / 1024, 1),
        "rss_over_reference": round(over_reference, 4),
        "rss_pairs_mib": [(round(a / 1024, 1), round(b / 1024, 1)) for a, b in pairs],
        "rss_vs_reference_at_same_frames": [round(r, 4) for r in ratios], "rss_spread": round(rss_spread, 4),
        "launches": launches,
    }
    report["passed"] = (report["final_rc"] == 0 and not differ and not repeated and len(runs) == 1
                        and report["mlflow_status"] == ["FINISHED"] and not damaged and not parts
                        and rss_spread <= 0.10 and over_reference <= 0.10 and len(pairs) > 1 and len(compared) > 0)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sun_soak"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "soak.json")
    args = parser.parse_args()
    reports = []
    for config in args.configs:
        report = soak(config, args.workdir / config, args.cycles)
        reports.append(report)
        print(f"{config}: {'PASS' if report['passed'] else 'FAIL'}  {report['cycles']} kills "
              f"({report['killed_during_write']} during a checkpoint write), reference {report['reference_s']} s, "
              f"soak {report['soak_s']} s, {report['metrics_compared']} metrics equal: {not report['metrics_differing']}, "
              f"MLflow {report['mlflow_status']}, steps twice: {report['steps_logged_twice']}, damaged: "
              f"{report['damaged_checkpoints']}, peak RSS (soaked, uninterrupted) at the same checkpoints "
              f"{report['rss_pairs_mib']} MiB (worst {report['rss_spread']:+.1%}; highest launch "
              f"{report['rss_over_reference']:+.1%} against the uninterrupted run's {report['reference_peak_rss_mib']} MiB)",
              flush=True)
    args.out.write_text(json.dumps(reports, indent=1) + "\n")


if __name__ == "__main__":
    main()
