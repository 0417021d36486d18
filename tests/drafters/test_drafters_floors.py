"""The floors inside ``spectool.drafters`` (``.importlinter``, ``drafters-floors``): the command
above tuning above the local drafter above the training-free drafters above the shared helpers.
The tree keeps them (tests/layering/test_layers.py: every contract on the real tree); here a
planted module that imports up must break that contract, or it protects nothing."""

from __future__ import annotations

import pytest

from tests.layering.test_layers import _copy_tree, _lint

FLOORS = "Floors inside spectool.drafters"


@pytest.mark.parametrize(
    ("module", "source"),
    [
        # the mining drafters know nothing of the model drafter
        ("spectool/drafters/history/_violation.py", "from ..local import _local\n"),
        # the model drafter does not load the tuning code
        ("spectool/drafters/local/_violation.py", "def f():\n    from ..tune import _tune\n"),
    ],
)
def test_a_drafters_module_importing_up_breaks_the_floors(tmp_path, module, source):
    _copy_tree(tmp_path)
    (tmp_path / module).write_text(source)
    out = _lint(tmp_path)
    assert out.returncode != 0
    assert f"{FLOORS} BROKEN" in out.stdout, out.stdout
