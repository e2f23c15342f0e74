"""On the device, after colcon build: the node and the bridge it needs import together."""

from pytest import importorskip


def test_the_bridge_is_installed_in_the_python_ros_uses():
    bridge = importorskip(
        'orin_llm.ros_bridge',
        reason='pip install the orin-llm repo into the Python ROS uses (jetson/ros2/README.md)')
    assert callable(bridge.PlanBridge.for_socket)


def test_the_node_imports_with_its_interfaces():
    importorskip('orin_llm.ros_bridge')
    node = importorskip('orin_llm_ros.planner_node')
    from orin_llm_interfaces.action import Plan
    from orin_llm_interfaces.srv import SetEnvironment

    assert callable(node.main) and node.NODE_NAME == 'orin_llm_planner'
    assert hasattr(Plan.Goal(), 'deadline_s') and hasattr(Plan.Feedback(), 'tokens_so_far')
    assert hasattr(SetEnvironment.Response(), 'version')


def test_a_result_carries_a_failed_outcome():
    importorskip('orin_llm.ros_bridge')
    node = importorskip('orin_llm_ros.planner_node')
    from orin_llm.ros_bridge import PlanOutcome

    result = node.to_result(PlanOutcome(False, error='the planner daemon at /x is not reachable'))
    assert not result.success and 'not reachable' in result.error
    assert result.environment_version == -1 and list(result.steps) == []
