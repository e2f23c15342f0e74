"""A ROS 2 client process for the tests: JSON commands on stdin, one JSON answer per line on stdout.

Runs in the ROS venv (.venv-ros, rclpy from the PyPI wheels); the tests (tests/test_ros_node.py,
in the main venv) drive it, so a test can start a goal here, stop the daemon there, and read the
goal's end here. Commands ({"op": ..., ...}):

  send    {"id", "goal": {field: value}}      -> {"accepted"} (waits for the goal response)
  wait    {"id", "timeout"}                   -> {"status", "result", "feedback", "waited_s"}
  until   {"id", "count", "kind", "timeout"}  -> {"feedback"} once that many feedbacks of the kind
                                                 (0 STEP, the default; 1 TOKENS) came
  cancel  {"id"}                              -> {"return_code", "status"} once the goal ended
  call    {"service", "type", "request"}      -> {"response"}
  topic   {"name", "type", "timeout"}         -> {"message"} (transient local: the latched one)
  diag    {"contains", "timeout"}             -> {"status"}: the first /diagnostics status from now
                                                 on whose message contains the text
  params  {"node", "set": {name: value}}      -> {"results": [{"successful", "reason"}]}
"""

import importlib
import json
import sys
import threading
import time

import rclpy
from action_msgs.msg import GoalStatus
from diagnostic_msgs.msg import DiagnosticArray
from orin_llm_interfaces.action import Plan
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.action import ActionClient
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

STATUS = {GoalStatus.STATUS_SUCCEEDED: 'SUCCEEDED', GoalStatus.STATUS_ABORTED: 'ABORTED',
          GoalStatus.STATUS_CANCELED: 'CANCELED', GoalStatus.STATUS_UNKNOWN: 'UNKNOWN'}


def to_dict(msg):
    """A message as plain JSON values."""
    if hasattr(msg, 'get_fields_and_field_types'):
        return {name: to_dict(getattr(msg, name)) for name in msg.get_fields_and_field_types()}
    if isinstance(msg, (list, tuple)) or type(msg).__name__ == 'array':
        return [to_dict(m) for m in msg]
    if isinstance(msg, bytes):
        return list(msg)
    return msg


def fill(msg, values):
    for name, value in values.items():
        current = getattr(msg, name)
        if hasattr(current, 'get_fields_and_field_types'):
            fill(current, value)
        else:
            setattr(msg, name, value)
    return msg


def load_type(name):
    package, kind, cls = name.split('/')
    return getattr(importlib.import_module(f'{package}.{kind}'), cls)


