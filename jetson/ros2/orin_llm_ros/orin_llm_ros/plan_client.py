"""
An example robot-side client of the plan action: one goal, its steps as they come, its result.

    ros2 run orin_llm_ros plan_client 'Bring the mug to the sofa.' --observation 'mug on counter'
    python3 -m orin_llm_ros.plan_client 'Open the fridge.' --environment lab --json

Each step is printed (or, with --json, written as one JSON line) the moment the node sends it,
which is where a robot would start executing it; then the result. Exit status: 0 when the plan
succeeded, 1 when the goal was rejected, aborted or cancelled (the reason is printed), 2 when
no planner node answers. Ctrl-C cancels the goal.
"""

import argparse
import json
import sys
import time

from action_msgs.msg import GoalStatus
from orin_llm_interfaces.action import Plan
import rclpy
from rclpy.action import ActionClient
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

STATES = {GoalStatus.STATUS_SUCCEEDED: 'succeeded', GoalStatus.STATUS_ABORTED: 'aborted',
          GoalStatus.STATUS_CANCELED: 'canceled'}


def parse_args(argv):
    """Read the command line (ROS arguments removed)."""
    p = argparse.ArgumentParser(description='Send one goal to the orin-llm planner node.')
    p.add_argument('task', help='what the robot should do')
    p.add_argument('--action', default='plan', help='the action name (default: plan)')
    p.add_argument('--observation', action='append', default=[], help='what the robot sees')
    p.add_argument('--environment', default='', help='a named home ("": the default one)')
    p.add_argument('--conversation', default='', help="an agent loop's id")
    p.add_argument('--max-tokens', type=int, default=0)
    p.add_argument('--deadline', type=float, default=0.0, help='seconds; 0: the node default')
    p.add_argument('--tokens', action='store_true', help='print the text as it is decoded')
    p.add_argument('--json', action='store_true', help='one JSON line per step, then the result')
    p.add_argument('--wait', type=float, default=10.0, help='seconds to wait for the node')
    return p.parse_args(argv)


def step_text(step):
    """Return a step as the call it is, e.g. go_to(kitchen)."""
    return f"{step.action}({', '.join(step.args)})"


def main(argv=None):
    """Send the goal, print its steps and result; return the exit status."""
    argv = rclpy.utilities.remove_ros_args(sys.argv if argv is None else argv)[1:]
    args = parse_args(argv)
    rclpy.init()
    node = Node('orin_llm_plan_client')
    client = ActionClient(node, Plan, args.action, feedback_sub_qos_profile=QoSProfile(
        depth=100, reliability=ReliabilityPolicy.RELIABLE))
    out = sys.stdout
    started_steps = set()

    def start(step):  # where a robot would start executing the step
        if step.index in started_steps:
            return
        started_steps.add(step.index)
        if args.json:
            out.write(json.dumps({'step': {'index': step.index, 'action': step.action,
                                           'args': list(step.args)}}) + '\n')
        else:
            out.write(f'step {step.index}: {step_text(step)}\n')
        out.flush()

    def on_feedback(msg):
        fb = msg.feedback
        if fb.kind == Plan.Feedback.STEP:
            start(fb.step)
        elif args.tokens and not args.json:
            out.write(fb.delta)
            out.flush()

    try:
        if not client.wait_for_server(timeout_sec=args.wait):
            print(f'no planner node serves {args.action!r} (is planner_node running, in this '
                  'ROS_DOMAIN_ID?)', file=sys.stderr)
            return 2
        goal = Plan.Goal(task=args.task, observations=args.observation,
                         environment=args.environment, conversation=args.conversation,
                         max_tokens=args.max_tokens, deadline_s=args.deadline,
                         token_feedback=args.tokens)
        started = time.monotonic()
        future = client.send_goal_async(goal, feedback_callback=on_feedback)
        rclpy.spin_until_future_complete(node, future)
        handle = future.result()
        if not handle.accepted:
            print('goal rejected: the node is not ready or busy (its reason is on /diagnostics '
                  'and in its log)', file=sys.stderr)
            return 1
        result_future = handle.get_result_async()
        try:
            rclpy.spin_until_future_complete(node, result_future)
        except KeyboardInterrupt:
            cancel = handle.cancel_goal_async()
            rclpy.spin_until_future_complete(node, cancel)
            rclpy.spin_until_future_complete(node, result_future)
        response = result_future.result()
        result, state = response.result, STATES.get(response.status, str(response.status))
        for step in result.steps:  # the result can overtake the last feedback: it has every step
            start(step)
        if args.json:
            out.write(json.dumps({'state': state, 'success': result.success,
                                  'error': result.error, 'steps': [
                                      step_text(s) for s in result.steps],
                                  'finish_reason': result.finish_reason,
                                  'environment_version': result.environment_version,
                                  'ttft_ms': result.ttft_ms, 'total_ms': result.total_ms,
                                  'client_s': round(time.monotonic() - started, 3)}) + '\n')
        elif result.success:
            print(f'{state}: {len(result.steps)} steps ({result.finish_reason}), TTFT '
                  f'{result.ttft_ms:.0f} ms, total {result.total_ms:.0f} ms, '
                  f'{result.cached_prompt_tokens}/{result.prompt_tokens} prompt tokens cached')
        else:
            print(f'{state}: {result.error}', file=sys.stderr)
        return 0 if result.success else 1
    finally:
        client.destroy()
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    sys.exit(main())
