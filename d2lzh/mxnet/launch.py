"""MXNet's launcher with a deadline (beyond the book; docs/multi-machine.md): runs
``mxnet.tools.launch ARGS`` and, as ps-lite never notices a dead peer, ends the whole
job when one process fails."""
import argparse
import contextlib
import functools
import importlib.util
import json
import logging
import os
import random
import re
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from ..jobs import LAUNCHER_PID_ENV
from .dist import STATUS_ENV, TIMEOUT_ENV


def _say(msg):
    print(f'[d2lzh.mxnet.launch] {msg}', file=sys.stderr, flush=True)


class TrackerThread(threading.Thread):
    """A Thread with dmlc's ``isAlive()`` (gone in Python 3.9) and ``setDaemon()``."""

    isAlive = threading.Thread.is_alive

    def setDaemon(self, daemonic):
        self.daemon = daemonic


def patch_dmlc_tracker(host=None, supervisor=None):
    """Make MXNet 1.9.1's ``dmlc_tracker`` work on Python 3.10-3.13, its scheduler at
    ``host`` (str; None: dmlc's guess, which turns ``127.x`` into eth0's address), its
    processes started by ``supervisor``, from a random port. Returns
    ``dmlc_tracker.tracker``; ImportError without it (mxnet's wheel)."""
    tracker = importlib.import_module('dmlc_tracker.tracker')
    for name in ('tracker', 'local', 'ssh', 'mpi', 'slurm', 'sge'):
        try:
            module = importlib.import_module('dmlc_tracker.' + name)
        except ImportError:  # an optional dependency is missing
            continue
        if hasattr(module, 'Thread'):
            module.Thread = TrackerThread
        if supervisor is not None and hasattr(module, 'subprocess'):
            module.subprocess = supervisor
    ps = tracker.PSTracker
    guess = vars(tracker).setdefault('_d2lzh_get_host_ip', tracker.get_host_ip)
    init = vars(ps).get('_d2lzh_init', ps.__init__)
    tracker.get_host_ip = lambda host_ip=None: host if host is not None else guess(host_ip)

    def ps_tracker_init(self, hostIP, cmd, port=9091, port_end=9999, envs=None):
        start = random.randrange(port, port + max(1, (port_end - port) // 2))
        init(self, hostIP, cmd, port=start, port_end=port_end, envs=envs)

    ps._d2lzh_init, ps.__init__ = init, ps_tracker_init
    return tracker


def _role_of(args, env):
    """(role, where) from DMLC_ROLE in ``env`` or in ``args`` (ssh, mpi)."""
    if env.get('DMLC_ROLE'):
        return env['DMLC_ROLE'], None
    text = args if isinstance(args, str) else ' '.join(map(str, args))
    if (role := re.search(r'DMLC_ROLE[= ](scheduler|server|worker)\b', text)) is None:
        return None, None
    host = re.search(r'^ssh .*?StrictHostKeyChecking=no (\S+) -p', text)
    return role.group(1), f'经 ssh 在 {host.group(1)} 上' if host else text.split()[0]


def describe_exit(code):
    """'退出码 1', '被 SIGKILL 杀死', '退出码 137（= 128 + SIGKILL）' ... (returncode)."""
    sig = {s.value: s.name for s in signal.Signals}.get(-code if code < 0 else code - 128)
    if sig is None or 0 <= code <= 128:
        return f'退出码 {code}'
    return f'被 {sig} 杀死' if code < 0 else f'退出码 {code}（= 128 + {sig}）'


class _Child(subprocess.Popen):
    """One process of the job."""

    def __init__(self, args, role, where, env, **kwargs):
        super().__init__(args, env=env, start_new_session=True, **kwargs)
        self.role, self.where, self.started = role, where, time.monotonic()
        self.task, self.status_path = env.get('DMLC_TASK_ID'), env[STATUS_ENV]

    def status(self):
        with contextlib.suppress(OSError, ValueError), open(self.status_path) as f:
            return json.load(f)
        return {}

    def name(self):
        rank = self.status().get('rank')
        parts = [f'kv.rank {rank}' if rank is not None else None,
                 f'task {self.task}' if self.task is not None else None, self.where,
                 f'pid {self.pid}']
        return f'{self.role} ({", ".join(p for p in parts if p)})'


class Supervisor:
    """``dmlc_tracker``'s ``subprocess``: ``call``, ``check_call`` start a process of
    the job and wait, never returning after a failure (dmlc would restart it)."""

    def __init__(self, status_dir, child_timeout):
        self.children, self.stopping, self.changed = [], False, threading.Condition()
        self.status_dir, self.child_timeout = status_dir, child_timeout

    def __getattr__(self, name):
        return getattr(subprocess, name)

    def _run(self, plain, args, **kwargs):
        env = dict(kwargs.pop('env', None) or os.environ)
        role, where = _role_of(args, env)
        if role is None:  # not a process of the job (rsync ...)
            return plain(args, env=env, **kwargs)
        with self.changed:
            if self.stopping:
                raise SystemExit(0)
            env[STATUS_ENV] = os.path.join(self.status_dir, f'{len(self.children)}.json')
            env.setdefault(TIMEOUT_ENV, f'{self.child_timeout:g}')
            env[LAUNCHER_PID_ENV] = str(os.getpid())
            child = _Child(args, role, where, env, **kwargs)
            self.children.append(child)
            self.changed.notify_all()
        code = child.wait()
        with self.changed:
            self.changed.notify_all()
        if code != 0:
            threading.Event().wait()
        return code

    call = functools.partialmethod(_run, subprocess.call)
    check_call = functools.partialmethod(_run, subprocess.check_call)

    def running(self):  # in a fixed order: it is printed
        return sorted((c for c in self.children if c.poll() is None),
                      key=lambda c: ('scheduler', 'worker', 'server').index(c.role))

    def stop_all(self, grace):
        """SIGTERM every child's process group, SIGKILL what is left after ``grace`` s."""
        with self.changed:
            self.stopping, children = True, list(self.children)

        def signal_groups(sig):  # how many groups received it
            there = 0
            for child in children:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    there += os.killpg(child.pid, sig) is None
            return there
        signal_groups(signal.SIGTERM)
        end = time.monotonic() + grace
        while time.monotonic() < end and signal_groups(0):
            time.sleep(0.05)
        signal_groups(signal.SIGKILL)
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=grace)


def _parse(argv):
    """(parser, our options, the other arguments)."""
    p = argparse.ArgumentParser(
        prog='python -m d2lzh.mxnet.launch', add_help=False,
        description="MXNet's launcher (python -m mxnet.tools.launch ARGS) with a deadline, "
                    'the address you give, and the whole job ended when one process fails. '
                    'Give these options first; all other arguments go to mxnet.tools.launch.')
    add = p.add_argument
    add('--host', help='where the scheduler listens (127.0.0.1 for one machine; required)')
    add('--timeout', type=float, help='end the whole job after this many seconds (required)')
    add('--grace', type=float, default=3.0, help='seconds from SIGTERM to SIGKILL (default 3)')
    add('-h', '--help', action='store_true')
    i, valued = 0, ('--host', '--timeout', '--grace')  # the command's own are not ours
    while i < len(argv) and argv[i].split('=', 1)[0] in (*valued, '-h', '--help'):
        i += 2 if argv[i] in valued else 1
    return p, p.parse_args(argv[:i]), argv[i:]


def main(argv=None):
    """Returns 0 (all finished), 1 (one failed), 124 (deadline), 128+N (signal N), 2 (usage)."""
    parser, ours, rest = _parse(list(sys.argv[1:] if argv is None else argv))
    spec = importlib.util.find_spec('mxnet')  # not importing MXNet
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit('没有安装 MXNet：请运行 python -m d2lzh.setup.install mxnet')
    path = os.path.join(list(spec.submodule_search_locations)[0], 'tools', 'launch.py')
    if not os.path.exists(path):
        raise SystemExit(f'MXNet 缺少启动脚本 tools/launch.py（{path}）：请重新安装 MXNet')
    namespace = runpy.run_path(path, run_name='mxnet_tools_launch')
    if ours.help:
        parser.print_help()
        print('\nArguments of mxnet.tools.launch:\n')
        sys.argv = ['python -m mxnet.tools.launch', '--help']
        namespace['main']()  # prints the help, exits with 0
    if ours.host is None or ours.timeout is None or ours.timeout <= 0:
        parser.print_usage(sys.stderr)
        _say('错误：要给出 --host ADDRESS（只用一台机器时为 127.0.0.1）和 --timeout SECONDS'
             '（> 0）：ps-lite 从不察觉出错的进程，所以作业需要一个期限')
        return 2
    theirs = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    theirs.add_argument('--launcher', default='ssh')  # mxnet.tools.launch's default
    theirs.add_argument('-H', '--hostfile')
    launcher, hostfile = vars(theirs.parse_known_args(rest)[0]).values()
    if launcher in ('ssh', 'mpi') and not hostfile:
        _say(f'错误：--launcher {launcher}（默认是 ssh）需要 -H HOSTFILE，即每行一台机器的'
             '文件；所有进程都在本机时用 --launcher local')
        return 2
    if 'PORT' in os.environ:
        _say(f'忽略 PORT={os.environ.pop("PORT")}：否则 ps-lite 会把每个进程都绑定到这个端口')
    os.environ.pop('DMLC_ROLE', None)
    if launcher == 'local':
        os.environ['DMLC_NODE_HOST'] = ours.host
    logging.basicConfig(format='%(asctime)s %(levelname)s %(message)s', level=logging.INFO)
    status_dir = tempfile.mkdtemp(prefix='d2lzh-dist-')
    supervisor = Supervisor(status_dir, child_timeout=ours.timeout + 2 * ours.grace + 5)
    patch_dmlc_tracker(ours.host, supervisor)
    outcome, received = {}, []

    def run_launcher():
        sys.argv = ['python -m mxnet.tools.launch', *rest]
        try:
            namespace['main']()
        except SystemExit as err:  # argparse errors
            outcome['code'] = err.code if isinstance(err.code, int) else 2
        except BaseException as err:
            outcome['code'], outcome['error'] = 1, f'{type(err).__name__}: {err}'
        with supervisor.changed:
            supervisor.changed.notify_all()

    # No lock in the handler (the main thread may hold it)
    old = {s: signal.signal(s, lambda signum, frame: received.append(signum))
           for s in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=run_launcher, name='mxnet.tools.launch', daemon=True)
    thread.start()
    try:
        return _supervise(supervisor, thread, outcome, received, ours)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        shutil.rmtree(status_dir, ignore_errors=True)


def _supervise(supervisor, thread, outcome, received, ours):
    """Wait for a failure, a signal, the deadline or the end; say which; exit status."""
    deadline = (start := time.monotonic()) + ours.timeout
    with supervisor.changed:
        while True:
            failed = next((c for c in supervisor.children if c.poll() not in (None, 0)), None)
            done = not thread.is_alive() and not supervisor.running()
            if failed is not None or received or done or time.monotonic() >= deadline:
                break
            supervisor.changed.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
    if failed is not None:
        error = failed.status().get('error')
        others = [c.name() for c in supervisor.running()]
        _say(f'{failed.name()} 运行 {time.monotonic() - failed.started:.1f} 秒后失败：'
             f'{describe_exit(failed.returncode)}{f"；它的错误：{error}" if error else ""}')
        _say(f'结束作业：停止其余 {len(others)} 个进程：{"; ".join(others) or "无"}')
        code = 1
    elif received:
        _say(f'收到 {signal.Signals(received[0]).name}：停止所有进程')
        code = 128 + received[0]
    elif not done:
        names = '; '.join(c.name() for c in supervisor.running()) or '无（还没有进程启动）'
        _say(f'已过 {ours.timeout:g} 秒的期限，仍在运行：{names}。停止所有进程。')
        code = 124
    elif code := outcome.get('code'):
        _say(f'mxnet.tools.launch 失败（{outcome.get("error") or describe_exit(code)}）')
    else:
        roles = [c.role for c in supervisor.children]
        by_role = '，'.join(f'{roles.count(r)} 个 {r}' for r in sorted(set(roles)))
        _say(f'全部 {len(roles)} 个进程（{by_role}）在 {time.monotonic() - start:.1f} 秒内结束')
        return 0
    supervisor.stop_all(ours.grace)
    return code


if __name__ == '__main__':
    sys.exit(main())
