"""The README's "When things go wrong" examples are true: each ``$ python -m sun_lightning ...`` command shown there,
run as written, prints the ``error: ...`` line under it (``...`` standing for any text) and exits with code 2.

(The README's custom-gridworld config is trained by ``tests/test_layouts.py``.)
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "$ python -m sun_lightning "


def readme_errors() -> list[tuple[str, str]]:
    """``(command, error line)`` pairs of the README's "When things go wrong" section, in order."""
    section = (ROOT / "README.md").read_text().split("## When things go wrong", 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines()]
    return [(line.removeprefix("$ "), lines[i + 1]) for i, line in enumerate(lines)
            if line.startswith(PROMPT) and i + 1 < len(lines) and lines[i + 1].startswith("error: ")]


EXAMPLES = readme_errors()


def test_the_readme_shows_its_error_examples():
    assert len(EXAMPLES) >= 5, EXAMPLES  # a README edit that breaks the format would otherwise test nothing


@pytest.mark.parametrize(("command", "shown"), EXAMPLES, ids=[shown[7:40] for _, shown in EXAMPLES])
def test_a_readme_error_example_prints_what_it_shows(command, shown, tmp_path):
    (tmp_path / "conf").symlink_to(ROOT / "conf")  # the commands name conf/...; what they write stays in tmp_path
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "sun_lightning"]
    proc = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    assert lines == [lines[-1]], lines  # one line, no traceback
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    assert re.match(pattern, lines[-1]), (shown, lines[-1])
