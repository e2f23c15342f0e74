"""
What the ROS 2 node costs a goal: the planner node against calling the daemon's socket directly.

Runs in the ROS venv (`make ros`) against a running daemon. It starts the project's planner node
(in its own process, as deployed, on a private ROS domain), then sends the same greedy plans both
ways, alternating, and times each from the client's side: to the first step (the node's first STEP
feedback; the stream's first `step` event) and to the result. Writes p50 and p99 of each, and the
node's overhead, as JSON (docs/bench/ros.json; docs/BENCHMARKS.md is generated from it).

    .venv-ros/bin/python jetson/ros2/bench_overhead.py --socket /tmp/planner.sock --goals 20 \
        --out docs/bench/ros.json
"""

import argparse
import json
import os
from pathlib import Path
import platform
import random
import statistics
import subprocess
import sys
import threading
import time

ROOT = Path(__file__).resolve().parents[2]
TASKS = ['Bring the mug from the kitchen to the sofa.', 'Switch off the floor lamp.',
         'Put the book on the bed.', 'Open the fridge.', 'Bring the remote to the counter.']


def percentile(values, q):
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values):
    ms = [v * 1e3 for v in values]
    return {'p50_ms': round(statistics.median(ms), 2), 'p99_ms': round(percentile(ms, 99), 2),
            'mean_ms': round(statistics.fmean(ms), 2), 'samples_ms': [round(v, 2) for v in ms]}


def direct(socket_path, body):
    from orin_llm_ros.daemon_client import DaemonClient

    t0 = time.perf_counter()
    first = None
    final = None
    for event in DaemonClient(socket_path).plan_stream(body):
        if 'step' in event and first is None:
            first = time.perf_counter() - t0
        elif 'delta' not in event and 'step' not in event:
            final = event
    return first, time.perf_counter() - t0, [(s['action'], s['args']) for s in final['steps']]


class ThroughNode:
    def __init__(self, action):
        import rclpy
        from orin_llm_interfaces.action import Plan
        from rclpy.action import ActionClient
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        rclpy.init()
        self.Plan = Plan
        self.node = rclpy.create_node('orin_llm_bench_client')
        self.client = ActionClient(self.node, Plan, action, feedback_sub_qos_profile=QoSProfile(
            depth=100, reliability=ReliabilityPolicy.RELIABLE))
        self.executor = MultiThreadedExecutor(num_threads=2)
        self.executor.add_node(self.node)
        threading.Thread(target=self.executor.spin, daemon=True).start()
        if not self.client.wait_for_server(timeout_sec=30):
            raise SystemExit(f'no planner node serves {action}')

    def plan(self, body):
        Plan = self.Plan
        goal = Plan.Goal(task=body['task'], max_tokens=body['max_tokens'])
        first = []
        done = threading.Event()
        t0 = time.perf_counter()

        def on_feedback(msg):
            if msg.feedback.kind == Plan.Feedback.STEP and not first:
                first.append(time.perf_counter() - t0)

        box = {}

        def on_result(future):
            box['result'] = future.result().result
            box['t'] = time.perf_counter() - t0
            done.set()

        def on_goal(future):
            handle = future.result()
            if not handle.accepted:
                box['t'] = None
                done.set()
                return
            handle.get_result_async().add_done_callback(on_result)

        self.client.send_goal_async(goal, feedback_callback=on_feedback).add_done_callback(on_goal)
        if not done.wait(300) or box.get('t') is None:
            raise SystemExit('a goal was rejected or timed out')
        result = box['result']
        if not result.success:
            raise SystemExit(f'a goal failed: {result.error}')
        return (first[0] if first else None, box['t'],
                [(s.action, list(s.args)) for s in result.steps])

    def close(self):
        import rclpy

        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown()


def machine(daemon_python):
    info = {'platform': platform.platform(), 'python': platform.python_version(),
            'cpu_count': os.cpu_count()}
    try:
        info['cpu'] = next(line.split(':', 1)[1].strip() for line in
                           Path('/proc/cpuinfo').read_text().splitlines()
                           if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    try:
        info['torch'] = subprocess.run(
            [daemon_python, '-c', 'import torch; print(torch.__version__)'], capture_output=True,
            text=True, check=True, timeout=120).stdout.strip() + ' (the daemon)'
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        info['commit'] = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT,
                                        capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument('--socket', required=True, help="the running daemon's socket")
    ap.add_argument('--goals', type=int, default=20, help='measured goals each way')
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--max-tokens', type=int, default=48)
    ap.add_argument('--daemon-python', default=str(ROOT / '.venv' / 'bin' / 'python'))
    ap.add_argument('--out', type=Path, required=True)
    args = ap.parse_args()

    load_before = os.getloadavg()[0]
    sys.path.insert(0, str(ROOT / 'jetson' / 'ros2' / 'orin_llm_ros'))
    domain = random.randint(1, 101)
    os.environ.update(ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    env = {**os.environ, 'PYTHONPATH': str(ROOT / 'jetson' / 'ros2' / 'orin_llm_ros')}
    node = subprocess.Popen([sys.executable, '-m', 'orin_llm_ros.planner_node', '--ros-args',
                             '-r', '__ns:=/bench', '-p', f'socket_path:={args.socket}'],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    via = None
    try:
        via = ThroughNode('/bench/plan')
        time.sleep(1.0)  # past the node's start
        ways = {'direct': lambda b: direct(args.socket, b), 'node': via.plan}
        times = {w: {'first_step': [], 'result': []} for w in ways}
        same = True
        for i in range(args.warmup + args.goals):
            body = {'task': TASKS[i % len(TASKS)], 'max_tokens': args.max_tokens}
            order = list(ways) if i % 2 == 0 else list(reversed(ways))
            plans = {}
            for way in order:
                first, total, plans[way] = ways[way](body)
                if i >= args.warmup:
                    times[way]['first_step'].append(first)
                    times[way]['result'].append(total)
            same = same and plans['direct'] == plans['node']
    finally:
        if via is not None:
            via.close()
        node.terminate()
        node.wait(30)
    out = {
        'scenario': 'ros',
        'command': ' '.join(['.venv-ros/bin/python', 'jetson/ros2/bench_overhead.py',
                             *sys.argv[1:]]),
        'utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
        'machine': machine(args.daemon_python),
        'ros': ('Kilted, PyPI wheels (rclpy 9.1.2, Fast DDS), one host, '
                'ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST'),
        'conditions': (f'Load average {load_before:.1f} at the start and '
                       f'{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores shared '
                       'with other jobs.'),
        'goals': args.goals, 'warmup': args.warmup, 'max_tokens': args.max_tokens,
        'tasks': TASKS, 'same_plans': same,
        'direct': {k: summary(v) for k, v in times['direct'].items()},
        'node': {k: summary(v) for k, v in times['node'].items()},
    }
    # each goal ran both ways back to back: the per-goal difference takes out the plan's own length
    # and most of a shared machine's noise
    out['overhead_ms'] = {}
    for k in ('first_step', 'result'):
        diffs = [(n - d) * 1e3 for n, d in zip(times['node'][k], times['direct'][k])]
        out['overhead_ms'][k] = {'p50_ms': round(statistics.median(diffs), 2),
                                 'p99_ms': round(percentile(diffs, 99), 2),
                                 'samples_ms': [round(v, 2) for v in diffs]}
    args.out.write_text(json.dumps(out, indent=2) + '\n')
    print(json.dumps({k: {p: v[p] for p in ('p50_ms', 'p99_ms')}
                      for k, v in out['overhead_ms'].items()}))


if __name__ == '__main__':
    main()
