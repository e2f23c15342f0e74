"""
The environment services: set_environment, get_environment, list_environments.

A home's text goes to the daemon as it is (JSON, else YAML with Content-Type application/yaml):
the daemon validates it, and its 4xx message is the service's answer.
"""

import json
from urllib.parse import quote

from orin_llm_interfaces.msg import EnvironmentInfo
from orin_llm_interfaces.srv import GetEnvironment, ListEnvironments, SetEnvironment

from .daemon_client import DaemonError, DaemonUnavailable
from .goal_runner import unreachable


def environment_services(node):
    """Return (type, name, callback) of each service, for node.create_service."""
    return [(SetEnvironment, 'set_environment', lambda q, r: set_environment(node, q, r)),
            (GetEnvironment, 'get_environment', lambda q, r: get_environment(node, q, r)),
            (ListEnvironments, 'list_environments', lambda q, r: list_environments(node, q, r))]


def _path(name):
    return f'/v1/environments/{quote(name, safe="")}' if name else '/v1/environment'


def _failure(e, what):
    if isinstance(e, DaemonUnavailable):
        return unreachable(e)
    if isinstance(e, DaemonError):
        status = f' (HTTP {e.status})' if e.status else ''
        return f'the planner daemon refused {what}{status}: {e.message}'
    return f'the planner node failed: {type(e).__name__}: {e}'


def _version(headers):
    tag = (headers.get('ETag') or '').removeprefix('W/').strip('"')
    return int(tag) if tag.isdigit() else -1


def set_environment(node, request, response):
    """Put the home (If-Match when if_version >= 0)."""
    text = request.environment
    try:
        json.loads(text)
        content_type = 'application/json'
    except ValueError:
        content_type = 'application/yaml'
    headers = {'Content-Type': content_type}
    if request.if_version >= 0:
        headers['If-Match'] = f'"{request.if_version}"'
    name = request.name or 'the default home'
    try:
        _, _, body = node.client().request('PUT', _path(request.name), text.encode('utf-8'),
                                           headers)
        response.success, response.version = True, int(body['version'])
        response.message = (f"{name} is now {body.get('name', '?')!r} version {body['version']} "
                            f"({body.get('prefix_tokens', '?')} prefix tokens pinned)")
    except Exception as e:  # noqa: B902 (never crash: the answer says why)
        response.success, response.version = False, -1
        response.message = _failure(e, f'the environment for {name}')
    # rclpy's logger takes one severity per call site: two calls
    if response.success:
        node.get_logger().info(f'set_environment: {response.message}')
    else:
        node.get_logger().warning(f'set_environment: {response.message}')
    return response


def get_environment(node, request, response):
    """Get one home as JSON, with its version."""
    try:
        _, headers, body = node.client().request('GET', _path(request.name))
        response.success, response.message = True, ''
        response.environment = json.dumps(body, ensure_ascii=False)
        response.version = _version(headers)
    except Exception as e:  # noqa: B902 (never crash: the answer says why)
        response.success, response.version = False, -1
        response.message = _failure(e, f'get_environment {request.name!r}')
    return response


def list_environments(node, request, response):
    """List the default home ('') and the named ones."""
    try:
        _, _, body = node.client().request('GET', '/v1/environments')
        response.environments = [
            EnvironmentInfo(name='' if key == 'default' else key, home=str(h.get('name', '')),
                            version=int(h.get('version', -1)),
                            prefix_tokens=int(h.get('prefix_tokens', 0)))
            for key, h in body.items()]
        response.success, response.message = True, ''
    except Exception as e:  # noqa: B902 (never crash: the answer says why)
        response.success, response.message = False, _failure(e, 'list_environments')
    return response
