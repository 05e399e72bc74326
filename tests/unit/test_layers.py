"""Imports point down the levels of tests/layers.py (SPEC §9), and docs/architecture.md shows them as they are."""

from __future__ import annotations

import pytest

from tests.layers import (DATAMODULE_READERS, DOC, LEVELS, PACKAGE, ROOT, SECTIONS, datamodule_reads,
                          document_section, files, imports_of, owner, package_of)

FILES = files()


def test_every_package_has_a_level():
    packages = {package_of(path) for path in FILES}
    assert packages <= set(LEVELS), f"packages without a level in tests/layers.py: {sorted(packages - set(LEVELS))}"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_imports_point_down_the_levels(path):
    own = package_of(path)
    for name in imports_of(path):
        other = owner(name)
        assert other == own or LEVELS[other][0] < LEVELS[own][0], (
            f"{path.relative_to(ROOT)} ({own}, level {LEVELS[own][0]}) imports {name} ({other}, level {LEVELS[other][0]})")


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_only_the_exploration_reads_the_data_module(path):
    """Outside exploration/, a run is read through exploration/view.py's typed view, never through
    ``trainer.datamodule``'s attributes (duck typing no import graph and no type checker sees)."""
    if package_of(path) in DATAMODULE_READERS:
        return
    lines = datamodule_reads(path)
    assert not lines, (f"{path.relative_to(ROOT)} reads .datamodule at line(s) {lines}: "
                       "take sun_lightning.exploration.view.run_view(trainer) instead")


@pytest.mark.parametrize("begin, end, generate", SECTIONS, ids=["packages", "step order"])
def test_the_architecture_document_is_the_code(begin, end, generate):
    """docs/architecture.md's package table and step order are generated (python -m tests.layers --write)."""
    assert document_section(DOC.read_text(), begin, end) == generate(), (
        "docs/architecture.md is stale: python -m tests.layers --write")


def test_no_module_of_the_package_is_left_at_the_top_but_the_foundations():
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert top == ["__main__", "_moved", "compare", "domains", "errors", "keys", "methods"], top
