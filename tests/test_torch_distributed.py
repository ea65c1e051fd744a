"""DistributedDataParallel under torchrun and elastic_launch, on the CPU (gloo).

Every job runs on 127.0.0.1 only, in its own session, under a deadline; after
each one no process of it may be left (checked with psutil by a marker that
every process of the job carries on its command line or in its environment).
Deadlines: a whole job JOB_DEADLINE s; after a worker fails, every other
process of the job ends within END_DEADLINE s (torchrun notices a dead worker
within its 0.1 s monitor interval and SIGTERMs the rest); after torchrun itself
is SIGKILLed, its workers end within ORPHAN_DEADLINE s (d2lzh.jobs.watch).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

torch = pytest.importorskip('torch')
from d2lzh import torch as d2l  # noqa: E402
from d2lzh.torch import ddp  # noqa: E402

JOB_DEADLINE = 120   # seconds for one job (2 workers, a few steps, maybe one restart)
END_DEADLINE = 20    # seconds from a worker's failure to the end of every other process
ORPHAN_DEADLINE = 10  # seconds from torchrun's SIGKILL to the end of its workers
CONFIG = ['--model', 'lenet', '--epochs', '2', '--batch-size', '8', '--max-examples', '64',
          '--lr', '0.1', '--amp', 'off', '--no-channels-last', '--no-verbose', '--timeout', '90']
WORKER = ['-m', 'd2lzh.torch.ddp']


def _torchrun_args(nnodes=1, nproc=2, endpoint='127.0.0.1:0', extra=()):
    return [sys.executable, '-m', 'torch.distributed.run', f'--nnodes={nnodes}',
            f'--nproc-per-node={nproc}', '--rdzv-backend=c10d', f'--rdzv-endpoint={endpoint}',
            '--monitor-interval=0.1', *extra]


def _job_processes(marker):
    found = []
    for p in psutil.process_iter(['cmdline', 'environ']):
        if p.pid == os.getpid():
            continue
        try:
            text = ' '.join(p.info['cmdline'] or []) + str((p.info['environ'] or {}).values())
        except (psutil.Error, TypeError):
            continue
        # multiprocessing's resource tracker serves the parent for its lifetime, by design
        if marker in text and 'resource_tracker' not in text:
            found.append(p)
    return found


def _run(cmds, tmp_path, env_extra=None):
    """Start each command of ``cmds`` in its own session (two nodes = two
    commands), wait for all under JOB_DEADLINE, kill every session on timeout;
    return (return codes, outputs, end time)."""
    env = {**os.environ, 'TMPDIR': str(tmp_path), 'D2LZH_TEST_MARKER': str(tmp_path),
           'OMP_NUM_THREADS': '1', **(env_extra or {})}
    env.pop('D2LZH_MAX_EXAMPLES', None)
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, cwd=tmp_path, start_new_session=True) for c in cmds]
    deadline = time.monotonic() + JOB_DEADLINE
    outs, codes = [], []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
            outs.append(out)
            codes.append(p.returncode)
    except subprocess.TimeoutExpired:
        _kill(procs)
        pytest.fail(f'the job did not end within {JOB_DEADLINE} s; what it printed:\n' +
                    '\n'.join(outs + [p.communicate(timeout=10)[0] for p in procs[len(outs):]]))
    finally:
        _kill(procs)
    end = time.time()
    left = _job_processes(str(tmp_path))
    assert not left, f'processes left behind: {[p.pid for p in left]}'
    return codes, outs, end


def _kill(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture(scope='module')
def clean_run(debian_dir, tmp_path_factory):
    """Two "nodes" on this machine (two torchrun invocations, one worker each),
    2 epochs of 4 steps; returns (result of rank 0, checkpoint state)."""
    tmp = tmp_path_factory.mktemp('two-nodes')
    port = _free_port()
    cmds = [_torchrun_args(nnodes=2, nproc=1, endpoint=f'127.0.0.1:{port}',
                           extra=[f'--node-rank={r}', '--rdzv-id=test-job', *WORKER, *CONFIG,
                                  '--out', str(tmp / 'out'), '--checkpoint', str(tmp / 'ck.pt')])
            for r in (0, 1)]
    codes, outs, _ = _run(cmds, tmp)
    assert codes == [0, 0], outs
    result = json.loads((tmp / 'out' / 'result.json').read_text())
    return result, torch.load(tmp / 'ck.pt', weights_only=True)


def _one_process_on_the_combined_batch():
    """LeNet's state after CONFIG's job in one process: 2 epochs of the global minibatches
    of 16 that 2 workers of 8 take (d2lzh.jobs.batch_indices), plain SGD; and its steps."""
    from d2lzh import data, jobs

    train_x, train_y, _, _ = data.load_fashion_mnist(max_examples=64, progress=False)
    X = torch.tensor(train_x, dtype=torch.float32).unsqueeze(1) / 255
    Y = torch.tensor(train_y, dtype=torch.int64)
    torch.manual_seed(0)
    net = d2l.lenet()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    steps = 0
    for epoch in range(2):
        for idx in jobs.batch_indices(64, 8, 2, None, epoch, 0):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(X[idx]), Y[idx]).backward()
            opt.step()
            steps += 1
    return net.state_dict(), steps


def test_two_workers_equal_one_process_on_the_combined_batch(clean_run):
    """The book's LeNet (no batch norm): 2 workers with minibatches of 8 train exactly what
    one process trains with the global minibatches of 16 (d2lzh.jobs.batch_indices)."""
    result, state = clean_run
    assert result['world_size'] == 2 and result['backend'] == 'gloo'
    assert len(result['params_digest']) == 2
    assert result['params_digest'][0] == result['params_digest'][1]  # bitwise-equal replicas
    reference, steps = _one_process_on_the_combined_batch()
    assert steps == 8 and result['examples'] == 64
    for name, value in reference.items():
        torch.testing.assert_close(state['model'][name], value, rtol=1e-5, atol=1e-6)


def test_exception_names_rank_and_traceback(debian_dir, tmp_path):
    cmd = _torchrun_args(extra=['--log-dir', str(tmp_path / 'logs'), *WORKER, *CONFIG])
    codes, outs, end = _run([cmd], tmp_path, {'D2LZH_FAULT': 'raise:1:0'})
    assert codes == [1]
    out = outs[0]
    root = out[out.index('Root Cause'):]
    assert 'rank      : 1 (local_rank: 1)' in root
    assert 'Traceback (most recent call last)' in root
    assert ('RuntimeError: 工作进程 rank 1 在第 1 个小批量之前故意失败'
            '（D2LZH_FAULT=raise:1:0）') in root
    error_file = next((tmp_path / 'logs').rglob('attempt_0/1/error.json'))
    assert end - error_file.stat().st_mtime < END_DEADLINE


def test_killed_worker_restarts_and_resumes_from_checkpoint(clean_run, tmp_path):
    """Rank 1 kills itself before its 6th minibatch (the 2nd of epoch 1, after epoch 0's
    checkpoint); the restarted group (no fault: the seam acts on the first attempt only)
    resumes after epoch 0 and ends where the uninterrupted run ended."""
    ck = tmp_path / 'ck.pt'
    cmd = _torchrun_args(extra=['--max-restarts=1', *WORKER, *CONFIG, '--checkpoint', str(ck),
                                '--out', str(tmp_path / 'out')])
    codes, outs, _ = _run([cmd], tmp_path, {'D2LZH_FAULT': 'kill:1:5'})
    assert codes == [0], outs
    assert 'failed (exitcode: ' in outs[0]  # torchrun saw the group fail, then restarted it
    result = json.loads((tmp_path / 'out' / 'result.json').read_text())
    assert result['restart_count'] == 1 and result['start_epoch'] == 1
    assert len(result['test_acc']) == 2
    assert result['params_digest'][0] == result['params_digest'][1]
    # up to rounding: that run had 2 threads per process, this one 1
    state = torch.load(ck, weights_only=True)
    for name, value in clean_run[1]['model'].items():
        torch.testing.assert_close(state['model'][name], value, rtol=1e-5, atol=1e-6)


def test_target_accuracy_stops_every_rank_after_the_same_epoch(debian_dir, tmp_path):
    """The fast path in DDP: only rank 0 evaluates (from epoch 2 on), and its decision to
    stop reaches rank 1, which has no test set: a rank that went on alone would wait at the
    next barrier until the deadline. The replicas stay identical."""
    cmd = _torchrun_args(extra=[*WORKER, *CONFIG, '--epochs', '3', '--momentum', '0.9',
                                '--nesterov', '--lr-schedule', 'linear', '--lr-warmup', '0.2',
                                '--label-smoothing', '0.1', '--fused-sgd', '--time-startup',
                                '--target-accuracy', '0.01', '--eval-from', '2',
                                '--out', str(tmp_path / 'out')])
    codes, outs, _ = _run([cmd], tmp_path)
    assert codes == [0], outs
    result = json.loads((tmp_path / 'out' / 'result.json').read_text())
    assert result['reached']['epoch'] == 2 and len(result['epoch_times']) == 2
    assert result['test_acc'][0] is None and result['test_acc'][1] >= 0.01
    assert result['startup_s'] > 0 and result['fused_sgd']
    assert result['params_digest'][0] == result['params_digest'][1]


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_workers_end_when_torchrun_is_killed(debian_dir, tmp_path):
    """SIGKILL to torchrun itself (not to its process group) while its 2 workers train: every
    worker notices that its launcher is gone and exits within ORPHAN_DEADLINE s, instead of
    training on as an orphan until its deadline."""
    ck = tmp_path / 'ck.pt'
    cmd = _torchrun_args(extra=[*WORKER, *CONFIG, '--epochs', '1000', '--checkpoint', str(ck)])
    env = {**os.environ, 'TMPDIR': str(tmp_path), 'D2LZH_TEST_MARKER': str(tmp_path),
           'OMP_NUM_THREADS': '1'}
    env.pop('D2LZH_MAX_EXAMPLES', None)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            cwd=tmp_path, start_new_session=True)
    workers = []
    try:
        deadline = time.monotonic() + JOB_DEADLINE
        while not ck.exists():  # rank 0 has finished an epoch: both workers train
            assert proc.poll() is None and time.monotonic() < deadline, 'no epoch finished'
            time.sleep(0.2)
        workers = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)
                   if 'd2lzh.torch.ddp' in ' '.join(p.cmdline())]
        assert len(workers) == 2
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(timeout=10)
        while any(_alive(pid) for pid in workers) and time.monotonic() - killed < ORPHAN_DEADLINE:
            time.sleep(0.1)
        left = [pid for pid in workers if _alive(pid)]
        assert not left, f'workers still running {ORPHAN_DEADLINE} s after torchrun was killed'
    finally:  # torchrun starts each worker in a session of its own: end them one by one
        for pid in [proc.pid, *workers]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)
    time.sleep(0.5)
    assert not _job_processes(str(tmp_path))


def test_run_ddp_from_python_reports_a_killed_rank(debian_dir, monkeypatch, tmp_path):
    """elastic_launch as a notebook calls it: the error names rank 1 and
    SIGKILL, the caller's signal handlers come back, no file in the temporary
    folder and no process is left (also after a rank that raised)."""
    monkeypatch.setenv('TMPDIR', str(tmp_path))
    monkeypatch.setattr(tempfile, 'tempdir', None)
    monkeypatch.setenv('D2LZH_FAULT', 'kill:1:0')
    monkeypatch.setenv('D2LZH_TEST_MARKER', str(tmp_path))
    monkeypatch.delenv('D2LZH_MAX_EXAMPLES', raising=False)

    def mine(signum, frame):
        pass

    old = {s: signal.signal(s, mine) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r'DDP 工作进程 rank 1（共 2 个）失败，退出码 '
                                               r'-9 \(SIGKILL\)：没有 traceback（进程被信号杀死'):
            d2l.run_ddp(2, d2l.Recipe(epochs=1, batch_size=8, amp='off', channels_last=False),
                        model='lenet', max_examples=64, timeout=90)
        assert time.monotonic() - start < JOB_DEADLINE
        assert signal.getsignal(signal.SIGINT) is mine
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    monkeypatch.setenv('D2LZH_FAULT', 'raise:1:0')  # a traceback: torch's error file, removed
    start = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        d2l.run_ddp(2, d2l.Recipe(epochs=1, batch_size=8, amp='off', channels_last=False),
                    model='lenet', max_examples=64, timeout=90)
    first, *stack = str(raised.value).splitlines()
    assert time.monotonic() - start < 10, 'the job outlived its failing rank by seconds'
    assert first.startswith('DDP 工作进程 rank 1（共 2 个）失败，退出码 1：RuntimeError: 工作进程 '
                            'rank 1 在第 1 个小批量之前故意失败'), first
    assert stack[0] == 'rank 1 的 Traceback (most recent call last):', stack
    assert any('File "d2lzh/jobs.py"' in line for line in stack), stack  # no machine's folders
    assert stack[-1].startswith('RuntimeError: 工作进程 rank 1 在第'), stack
    assert not list(Path(tmp_path).iterdir())  # no torchelastic_*, no pytorch-errorfile-*
    assert not _job_processes(str(tmp_path))


def test_worker_outside_torchrun_says_how_to_start_it(monkeypatch):
    monkeypatch.delenv('RANK', raising=False)
    with pytest.raises(RuntimeError, match=r'没有设置 \$RANK：.*torchrun'):
        d2l.ddp_worker()


def test_run_ddp_rejects_bad_settings(monkeypatch):
    with pytest.raises(ValueError, match=r"model='vgg' 无效"):
        d2l.run_ddp(1, model='vgg')
    with pytest.raises(ValueError, match=r"未知的设置 \['epochs'\].*d2l.Recipe"):
        d2l.run_ddp(1, epochs=2)
    with pytest.raises(ValueError, match='max_restarts=-1'):
        d2l.run_ddp(1, max_restarts=-1)
    monkeypatch.setattr(ddp, 'num_gpus', lambda: 1)
    monkeypatch.setattr(ddp, 'gpu_name', lambda i: 'NVIDIA H200')
    with pytest.raises(ValueError, match='要 2 块 GPU，这台机器却只有 1 块'):
        d2l.run_ddp(2, backend='nccl')


def test_worker_module_help():
    out = subprocess.run([sys.executable, '-m', 'd2lzh.torch.ddp', '--help'],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == ''
    for text in ('torchrun ... -m d2lzh.torch.ddp', '--checkpoint', '--fast', '--lr-warmup'):
        assert text in out.stdout


def test_worker_flags_are_the_recipe_fields():
    """The flags are generated from Recipe's and Job's fields: --fast gives d2l.FAST, and the
    same settings spelled out give it too; a bad value is refused with the field's rule."""
    import dataclasses
    assert ddp._parse(['--fast']) == [d2l.FAST, ddp.Job()]
    flags = ('--batch-size 512 --epochs 2 --cuda-graph --momentum 0.9 --nesterov '
             '--weight-decay 5e-4 --fused-sgd --lr-schedule linear --lr-warmup 0.2 '
             '--label-smoothing 0.1 --eval-from 2 --target-accuracy 0.92 --time-startup')
    recipe, job = ddp._parse(flags.split() + ['--model', 'lenet', '--max-examples', '64'])
    assert recipe == d2l.FAST and job == ddp.Job(model='lenet', max_examples='64')
    assert ddp._parse(['--fast', '--lr-schedule', 'cosine', '--lr-warmup', '0'])[0] == \
        dataclasses.replace(d2l.FAST, lr_schedule='cosine', lr_warmup=0.0)
    assert ddp._parse(['--fast', '--target-accuracy', 'none'])[0].target_accuracy is None
    with pytest.raises(SystemExit):
        ddp._parse(['--momentum', '1.5'])


