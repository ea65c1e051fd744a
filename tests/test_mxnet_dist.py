"""MXNet's parameter server (ps-lite, kvstore='dist_sync') started by MXNet's own
launcher through d2lzh.mxnet.launch: results, faults, deadline, no process left.

Every job runs on 127.0.0.1 only, under the launcher's --timeout and under a
subprocess timeout here; each test checks with psutil that no process of its
job is left.
"""
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import numpy as np
import psutil
import pytest

from d2lzh import jobs
from d2lzh.mxnet import dist, launch

HOST = '127.0.0.1'
STEPS = 4
BATCH = 32


def job_processes(tag):
    """Every process of one test's job: the launcher and everything it started
    (scheduler, servers, workers: all have DMLC_ROLE) inherit the test's tag.
    Tagging keeps other sessions' MXNet jobs on the same machine out of it."""
    found = []
    for proc in psutil.process_iter(['pid']):
        try:
            env = proc.environ()
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if env.get('D2LZH_TEST_TAG') == tag:
            found.append(proc)
    return found


def run_job(*worker_args, workers=2, servers=1, timeout=60, extra_env=None):
    """Run the documented command; returns (returncode, stderr+stdout, seconds, tag)."""
    tag = uuid.uuid4().hex
    env = dict(os.environ, D2LZH_TEST_TAG=tag, OMP_NUM_THREADS='1', **(extra_env or {}))
    cmd = [sys.executable, '-m', 'd2lzh.mxnet.launch', '--host', HOST, '--timeout', str(timeout),
           '-n', str(workers), '-s', str(servers), '--launcher', 'local',
           sys.executable, '-m', 'd2lzh.mxnet.dist', '--batch-size', str(BATCH),
           '--max-steps', str(STEPS), '--max-examples', '1024', *worker_args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f'the launcher outlived its own deadline:\n{out}')
    finally:
        for p in job_processes(tag):  # leave nothing behind even when a test fails
            p.kill()
    return proc.returncode, out, time.monotonic() - start, tag


def assert_nothing_left(tag):
    """No process of the job runs: none of this test's children, and nothing anywhere with
    DMLC_ROLE (or the launcher) carrying this test's tag."""
    time.sleep(0.2)
    children = []
    for p in psutil.Process().children(recursive=True):
        try:
            if any('d2lzh.mxnet' in part for part in p.cmdline()):
                children.append(p)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            pass
    assert not children, f'children left behind: {[p.cmdline() for p in children]}'
    left = job_processes(tag)
    assert not left, f'processes left behind: {[p.cmdline() for p in left]}'


def test_patch_fixes_threads_and_address():
    tracker = launch.patch_dmlc_tracker(HOST)
    assert tracker.get_host_ip('auto') == HOST
    thread = tracker.Thread(target=lambda: None)
    thread.setDaemon(True)
    thread.start()
    thread.join()
    assert thread.daemon and not thread.isAlive()
    tracker = launch.patch_dmlc_tracker(None)  # back to dmlc's own guess
    assert tracker.get_host_ip('10.1.2.3') == '10.1.2.3'


def test_describe_exit():
    assert launch.describe_exit(-9) == '被 SIGKILL 杀死'
    assert launch.describe_exit(1) == '退出码 1'
    assert launch.describe_exit(137) == '退出码 137（= 128 + SIGKILL）'
    assert launch.describe_exit(200) == '退出码 200'


