"""ament_pep257 over this package (docstrings in the ROS 2 style)."""

from ament_pep257.main import main
from pytest import mark


@mark.linter
@mark.pep257
def test_pep257():
    rc = main(argv=['.', 'test'])
    assert rc == 0, 'Found code style errors / warnings'
