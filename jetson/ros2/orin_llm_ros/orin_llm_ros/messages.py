"""The node's parameters, and the daemon's answers as messages."""

from orin_llm_interfaces.action import Plan
from orin_llm_interfaces.msg import Step
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor


def _float(description, low, high, read_only=False):
    return ParameterDescriptor(description=description, read_only=read_only,
                               floating_point_range=[FloatingPointRange(
                                   from_value=low, to_value=high, step=0.0)])


def _int(description, low, high, read_only=False):
    return ParameterDescriptor(description=description, read_only=read_only,
                               integer_range=[IntegerRange(from_value=low, to_value=high, step=1)])


def parameters():
    """Return name -> (default, descriptor); rclpy checks the ranges when a value is set."""
    return {
        'socket_path': ('/run/orin-llm/planner.sock', ParameterDescriptor(
            description="The daemon's Unix socket; '' = $ORIN_LLM_SOCKET, else the default")),
        'timeout_s': (120.0, _float('Longest wait for any answer of the daemon, queue included',
                                    0.1, 3600.0)),
        'max_tokens': (256, _int('Plan length cap for goals that send max_tokens 0', 1, 32768)),
        'deadline_s': (0.0, _float('Deadline for goals that send deadline_s 0; 0 = none',
                                   0.0, 3600.0)),
        'goal_policy': ('parallel', ParameterDescriptor(description=(
            'parallel: up to max_goals goals at once; preempt: a new goal stops the running ones '
            '(aborted, "preempted"); reject_if_busy: a goal is rejected while one runs'))),
        'max_goals': (0, _int("Goals at once under goal_policy parallel; 0 = the daemon's batch "
                              'size (its /health)', 0, 64)),
        'health_period_s': (5.0, _float("How often the daemon's /health is checked", 0.1, 3600.0)),
        'feedback_depth': (100, _int('History depth of the feedback topic (set at start)',
                                     1, 10000, read_only=True)),
        'token_feedback': (False, ParameterDescriptor(description=(
            'Send the text as it is decoded (TOKENS feedback) for every goal, not only for goals '
            'that ask with token_feedback'))),
    }


def to_step(step):
    """Make a Step message of the daemon's {"index", "action", "args"}."""
    msg = Step()
    msg.action = str(step['action'])
    msg.args = [str(a) for a in step.get('args', [])]
    msg.index = int(step.get('index', 0))
    return msg


def to_result(outcome):
    """Make a Plan result of a goal_runner Outcome (the daemon's answer, or why not)."""
    result = Plan.Result()
    result.success = bool(outcome.success)
    result.error = outcome.error
    answer = outcome.answer
    result.environment_version = -1
    if not answer:
        return result
    result.plan = answer.get('plan', '')
    result.steps = [to_step({**s, 'index': i}) for i, s in enumerate(answer.get('steps', []))]
    result.rejected_lines = [f"{r['line']} -- {r['reason']}"
                             for r in answer.get('rejected_lines', [])]
    result.finish_reason = answer.get('finish_reason', '')
    result.environment = answer.get('environment') or ''
    version = answer.get('environment_version')
    result.environment_version = int(version) if version is not None else -1
    result.conversation_turn = int((answer.get('conversation') or {}).get('turn', 0))
    result.goal_reached = bool(answer.get('goal_reached') or False)
    result.goal_missing = [str(f) for f in answer.get('goal_missing') or []]
    t = answer.get('timings', {})
    result.queue_ms = float(t.get('queue_ms', 0.0))
    result.ttft_ms = float(t.get('ttft_since_arrival_ms', t.get('ttft_ms', 0.0)))
    result.total_ms = float(t.get('total_since_arrival_ms', t.get('total_ms', 0.0)))
    result.decode_tokens_per_s = float(t.get('decode_tokens_per_s', 0.0))
    result.prompt_tokens = int(t.get('prompt_tokens', 0))
    result.cached_prompt_tokens = int(t.get('cached_prompt_tokens', 0))
    result.completion_tokens = int(t.get('completion_tokens', 0))
    return result
