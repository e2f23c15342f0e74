"""Which goals run at once: the goal_policy parameter (parallel, preempt, reject_if_busy)."""

import threading


class GoalSlots:
    """The goals accepted and running, each with an event that stops it (a cancel or a preempt)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running = {}  # goal id -> threading.Event
        self._preempted = set()
        self._pending = 0  # accepted, not yet executing

    def count(self):
        """Count the goals accepted and not finished."""
        with self._lock:
            return len(self._running) + self._pending

    def admit(self, policy, limit):
        """
        Return '' if a new goal may start now (it is then counted), else why not.

        parallel: up to limit goals at once; preempt: the new goal stops the running ones (they
        end aborted, 'preempted'); reject_if_busy: only when none runs.
        """
        with self._lock:
            busy = len(self._running) + self._pending
            if policy == 'reject_if_busy' and busy:
                return f'{busy} goal(s) running and goal_policy is reject_if_busy'
            if policy == 'parallel' and busy >= limit:
                return (f'{busy} goals running, at most {limit} at once (the max_goals '
                        "parameter; 0 = the daemon's batch size)")
            if policy == 'preempt':
                for key, event in self._running.items():
                    self._preempted.add(key)
                    event.set()
            self._pending += 1
            return ''

    def start(self, key):
        """Begin an accepted goal; return its stop event."""
        with self._lock:
            self._pending = max(0, self._pending - 1)
            event = self._running[key] = threading.Event()
            return event

    def cancel(self, key):
        """Stop a goal (a cancel request); a goal not running yet checks its handle itself."""
        with self._lock:
            event = self._running.get(key)
        if event is not None:
            event.set()

    def preempted(self, key):
        """Tell whether a newer goal stopped this one."""
        with self._lock:
            return key in self._preempted

    def finish(self, key):
        """Forget a goal that ended."""
        with self._lock:
            self._running.pop(key, None)
            self._preempted.discard(key)

    def stop_all(self):
        """Stop every running goal (the node is shutting down)."""
        with self._lock:
            for event in self._running.values():
                event.set()
