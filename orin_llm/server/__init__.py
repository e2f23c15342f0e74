"""The planning daemon: HTTP/1.1 over a Unix socket in front of one engine worker.

Modules: `sockets` (paths, binding, sd_notify), `protocol` (the HTTP connection: head limits,
arrival times, clients that go away or half-close), `content` (how bodies are read), `body_limit`,
`bodies` (what a parsed body may hold), `body_process` (homes' bodies read in a process), `schemas`
(request bodies), `worker` (the thread that owns the engine), `jobs` (what a request runs on it),
`streams` (waiting on a job, SSE), `app` (the app, its error handlers and loading gate), `routes`
(the routers, one per concern, and the `AppState` they share), `metrics`, `config` (the daemon's
options: `DaemonConfig`), `daemon` (`serve`), `process` (a daemon in a child process), `cli` (the
CLI's commands).
Nothing here is imported by the package root: `sockets` stays importable without FastAPI.
"""
