"""The ROS 2 packages under jetson/ros2: what rosdep installs is all they need, and (in the ROS venv,
`make ros`) rosidl's own parser reads the interfaces and ament's flake8 and pep257 pass."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from .ros.conftest import ros_env, ros_python

ROS2 = Path(__file__).resolve().parents[1] / "jetson" / "ros2"
IFACES = ROS2 / "orin_llm_interfaces"
NODE_PKG = ROS2 / "orin_llm_ros"
CODE = sorted((NODE_PKG / "orin_llm_ros").glob("*.py"))
# rosdep key -> the Python module it installs
ROSDEP_MODULES = {"rclpy": "rclpy", "orin_llm_interfaces": "orin_llm_interfaces", "action_msgs": "action_msgs",
                  "diagnostic_msgs": "diagnostic_msgs", "rcl_interfaces": "rcl_interfaces", "launch": "launch",
                  "launch_ros": "launch_ros", "ament_flake8": "ament_flake8", "ament_pep257": "ament_pep257",
                  "python3-pytest": "pytest"}


def package(path: Path) -> ET.Element:
    root = ET.parse(path / "package.xml").getroot()
    assert root.tag == "package" and root.get("format") == "3"
    return root


def deps(root: ET.Element, *tags: str) -> set[str]:
    return {e.text for tag in tags for e in root.findall(tag)}


def imports(path: Path) -> set[str]:
    names = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            names |= {a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            names.add(n.module.split(".")[0])
    return names


def test_the_node_needs_only_the_standard_library_and_its_rosdep_keys():
    root = package(NODE_PKG)
    assert root.findtext("name") == "orin_llm_ros" and root.findtext("export/build_type") == "ament_python"
    declared = {ROSDEP_MODULES[k] for k in deps(root, "exec_depend", "depend", "test_depend")}
    files = [*CODE, *(NODE_PKG / "test").glob("*.py"), *(NODE_PKG / "launch").glob("*.py")]
    used = set().union(*(imports(p) for p in files)) - set(sys.stdlib_module_names) - {"setuptools", "orin_llm_ros"}
    assert used - declared == set(), "imported but not a rosdep key of package.xml"
    assert "orin_llm" not in used  # the daemon's package (torch, pydantic, ...) is not the node's business
    assert {"rclpy", "orin_llm_interfaces", "diagnostic_msgs"} <= deps(root, "exec_depend")


def test_the_interfaces_package_generates_every_interface_file():
    root = package(IFACES)
    assert root.findtext("export/build_type") == "ament_cmake"
    assert {"ament_cmake", "rosidl_default_generators"} <= deps(root, "buildtool_depend")
    assert root.findtext("member_of_group") == "rosidl_interface_packages"
    cmake = (IFACES / "CMakeLists.txt").read_text()
    listed = set(re.findall(r'"((?:msg|srv|action)/\w+\.(?:msg|srv|action))"', cmake))
    on_disk = {str(p.relative_to(IFACES)) for p in IFACES.glob("*/*") if p.suffix in (".msg", ".srv", ".action")}
    assert listed == on_disk and len(on_disk) == 7


def test_setup_py_installs_the_node_the_client_launch_and_config():
    tree = ast.parse((NODE_PKG / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    assert ast.literal_eval(kw["entry_points"]) == {"console_scripts": [
        "planner_node = orin_llm_ros.planner_node:main", "plan_client = orin_llm_ros.plan_client:main"]}
    data_files = ast.unparse(kw["data_files"])
    for needed in ("share/ament_index/resource_index/packages", "'package.xml'", "launch/*.launch.py",
                   "config/*.yaml"):
        assert needed in data_files
    assert ast.literal_eval(kw["install_requires"]) == ["setuptools"]


def declared_parameters() -> dict[str, object]:
    """The node's parameters and defaults, read from messages.parameters() without importing ROS."""
    tree = ast.parse((NODE_PKG / "orin_llm_ros" / "messages.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parameters")
    table = next(n.value for n in ast.walk(fn) if isinstance(n, ast.Return))
    return {ast.literal_eval(k): ast.literal_eval(v.elts[0]) for k, v in zip(table.keys, table.values, strict=True)}


def test_the_params_file_sets_every_parameter_with_its_type():
    params = yaml.safe_load((NODE_PKG / "config" / "planner.params.yaml").read_text())
    (key, body), = params.items()
    assert key.endswith("orin_llm_planner")
    values = body["ros__parameters"]
    declared = declared_parameters()
    assert set(values) == set(declared)
    for name, default in declared.items():  # ROS 2 types a parameter by its default: 5.0, not 5
        assert type(values[name]) is type(default), name


PARSE = """
import json, sys
from pathlib import Path
from rosidl_adapter.parser import parse_action_file, parse_message_file, parse_service_file
out = {}
def fields(spec):
    return {"fields": [[str(f.type), f.name, f.default_value] for f in spec.fields],
            "constants": [[c.type, c.name, c.value] for c in spec.constants]}
for p in sorted(Path(sys.argv[1]).glob("*/*")):
    if p.suffix == ".msg":
        out[p.name] = [fields(parse_message_file("orin_llm_interfaces", str(p)))]
    elif p.suffix == ".srv":
        s = parse_service_file("orin_llm_interfaces", str(p))
        out[p.name] = [fields(s.request), fields(s.response)]
    elif p.suffix == ".action":
        a = parse_action_file("orin_llm_interfaces", str(p))
        out[p.name] = [fields(a.goal), fields(a.result), fields(a.feedback)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def parsed() -> dict:
    """Every interface file as rosidl's own parser (rosidl_adapter, the ROS venv's) reads it."""
    proc = subprocess.run([str(ros_python()), "-c", PARSE, str(IFACES)], capture_output=True, text=True,
                          env=ros_env(0), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def names(section: dict) -> list[str]:
    return [f"{t} {n}" + ("" if d is None else f" {json.dumps(d)}") for t, n, d in section["fields"]]


@pytest.mark.full
def test_rosidl_parses_the_plan_action(parsed):
    goal, result, feedback = parsed["Plan.action"]
    assert names(goal) == [
        "string task", "string[] observations", "string environment", "string conversation",
        "bool constrained true", "int32 max_tokens 0", "float32 deadline_s 0.0", "float32 temperature 0.0",
        "int64 seed -1", "bool token_feedback false", "string[] goal", "string feasibility"]
    assert names(result) == [
        "bool success", "string error", "string plan", "orin_llm_interfaces/Step[] steps", "string[] rejected_lines",
        "string finish_reason", "string environment", "int32 environment_version", "int32 conversation_turn",
        "bool goal_reached", "string[] goal_missing", "float32 queue_ms", "float32 ttft_ms", "float32 total_ms",
        "float32 decode_tokens_per_s", "int32 prompt_tokens", "int32 cached_prompt_tokens",
        "int32 completion_tokens"]
    assert names(feedback) == ["uint8 kind", "orin_llm_interfaces/Step step", "string delta", "int32 tokens_so_far"]
    assert feedback["constants"] == [["uint8", "STEP", 0], ["uint8", "TOKENS", 1]]


@pytest.mark.full
def test_rosidl_parses_the_messages_and_services(parsed):
    assert names(parsed["Step.msg"][0]) == ["string action", "string[] args", "int32 index"]
    assert names(parsed["PlanSteps.msg"][0]) == [
        "string task", "string environment", "int32 environment_version", "orin_llm_interfaces/Step[] steps",
        "string finish_reason"]
    assert names(parsed["EnvironmentInfo.msg"][0]) == [
        "string name", "string home", "int32 version", "int32 prefix_tokens"]
    request, response = parsed["SetEnvironment.srv"]
    assert names(request) == ["string name", "string environment", "int32 if_version -1"]
    assert names(response) == ["bool success", "string message", "int32 version"]
    request, response = parsed["GetEnvironment.srv"]
    assert names(request) == ["string name"]
    assert names(response) == ["bool success", "string message", "string environment", "int32 version"]
    request, response = parsed["ListEnvironments.srv"]
    assert names(request) == [] and names(response) == [
        "bool success", "string message", "orin_llm_interfaces/EnvironmentInfo[] environments"]


@pytest.mark.full
@pytest.mark.parametrize("linter", ["ament_flake8", "ament_pep257"])
def test_the_ros_packages_pass_ament_style(linter):
    """ament's own linters from the wheels (ament_flake8 with its config: 99 columns, google import
    order, single quotes, docstrings; ament_pep257 with the ament convention)."""
    tool = ros_python().parent / linter
    proc = subprocess.run([str(tool), "."], cwd=NODE_PKG, capture_output=True, text=True, env=ros_env(0),
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "orin_llm_ros/planner_node.py" in proc.stdout  # it did check the node
