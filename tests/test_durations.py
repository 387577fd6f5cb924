"""The suite's own scheduling (tests/durations.py): the slowest files first, a file's tests
in their order, a file the table does not know at the median file's time."""
import pathlib
from types import SimpleNamespace

import durations
from conftest import OWN_HANDLING

pytestmark = OWN_HANDLING


def _items(*names):
    return [SimpleNamespace(path=pathlib.Path("tests") / f, name=f"{f}::{i}")
            for i, f in enumerate(names)]


def test_the_slowest_files_go_first_and_a_files_tests_stay_together_in_order():
    items = _items("a.py", "b.py", "a.py", "new.py", "c.py", "b.py")
    seconds = {"a.py": 5.0, "b.py": 300.0, "c.py": 40.0}  # median 40: new.py ties c.py
    order = [i.name for i in durations.longest_first(items, seconds)]
    assert order == ["b.py::1", "b.py::5", "new.py::3", "c.py::4", "a.py::0", "a.py::2"]
    assert durations.longest_first(items, {}) == items  # no table: collection order


def test_the_table_is_read_from_a_junit_file_and_names_only_files_that_exist(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="tests.test_x" name="a" '
                   'time="1.5"/><testcase classname="tests.test_x" name="b" time="2"/>'
                   '<testcase classname="tests.test_y" name="c" time="0.5"/></testsuite>'
                   '</testsuites>')
    assert durations.file_seconds(str(xml)) == {"test_x.py": 3.5, "test_y.py": 0.5}
    here = pathlib.Path(durations.__file__).parent
    for stack in ("pip", "ngc"):
        missing = [f for f in durations.load(stack) if not (here / f).is_file()]
        assert not missing, f"tests/durations.json names removed files ({stack}): {missing}"