class Harness(Node):
    def __init__(self, action_name, feedback_depth):
        super().__init__('orin_llm_test_harness')
        self.action = ActionClient(self, Plan, action_name, feedback_sub_qos_profile=QoSProfile(
            depth=feedback_depth, reliability=ReliabilityPolicy.RELIABLE))
        self.goals = {}  # id -> {"handle", "feedback", "result_future", "sent"}
        self.lock = threading.Lock()
        self.diagnostics = []
        self.create_subscription(DiagnosticArray, '/diagnostics', self.diagnostics.append, 50)

    def wait_future(self, future, timeout):
        end = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > end:
                raise TimeoutError(f'no answer within {timeout} s')
            time.sleep(0.005)
        return future.result()

    def op_send(self, cmd):
        if not self.action.wait_for_server(timeout_sec=cmd.get('timeout', 20)):
            raise TimeoutError('no plan action server')
        goal = fill(Plan.Goal(), cmd['goal'])
        entry = {'feedback': [], 'sent': time.monotonic()}
        with self.lock:
            self.goals[cmd['id']] = entry

        def on_feedback(msg):
            entry['feedback'].append({**to_dict(msg.feedback),
                                      't': time.monotonic() - entry['sent']})
        handle = self.wait_future(self.action.send_goal_async(goal, feedback_callback=on_feedback),
                                  cmd.get('timeout', 20))
        entry['handle'] = handle
        entry['accepted_s'] = time.monotonic() - entry['sent']
        if handle.accepted:
            entry['result_future'] = handle.get_result_async()
        return {'accepted': handle.accepted, 'accepted_s': entry['accepted_s']}

    def op_wait(self, cmd):
        entry = self.goals[cmd['id']]
        response = self.wait_future(entry['result_future'], cmd.get('timeout', 120))
        waited = time.monotonic() - entry['sent']
        # feedback (a topic) and the result (a service) are separate channels: the result can
        # overtake the last feedback messages, so wait until they stop coming (a quiet 0.6 s: on a
        # loaded machine a last message came more than 0.2 s after the result)
        end, count = time.monotonic() + 6.0, -1
        while count != len(entry['feedback']) and time.monotonic() < end:
            count = len(entry['feedback'])
            time.sleep(0.6)
        return {'status': STATUS.get(response.status, str(response.status)),
                'result': to_dict(response.result), 'feedback': entry['feedback'],
                'waited_s': waited}

    def op_until(self, cmd):
        entry = self.goals[cmd['id']]
        end = time.monotonic() + cmd.get('timeout', 60)
        kind = cmd.get('kind', Plan.Feedback.STEP)
        while sum(f['kind'] == kind for f in entry['feedback']) < cmd['count']:
            if time.monotonic() > end or entry['result_future'].done():
                raise TimeoutError(f"{len(entry['feedback'])} feedback messages, not "
                                   f"{cmd['count']} of kind {kind}")
            time.sleep(0.005)
        return {'feedback': entry['feedback']}

    def op_cancel(self, cmd):
        entry = self.goals[cmd['id']]
        sent = time.monotonic()
        response = self.wait_future(entry['handle'].cancel_goal_async(), cmd.get('timeout', 20))
        result = self.wait_future(entry['result_future'], cmd.get('timeout', 20))
        return {'return_code': response.return_code, 'status': STATUS.get(result.status),
                'result': to_dict(result.result), 'cancel_s': time.monotonic() - sent}

    def op_call(self, cmd):
        srv = load_type(cmd['type'])
        client = self.create_client(srv, cmd['service'])
        try:
            if not client.wait_for_service(timeout_sec=cmd.get('timeout', 20)):
                raise TimeoutError(f"no service {cmd['service']}")
            request = fill(srv.Request(), cmd.get('request', {}))
            return {'response': to_dict(self.wait_future(client.call_async(request),
                                                         cmd.get('timeout', 60)))}
        finally:
            self.destroy_client(client)

    def op_topic(self, cmd):
        got = []
        qos = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                         reliability=ReliabilityPolicy.RELIABLE)
        sub = self.create_subscription(load_type(cmd['type']), cmd['name'], got.append, qos)
        try:
            end = time.monotonic() + cmd.get('timeout', 10)
            while not got and time.monotonic() < end:
                time.sleep(0.01)
            return {'message': to_dict(got[-1]) if got else None}
        finally:
            self.destroy_subscription(sub)

    def op_diag(self, cmd):
        end = time.monotonic() + cmd.get('timeout', 20)
        seen = len(self.diagnostics)  # only what comes from now on
        while time.monotonic() < end:
            for array in list(self.diagnostics[seen:]):
                for status in array.status:
                    if cmd['contains'] in status.message:
                        return {'status': to_dict(status)}
            time.sleep(0.02)
        last = self.diagnostics[-1].status[0].message if self.diagnostics else 'none'
        raise TimeoutError(f"no /diagnostics status with {cmd['contains']!r}; last: {last!r}")

    def op_params(self, cmd):
        kinds = {bool: ('bool_value', ParameterType.PARAMETER_BOOL),
                 int: ('integer_value', ParameterType.PARAMETER_INTEGER),
                 float: ('double_value', ParameterType.PARAMETER_DOUBLE),
                 str: ('string_value', ParameterType.PARAMETER_STRING)}
        params = []
        for name, value in cmd['set'].items():
            field, kind = kinds[type(value)]
            params.append(Parameter(name=name, value=ParameterValue(type=kind, **{field: value})))
        return self._set(cmd['node'], params)

    def _set(self, node, params):
        client = self.create_client(SetParameters, f'{node}/set_parameters')
        try:
            if not client.wait_for_service(timeout_sec=20):
                raise TimeoutError(f'no {node}/set_parameters')
            response = self.wait_future(client.call_async(SetParameters.Request(
                parameters=params)), 20)
            return {'results': to_dict(response.results)}
        finally:
            self.destroy_client(client)


def main():
    rclpy.init()
    node = Harness(sys.argv[1] if len(sys.argv) > 1 else 'plan',
                   int(sys.argv[2]) if len(sys.argv) > 2 else 100)
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    print(json.dumps({'ready': True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            answer = {'ok': True, **getattr(node, f"op_{cmd['op']}")(cmd)}
        except Exception as e:  # noqa: B902 (the test reads the error)
            answer = {'ok': False, 'error': f'{type(e).__name__}: {e}'}
        print(json.dumps(answer), flush=True)
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == '__main__':
    main()
