"""
HTTP over the planning daemon's Unix socket, with the standard library only.

The node needs nothing rosdep does not install: this is the whole client. It does not validate
what it sends; the daemon answers a bad request with a 4xx whose message says what to fix, and
that message is what the goal's or the service's caller gets.

    client = DaemonClient('/run/orin-llm/planner.sock', timeout_s=120.0)
    client.health()                               # GET /health (its 503 body while loading too)
    stream = client.plan_stream({'task': '...'})  # POST /v1/plan, stream: true
    for event in stream: ...                      # {'delta'}, {'step'}, then the full answer
    stream.close()                                # from any thread: the daemon cancels the plan

Closing a stream shuts its socket down, which also wakes a reader still waiting for the first
byte: a goal still queued in the daemon is cancelled at once, before its prefill runs.
"""

import http.client
import json
import os
import socket
import threading

DEFAULT_SOCKET = '/run/orin-llm/planner.sock'


class DaemonError(Exception):
    """The daemon answered with an error (status: HTTP status; None: a broken connection)."""

    def __init__(self, status, message):
        super().__init__(f'{message} (HTTP {status})' if status else message)
        self.status, self.message = status, message


class DaemonUnavailable(DaemonError):
    """Nobody answers on the socket (no socket file, nobody listening, no permission)."""

    def __init__(self, socket_path, reason):
        super().__init__(None, f'the planner daemon at {socket_path} is not reachable ({reason})')
        self.socket_path, self.reason = socket_path, reason


def default_socket():
    """$ORIN_LLM_SOCKET, else the user's runtime socket if it exists, else the system one."""
    path = os.environ.get('ORIN_LLM_SOCKET')
    if path:
        return path
    runtime = os.environ.get('XDG_RUNTIME_DIR')
    if runtime and os.path.exists(os.path.join(runtime, 'orin-llm', 'planner.sock')):
        return os.path.join(runtime, 'orin-llm', 'planner.sock')
    return DEFAULT_SOCKET


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, socket_path, timeout_s):
        super().__init__('orin-llm', timeout=timeout_s)
        self.socket_path = socket_path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class DaemonClient:
    """One request per connection: a daemon restarted between two calls is simply found again."""

    def __init__(self, socket_path=None, timeout_s=120.0):
        self.socket_path = socket_path or default_socket()
        self.timeout_s = float(timeout_s)

    def health(self, timeout_s=None):
        """Return the /health body; 503 (loading, failed, stopping) answers with one too."""
        status, _, body = self.request('GET', '/health', timeout_s=timeout_s, accept=(503,))
        if not isinstance(body, dict):
            raise DaemonError(status, f'/health answered {body!r}')
        return body

    def request(self, method, path, body=None, headers=None, timeout_s=None, accept=()):
        """Return (status, headers, JSON body); a status >= 400 not in accept: DaemonError."""
        conn = _UnixConnection(self.socket_path, timeout_s or self.timeout_s)
        head = {'Accept': 'application/json', **(headers or {})}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode('utf-8')
            head.setdefault('Content-Type', 'application/json')
        try:
            conn.request(method, path, body=data, headers=head)
            response = conn.getresponse()
            raw = response.read()
        except (FileNotFoundError, ConnectionRefusedError, PermissionError) as e:
            raise DaemonUnavailable(self.socket_path, reason(e)) from None
        except (OSError, http.client.HTTPException) as e:
            raise DaemonError(None, f'{method} {path} failed: {reason(e)}') from None
        finally:
            conn.close()
        if response.status >= 400 and response.status not in accept:
            raise DaemonError(response.status, error_message(raw))
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode('utf-8', 'replace')
        return response.status, response.headers, parsed

    def plan_stream(self, body):
        """Return a PlanStream of POST /v1/plan with stream: true (not yet connected)."""
        return PlanStream(self.socket_path, self.timeout_s, {**body, 'stream': True})


class PlanStream:
    """The events of one streamed plan; iterate in one thread, close() from any."""

    def __init__(self, socket_path, timeout_s, body):
        self._conn = _UnixConnection(socket_path, timeout_s)
        self._body, self._socket_path = body, socket_path
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def close(self):
        """Shut the connection down: a blocked read returns, the daemon sees its client go."""
        self._closed.set()
        with self._lock:
            sock = self._conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def __iter__(self):
        try:
            with self._lock:
                if self._closed.is_set():
                    return
                self._conn.connect()
            self._conn.request('POST', '/v1/plan', body=json.dumps(self._body).encode('utf-8'),
                               headers={'Content-Type': 'application/json',
                                        'Accept': 'text/event-stream'})
            response = self._conn.getresponse()
            if response.status >= 400:
                raise DaemonError(response.status, error_message(response.read()))
            while True:
                raw = response.readline()
                if not raw:
                    break
                line = raw.decode('utf-8').rstrip('\r\n')
                if not line.startswith('data: '):
                    continue
                data = line[len('data: '):]
                if data == '[DONE]':
                    return
                event = json.loads(data)
                if 'error' in event:
                    error = event['error']
                    raise DaemonError(error.get('code'), error.get('message', str(error)))
                yield event
        except (FileNotFoundError, ConnectionRefusedError, PermissionError) as e:
            raise DaemonUnavailable(self._socket_path, reason(e)) from None
        except (OSError, http.client.HTTPException) as e:
            if self._closed.is_set():
                return
            raise DaemonError(None, f'the plan stream broke: {reason(e)}') from None
        finally:
            self._conn.close()
        if not self._closed.is_set():
            raise DaemonError(None, 'the plan stream ended without [DONE] (the daemon went away?)')


def error_message(raw):
    """Return the message of the daemon's error body ({"error": {"message"}}), else the text."""
    text = raw.decode('utf-8', 'replace') if isinstance(raw, bytes) else str(raw)
    try:
        return json.loads(text)['error']['message']
    except (ValueError, KeyError, TypeError):
        return text.strip() or 'no message'


def reason(e):
    """Say why a connection failed, in words a robot's operator can act on."""
    text = str(e)
    if isinstance(e, FileNotFoundError) or 'No such file' in text:
        return 'no such socket'
    if isinstance(e, ConnectionRefusedError) or 'refused' in text.lower():
        return 'nobody listening'
    if isinstance(e, PermissionError) or 'ermission' in text:
        return "permission denied: is the node's user in the socket's group?"
    if isinstance(e, TimeoutError) or 'timed out' in text:
        return 'timed out'
    if isinstance(e, http.client.RemoteDisconnected):
        return 'the daemon closed the connection without answering'
    return text or type(e).__name__