def test_worker_trains_the_fast_paths_model_without_conv_biases():
    """--no-conv-bias: the DDP worker's ResNet-18 is the fastest single-GPU configuration's."""
    recipe, job = ddp._parse(['--fast', '--no-conv-bias'])
    assert recipe == d2l.FAST and job.conv_bias is False and ddp.Job().conv_bias is True


def test_forking_launcher_trains_and_names_a_failing_rank(debian_dir, tmp_path):
    """python -m d2lzh.torch.launch: torchrun's agent in the launching process, its workers
    forked (they inherit torch and the data); the same job and the same failure report."""
    cmd = [sys.executable, '-m', 'd2lzh.torch.launch', '--nproc-per-node=2', *CONFIG,
           '--out', str(tmp_path / 'out')]
    codes, outs, _ = _run([cmd], tmp_path)
    assert codes == [0], outs
    assert '进程总数 2（gloo，cpu，amp off）' in outs[0] and '各副本完全相同：True' in outs[0]
    marks = json.loads((tmp_path / 'out' / 'result.json').read_text())['marks']
    assert marks['imported'] < marks['process_group'] < marks['data'] < marks['train_start']
    codes, outs, _ = _run([cmd], tmp_path, {'D2LZH_FAULT': 'raise:1:0'})
    assert codes == [1], outs
    assert 'DDP 工作进程 rank 1（共 2 个）失败，退出码 1：RuntimeError: 工作进程 rank 1 在第 1 个' \
        '小批量之前故意失败（D2LZH_FAULT=raise:1:0）' in outs[0]
    assert 'rank 1 的 Traceback (most recent call last)' in outs[0]


