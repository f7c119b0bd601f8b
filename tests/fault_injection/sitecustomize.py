"""Fault injection for the failure tests of ``pyg-dynscale train``.

Put this folder on ``PYTHONPATH`` and set ``PYG_DYNSCALE_TEST_FAULT`` to
``"<rank>:<epoch>"``: that rank raises ``RuntimeError("injected fault")`` at
the start of that (1-based) epoch of this process (``DistributedTrainer``, ``MemoryTrainer``,
``WindowTrainer``: ``train``, ``train-events``, ``train --windows``), on torchrun's first attempt only (so a
restart with ``--resume`` recovers). ``"<rank>:<epoch>:kill"``: that rank ends itself with
``SIGKILL`` there instead (as a process killed from outside: no traceback, no published cause);
``"<rank>:<epoch>:input"`` raises ``CommandError("injected input error")`` (a refusal of the user's input, exit
status 2). ``<rank>`` ``all``: every rank.
Python imports ``sitecustomize`` at start-up, so every worker torchrun starts is patched; the
package itself is unchanged.

``PYG_DYNSCALE_TEST_PROGRESS=<dir>``: every rank writes the number of epochs it
has finished to ``<dir>/rank<r>`` after each epoch, so a test can inject a
signal once the ranks are training (instead of sleeping for a guessed time).
"""
import os

_spec = os.environ.get("PYG_DYNSCALE_TEST_FAULT")
if _spec and os.environ.get("RANK") is not None and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
    _rank, _epoch, *_how = _spec.split(":")
    _rank, _epoch = (int(os.environ["RANK"]) if _rank == "all" else int(_rank)), int(_epoch)

    def _inject():
        if _how == ["kill"]:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        if _how == ["input"]:
            from pyg_dynscale.errors import CommandError

            raise CommandError("injected input error")
        raise RuntimeError("injected fault")

    if int(os.environ["RANK"]) == _rank:
        from pyg_dynscale.distributed.trainer import DistributedTrainer

        _original = DistributedTrainer.train_epoch

        def _faulty(self):
            if len(self.epoch_seconds) + 1 == _epoch:
                _inject()
            return _original(self)

        DistributedTrainer.train_epoch = _faulty

        # train-events and train --windows: their trainers count the epochs they trained (restored on resume)
        from pyg_dynscale.ctdg import MemoryTrainer
        from pyg_dynscale.windows import WindowTrainer

        def _counting(cls):
            inner = cls.train_epoch

            def faulty(self):
                if self.epoch + 1 == _epoch:
                    _inject()
                return inner(self)

            cls.train_epoch = faulty

        _counting(MemoryTrainer)
        _counting(WindowTrainer)

_progress = os.environ.get("PYG_DYNSCALE_TEST_PROGRESS")
if _progress and os.environ.get("RANK") is not None:
    from pyg_dynscale.distributed.trainer import DistributedTrainer

    _inner = DistributedTrainer.train_epoch
    _file = os.path.join(_progress, f"rank{os.environ['RANK']}")

    def _counted(self):
        loss = _inner(self)
        with open(_file + ".tmp", "w") as f:
            f.write(str(len(self.epoch_seconds)))
        os.replace(_file + ".tmp", _file)  # a reader never sees a half-written count
        return loss

    DistributedTrainer.train_epoch = _counted

# PYG_DYNSCALE_TEST_HOLD="<rank>:<epoch>": that rank stops at the start of that (1-based) epoch and waits there
# until it is killed (every attempt of the processes that have it set: a test sets it for the agent it kills), so
# a test that waits for the checkpoint before that epoch knows the job is not past it (no guessed sleeps).
_hold = os.environ.get("PYG_DYNSCALE_TEST_HOLD")
if _hold and os.environ.get("RANK") is not None and int(os.environ["RANK"]) == int(_hold.split(":")[0]):
    _hold_epoch = int(_hold.split(":")[1])

    def _holding(cls, done):
        inner = cls.train_epoch

        def held(self):
            if done(self) + 1 == _hold_epoch:
                import threading

                threading.Event().wait()  # until killed (the SIGTERM of a dying agent ends the process)
            return inner(self)

        cls.train_epoch = held

    from pyg_dynscale.ctdg import MemoryTrainer as _MT
    from pyg_dynscale.distributed.trainer import DistributedTrainer as _DT
    from pyg_dynscale.windows import WindowTrainer as _WT

    _holding(_DT, lambda self: len(self.epoch_seconds))
    _holding(_MT, lambda self: self.epoch)
    _holding(_WT, lambda self: self.epoch)

# PYG_DYNSCALE_TEST_STOP_BEFORE_GROUP="<rank>": that rank stops itself (SIGSTOP) right before it would join the
# process group, as a rank stopped while loading its data: its peers wait for it in the store, not in a collective.
_stop = os.environ.get("PYG_DYNSCALE_TEST_STOP_BEFORE_GROUP")
if _stop and os.environ.get("RANK") is not None and int(os.environ["RANK"]) == int(_stop):
    import signal as _signal

    import torch.distributed as _dist

    _init = _dist.init_process_group

    def _stopped_first(*args, **kwargs):
        os.kill(os.getpid(), _signal.SIGSTOP)
        return _init(*args, **kwargs)

    _dist.init_process_group = _stopped_first
