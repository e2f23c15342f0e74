"""A home rendered into chat messages, deterministically: the same Environment always gives
byte-identical messages, so an inference server can cache the prefix."""

from __future__ import annotations

from ..errors import OrinError
from .calls import format_call, parse_call
from .model import Environment, one_line

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


def task_message(task: str, observations: list[str] | None = None) -> dict[str, str]:
    """The user turn for a request: ``Task: ...`` plus an ``Observations:`` block."""
    task = one_line(task)
    if not task:
        raise OrinError("the task is empty; say what the robot should do, e.g. 'bring me the mug'")
    content = f"Task: {task}"
    obs = [one_line(o) for o in (observations or []) if one_line(o)]
    if obs:
        content += "\nObservations:\n" + "\n".join(f"- {o}" for o in obs)
    return {"role": "user", "content": content}


def prefix_messages(env: Environment) -> list[dict[str, str]]:
    """System message (role + home) followed by the examples as user/assistant turns."""
    messages = [system_message(env)]
    for ex in env.examples:
        messages.append(task_message(ex.task))
        steps = []
        for raw in ex.plan:
            call = parse_call(raw)
            assert call is not None  # validated by Environment
            action = env.action(call[0])
            steps.append(format_call(*call, types=action.args if action else None))
        messages.append({"role": "assistant", "content": "\n".join(steps)})
    return messages