BLOCKED_PEERS = '''
import sys, time
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from d2lzh.torch import ddp, launch


@record
def blocked(failed_at):
    rank, _, _ = ddp.init_process_group('gloo', timeout=120)
    if rank == 2:
        time.sleep(1)
        with open(failed_at, 'w') as f:
            f.write(repr(time.time()))
        raise RuntimeError('rank 2 fails while ranks 0 and 1 wait for each other')
    dist.recv(torch.zeros(1), src=1 - rank)  # never sent: blocked in gloo's C++ wait


try:
    launch._launch(3, blocked, (sys.argv[1],), start='fork')
except RuntimeError as err:
    print(err)
'''


def test_forked_workers_blocked_in_a_collective_end_soon_after_a_peer_fails(debian_dir, tmp_path):
    """A forked worker blocked in a collective (as in NCCL, which spins in C++) ends when
    torchelastic's agent stops it, not 30 s later when the agent's SIGKILL comes: the
    launcher puts the stop signals back to their default action in its forked workers."""
    script = tmp_path / 'blocked.py'
    script.write_text(BLOCKED_PEERS)
    failed_at = tmp_path / 'failed_at'
    codes, outs, end = _run([[sys.executable, str(script), str(failed_at)]], tmp_path)
    assert codes == [0], outs
    assert 'DDP 工作进程 rank 2（共 3 个）失败，退出码 1：RuntimeError: rank 2 fails' in outs[0]
    assert end - float(failed_at.read_text()) < 10


