"""The callback groups' one table (sun_lightning/callbacks/groups.py) is what the CLI adds, what the pre-check reads
and what docs/architecture.md shows."""

from __future__ import annotations

from pathlib import Path

from sun_lightning.callbacks.groups import CALLBACK_GROUPS, callback_class
from sun_lightning.run import precheck

ROOT = Path(__file__).resolve().parents[3]


def test_the_cli_adds_every_group_of_the_table_and_no_other():
    from sun_lightning.run.cli import SUNCLI

    class Probe(SUNCLI):
        def __init__(self) -> None:  # only the parser's groups, nothing run
            pass

    added = []
    parser = type("P", (), {"add_lightning_class_args": lambda self, cls, group: added.append((group, cls)),
                            "link_arguments": lambda self, *a, **k: None, "set_defaults": lambda self, *a, **k: None,
                            "add_argument": lambda self, *a, **k: None})()
    try:
        Probe().add_arguments_to_parser(parser)
    except Exception:  # anything after the groups (links, defaults) is not this test's business
        pass
    assert [(group, cls) for group, cls in added if group in CALLBACK_GROUPS] == \
        [(group, callback_class(group)) for group in CALLBACK_GROUPS]


def test_the_pre_check_reads_the_same_groups_in_the_same_order():
    assert {group: path for group, path in precheck.GROUPS.items() if group not in ("trainer", "data")} == \
        {group: path for group, (path, _) in CALLBACK_GROUPS.items()}
    assert precheck.DOMAIN_ORDER[2:] == tuple(CALLBACK_GROUPS)


def test_the_architecture_document_lists_each_group_with_its_class():
    text = (ROOT / "docs" / "architecture.md").read_text()
    for group, (path, holds) in CALLBACK_GROUPS.items():
        assert f"| `{group}` | `{path}` | {holds} |" in text, group