def test_launcher_requires_host_and_timeout():
    out = subprocess.run([sys.executable, '-m', 'd2lzh.mxnet.launch', '-n', '1',
                          '--launcher', 'local', 'true'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert '--host' in out.stderr and '--timeout' in out.stderr


def test_two_workers_equal_one_process_on_the_combined_batch(tmp_path):
    # An exported PORT would make ps-lite bind every process to one port: the launcher drops it.
    code, out, seconds, tag = run_job('--out', str(tmp_path), extra_env={'PORT': '9'})
    assert code == 0, out
    assert '忽略 PORT=9' in out
    assert '全部 4 个进程（1 个 scheduler，1 个 server，2 个 worker）在' in out
    assert_nothing_left(tag)
    w0 = dist.load_result(tmp_path, 'worker-0')
    w1 = dist.load_result(tmp_path, 'worker-1')
    assert (w0['steps'], w0['global_batch'], w0['num_workers']) == (STEPS, 2 * BATCH, 2)
    assert w0['losses'] != w1['losses']  # different shards
    for a, b in zip(w0['params'], w1['params']):
        np.testing.assert_array_equal(a, b)  # the workers hold the same parameters
    single = dist.train(kvstore=None, batch_size=BATCH, num_workers=2, max_steps=STEPS,
                              max_examples=1024)
    init = dist.train(kvstore=None, batch_size=BATCH, num_workers=2, max_steps=0,
                            max_examples=1024)
    for a, b, c in zip(w0['params'], single['params'], init['params']):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
        assert np.abs(a - c).max() > 1e-4 or a.ndim == 1  # training changed the weights


def test_step_with_the_local_batch_multiplies_the_learning_rate(tmp_path):
    # trainer.step(B) instead of trainer.step(B * W): the servers' sum of W workers' gradients
    # divided by B is W times the mean gradient. The worker's plain SGD (no weight decay) then
    # trains exactly as one process with learning rate W * lr, up to the order of the sums.
    code, out, seconds, tag = run_job('--step-batch', 'local', '--out', str(tmp_path))
    assert code == 0, out
    assert f'全局批量 {2 * BATCH}（trainer.step({BATCH})：--step-batch local）' in out
    assert_nothing_left(tag)
    w0 = dist.load_result(tmp_path, 'worker-0')
    w1 = dist.load_result(tmp_path, 'worker-1')
    assert (w0['steps'], w0['step_batch']) == (STEPS, 'local')
    for a, b in zip(w0['params'], w1['params']):
        np.testing.assert_array_equal(a, b)
    kwargs = dict(kvstore=None, batch_size=BATCH, num_workers=2, max_steps=STEPS,
                  max_examples=1024)
    correct = dist.train(lr=w0['lr'], **kwargs)
    scaled = dist.train(lr=2 * w0['lr'], **kwargs)
    for a, b in zip(w0['params'], scaled['params']):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    # ... and not the correct result: far beyond the rounding allowed above.
    assert max(float(np.abs(a - b).max()) for a, b in zip(w0['params'], correct['params'])) > 1e-3
    with pytest.raises(ValueError, match="step_batch='worker' 无效"):
        dist.train(step_batch='worker', **kwargs)


@pytest.mark.parametrize('mode, said, how', [
    ('raise', 'RuntimeError: 工作进程 rank 1 在第 3 个小批量之前故意失败', 'env'),
    ('kill', '被 SIGKILL 杀死', 'cli')])
def test_a_failing_worker_ends_the_whole_job(mode, said, how):
    """The fault reaches the worker through $D2LZH_FAULT (the seam of d2lzh.jobs), or through
    the worker's --fault, which sets it."""
    spec = f'{mode}:1:2'
    code, out, seconds, tag = run_job(*(['--fault', spec] if how == 'cli' else []), timeout=60,
                                      extra_env={jobs.FAULT_ENV: spec} if how == 'env' else None)
    assert code == 1, out
    assert f'worker (kv.rank 1, ' in out and said in out, out
    assert '结束作业：停止其余 3 个进程' in out
    if mode == 'raise':
        assert 'Traceback' in out  # the worker's own traceback
    assert seconds < 30, f'the job took {seconds:.1f} s to end'
    assert_nothing_left(tag)


def test_deadline_ends_a_job_that_does_not_finish():
    # The worker's own --timeout (after the command) is the worker's, not the launcher's.
    code, out, seconds, tag = run_job('--max-steps', '100000', '--epochs', '1000',
                                     '--timeout', '300', timeout=6)
    assert code == 124, out
    assert '已过 6 秒的期限，仍在运行：' in out and 'worker (kv.rank' in out
    assert seconds < 6 + 15
    assert_nothing_left(tag)


def test_loopback_only_and_every_process_ends_within_10_s_when_the_launcher_is_killed(tmp_path):
    """Mid-run, every process listens on 127.0.0.1 only. Then SIGKILL, which the launcher
    cannot handle: scheduler, server and workers each see their launcher go
    (d2lzh.jobs.watch) and are all gone within 10 s."""
    tag = uuid.uuid4().hex
    # A launcher killed with SIGKILL cannot remove its temporary folder: keep it in tmp_path.
    env = dict(os.environ, D2LZH_TEST_TAG=tag, OMP_NUM_THREADS='1', TMPDIR=str(tmp_path))
    cmd = [sys.executable, '-m', 'd2lzh.mxnet.launch', '--host', HOST, '--timeout', '60',
           '-n', '2', '-s', '1', '--launcher', 'local', sys.executable, '-m', 'd2lzh.mxnet.dist',
           '--max-steps', '100000', '--epochs', '1000', '--max-examples', '1024']
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        end = time.monotonic() + 30
        while len(job_processes(tag)) < 5 and time.monotonic() < end:  # launcher + 4
            time.sleep(0.2)
        assert len(job_processes(tag)) == 5, 'the job did not start'
        # Every process of the job listens on the address given with --host, and only there.
        end = time.monotonic() + 15
        while time.monotonic() < end:
            listening = {p.pid: [c.laddr.ip for c in p.net_connections('inet')
                                 if c.status == psutil.CONN_LISTEN]
                         for p in job_processes(tag) if 'DMLC_ROLE' in p.environ()}
            if len(listening) == 4 and all(listening.values()):
                break
            time.sleep(0.2)
        assert len(listening) == 4 and all(listening.values()), listening
        assert {ip for ips in listening.values() for ip in ips} == {HOST}, listening
        roles = sorted(p.environ()['DMLC_ROLE'] for p in job_processes(tag)
                       if 'DMLC_ROLE' in p.environ())
        assert roles == ['scheduler', 'server', 'worker', 'worker']
        proc.kill()
        killed = time.monotonic()
        proc.wait(timeout=10)
        while job_processes(tag) and time.monotonic() < killed + 10:
            time.sleep(0.1)
        seconds = time.monotonic() - killed
        assert_nothing_left(tag)
        assert seconds < 10, f'the job outlived its launcher by {seconds:.1f} s'
    finally:
        for p in job_processes(tag):
            p.kill()


def test_processes_of_remote_launchers_are_named():
    _role_of = launch._role_of
    ssh = ("ssh -o StrictHostKeyChecking=no 10.0.0.11 -p 22 'export DMLC_ROLE=server; "
           "export DMLC_NODE_HOST=10.0.0.11; cd /job; python -m d2lzh.mxnet.dist'")
    assert _role_of(ssh, {}) == ('server', '经 ssh 在 10.0.0.11 上')
    mpi = 'mpirun -n 2  -x DMLC_ROLE=worker -x DMLC_NUM_WORKER=2 --hostfile hosts python x.py'
    assert _role_of(mpi, {}) == ('worker', 'mpirun')
    assert _role_of('rsync -az a b:c', {}) == (None, None)
    assert _role_of('python x.py', {'DMLC_ROLE': 'scheduler'}) == ('scheduler', None)


def test_worker_watchdog_ends_a_worker_waiting_for_a_scheduler_that_never_comes():
    """Without any launcher: ps-lite would wait forever; the worker's own --timeout ends it."""
    with socket.socket() as s:  # a port on which nobody listens
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    env = dict(os.environ, DMLC_ROLE='worker', DMLC_PS_ROOT_URI=HOST, DMLC_PS_ROOT_PORT=str(port),
               DMLC_NODE_HOST=HOST, DMLC_NUM_SERVER='1', DMLC_NUM_WORKER='1', OMP_NUM_THREADS='1')
    start = time.monotonic()
    out = subprocess.run([sys.executable, '-m', 'd2lzh.mxnet.dist', '--timeout', '3'], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 124, out.stderr
    assert 'worker（pid' in out.stderr and '已过 3 秒的期限，退出' in out.stderr
    assert time.monotonic() - start < 20


def test_a_bad_fault_spec_is_a_clear_error():
    out = subprocess.run([sys.executable, '-m', 'd2lzh.mxnet.dist', '--fault', 'crash:1'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "--fault: fault='crash:1' 无效：请用 KIND:RANK:STEP" in out.stderr


def test_ssh_launcher_without_host_file_is_a_clear_error():
    out = subprocess.run([sys.executable, '-m', 'd2lzh.mxnet.launch', '--host', HOST,
                          '--timeout', '10', '-n', '1', 'true'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert '--launcher ssh（默认是 ssh）需要 -H HOSTFILE' in out.stderr


def test_two_jobs_started_together_both_finish():
    # dmlc_tracker would give both schedulers port 9091 (it releases the port before the
    # scheduler binds it); the patched search starts at a random port of the same range.
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: run_job(timeout=90), range(2)))
    for code, out, _, tag in results:
        assert code == 0, out
        assert_nothing_left(tag)
