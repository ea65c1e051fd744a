"""MXNet's own launcher with a deadline; the whole job ends when one process fails.

Beyond the book. ``python -m d2lzh.mxnet.launch --host ADDRESS --timeout SECONDS [--grace
SECONDS] ARGS`` runs ``python -m mxnet.tools.launch ARGS`` (which starts the ps-lite
scheduler, servers and workers through ``dmlc_tracker``) in this process, and adds:

* :func:`patch_dmlc_tracker`: Python 3.10-3.13 support, and ``--host`` as the address of
  the job (not the eth0 address dmlc would pick);
* a :class:`Supervisor` of every process ``dmlc_tracker`` starts, each in a process group
  of its own. When one fails, the launcher names it (role, kv.rank, task or host, pid,
  exit code or signal, the error the worker recorded; at the deadline: what still runs),
  stops every group (SIGTERM, SIGKILL ``--grace`` s later) and exits with 1 (a process
  failed), 124 (the deadline) or 128+N (signal N). ps-lite never notices a dead peer:
  without this the job waits forever. Each process it starts gets ``$D2LZH_LAUNCHER_PID``
  and a deadline, so that :func:`d2lzh.jobs.watch` ends it when the launcher is killed.

Example (2 workers, 1 server, this machine; ``--launcher ssh -H hosts`` or ``mpi`` for
other machines, whose processes the worker program's own ``--timeout`` ends)::

    python -m d2lzh.mxnet.launch --host 127.0.0.1 --timeout 300 \\
        -n 2 -s 1 --launcher local python -m d2lzh.mxnet.dist --out build/dist

It does not import MXNet, so it runs on Python 3.13 too.
"""
import argparse
import contextlib
import importlib
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

PREFIX = 'd2lzh.mxnet.launch'


def _say(msg):
    print(f'[{PREFIX}] {msg}', file=sys.stderr, flush=True)


def _dmlc_modules():
    """dmlc_tracker's modules that start threads and processes (the scheduler: tracker)."""
    for name in ('tracker', 'local', 'ssh', 'mpi', 'slurm', 'sge'):
        with contextlib.suppress(ImportError):  # e.g. an optional dependency is missing
            yield importlib.import_module('dmlc_tracker.' + name)


class TrackerThread(threading.Thread):
    """``threading.Thread`` with the two methods ``dmlc_tracker`` calls: ``isAlive()``
    (removed in Python 3.9: MXNet's launcher died a second after it started, leaving its
    scheduler orphaned) and ``setDaemon()`` (deprecated since 3.10, here without warning)."""

    def isAlive(self):  # noqa: N802 (dmlc_tracker's spelling)
        return self.is_alive()

    def setDaemon(self, daemonic):  # noqa: N802 (dmlc_tracker's spelling)
        self.daemon = daemonic