# ------------------------------------------- data parallelism without DDP (issue 49)

def test_allreduce_workers_equal_one_process_on_the_combined_batch(debian_dir, tmp_path):
    """--data-parallel allreduce (AllReduceParallel: one all-reduce of a flat gradient
    buffer per step) trains what DDP and one process on the global minibatch train."""
    cmd = [*_torchrun_args(), *WORKER, *CONFIG, '--data-parallel', 'allreduce',
           '--out', str(tmp_path / 'out'), '--checkpoint', str(tmp_path / 'ck.pt')]
    codes, outs, _ = _run([cmd], tmp_path)
    assert codes == [0], outs
    result = json.loads((tmp_path / 'out' / 'result.json').read_text())
    assert result['world_size'] == 2 and len(set(result['params_digest'])) == 1
    state = torch.load(tmp_path / 'ck.pt', weights_only=True)['model']
    for name, value in _one_process_on_the_combined_batch()[0].items():
        torch.testing.assert_close(state[name], value, rtol=1e-5, atol=1e-6)


ALLREDUCE_PARTS = '''
import os, sys
import torch
from d2lzh.torch import ddp
from d2lzh.torch.step import AllReduceParallel

rank, world, _ = ddp.init_process_group('gloo', timeout=60)
torch.manual_seed(rank)  # different weights on each rank: rank 0's must win
net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
model = AllReduceParallel(net)
first = [p.detach().clone() for p in net.parameters()]
(net(torch.randn(4, 3)) ** 3).sum().backward()  # a batch of each rank's own
mine = [p.grad.clone() for p in model.params]
model.allreduce_grads()
net[1].running_mean.fill_(rank)  # 0 and 1: the mean is 0.5
model.average_buffers()
torch.save({'first': first, 'mine': mine, 'mean': [p.grad for p in model.params],
            'running_mean': net[1].running_mean}, sys.argv[1] + f'.{rank}')
torch.distributed.destroy_process_group()
'''


