"""Make MXNet's launcher (``mxnet.tools.launch`` / ``dmlc_tracker``) work today.

The ``dmlc_tracker`` package shipped in the MXNet 1.9.1 wheel was written for
Python 2/3.6 and has three problems on Python 3.10-3.13 (beyond the book;
measured on Python 3.11 with the local launcher):

* it calls ``Thread.isAlive()``, removed in Python 3.9: the launcher dies one
  second after it started (``'Thread' object has no attribute 'isAlive'``),
  leaving the scheduler it has just started running, orphaned;
* it calls ``Thread.setDaemon()``, deprecated since Python 3.10;
* in local mode it never passes the address it was given to the tracker, and
  the tracker replaces any ``127.x`` address by the address of the machine's
  first network interface (eth0): a job meant for the loopback interface
  listens on the network instead;
* it looks for the scheduler's port by trying 9091, 9092, ... and releases the
  port again before the scheduler process binds it: two jobs started at the
  same time on one machine both pick 9091 and one scheduler fails with
  ``bind failed`` (seen when two copies of notebook 07 ran at once).

:func:`patch_dmlc_tracker` fixes these in the running process only, by
replacing names inside ``dmlc_tracker``'s own modules; the standard library
and every other package are left alone. The launch itself is still done by
``dmlc_tracker``'s code.

With it, :mod:`d2lzh.mxnet_launch` ran a local job (1 scheduler, 1 server, 2
workers) under Python 3.10, 3.11, 3.12 and 3.13, the last without a single
DeprecationWarning (the launcher itself does not import MXNet, so it runs on
3.13 even though MXNet 1.9.1 does not).
"""
import importlib
import random
import threading

# dmlc_tracker modules that start threads, and so name ``Thread``.
_THREAD_MODULES = ('tracker', 'local', 'ssh', 'mpi', 'slurm', 'sge')


class TrackerThread(threading.Thread):
    """``threading.Thread`` with the two methods that ``dmlc_tracker`` still calls.

    ``isAlive()`` is ``is_alive()``; ``setDaemon(flag)`` sets ``daemon``
    (without Python's deprecation warning).
    """

    def isAlive(self):  # noqa: N802 (dmlc_tracker's spelling)
        """Same as :meth:`threading.Thread.is_alive`."""
        return self.is_alive()

    def setDaemon(self, daemonic):  # noqa: N802 (dmlc_tracker's spelling)
        """Same as setting :attr:`threading.Thread.daemon`."""
        self.daemon = daemonic


def patch_dmlc_tracker(host=None):
    """Make ``dmlc_tracker`` usable on Python 3.10-3.13 and bind it to ``host``.

    Args:
        host (str or None): the address (IP or host name) the scheduler listens
            on and that the other processes connect to, e.g. ``'127.0.0.1'``
            for a job on one machine, or this machine's address on the
            cluster's network. None keeps ``dmlc_tracker``'s own guess (the
            address of the first network interface).

    Returns:
        module: the patched ``dmlc_tracker.tracker`` module. Calling again
        with another ``host`` replaces the address.

    Raises:
        ImportError: ``dmlc_tracker`` is not installed (it comes with the
            ``mxnet`` wheel; ``pip install -r requirements.txt``).
    """
    tracker = importlib.import_module('dmlc_tracker.tracker')
    for name in _THREAD_MODULES:
        try:
            module = importlib.import_module('dmlc_tracker.' + name)
        except ImportError:  # e.g. an optional dependency of that launcher is missing
            continue
        if getattr(module, 'Thread', None) is not None:
            module.Thread = TrackerThread
    original = getattr(tracker, '_d2lzh_original_get_host_ip', tracker.get_host_ip)
    tracker._d2lzh_original_get_host_ip = original

    def get_host_ip(host_ip=None):
        """The address given to :func:`patch_dmlc_tracker`, else dmlc's guess."""
        if host is not None:
            return host
        return original(host_ip)

    tracker.get_host_ip = get_host_ip

    ps_tracker = tracker.PSTracker
    init = getattr(ps_tracker, '_d2lzh_original_init', ps_tracker.__init__)
    ps_tracker._d2lzh_original_init = init

    def ps_tracker_init(self, hostIP, cmd, port=9091, port_end=9999, envs=None):  # noqa: N803
        # Same range as dmlc_tracker, but the search starts at a random port in its
        # first half, so that jobs started together rarely try the same port.
        start = random.randrange(port, port + max(1, (port_end - port) // 2))
        init(self, hostIP, cmd, port=start, port_end=port_end, envs=envs)

    ps_tracker.__init__ = ps_tracker_init
    return tracker
