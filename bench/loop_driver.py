"""One timed ``fit`` of a config, run in its own process by :mod:`bench_training_loop` (this tree's code, or
another tree's on ``PYTHONPATH``); prints one JSON line: learning frames, updates and seconds."""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    warmup, args = int(sys.argv[1]), sys.argv[2:]
    import sun_lightning

    try:
        from sun_lightning.run.cli import main as cli_main
    except ImportError:  # a baseline from before the package map (sun_lightning/cli.py)
        from sun_lightning.cli import main as cli_main

    cli = cli_main(args, run=False)
    dm, module = cli.datamodule, cli.model
    marks: dict[str, float] = {}

    def on_frames(frames: int) -> None:
        now = time.perf_counter()
        if frames >= warmup and "start" not in marks:
            marks.update(start=now, frames0=frames, updates0=module.updates)
        marks.update(end=now, frames1=frames, updates1=module.updates)

    if hasattr(dm, "events"):
        dm.events.subscribe("frames", on_frames)
    else:  # a baseline from before the loop's events
        dm.frame_listeners.append(on_frames)
    start = time.perf_counter()
    cli.trainer.fit(module, datamodule=dm)
    print(json.dumps({
        "package": sun_lightning.__file__,
        "seconds": marks["end"] - marks["start"],
        "frames": marks["frames1"] - marks["frames0"],
        "updates": marks["updates1"] - marks["updates0"],
        "total_seconds": time.perf_counter() - start,
    }))


if __name__ == "__main__":
    main()
