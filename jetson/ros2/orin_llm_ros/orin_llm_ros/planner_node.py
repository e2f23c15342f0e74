"""ROS 2 (Humble) planner node in front of the orin-llm planning daemon.

Serves the ``plan`` action (orin_llm_interfaces/action/Plan: streamed feedback, cancel,
deadline) and the ``set_environment`` service (orin_llm_interfaces/srv/SetEnvironment).
Everything between a goal and the daemon's Unix socket is orin_llm.ros_bridge, plain Python
tested off the robot against a real daemon; this file only maps messages and goal states.

Parameters (read at every goal, so ``ros2 param set`` takes effect on the next one):
socket_path (string, '' = orin-llm's default), timeout_s (double), max_tokens (int, the default
for goals that send 0), deadline_s (double, the default for goals that send 0; 0.0 = none).

It never crashes on a goal: every failure, the daemon being down included, ends the goal as
aborted with a result whose ``error`` says what to fix.
"""

import threading
import time

from orin_llm_interfaces.action import Plan
from orin_llm_interfaces.srv import SetEnvironment
from rclpy import init, try_shutdown
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node

from orin_llm.environment import format_call  # noqa: I100 (ruff: first party)
from orin_llm.ros_bridge import PlanBridge, PlanGoal, PlanOutcome

NODE_NAME = 'orin_llm_planner'
CANCEL_STATE_WAIT_S = 1.0  # a cancel callback runs just before the goal turns CANCELING


class PlannerNode(Node):
    """The plan action server and the set_environment service."""

    def __init__(self):
        super().__init__(NODE_NAME)
        self.declare_parameter('socket_path', '')
        self.declare_parameter('timeout_s', 120.0)
        self.declare_parameter('max_tokens', 256)
        self.declare_parameter('deadline_s', 0.0)
        self._cancel_events = {}
        self._lock = threading.Lock()
        group = ReentrantCallbackGroup()
        self._action_server = ActionServer(
            self, Plan, 'plan', execute_callback=self._execute, goal_callback=self._on_goal,
            cancel_callback=self._on_cancel, callback_group=group)
        self._service = self.create_service(
            SetEnvironment, 'set_environment', self._set_environment, callback_group=group)
        socket_path = self._param('socket_path') or 'the default socket'
        self.get_logger().info(f'planning with the orin-llm daemon at {socket_path}')

    # -- parameters ---------------------------------------------------------------------

    def _param(self, name):
        return self.get_parameter(name).value

    def _bridge(self):
        return PlanBridge.for_socket(
            self._param('socket_path') or None, timeout_s=float(self._param('timeout_s')),
            max_tokens=int(self._param('max_tokens')),
            deadline_s=float(self._param('deadline_s')))

    # -- the action ---------------------------------------------------------------------

    def _on_goal(self, goal_request):
        self.get_logger().info(f'goal: {goal_request.task[:120]!r}')
        return GoalResponse.ACCEPT

    def _on_cancel(self, goal_handle):
        with self._lock:
            event = self._cancel_events.get(bytes(goal_handle.goal_id.uuid))
        if event is not None:
            event.set()
        return CancelResponse.ACCEPT

    def _execute(self, goal_handle):
        key = bytes(goal_handle.goal_id.uuid)
        cancelled = threading.Event()
        with self._lock:
            self._cancel_events[key] = cancelled
        try:
            request = goal_handle.request
            goal = PlanGoal(task=request.task, observations=list(request.observations),
                            max_tokens=int(request.max_tokens),
                            deadline_s=float(request.deadline_s),
                            unconstrained=bool(request.unconstrained))
            progress = {'tokens': 0}

            def on_feedback(delta, tokens):
                progress['tokens'] = tokens
                goal_handle.publish_feedback(to_feedback(delta, tokens))

            def on_step(step):  # a line complete as a step: the robot may start it now
                goal_handle.publish_feedback(to_feedback('', progress['tokens'], step))

            def is_cancelled():
                return cancelled.is_set() or goal_handle.is_cancel_requested

            outcome = self._bridge().run_goal(goal, on_feedback, is_cancelled, on_step)
            result = to_result(outcome)
            self._finish(goal_handle, outcome)
            return result
        except Exception as e:  # noqa: B902 (never crash: the goal ends aborted, with the message)
            message = f'{type(e).__name__}: {e}'
            self.get_logger().error(f'plan goal failed: {message}')
            self._abort(goal_handle)
            return to_result(PlanOutcome(False, error=f'the planner node failed: {message}'))
        finally:
            with self._lock:
                self._cancel_events.pop(key, None)

    def _finish(self, goal_handle, outcome):
        log = self.get_logger()
        if outcome.cancelled:
            end = time.monotonic() + CANCEL_STATE_WAIT_S
            while not goal_handle.is_cancel_requested and time.monotonic() < end:
                time.sleep(0.01)
            if goal_handle.is_cancel_requested:
                log.info(f'goal cancelled after {outcome.tokens} tokens')
                goal_handle.canceled()
                return
        if outcome.success:
            t = outcome.timings
            log.info(f'plan: {len(outcome.steps)} steps, TTFT {t.get("ttft_ms", 0):.0f} ms, '
                     f'{t.get("decode_tokens_per_s", 0):.1f} tokens/s')
            if outcome.finish_reason == 'length':
                log.warning('the plan hit max_tokens and may be cut off; raise max_tokens')
            goal_handle.succeed()
        else:
            log.warning(f'goal aborted: {outcome.error}')
            goal_handle.abort()

    def _abort(self, goal_handle):
        try:
            if goal_handle.is_active:
                goal_handle.abort()
        except Exception as e:  # noqa: B902 (already terminal: nothing left to do)
            self.get_logger().warning(f'could not abort the goal: {e}')

    # -- the service --------------------------------------------------------------------

    def _set_environment(self, request, response):
        try:
            ok, message, version = self._bridge().set_environment(request.environment)
        except Exception as e:  # noqa: B902 (never crash: answer with the message)
            ok, message, version = False, f'the planner node failed: {type(e).__name__}: {e}', -1
        log = self.get_logger()
        (log.info if ok else log.warning)(f'set_environment: {message}')
        response.success = bool(ok)
        response.message = message
        response.version = int(version)
        return response


def to_feedback(delta, tokens, step=None):
    """A Plan feedback message: text decoded since the last one, or a step that just completed."""
    feedback = Plan.Feedback()
    feedback.delta = delta
    feedback.tokens_so_far = tokens
    feedback.step_index = int(step['index']) if step else -1
    if step:
        feedback.step_action = step['action']
        feedback.step_args = list(step.get('args', []))
        feedback.step = format_call(step['action'], list(step.get('args', [])))
    return feedback


def to_result(outcome):
    """Map a PlanOutcome onto a Plan result message."""
    result = Plan.Result()
    result.success = bool(outcome.success)
    result.error = outcome.error
    result.plan = outcome.plan
    result.steps = list(outcome.steps)
    result.rejected_lines = list(outcome.rejected_lines)
    timings = outcome.timings
    result.ttft_ms = float(timings.get('ttft_ms', 0.0))
    result.total_ms = float(timings.get('total_ms', 0.0))
    result.decode_tokens_per_s = float(timings.get('decode_tokens_per_s', 0.0))
    result.environment_version = int(outcome.environment_version)
    return result


def main(args=None):
    """Spin the planner node on a multi-threaded executor until shutdown."""
    init(args=args)
    node = None
    try:
        node = PlannerNode()
        executor = MultiThreadedExecutor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        try_shutdown()


if __name__ == '__main__':
    main()
