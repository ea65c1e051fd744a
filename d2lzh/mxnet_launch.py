"""Run MXNet's own launcher with a deadline, and end the whole job when one process fails.

Beyond the book. ``python -m d2lzh.mxnet_launch --host ADDRESS --timeout SECONDS
[--grace SECONDS] ARGS`` runs ``python -m mxnet.tools.launch ARGS`` (MXNet's
launcher, which starts the ps-lite scheduler, servers and workers through
``dmlc_tracker``) in this process. Its own three options come first; every
argument from the first other one on goes to ``mxnet.tools.launch`` unchanged.
MXNet's launcher does the launching; this module adds:

* :func:`d2lzh._dmlc_compat.patch_dmlc_tracker`: Python 3.10-3.13 support,
  and ``--host`` as the scheduler's address (in local mode also every
  process's ``DMLC_NODE_HOST``) instead of the eth0 address dmlc would pick;
* supervision of every process ``dmlc_tracker`` starts: each runs in a process
  group of its own; when one exits with an error or is killed, or when
  ``--timeout`` seconds have passed, the launcher names it (role, kvstore
  rank, task number or host, pid, exit code or signal, and the error the
  worker recorded), stops every process group (SIGTERM, then SIGKILL after
  ``--grace`` seconds) and exits with status 1 (a process failed), 124 (the
  deadline) or 128+N (signal N to the launcher). ps-lite itself never notices
  a dead peer: without this the other processes, and MXNet's launcher, wait
  forever. Each process started on this machine also gets the launcher's pid
  and a deadline, which the watchdog of :mod:`d2lzh.mxnet_dist` uses to end it
  when the launcher itself is killed.

``$PORT`` is removed from the environment (ps-lite would bind every process to
that one port). Example, 2 workers and 1 server on this machine::

    python -m d2lzh.mxnet_launch --host 127.0.0.1 --timeout 300 \\
        -n 2 -s 1 --launcher local python -m d2lzh.mxnet_dist --out build/dist

With ``--launcher ssh -H hosts`` (or ``mpi``) the processes run on other
machines; the launcher supervises the local ``ssh``/``mpirun`` processes, and
the worker program's own ``--timeout`` ends the remote ones.
"""
import argparse
import importlib.util
import json
import logging
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from ._dmlc_compat import patch_dmlc_tracker

PREFIX = 'd2lzh.mxnet_launch'
# dmlc_tracker modules that start processes (the scheduler: tracker; the others: by launcher).
_SPAWNING_MODULES = ('tracker', 'local', 'ssh', 'mpi', 'slurm', 'sge')


def _say(msg):
    print(f'[{PREFIX}] {msg}', file=sys.stderr, flush=True)


def _role_of(args, env):
    """(role, where) of a command dmlc_tracker starts, or (None, None) for other commands
    (e.g. the ssh launcher's rsync). Local processes have DMLC_ROLE in their environment;
    the ssh and mpi launchers put it into the command line they run."""
    if env.get('DMLC_ROLE'):
        return env['DMLC_ROLE'], None
    text = args if isinstance(args, str) else ' '.join(map(str, args))
    role = re.search(r'DMLC_ROLE[= ](scheduler|server|worker)\b', text)
    if role is None:
        return None, None
    host = re.search(r'^ssh .*?StrictHostKeyChecking=no (\S+) -p', text)
    where = f'via ssh on {host.group(1)}' if host else text.split()[0] if text else None
    return role.group(1), where


