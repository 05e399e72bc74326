"""The README and its docs/ pages: the README fits a screen and links every page, and every error example is true:
each ``$ python -m sun_lightning ...`` command shown in the README or a docs/ page (``docs/faults.md`` has most), run as
written, prints the ``error: ...`` line under it (``...`` standing for any text) and exits with code 2.

(The custom-gridworld config of ``docs/custom-envs.md`` is trained by ``tests/integration/test_layouts.py``.)
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "$ python -m sun_lightning "


#: The README and the pages under docs/ (the reports under docs/<name>/ are not pages).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The README's size limit: it fits a screen's worth of scrolling; reference material lives under docs/.
README_BYTES = 16_000


def readme_errors() -> list[tuple[str, str]]:
    """``(command, error line)`` pairs of every page, in order."""
    examples = []
    for page in PAGES:
        lines = [line.strip() for line in page.read_text().splitlines()]
        examples += [(line.removeprefix("$ "), lines[i + 1]) for i, line in enumerate(lines)
                     if line.startswith(PROMPT) and i + 1 < len(lines) and lines[i + 1].startswith("error: ")]
    return examples


#: Examples that need a prepared state (a damaged or another run's checkpoint, a broken YAML file): those exact
#: lines are checked by ``tests/integration/test_checkpoint_trust.py``, which makes that state first.
PREPARED = ("--ckpt_path", "conf/x.yaml")
EXAMPLES = [(command, shown) for command, shown in readme_errors() if not any(p in command for p in PREPARED)]


def test_the_docs_show_their_error_examples():
    assert len(EXAMPLES) >= 5, EXAMPLES  # an edit that breaks the format would otherwise test nothing


def test_the_readme_fits_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= README_BYTES
    pages = [page.relative_to(ROOT).as_posix() for page in PAGES[1:]]
    assert {"docs/tracking.md", "docs/faults.md", "docs/distributed.md", "docs/custom-envs.md",
            "docs/study.md"} <= set(pages)
    assert [page for page in pages if f"]({page})" not in readme] == []


def test_relative_links_of_the_docs_lead_to_files():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / target).exists():
                broken.append(f"{page.name}: {target}")
    assert broken == []


def test_the_paper_index_names_files_that_exist():
    """docs/paper.md's commands and file columns name real files (templates such as ``docs/<env>/`` and where a
    command writes apart)."""
    index = (ROOT / "docs" / "paper.md").read_text()
    named = set()
    for code in re.findall(r"`([^`]+)`", index):
        tokens = code.split()
        for before, token in zip(["", *tokens], tokens):
            if (re.match(r"(docs|conf|tests|sun_lightning|bench)/", token) and not re.search(r"[<*{…]", token)
                    and before not in ("--results-dir", "--out")):
                named.add(token.rstrip(",;:"))
    assert len(named) >= 10, named  # an edit that breaks the format would otherwise test nothing
    assert sorted(path for path in named if not (ROOT / path).exists()) == []


@pytest.mark.parametrize(("command", "shown"), EXAMPLES, ids=[shown[7:40] for _, shown in EXAMPLES])
def test_a_readme_error_example_prints_what_it_shows(command, shown, tmp_path):
    (tmp_path / "conf").symlink_to(ROOT / "conf")  # the commands name conf/...; what they write stays in tmp_path
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "sun_lightning"]
    proc = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    assert lines == [lines[-1]], lines  # one line, no traceback
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    assert re.match(pattern, lines[-1]), (shown, lines[-1])
