"""ament_flake8 over this package (ROS 2 style: 99 columns, google import order, quotes)."""

from ament_flake8.main import main_with_errors
from pytest import mark


@mark.flake8
@mark.linter
def test_flake8():
    rc, errors = main_with_errors(argv=[])
    assert rc == 0, f'Found {len(errors)} code style errors / warnings:\n' + '\n'.join(errors)