class _Child:
    def __init__(self, proc, role, where, env, status_path, started):
        self.proc, self.status_path, self.started = proc, status_path, started
        self.role, self.where = role, where
        self.task = env.get('DMLC_TASK_ID')

    def status(self):
        try:
            with open(self.status_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def name(self):
        status = self.status()
        parts = [self.role]
        if status.get('rank') is not None:
            parts.append(f'kv.rank {status["rank"]}')
        if self.task is not None:
            parts.append(f'task {self.task}')
        if self.where:
            parts.append(self.where)
        parts.append(f'pid {self.proc.pid}')
        return f'{parts[0]} ({", ".join(parts[1:])})'


def describe_exit(code):
    """'exit code 1', 'killed by SIGKILL' ... for a ``Popen.returncode``."""
    if code is None:
        return 'still running'
    if code < 0 or code > 128:
        num = -code if code < 0 else code - 128
        try:
            sig = signal.Signals(num).name
        except ValueError:
            sig = None
        if sig is not None:
            return f'killed by {sig}' if code < 0 else f'exit code {code} (= 128 + {sig})'
    return f'exit code {code}'


class Supervisor:
    """Starts the processes ``dmlc_tracker`` asks for and watches them.

    Installed by :func:`main` as the ``subprocess`` module of
    ``dmlc_tracker``'s spawning modules: its ``call`` and ``check_call`` start
    the command in a new session (own process group), record it with its
    role, and wait. A process that fails is reported to the launcher's main
    thread; the ``dmlc_tracker`` thread that started it then waits until the
    launcher exits, so that ``dmlc_tracker`` neither restarts it nor prints its
    environment. Everything else is the real :mod:`subprocess`.
    """

    def __init__(self, status_dir, child_timeout):
        self.children = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.status_dir = status_dir
        self.child_timeout = child_timeout
        self.stopping = False
        self.next_id = 0

    def __getattr__(self, name):  # everything else: the real subprocess module
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
        with self.lock:
            if self.stopping:
                raise SystemExit(0)
            self.next_id += 1
            status_path = os.path.join(self.status_dir, f'{self.next_id}.json')
        env['D2LZH_DIST_STATUS'] = status_path
        env.setdefault('D2LZH_DIST_TIMEOUT', f'{self.child_timeout:g}')
        env['D2LZH_DIST_LAUNCHER_PID'] = str(os.getpid())
        proc = subprocess.Popen(args, env=env, start_new_session=True, **kwargs)
        child = _Child(proc, role, where, env, status_path, time.monotonic())
        with self.changed:
            self.children.append(child)
            self.changed.notify_all()
        code = proc.wait()
        with self.changed:
            self.changed.notify_all()
        if code != 0:
            threading.Event().wait()  # never return into dmlc_tracker: the launcher ends the job
        return code

    def first_failure(self):
        """The first child (by start order) that has exited non-zero, or None."""
        for child in self.children:
            code = child.proc.poll()
            if code not in (None, 0):
                return child
        return None

    def running(self):
        return [c for c in self.children if c.proc.poll() is None]

    def stop_all(self, grace):
        """SIGTERM every child's process group, SIGKILL what is left after ``grace`` s."""
        with self.lock:
            self.stopping = True
            children = list(self.children)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for child in children:
                try:
                    os.killpg(child.proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            end = time.monotonic() + grace
            while sig == signal.SIGTERM and time.monotonic() < end and any(
                    _group_alive(c.proc.pid) for c in children):
                time.sleep(0.05)
        for child in children:
            try:
                child.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass


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
        raise SystemExit('MXNet is not installed: pip install -r requirements.txt')
    path = os.path.join(list(spec.submodule_search_locations)[0], 'tools', 'launch.py')
    if not os.path.exists(path):
        raise SystemExit(f'MXNet is installed without its launcher tools/launch.py ({path})')
    return runpy.run_path(path, run_name='mxnet_tools_launch')


def _parser():
    p = argparse.ArgumentParser(
        prog='python -m d2lzh.mxnet_launch', add_help=False,
        description="MXNet's launcher (python -m mxnet.tools.launch ARGS) with a deadline, "
                    'the address you give, and the whole job ended when one process fails. '
                    'Give these options first; all other arguments go to mxnet.tools.launch.')
    p.add_argument('--host', default=None,
                   help='address the scheduler listens on and every process connects to '
                        '(127.0.0.1 for one machine; required)')
    p.add_argument('--timeout', type=float, default=None,
                   help='end the whole job after this many seconds (required)')
    p.add_argument('--grace', type=float, default=3.0,
                   help='seconds between SIGTERM and SIGKILL when ending the job (default 3)')
    p.add_argument('-h', '--help', action='store_true')
    return p


def main(argv=None):
    """Entry point of ``python -m d2lzh.mxnet_launch``; see the module docstring.

    Returns:
        int: 0 when every process finished, 1 when one failed, 124 at the
        deadline, 128+N on signal N, 2 on a usage error.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    # Our options come first; everything from the first other argument on belongs to
    # mxnet.tools.launch and the command it starts (which may have a --timeout of its own).
    i = 0
    while i < len(argv):
        name = argv[i].split('=', 1)[0]
        if name in ('--host', '--timeout', '--grace'):
            i += 1 if '=' in argv[i] else 2
        elif name in ('-h', '--help'):
            i += 1
        else:
            break
    ours, rest = parser.parse_args(argv[:i]), argv[i:]
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
    if 'PORT' in os.environ:
        _say(f'ignoring PORT={os.environ["PORT"]}: ps-lite would bind every process to it')
        os.environ.pop('PORT')
    os.environ.pop('DMLC_ROLE', None)
    logging.basicConfig(format='%(asctime)s %(levelname)s %(message)s', level=logging.INFO)
    patch_dmlc_tracker(ours.host)
    launcher = 'ssh'  # mxnet.tools.launch's default
    for i, arg in enumerate(rest):
        if arg == '--launcher' and i + 1 < len(rest):
            launcher = rest[i + 1]
        elif arg.startswith('--launcher='):
            launcher = arg.split('=', 1)[1]
    if launcher in ('ssh', 'mpi') and not any(
            a in ('-H', '--hostfile') or a.startswith('--hostfile=') for a in rest):
        _say(f'error: --launcher {launcher} (the default is ssh) needs -H HOSTFILE, a file with '
             'one machine per line; for processes on this machine only use --launcher local')
        return 2
    if launcher == 'local':
        os.environ['DMLC_NODE_HOST'] = ours.host

    status_dir = tempfile.mkdtemp(prefix='d2lzh-dist-')
    supervisor = Supervisor(status_dir, child_timeout=ours.timeout + 2 * ours.grace + 5)
    for name in _SPAWNING_MODULES:
        try:
            module = importlib.import_module('dmlc_tracker.' + name)
        except ImportError:
            continue
        if hasattr(module, 'subprocess'):
            module.subprocess = supervisor

    outcome = {}

    def run_launcher():
        sys.argv = ['python -m mxnet.tools.launch', *rest]
        try:
            namespace['main']()
            outcome['code'] = 0
        except SystemExit as err:  # argparse errors in mxnet.tools.launch
            outcome['code'] = err.code if isinstance(err.code, int) else 2
        except BaseException as err:  # noqa: B902
            outcome['code'] = 1
            outcome['error'] = f'{type(err).__name__}: {err}'
        with supervisor.changed:
            supervisor.changed.notify_all()

    received = []

    def on_signal(signum, frame):
        # No lock here: the main thread may hold it. The loop below looks every 0.2 s.
        received.append(signum)

    old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    start = time.monotonic()
    deadline = start + ours.timeout
    thread = threading.Thread(target=run_launcher, name='mxnet.tools.launch', daemon=True)
    thread.start()
    try:
        code = _supervise(supervisor, thread, outcome, received, deadline, ours, start)
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)
        shutil.rmtree(status_dir, ignore_errors=True)
    return code


def _supervise(supervisor, thread, outcome, received, deadline, ours, start):
    while True:
        with supervisor.changed:
            failed = supervisor.first_failure()
            running = supervisor.running()
            done = not thread.is_alive() and not running
            now = time.monotonic()
            if failed is None and not received and not done and now < deadline:
                supervisor.changed.wait(timeout=min(0.2, deadline - now))
                continue
        break
    elapsed = time.monotonic() - start
    if failed is not None:
        status = failed.status()
        error = f'; its error: {status["error"]}' if status.get('error') else ''
        others = [c.name() for c in supervisor.running() if c is not failed]
        _say(f'{failed.name()} failed after {time.monotonic() - failed.started:.1f} s: '
             f'{describe_exit(failed.proc.returncode)}{error}')
        _say(f'ending the job: stopping {len(others)} other process(es): '
             f'{"; ".join(others) or "none"}')
        supervisor.stop_all(ours.grace)
        return 1
    if received:
        _say(f'received {signal.Signals(received[0]).name}: stopping every process')
        supervisor.stop_all(ours.grace)
        return 128 + received[0]
    if not done:
        names = '; '.join(c.name() for c in supervisor.running()) or 'none started'
        _say(f'deadline of {ours.timeout:g} s passed; still running: {names}. '
             'Stopping every process.')
        supervisor.stop_all(ours.grace)
        return 124
    if outcome.get('code'):
        why = outcome.get('error') or describe_exit(outcome['code'])
        _say(f'mxnet.tools.launch failed ({why})')
        supervisor.stop_all(ours.grace)
        return outcome['code']
    counts = {}
    for c in supervisor.children:
        counts[c.role] = counts.get(c.role, 0) + 1
    summary = ', '.join(f'{n} {role}' for role, n in sorted(counts.items()))
    _say(f'all {len(supervisor.children)} processes ({summary}) finished in {elapsed:.1f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
