"""The ROS 2 packages under jetson/ros2 are complete (rclpy and colcon are not here: their build and
run are checked on the device, see jetson/ros2/README.md)."""

from __future__ import annotations

import ast
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

ROS2 = Path(__file__).resolve().parents[1] / "jetson" / "ros2"
IFACES = ROS2 / "orin_llm_interfaces"
NODE_PKG = ROS2 / "orin_llm_ros"
NODE = NODE_PKG / "orin_llm_ros" / "planner_node.py"

# rosidl: "<type>[[]] <name>", optional "# comment"; sections split by "---"
FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9_/]*(?:\[\])?)\s+([a-z][a-z0-9_]*)\s*(?:#.*)?$")


def interface_sections(path: Path) -> list[list[tuple[str, str]]]:
    sections: list[list[tuple[str, str]]] = [[]]
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line == "---":
            sections.append([])
        elif line and not line.startswith("#"):
            m = FIELD.match(line)
            assert m, f"{path.name}: not a rosidl field: {raw!r}"
            sections[-1].append((m.group(1), m.group(2)))
    return sections


def package(path: Path) -> ET.Element:
    root = ET.parse(path / "package.xml").getroot()
    assert root.tag == "package" and root.get("format") == "3"
    return root


def deps(root: ET.Element, tag: str) -> set[str]:
    return {e.text for e in root.findall(tag)}


def test_plan_action_fields():
    goal, result, feedback = interface_sections(IFACES / "action" / "Plan.action")
    assert goal == [("string", "task"), ("string[]", "observations"), ("int32", "max_tokens"),
                    ("float32", "deadline_s"), ("bool", "unconstrained")]
    assert result == [("bool", "success"), ("string", "error"), ("string", "plan"), ("string[]", "steps"),
                      ("string[]", "rejected_lines"), ("float32", "ttft_ms"), ("float32", "total_ms"),
                      ("float32", "decode_tokens_per_s"), ("int32", "environment_version")]
    assert feedback == [("string", "delta"), ("int32", "tokens_so_far"), ("int32", "step_index"), ("string", "step"),
                        ("string", "step_action"), ("string[]", "step_args")]


def test_set_environment_service_fields():
    request, response = interface_sections(IFACES / "srv" / "SetEnvironment.srv")
    assert request == [("string", "environment")]
    assert response == [("bool", "success"), ("string", "message"), ("int32", "version")]


def test_interfaces_package_is_ament_cmake_with_rosidl():
    root = package(IFACES)
    assert root.findtext("name") == "orin_llm_interfaces" and root.findtext("export/build_type") == "ament_cmake"
    assert {"ament_cmake", "rosidl_default_generators"} <= deps(root, "buildtool_depend")
    assert "action_msgs" in deps(root, "depend") and "rosidl_default_runtime" in deps(root, "exec_depend")
    assert root.findtext("member_of_group") == "rosidl_interface_packages"
    cmake = (IFACES / "CMakeLists.txt").read_text()
    assert "project(orin_llm_interfaces)" in cmake
    for needed in ("find_package(ament_cmake REQUIRED)", "find_package(rosidl_default_generators REQUIRED)",
                   '"action/Plan.action"', '"srv/SetEnvironment.srv"', "ament_package()"):
        assert needed in cmake
    assert re.search(r"rosidl_generate_interfaces\(\$\{PROJECT_NAME\}", cmake)


def test_node_package_is_ament_python():
    root = package(NODE_PKG)
    assert root.findtext("name") == "orin_llm_ros" and root.findtext("export/build_type") == "ament_python"
    assert {"rclpy", "orin_llm_interfaces", "launch", "launch_ros"} <= deps(root, "exec_depend")
    assert "ament_flake8" in deps(root, "test_depend")
    assert (NODE_PKG / "resource" / "orin_llm_ros").is_file()
    assert (NODE_PKG / "orin_llm_ros" / "__init__.py").is_file()
    cfg = (NODE_PKG / "setup.cfg").read_text()
    assert "script_dir=$base/lib/orin_llm_ros" in cfg and "install_scripts=$base/lib/orin_llm_ros" in cfg
    for test in ("test_flake8.py", "test_bridge_import.py"):
        ast.parse((NODE_PKG / "test" / test).read_text())


def setup_call() -> dict[str, ast.expr]:
    tree = ast.parse((NODE_PKG / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    return {k.arg: k.value for k in call.keywords if k.arg}


def test_setup_py_names_the_entry_point_and_installs_launch_and_config():
    kw = setup_call()
    assert ast.literal_eval(kw["entry_points"]) == {
        "console_scripts": ["planner_node = orin_llm_ros.planner_node:main"]}
    data_files = ast.unparse(kw["data_files"])
    for needed in ("share/ament_index/resource_index/packages", "'package.xml'", "launch/*.launch.py",
                   "config/*.yaml"):
        assert needed in data_files
    source = (NODE_PKG / "setup.py").read_text()
    assert "package_name = 'orin_llm_ros'" in source


def test_launch_and_params_files():
    launch = NODE_PKG / "launch" / "planner.launch.py"
    tree = ast.parse(launch.read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)
    text = launch.read_text()
    assert "executable='planner_node'" in text and "package='orin_llm_ros'" in text
    assert "name='orin_llm_planner'" in text and "planner.params.yaml" in text
    params = yaml.safe_load((NODE_PKG / "config" / "planner.params.yaml").read_text())
    (node_key, body), = params.items()
    assert node_key.endswith("orin_llm_planner")
    p = body["ros__parameters"]
    assert set(p) == {"socket_path", "timeout_s", "max_tokens", "deadline_s"}
    # ROS 2 parameters are typed by their declared default: floats must be written as floats
    assert isinstance(p["socket_path"], str) and isinstance(p["max_tokens"], int)
    assert isinstance(p["timeout_s"], float) and isinstance(p["deadline_s"], float)


def imports(path: Path) -> list[str]:
    names = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            names += [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module:
            names.append(n.module)
    return names


def test_planner_node_is_a_thin_rclpy_shell_over_the_bridge():
    tree = ast.parse(NODE.read_text())
    mods = imports(NODE)
    assert {"rclpy", "rclpy.action", "rclpy.executors", "orin_llm_interfaces.action",
            "orin_llm_interfaces.srv", "orin_llm.ros_bridge"} <= set(mods)
    source = NODE.read_text()
    for needed in ("ActionServer(", "MultiThreadedExecutor(", "ReentrantCallbackGroup(", "publish_feedback(",
                   "cancel_callback=", "'set_environment'", "goal_handle.canceled()", "goal_handle.abort()",
                   "goal_handle.succeed()", "'plan'", ".run_goal(", ".set_environment("):
        assert needed in source, needed
    for name in ("socket_path", "timeout_s", "max_tokens", "deadline_s"):
        assert f"declare_parameter('{name}'" in source
    functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert {"main", "_execute", "_on_cancel", "_set_environment"} <= functions


def test_rclpy_stays_inside_the_ros_package():
    """Only the ROS package imports rclpy: the repo's code and tests import without ROS."""
    assert "rclpy" not in sys.modules  # nothing this test session imported pulled it in
    repo = ROS2.parents[1]
    offenders = [str(p.relative_to(repo)) for top in ("orin_llm", "tests") for p in (repo / top).rglob("*.py")
                 if any(m == "rclpy" or m.startswith(("rclpy.", "orin_llm_interfaces")) for m in imports(p))]
    assert offenders == []
    bridge_imports = imports(repo / "orin_llm" / "ros_bridge.py")
    assert not [m for m in bridge_imports if m.startswith(("rclpy", "orin_llm_interfaces", "launch"))]


@pytest.mark.parametrize("path", [NODE, NODE_PKG / "setup.py", NODE_PKG / "launch" / "planner.launch.py"])
def test_python_files_parse(path):
    ast.parse(path.read_text())
