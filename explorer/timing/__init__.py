"""The step timed on real devices: this process's, or several processes' and hosts' with ``jax.distributed``.

Takes a ``Layout``; gives a ``TimingResult`` (every step's time, the compile's, memory, collectives):

- ``timing``: one process, its devices;
- ``distributed``: one process of a ``jax.distributed`` run (``python -m explorer.timing.distributed``);
- ``workers``: N local processes started, watched and ended;
- ``compare``: layouts side by side (the arrays whose specs differ) and a fair timing race.
"""
