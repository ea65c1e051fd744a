"""d2lzh.jobs: the sharding rule, the launcher watch and the fault seam of both editions."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from d2lzh import jobs

ROOT = Path(__file__).resolve().parent.parent


def test_workers_together_see_the_global_minibatch_of_one_process():
    one = jobs.batch_indices(100, 8, 3, None, epoch=1, seed=5)
    parts = [jobs.batch_indices(100, 8, 3, r, epoch=1, seed=5) for r in range(3)]
    assert len(one) == 100 // 24 and all(len(p) == len(one) for p in parts)
    for t, batch in enumerate(one):
        np.testing.assert_array_equal(np.concatenate([p[t] for p in parts]), batch)
    seen = np.concatenate(one)
    assert len(set(seen.tolist())) == len(seen)  # no example twice in an epoch
    other = jobs.batch_indices(100, 8, 3, None, epoch=2, seed=5)
    assert not np.array_equal(np.concatenate(other), seen)  # a new order every epoch


@pytest.mark.parametrize('args, message', [
    ((10, 8, 2, 0), r'凑不满一个全局小批量（8 × 2 个工作进程 = 16 个）'),
    ((100, 8, 2, 2), r'rank=2 无效：请用 0\.\.1 中的一个')])
def test_batch_indices_rejects(args, message):
    with pytest.raises(ValueError, match=message):
        jobs.batch_indices(*args, epoch=0, seed=0)


def test_fault_seam_strikes_before_the_named_minibatch_across_epochs():
    class Data:
        def __iter__(self):
            return iter(range(3))

        def __len__(self):
            return 3

        def set_epoch(self, epoch):
            self.epoch = epoch

    data = Data()
    assert jobs.inject_faults(data, rank=0, text='raise:1:4') is data  # another rank
    assert jobs.inject_faults(data, rank=0, text='') is data
    wrapped = jobs.inject_faults(data, rank=1, text='raise:1:4')
    wrapped.set_epoch(3)
    assert len(wrapped) == 3 and data.epoch == 3
    assert list(wrapped) == [0, 1, 2]
    taken = []
    with pytest.raises(RuntimeError, match=r'工作进程 rank 1 在第 5 个小批量之前故意失败'):
        for batch in wrapped:
            taken.append(batch)
    assert taken == [0]


@pytest.mark.parametrize('text', ['boom:1:2', 'raise:1', 'raise:x:2'])
def test_bad_fault_text_names_the_form(text):
    with pytest.raises(ValueError, match='请用 KIND:RANK:STEP'):
        jobs.Fault.parse(text)


def _child(code, **env):
    return subprocess.Popen([sys.executable, '-c', code], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **env})


def test_watch_ends_a_process_at_its_deadline():
    proc = _child('import time\nfrom d2lzh import jobs\n'
                  'jobs.watch(0.5, "worker rank 0", interval=0.1)\ntime.sleep(30)')
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 124
    assert 'worker rank 0' in err and '已过 0.5 秒的期限' in err


def test_watch_ends_a_process_whose_launcher_is_gone():
    """The launcher (here a shell) is SIGKILLed: its child sees its parent change and
    ends within a second, instead of running on as an orphan."""
    code = ('import time\nfrom d2lzh import jobs\njobs.watch(None, "worker", interval=0.1)\n'
            'print("ready", flush=True)\ntime.sleep(30)')
    launcher = subprocess.Popen(
        ['bash', '-c', f'{sys.executable} -c \'{code}\' & echo $!; wait'],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    worker = int(launcher.stdout.readline())
    assert launcher.stdout.readline().strip() == 'ready'
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail('the worker outlived its launcher by 10 s')
    launcher.stdout.close()
