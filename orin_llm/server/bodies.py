"""Untrusted bodies, read under limits: the structure of a JSON or YAML body is bounded before any
of our code (the UTF-8 check, pydantic, the home's checks) walks it.

- **Aliases** are refused in YAML. A 552-byte body of anchors and aliases composes to a few dozen
  nodes but constructs to a list of 10^8 leaves (shared, so cheap to build, but everything that walks
  it walks them all: 50 s of /health stalled). A home has no use for them, and the message says to
  write the value out (or send JSON, which has none).
- **Depth** at most `MAX_DEPTH` levels of lists and mappings (a home is 4 deep; a chat request's
  tool schemas take 3 levels per nested object); deeper is 422. libyaml stops at 1000 levels itself,
  Python's JSON parser at its recursion limit: both are answered with the same message.
- **Values** at most `MAX_NODES` (every list, mapping, key and scalar counts): a home that fills the
  demo engine's 6144-token prompt has about 1,300 (measured: 855 rooms are 20,000 values and 99,000
  tokens), a plan request a few dozen; more is 413. Refused before pydantic, whose error message for
  131,000 wrong list items took 0.9 s to build and was 10 MB long.
- **Time**: a home's body gets `PARSE_S` in the body process (body_process.py); over it, 413.

The daemon reads a home's body in that process, with these functions; plan, chat and state bodies
in place (content.py), with `load_json`. Only the standard library and PyYAML are imported here.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

MAX_DEPTH = 64
MAX_NODES = 10_000
PARSE_S = 2.0

# libyaml's scanner and parser when PyYAML was built with it (several times faster than the pure-Python
# ones: lab notes, "Measurements moved out of the code"); the constructor is Python either way
BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class BodyError(ValueError):
    """A body over a limit (413) or that cannot be read (422); the message says what to fix."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def too_deep() -> BodyError:
    return BodyError(422, f"the body is nested more than {MAX_DEPTH} levels deep (lists and objects inside "
                          f"each other); the limit is {MAX_DEPTH}: flatten it")


def too_many() -> BodyError:
    return BodyError(413, f"the body has more than {MAX_NODES} values (objects, lists, keys and scalars "
                          f"together); the limit is {MAX_NODES}: send less")


def check_tree(obj: Any, unicode: bool = True) -> None:
    """Depth, value count and (`unicode`) UTF-8 (no lone surrogates, which JSON can spell as "\\ud800"
    and the tokenizer cannot take) of a parsed body, in one iterative walk that stops at the first problem."""
    todo: list[tuple[Any, int]] = [(obj, 0)]
    seen = 0
    while todo:
        item, depth = todo.pop()
        seen += 1
        if seen > MAX_NODES:
            raise too_many()
        if isinstance(item, str):
            if not unicode:
                continue
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise BodyError(422, "text must be valid Unicode (no lone surrogates)") from None
        elif isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                raise too_deep()
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            if seen + len(children) > MAX_NODES:
                raise too_many()
            todo.extend((child, depth + 1) for child in children)


def load_json(text: str | bytes, unicode: bool = True) -> Any:
    """A JSON body under the limits. The parser is C and the text at most the body limit (256 KB
    parses in under 5 ms), so it runs where it is called; what is bounded is what walks the result."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise too_deep() from None
    check_tree(data, unicode)
    return data


def load_yaml(text: str) -> Any:
    """A YAML body under the limits (aliases refused, depth and values bounded), as yaml.safe_load
    would read it. Slow in pure Python: the daemon calls it in the body process (body_process.py)."""
    loader = None
    try:
        loader = BaseLoader(text)  # the pure-Python reader checks the characters here
        node = loader.get_single_node()
        if node is None:
            return None
        check_nodes(node)
        data = loader.construct_document(node)
    except RecursionError:  # the pure-Python composer recurses per level
        raise too_deep() from None
    except yaml.YAMLError as e:
        if "maximum nesting depth" in str(e):  # libyaml's own limit, 1000
            raise too_deep() from None
        raise BodyError(422, yaml_message(e)) from None
    except ValueError as e:  # int("9" * 5000): over Python's 4300 digits (a BodyError is passed on)
        if isinstance(e, BodyError):
            raise
        raise BodyError(422, f"the body is not valid YAML: {e}") from None
    finally:
        if loader is not None:
            loader.dispose()
    check_tree(data)  # "\ud800" in a double-quoted scalar is a lone surrogate
    return data


def yaml_message(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"the body is not valid YAML{where}: {getattr(e, 'problem', None) or e}"


def check_nodes(root: yaml.Node) -> None:
    """The composed document before it is constructed: a node reached twice is an alias (the composer
    makes a new node for everything else), and aliases are what multiply a small body."""
    seen: set[int] = set()
    todo: list[tuple[yaml.Node, int]] = [(root, 0)]
    while todo:
        node, depth = todo.pop()
        if id(node) in seen:
            raise BodyError(422, "YAML aliases (*name) are not accepted in a body: write the value out where it "
                                 "is used, or send the home as JSON")
        seen.add(id(node))
        if len(seen) > MAX_NODES:
            raise too_many()
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            continue
        if depth >= MAX_DEPTH:
            raise too_deep()
        todo.extend((child, depth + 1) for child in children)
    # every value counted once: the constructed document has as many (keys and scalars included)
