"""The home environment the planner is given, and how it becomes chat messages.

An environment is either structured (rooms with places and objects, the actions the
robot can run, a few worked examples) or a plain-text description (``text``). It is
rendered deterministically into a chat prefix: the same Environment always gives
byte-identical messages, so an inference server can cache the prefix.

The planner answers with one action call per line, e.g. ``go_to(kitchen)``;
orin_llm/planning/home/steps.py checks such an answer against the home, line by line.

model.py holds the home and its validation, calls.py an action call's syntax, parse.py loading
from a file or a mapping, render.py the chat messages; their public names are re-exported here.
state.py holds what is known of the home now (HomeState), world.py the simulator that checks a step
against it, goals.py the facts a plan must make true and search.py the classical planner that
reaches them (docs/HOMES.md).
"""

from .calls import Step, format_call, parse_call
from .model import ARG_TYPES, BUILTIN_KINDS, KINDS, Action, Environment, Example, Room, version_key
from .parse import EXAMPLE_HOME_PATH, environment_from_dict, load_environment
from .render import SYSTEM_PROMPT, prefix_messages, system_message, task_message
from .state import HomeState, apply_update, state_from_dict
from .world import Violation, World, loops, simulate

__all__ = [
    "ARG_TYPES", "BUILTIN_KINDS", "EXAMPLE_HOME_PATH", "KINDS", "SYSTEM_PROMPT", "Action", "Environment", "Example",
    "HomeState", "Room", "Step", "Violation", "World", "apply_update", "environment_from_dict", "format_call",
    "load_environment", "loops", "parse_call", "prefix_messages", "simulate", "state_from_dict", "system_message",
    "task_message", "version_key",
]