def patch_dmlc_tracker(host=None):
    """Make MXNet 1.9.1's ``dmlc_tracker`` work on Python 3.10-3.13, bound to ``host``.

    Replaces names inside ``dmlc_tracker``'s modules only: ``Thread`` by
    :class:`TrackerThread`; ``get_host_ip``, to return ``host`` (dmlc turns ``127.x`` into
    eth0's address, and its local mode never passes an address on); the scheduler's port
    search, which tried 9091, 9092 ... and released the port before the scheduler bound
    it, so that two jobs started together both took 9091: it now starts at a random port
    of the first half of the same range.

    Args:
        host (str or None): address the scheduler listens on and the others connect to
            (``'127.0.0.1'`` for one machine); None keeps dmlc's own guess.

    Returns:
        module: the patched ``dmlc_tracker.tracker``; calling again replaces ``host``.

    Raises:
        ImportError: ``dmlc_tracker`` is missing (it comes with the ``mxnet`` wheel).
    """
    tracker = importlib.import_module('dmlc_tracker.tracker')
    for module in _dmlc_modules():
        if getattr(module, 'Thread', None) is not None:
            module.Thread = TrackerThread
    ps = tracker.PSTracker
    guess = tracker.__dict__.setdefault('_d2lzh_get_host_ip', tracker.get_host_ip)
    init = ps.__dict__.get('_d2lzh_init', ps.__init__)
    tracker.get_host_ip = lambda host_ip=None: host if host is not None else guess(host_ip)

    def ps_tracker_init(self, hostIP, cmd, port=9091, port_end=9999, envs=None):  # noqa: N803
        start = random.randrange(port, port + max(1, (port_end - port) // 2))
        init(self, hostIP, cmd, port=start, port_end=port_end, envs=envs)

    ps._d2lzh_init, ps.__init__ = init, ps_tracker_init
    return tracker


def _role_of(args, env):
    """(role, where) of a command dmlc_tracker starts, or (None, None) for others (e.g. the
    ssh launcher's rsync). Local processes have DMLC_ROLE in their environment; the ssh and
    mpi launchers put it into the command line."""
    if env.get('DMLC_ROLE'):
        return env['DMLC_ROLE'], None
    text = args if isinstance(args, str) else ' '.join(map(str, args))
    role = re.search(r'DMLC_ROLE[= ](scheduler|server|worker)\b', text)
    if role is None:
        return None, None
    host = re.search(r'^ssh .*?StrictHostKeyChecking=no (\S+) -p', text)
    return role.group(1), f'via ssh on {host.group(1)}' if host else text.split()[0]


def describe_exit(code):
    """'exit code 1', 'killed by SIGKILL', 'exit code 137 (= 128 + SIGKILL)' ... for a
    ``Popen.returncode``."""
    sig = {s.value: s.name for s in signal.Signals}.get(-code if code < 0 else code - 128)
    if sig is None or 0 <= code <= 128:
        return f'exit code {code}'
    return f'killed by {sig}' if code < 0 else f'exit code {code} (= 128 + {sig})'


class _Child:
    """One process of the job: its Popen, role, where it runs and its status file."""

    def __init__(self, proc, role, where, env):
        self.proc, self.role, self.where, self.started = proc, role, where, time.monotonic()
        self.task, self.status_path = env.get('DMLC_TASK_ID'), env[STATUS_ENV]

    def status(self):
        try:
            with open(self.status_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def name(self):
        rank = self.status().get('rank')
        parts = [f'kv.rank {rank}' if rank is not None else None,
                 f'task {self.task}' if self.task is not None else None, self.where,
                 f'pid {self.proc.pid}']
        return f'{self.role} ({", ".join(p for p in parts if p)})'


class Supervisor:
    """Starts the processes ``dmlc_tracker`` asks for and watches them.

    Installed as the ``subprocess`` module of ``dmlc_tracker``'s modules (every other name
    is the real :mod:`subprocess`'s): ``call`` and ``check_call`` start a process of the
    job in a new session (own process group), record it and wait. After a failure that
    ``dmlc_tracker`` thread waits until the launcher exits, so that ``dmlc_tracker``
    neither restarts the process nor prints its environment.
    """

    def __init__(self, status_dir, child_timeout):
        self.children, self.stopping, self.changed = [], False, threading.Condition()
        self.status_dir, self.child_timeout = status_dir, child_timeout

    def __getattr__(self, name):
        return getattr(subprocess, name)

    def call(self, args, **kwargs):
        return self._run(subprocess.call, args, kwargs)

    def check_call(self, args, **kwargs):
        return self._run(subprocess.check_call, args, kwargs)

    def _run(self, plain, args, kwargs):
        env = dict(kwargs.pop('env', None) or os.environ)
        role, where = _role_of(args, env)
        if role is None:  # not a process of the job (rsync of the ssh launcher ...)
            return plain(args, env=env, **kwargs)
        with self.changed:
            if self.stopping:
                raise SystemExit(0)
            env[STATUS_ENV] = os.path.join(self.status_dir, f'{len(self.children)}.json')
            env.setdefault(TIMEOUT_ENV, f'{self.child_timeout:g}')
            env[LAUNCHER_PID_ENV] = str(os.getpid())
            child = _Child(subprocess.Popen(args, env=env, start_new_session=True, **kwargs),
                           role, where, env)
            self.children.append(child)
            self.changed.notify_all()
        code = child.proc.wait()
        with self.changed:
            self.changed.notify_all()
        if code != 0:
            threading.Event().wait()  # never return into dmlc_tracker: the launcher ends the job
        return code

    def first_failure(self):
        """The first child (by start order) that has exited non-zero, or None."""
        return next((c for c in self.children if c.proc.poll() not in (None, 0)), None)

    def running(self):
        return [c for c in self.children if c.proc.poll() is None]

    def stop_all(self, grace):
        """SIGTERM every child's process group, SIGKILL what is left after ``grace`` s."""
        with self.changed:
            self.stopping, children = True, list(self.children)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for child in children:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.proc.pid, sig)
            end = time.monotonic() + grace
            while sig == signal.SIGTERM and time.monotonic() < end and any(
                    _group_alive(c.proc.pid) for c in children):
                time.sleep(0.05)
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=grace)


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _load_mxnet_launch():
    """MXNet's ``tools/launch.py`` as a module namespace, without importing MXNet."""
    spec = importlib.util.find_spec('mxnet')
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit('MXNet is not installed: python -m d2lzh.setup.install mxnet')
    path = os.path.join(list(spec.submodule_search_locations)[0], 'tools', 'launch.py')
    if not os.path.exists(path):
        raise SystemExit(f'MXNet is installed without its launcher tools/launch.py ({path})')
    return runpy.run_path(path, run_name='mxnet_tools_launch')


def _parser():
    p = argparse.ArgumentParser(
        prog='python -m d2lzh.mxnet.launch', add_help=False,
        description="MXNet's launcher (python -m mxnet.tools.launch ARGS) with a deadline, "
                    'the address you give, and the whole job ended when one process fails. '
                    'Give these options first; all other arguments go to mxnet.tools.launch.')
    p.add_argument('--host', help='address the scheduler listens on and every process '
                                  'connects to (127.0.0.1 for one machine; required)')
    p.add_argument('--timeout', type=float, help='end the whole job after this many seconds '
                                                 '(required)')
    p.add_argument('--grace', type=float, default=3.0,
                   help='seconds between SIGTERM and SIGKILL when ending the job (default 3)')
    p.add_argument('-h', '--help', action='store_true')
    return p


def _split(argv):
    """(our options, the rest): ours come first; the rest belongs to mxnet.tools.launch and
    the command it starts (which may have a --timeout of its own)."""
    i = 0
    while i < len(argv) and argv[i].split('=', 1)[0] in ('--host', '--timeout', '--grace',
                                                         '-h', '--help'):
        i += 1 if '=' in argv[i] or argv[i] in ('-h', '--help') else 2
    return argv[:i], argv[i:]


def main(argv=None):
    """Entry point of ``python -m d2lzh.mxnet.launch``; see the module docstring.

    Returns:
        int: 0 when every process finished, 1 when one failed, 124 at the deadline, 128+N
        on signal N, 2 on a usage error.
    """
    parser = _parser()
    ours, rest = _split(list(sys.argv[1:] if argv is None else argv))
    ours = parser.parse_args(ours)
    namespace = _load_mxnet_launch()
    if ours.help:
        parser.print_help()
        print('\nArguments of mxnet.tools.launch:\n')
        sys.argv = ['python -m mxnet.tools.launch', '--help']
        namespace['main']()
        return 0
    if ours.host is None or ours.timeout is None or ours.timeout <= 0:
        parser.print_usage(sys.stderr)
        _say('error: give --host ADDRESS (127.0.0.1 for one machine) and --timeout SECONDS '
             '(> 0): ps-lite never notices a failed process, so the job needs a deadline')
        return 2
    theirs = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    theirs.add_argument('--launcher', default='ssh')  # mxnet.tools.launch's default
    theirs.add_argument('-H', '--hostfile')
    launcher, hostfile = vars(theirs.parse_known_args(rest)[0]).values()
    if launcher in ('ssh', 'mpi') and not hostfile:
        _say(f'error: --launcher {launcher} (the default is ssh) needs -H HOSTFILE, a file with '
             'one machine per line; for processes on this machine only use --launcher local')
        return 2
    if 'PORT' in os.environ:
        _say(f'ignoring PORT={os.environ.pop("PORT")}: ps-lite would bind every process to it')
    os.environ.pop('DMLC_ROLE', None)
    if launcher == 'local':
        os.environ['DMLC_NODE_HOST'] = ours.host
    logging.basicConfig(format='%(asctime)s %(levelname)s %(message)s', level=logging.INFO)
    patch_dmlc_tracker(ours.host)
    status_dir = tempfile.mkdtemp(prefix='d2lzh-dist-')
    supervisor = Supervisor(status_dir, child_timeout=ours.timeout + 2 * ours.grace + 5)
    for module in _dmlc_modules():
        if hasattr(module, 'subprocess'):
            module.subprocess = supervisor
    outcome, received = {}, []

    def run_launcher():
        sys.argv = ['python -m mxnet.tools.launch', *rest]
        try:
            namespace['main']()
            outcome['code'] = 0
        except SystemExit as err:  # argparse errors in mxnet.tools.launch
            outcome['code'] = err.code if isinstance(err.code, int) else 2
        except BaseException as err:  # noqa: B902
            outcome['code'], outcome['error'] = 1, f'{type(err).__name__}: {err}'
        with supervisor.changed:
            supervisor.changed.notify_all()

    # No lock in the handler (the main thread may hold it): _supervise looks every 0.2 s.
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
    """Wait until a process fails, a signal comes, the deadline passes or all is done; say
    which, stop what still runs, and return the exit status of :func:`main`."""
    start = time.monotonic()
    deadline = start + ours.timeout
    with supervisor.changed:
        while True:
            failed = supervisor.first_failure()
            done = not thread.is_alive() and not supervisor.running()
            if failed is not None or received or done or time.monotonic() >= deadline:
                break
            supervisor.changed.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
    if failed is not None:
        error = failed.status().get('error')
        others = [c.name() for c in supervisor.running() if c is not failed]
        _say(f'{failed.name()} failed after {time.monotonic() - failed.started:.1f} s: '
             f'{describe_exit(failed.proc.returncode)}{f"; its error: {error}" if error else ""}')
        _say(f'ending the job: stopping {len(others)} other process(es): '
             f'{"; ".join(others) or "none"}')
        code = 1
    elif received:
        _say(f'received {signal.Signals(received[0]).name}: stopping every process')
        code = 128 + received[0]
    elif not done:
        names = '; '.join(c.name() for c in supervisor.running()) or 'none started'
        _say(f'deadline of {ours.timeout:g} s passed; still running: {names}. '
             'Stopping every process.')
        code = 124
    elif outcome.get('code'):
        why = outcome.get('error') or describe_exit(outcome['code'])
        _say(f'mxnet.tools.launch failed ({why})')
        code = outcome['code']
    else:
        roles = [c.role for c in supervisor.children]
        summary = ', '.join(f'{roles.count(r)} {r}' for r in sorted(set(roles)))
        _say(f'all {len(roles)} processes ({summary}) finished in '
             f'{time.monotonic() - start:.1f} s')
        return 0
    supervisor.stop_all(ours.grace)
    return code


if __name__ == '__main__':
    sys.exit(main())