def test_allreduce_parallel_broadcasts_averages_gradients_and_batch_norm(tmp_path):
    """AllReduceParallel, 2 gloo processes: rank 0's weights everywhere, each gradient the
    mean of the two processes' gradients, batch norm's running statistics averaged."""
    script = tmp_path / 'parts.py'
    script.write_text(ALLREDUCE_PARTS)
    codes, outs, _ = _run([[*_torchrun_args(), str(script), str(tmp_path / 'out')]], tmp_path)
    assert codes == [0], outs
    r0, r1 = (torch.load(tmp_path / f'out.{r}', weights_only=True) for r in (0, 1))
    for a, b in zip(r0['first'], r1['first']):
        torch.testing.assert_close(a, b)
    assert not torch.equal(r0['mine'][0], r1['mine'][0])  # the inputs differ per rank
    for g0, g1, m0, m1 in zip(r0['mine'], r1['mine'], r0['mean'], r1['mean']):
        torch.testing.assert_close(m0, (g0 + g1) / 2)
        torch.testing.assert_close(m0, m1)
    assert r0['running_mean'].tolist() == r1['running_mean'].tolist() == [0.5, 0.5]


NO_DYNAMO = '''
import os, sys
from d2lzh.torch import ddp
from d2lzh import torch as d2l

recipe = d2l.Recipe(batch_size=16, epochs=1, lr=0.1, fused_sgd=True, amp='off')
job = ddp.Job(model='resnet18', max_examples='64', data_parallel=sys.argv[1],
              verbose=False, timeout=60)
r = ddp.ddp_worker(recipe, job)
print('TorchDynamo:', 'torch._dynamo' in sys.modules, 'examples:', r.examples)
'''


