"""A home rendered into chat messages, deterministically: the same Environment always gives
byte-identical messages, so an inference server can cache the prefix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import OrinError
from .calls import format_call, parse_call
from .model import Environment, one_line

if TYPE_CHECKING:
    from .state import HomeState

SYSTEM_PROMPT = (
    "You are the planner of a home robot. Turn the user's task into a plan.\n"
    "Answer with one action call per line, for example go_to(kitchen). "
    "Use only the allowed actions and the names of this home. Write nothing else."
)


def _render_home(env: Environment) -> str:
    lines = [f"Home: {one_line(env.name)}"]
    if env.description.strip():
        lines.append(one_line(env.description))
    if env.is_text:
        lines.append(str(env.text).strip())
        return "\n".join(lines)
    lines.append("Rooms:")
    for room in env.rooms:
        line = f"- {room.name}."
        if room.places:
            line += f" Places: {', '.join(room.places)}."
        if room.objects:
            line += f" Objects: {', '.join(room.objects)}."
        if room.devices:
            line += f" Devices: {', '.join(room.devices)}."
        lines.append(line)
    lines.append("Actions:")
    for a in env.actions:
        desc = one_line(a.description)
        lines.append(f"- {a.signature()}: {desc}" if desc else f"- {a.signature()}")
    return "\n".join(lines)


def system_message(env: Environment) -> dict[str, str]:
    return {"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{_render_home(env)}"}


def state_text(state: HomeState) -> str:
    """The known facts of a home's state, as the planner reads them before a task: what the robot
    holds, where it is, where things lie, what is open and what is on (sorted, so the same state
    always gives the same text and its tokens stay cached). Unknown facts are left out."""
    lines = ["State:"]
    if state.robot_at:
        lines.append(f"- the robot is at {state.robot_at}")
    lines.append(f"- the robot holds {state.holding}" if state.holding else "- the robot's hand is empty")
    lines += [f"- {o} is at {p}" for o, p in sorted(state.object_at.items())]
    lines += [f"- {p} is {'open' if v else 'closed'}" for p, v in sorted(state.open.items())]
    lines += [f"- {d} is {'on' if v else 'off'}" for d, v in sorted(state.on.items())]
    return "\n".join(lines)


def task_message(task: str, observations: list[str] | None = None, state: str | None = None) -> dict[str, str]:
    """The user turn for a request: the home's state (`state`: state_text's, when the home has one),
    ``Task: ...``, and an ``Observations:`` block. The state comes first: it changes less often
    than the task, so its tokens stay cached from one plan to the next."""
    task = one_line(task)
    if not task:
        raise OrinError("the task is empty; say what the robot should do, e.g. 'bring me the mug'")
    content = f"{state}\n\nTask: {task}" if state else f"Task: {task}"
    obs = [one_line(o) for o in (observations or []) if one_line(o)]
    if obs:
        content += "\nObservations:\n" + "\n".join(f"- {o}" for o in obs)
    return {"role": "user", "content": content}


def prefix_messages(env: Environment) -> list[dict[str, str]]:
    """System message (role + home) followed by the examples as user/assistant turns. An example's turn
    is laid out as a task's is: the home's state first, where the home has one (examples run from it:
    world.check_examples), so that the model is shown the layout it is asked in."""
    messages = [system_message(env)]
    block = state_text(env.state) if env.state is not None and not env.is_text else None
    for ex in env.examples:
        messages.append(task_message(ex.task, None, block))
        steps = []
        for raw in ex.plan:
            call = parse_call(raw)
            assert call is not None  # validated by Environment
            action = env.action(call[0])
            steps.append(format_call(*call, types=action.args if action else None))
        messages.append({"role": "assistant", "content": "\n".join(steps)})
    return messages
