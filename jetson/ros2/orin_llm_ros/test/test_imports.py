"""After colcon build: the node, the example client and their interfaces import together."""


def test_the_node_and_the_client_import_with_their_interfaces():
    from orin_llm_interfaces.action import Plan
    from orin_llm_ros import plan_client, planner_node

    assert callable(planner_node.main) and callable(plan_client.main)
    assert Plan.Goal().constrained and Plan.Goal().seed == -1
    assert Plan.Feedback.STEP == 0 and Plan.Feedback.TOKENS == 1


def test_a_failed_outcome_is_a_result_with_its_reason():
    from orin_llm_ros.goal_runner import Outcome
    from orin_llm_ros.messages import to_result

    result = to_result(Outcome(False, error='the planner daemon at /x is not reachable'))
    assert not result.success and 'not reachable' in result.error
    assert result.environment_version == -1 and list(result.steps) == []