@pytest.mark.parametrize('kind, dynamo', [('allreduce', False), ('ddp', True)])
def test_the_allreduce_worker_never_imports_torchdynamo(debian_dir, tmp_path, kind, dynamo):
    """A worker with --data-parallel allreduce trains ResNet-18 without importing
    TorchDynamo (about 4.7 s of a cold start on one H200); DDP imports it."""
    script = tmp_path / 'no_dynamo.py'
    script.write_text(NO_DYNAMO)
    env = {'RANK': '0', 'LOCAL_RANK': '0', 'WORLD_SIZE': '1', 'LOCAL_WORLD_SIZE': '1',
           'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(_free_port())}
    codes, outs, _ = _run([[sys.executable, str(script), kind]], tmp_path, env)
    assert codes == [0], outs
    assert f'TorchDynamo: {dynamo} examples: 64' in outs[0]


@pytest.mark.parametrize('fault', ['raise:1:1', 'kill:1:1'])
def test_a_failing_allreduce_worker_ends_the_job_soon(debian_dir, tmp_path, fault):
    """With --data-parallel allreduce, rank 0 waits in the all-reduce of a step that rank 1
    never reaches: torchrun's agent still ends the job soon after rank 1 fails, and names it."""
    cmd = _torchrun_args(extra=['--log-dir', str(tmp_path / 'logs'), *WORKER, *CONFIG,
                                '--data-parallel', 'allreduce'])
    start = time.time()
    codes, outs, end = _run([cmd], tmp_path, {'D2LZH_FAULT': fault})
    assert codes == [1], outs
    assert 'rank      : 1 (local_rank: 1)' in outs[0]
    assert end - start < END_DEADLINE + 15  # the job's start and its few steps included
