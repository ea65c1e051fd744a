"""PyTorch 04's `in_lanes` (8.3 exercises 1 and 3): every CUDA stream waits for the default
stream before any product is queued, so the lanes can overlap. Run on the CPU with a fake
``torch`` that records the calls; the GPU check asserts the overlap itself (the notebook
prints whether two streams' kernels ran at the same time)."""
import contextlib
import json
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / 'notebooks' / 'pytorch' / '04_auto-parallelism.ipynb'


def _in_lanes(calls):
    """The notebook's `in_lanes`, executed against a fake torch.cuda that appends to calls."""
    source = next(''.join(c['source']) for c in json.loads(NOTEBOOK.read_text('utf-8'))['cells']
                  if c['cell_type'] == 'code' and 'def in_lanes(' in ''.join(c['source']))
    source = source[source.index('def in_lanes('):source.index('\ndef compare_lanes(')]

    class Stream:
        def __init__(self, name='default'):
            self.name = name

        def wait_stream(self, other):
            calls.append(('wait', self.name, other.name))

    streams = iter(f'side{i}' for i in range(1, 10))
    current = ['default']

    @contextlib.contextmanager
    def stream(s):
        current.append(s.name)
        yield
        current.pop()

    cuda = types.SimpleNamespace(current_stream=lambda device=None: Stream(),
                                 Stream=lambda device=None: Stream(next(streams)),
                                 stream=stream, synchronize=lambda device=None: calls.append(('sync',)))

    class X:
        is_cuda, device = True, 'cuda:0'

        def __matmul__(self, other):
            calls.append(('matmul', current[-1]))

    namespace = {'torch': types.SimpleNamespace(cuda=cuda), 'threading': None}
    exec(compile(source, str(NOTEBOOK), 'exec'), namespace)
    return namespace['in_lanes'], X()


def test_every_stream_waits_before_any_product_is_queued():
    calls = []
    in_lanes, x = _in_lanes(calls)
    in_lanes(x, 6, 2)
    first_product = next(i for i, c in enumerate(calls) if c[0] == 'matmul')
    waits = [i for i, c in enumerate(calls) if c[0] == 'wait']
    assert waits and max(waits) < first_product, calls
    assert [c[1] for c in calls if c[0] == 'matmul'] == ['default', 'side1'] * 3, calls
    assert calls[-1] == ('sync',)


def test_one_lane_queues_every_product_on_the_default_stream():
    calls = []
    in_lanes, x = _in_lanes(calls)
    in_lanes(x, 4, 1)
    assert calls == [('matmul', 'default')] * 4 + [('sync',)]
