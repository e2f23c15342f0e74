"""
ROS 2 planner node in front of the orin-llm planning daemon (runs on Humble and Kilted).

Serves the ``plan`` action (orin_llm_interfaces/action/Plan: typed steps as feedback, cancel,
deadline), the services ``set_environment``, ``get_environment`` and ``list_environments``, the
latched topic ``last_plan`` (the last plan's steps) and the daemon's state on ``/diagnostics``.
What a goal does against the daemon is goal_runner.py; the socket client is daemon_client.py
(standard library only). This file maps messages, parameters and goal states.

It checks the daemon's /health at start and every health_period_s. While the daemon is not
reachable or not ready, new goals are rejected at once (the reason is logged and on
/diagnostics). It never crashes on a goal: every failure ends the goal aborted, with a result
whose ``error`` says what to fix.
"""

import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from orin_llm_interfaces.action import Plan
from orin_llm_interfaces.msg import PlanSteps
from rclpy import init, try_shutdown
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from .daemon_client import DaemonClient, DaemonError, DaemonUnavailable
from .environments import environment_services
from .goal_runner import request_body, run_goal, unreachable
from .messages import parameters, to_result, to_step
from .policy import GoalSlots

NODE_NAME = 'orin_llm_planner'
POLICIES = ('parallel', 'preempt', 'reject_if_busy')
CANCEL_STATE_WAIT_S = 1.0  # a cancel callback runs just before the goal turns CANCELING
HEALTH_TIMEOUT_S = 2.0
SHUTDOWN_WAIT_S = 2.0  # for running goals to end once stopped
UNKNOWN_BATCH = 8  # goals at once when the daemon's /health names no batch size


