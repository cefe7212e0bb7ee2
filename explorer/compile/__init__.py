"""The train step compiled: for a target without owning it (in a child process), or for this process's devices.

Takes a ``Layout`` (and a target); gives a typed result with XLA's own figures and the prediction:

- ``train_step``: the guides' train step (one home: the reading traces its state, the compiles and timings run it);
- ``target_compile``: a compile for a TPU slice, N slices or a GPU cluster in a child process (stages, Stop);
- ``xla_compile``: the compile itself (MaxText's ``train_compile.py`` recipe), run in the child;
- ``xla_results``: XLA's results read (memory, collectives, sources, verdict, prediction);
- ``memory_breakdown``: what fills the memory at the peak, each buffer's kind, line and layer (from XLA's dump);
- ``compile_result``: the typed result (``TargetCompile``) and its JSON form;
- ``compile_cache``: results kept on disk by (layout, target, versions);
- ``compiled``: the step compiled for this process's devices (timing and the Arrays page use it);
- ``origins``: where Shardy's propagation says each value's sharding came from.
"""
