"""``python -m sun_lightning``: the LightningCLI, with one-line reports of user errors (exit code 2)."""

import gc
import os
import sys

from sun_lightning.errors import ConfigError, NonFiniteLossError, UsageError, report


def entry(argv: list[str] | None = None) -> int:
    """Run the CLI; a config or command-line error prints one line and returns 2, a run stopped with its checkpoint
    returns 130 (Ctrl-C) or 143 (SIGTERM), anything else raises.

    Errors the sources alone tell are found before the heavy imports (:mod:`sun_lightning.run.precheck`)."""
    from sun_lightning.run import precheck

    try:
        precheck.check(sys.argv[1:] if argv is None else argv)
        from sun_lightning.run.cli import main

        cli = main(argv)
    except (UsageError, ConfigError) as error:
        return report(error)
    except NonFiniteLossError as error:
        if os.environ.get("LOCAL_RANK", "0") == "0":  # under DDP every rank stops; the first one says why
            print(f"error: {error.describe()}", file=sys.stderr, flush=True)
        return 1
    # A run stopped by Ctrl-C or SIGTERM (with its checkpoint) exits 130 or 143: not a finished run.
    trainer = getattr(cli, "trainer", None)
    return max((getattr(cb, "exit_code", 0) for cb in getattr(trainer, "callbacks", ())), default=0)


if __name__ == "__main__":
    code = entry()
    # Everything is written: the interpreter's last collection over torch's and Lightning's objects would take
    # seconds and free nothing the process's exit does not.
    gc.freeze()
    sys.exit(code)