class PlannerNode(Node):
    """The plan action server, the environment services, /diagnostics and last_plan."""

    def __init__(self):
        super().__init__(NODE_NAME)
        for name, (default, descriptor) in parameters().items():
            self.declare_parameter(name, default, descriptor)
        self.add_on_set_parameters_callback(self._check_parameters)
        self._slots = GoalSlots()
        self._health_lock = threading.Lock()
        self._daemon = {'ok': False, 'reason': 'not checked yet', 'health': {}}
        self._told = False  # whether the daemon's state was logged once
        goals = ReentrantCallbackGroup()
        depth = int(self._param('feedback_depth'))
        self._action_server = ActionServer(
            self, Plan, 'plan', execute_callback=self._execute, goal_callback=self._on_goal,
            cancel_callback=self._on_cancel, callback_group=goals,
            feedback_pub_qos_profile=QoSProfile(depth=depth,
                                                reliability=ReliabilityPolicy.RELIABLE))
        for srv_type, name, call in environment_services(self):
            self.create_service(srv_type, name, call, callback_group=goals)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        self._last_plan = self.create_publisher(PlanSteps, 'last_plan', latched)
        self._diagnostics = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self._check_health()
        self._timer = self.create_timer(float(self._param('health_period_s')), self._check_health,
                                        callback_group=MutuallyExclusiveCallbackGroup())
        self.get_logger().info(f'planning with the orin-llm daemon at {self.client().socket_path}')

    # -- parameters ---------------------------------------------------------------------

    def _param(self, name):
        return self.get_parameter(name).value

    def _check_parameters(self, params):
        from rcl_interfaces.msg import SetParametersResult

        for p in params:
            if p.name == 'goal_policy' and p.value not in POLICIES:
                return SetParametersResult(successful=False, reason=(
                    f'goal_policy {p.value!r}: use parallel, preempt or reject_if_busy'))
            if p.name == 'health_period_s' and hasattr(self, '_timer'):
                self._timer.cancel()
                self._timer = self.create_timer(float(p.value), self._check_health,
                                                callback_group=MutuallyExclusiveCallbackGroup())
        return SetParametersResult(successful=True)

    def client(self, timeout_s=None):
        """Return a socket client for one call (the socket_path parameter as it is now)."""
        return DaemonClient(self._param('socket_path') or None,
                            timeout_s or float(self._param('timeout_s')))

    # -- the daemon's health ------------------------------------------------------------

    def _check_health(self):
        client = self.client(HEALTH_TIMEOUT_S)
        try:
            health = client.health()
            ok = bool(health.get('ready'))
            why = '' if ok else (
                f'the planner daemon at {client.socket_path} is not ready (status '
                f"{health.get('status')!r}{': ' + health['error'] if 'error' in health else ''})")
        except DaemonUnavailable as e:
            health, ok, why = {}, False, unreachable(e)
        except DaemonError as e:
            health, ok, why = {}, False, f'/health of the planner daemon failed: {e.message}'
        with self._health_lock:
            was = self._daemon['ok']
            self._daemon = {'ok': ok, 'reason': why, 'health': health}
        if ok and not was:  # rclpy's logger takes one severity per call site: two calls
            self.get_logger().info(f'the planner daemon at {client.socket_path} is ready')
        elif was and not ok or not ok and not self._told:
            self.get_logger().error(f'{why}; new goals are rejected until it is back')
        self._told = True
        self._publish_diagnostics(client.socket_path)
        return ok

    def _publish_diagnostics(self, socket_path):
        with self._health_lock:
            daemon = dict(self._daemon)
        health = daemon['health']
        status = DiagnosticStatus()
        status.name = f'{self.get_fully_qualified_name()}: planner daemon'
        status.hardware_id = socket_path
        running = self._slots.count()
        if daemon['ok']:
            status.level = DiagnosticStatus.OK
            status.message = f"ready: {health.get('engine', '?')}, {running} goals running"
        else:
            status.level = DiagnosticStatus.ERROR
            status.message = f"{daemon['reason']}; new goals are rejected"
        queue = health.get('queue', {})
        env = health.get('environment', {})
        values = {'socket_path': socket_path, 'status': health.get('status', 'unreachable'),
                  'engine': health.get('engine', ''), 'goals_running': running,
                  'queue_depth': queue.get('depth', ''),
                  'daemon_running': queue.get('running', ''),
                  'environment': env.get('name', ''),
                  'environment_version': env.get('version', ''),
                  'goal_policy': self._param('goal_policy')}
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status = [status]
        self._diagnostics.publish(array)

    def _batch_size(self):
        with self._health_lock:
            scheduler = self._daemon['health'].get('scheduler') or {}
        # the TensorRT-LLM backend batches inside its executor and does not say how many
        return int(scheduler.get('max_running') or UNKNOWN_BATCH)

    # -- the action ---------------------------------------------------------------------

    def _on_goal(self, request):
        log = self.get_logger()
        with self._health_lock:
            ok, why = self._daemon['ok'], self._daemon['reason']
        if not ok and not self._check_health():  # it may have come back since the last check
            with self._health_lock:
                why = self._daemon['reason']
            log.warning(f'goal rejected: {why}')
            return GoalResponse.REJECT
        policy = self._param('goal_policy')
        limit = int(self._param('max_goals')) or self._batch_size()
        refused = self._slots.admit(policy, limit)
        if refused:
            log.warning(f'goal rejected: {refused}')
            return GoalResponse.REJECT
        log.info(f'goal: {request.task[:120]!r}')
        return GoalResponse.ACCEPT

    def _on_cancel(self, goal_handle):
        self._slots.cancel(bytes(goal_handle.goal_id.uuid))
        return CancelResponse.ACCEPT

    def _execute(self, goal_handle):
        key = bytes(goal_handle.goal_id.uuid)
        slot = self._slots.start(key)
        try:
            return self._run(goal_handle, slot)
        except Exception as e:  # noqa: B902 (never crash: the goal ends aborted, with the message)
            message = f'the planner node failed: {type(e).__name__}: {e}'
            self.get_logger().error(message)
            self._end(goal_handle, 'abort')
            result = Plan.Result()
            result.error = message
            return result
        finally:
            self._slots.finish(key)

    def _run(self, goal_handle, slot):
        request = goal_handle.request
        goal = {name: getattr(request, name) for name in (
            'task', 'observations', 'environment', 'conversation', 'constrained', 'max_tokens',
            'deadline_s', 'temperature', 'seed', 'goal', 'feasibility')}
        body = request_body(goal, self._param('max_tokens'), self._param('deadline_s'))
        tokens_wanted = bool(request.token_feedback or self._param('token_feedback'))
        progress = {'tokens': 0}

        def on_step(step):  # a line complete as a step: the robot may start it now
            feedback = Plan.Feedback()
            feedback.kind = Plan.Feedback.STEP
            feedback.step = to_step(step)
            feedback.tokens_so_far = progress['tokens']
            goal_handle.publish_feedback(feedback)

        def on_delta(delta, tokens):
            progress['tokens'] = tokens
            if tokens_wanted:
                feedback = Plan.Feedback()
                feedback.kind = Plan.Feedback.TOKENS
                feedback.delta = delta
                feedback.tokens_so_far = tokens
                goal_handle.publish_feedback(feedback)

        def is_cancelled():
            return slot.is_set() or goal_handle.is_cancel_requested

        outcome = run_goal(self.client(), body, on_step, on_delta, is_cancelled)
        if outcome.cancelled and self._slots.preempted(bytes(goal_handle.goal_id.uuid)):
            outcome.error = 'preempted by a newer goal (goal_policy preempt)'
            outcome.cancelled = False
        result = to_result(outcome)
        log = self.get_logger()
        if outcome.cancelled and self._wait_cancel_state(goal_handle):
            log.info(f'goal cancelled after {outcome.tokens} tokens')
            self._end(goal_handle, 'canceled')
        elif outcome.success:
            log.info(f'plan: {len(result.steps)} steps, queue {result.queue_ms:.0f} ms, '
                     f'TTFT {result.ttft_ms:.0f} ms, finish {result.finish_reason}')
            if result.finish_reason == 'length':
                log.warning('the plan hit max_tokens and may be cut off; raise max_tokens')
            self._publish_last_plan(request, result)
            self._end(goal_handle, 'succeed')
        else:
            log.warning(f'goal aborted: {outcome.error}')
            self._end(goal_handle, 'abort')
        return result

    @staticmethod
    def _wait_cancel_state(goal_handle):
        end = time.monotonic() + CANCEL_STATE_WAIT_S
        while not goal_handle.is_cancel_requested and time.monotonic() < end:
            time.sleep(0.01)
        return goal_handle.is_cancel_requested

    def _end(self, goal_handle, how):
        try:
            if goal_handle.is_active:
                getattr(goal_handle, how)()
        except Exception as e:  # noqa: B902 (already terminal: nothing left to do)
            self.get_logger().warning(f'could not {how} the goal: {e}')

    def stop_goals(self):
        """Stop the running goals: each ends aborted, and its stream is closed."""
        self._slots.stop_all()

    def _publish_last_plan(self, request, result):
        msg = PlanSteps()
        msg.task = request.task
        msg.environment = result.environment
        msg.environment_version = result.environment_version
        msg.steps = list(result.steps)
        msg.finish_reason = result.finish_reason
        self._last_plan.publish(msg)


def main(args=None):
    """Spin the planner node on a multi-threaded executor until shutdown."""
    init(args=args)
    node = executor = None
    try:
        node = PlannerNode()
        # each running goal holds a thread: room for the most goals, the timer and the services
        threads = max(8, int(node.get_parameter('max_goals').value) + 4)
        executor = MultiThreadedExecutor(num_threads=threads)
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.stop_goals()  # their streams close: the daemon stops decoding them
        if executor is not None:
            executor.shutdown(timeout_sec=SHUTDOWN_WAIT_S)
        if node is not None:
            node.destroy_node()
        try_shutdown()


if __name__ == '__main__':
    main()
