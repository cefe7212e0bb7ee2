"""One reader of XLA's programs (the compiled HLO text) and of where in the user's code a value comes from.

Takes program text and tracebacks; gives plain records. Below the reading (which asks ``sources`` which frames are
library code) and every stage that reads a compiled program (compile, predict, timing, ops):

- ``instructions``: one line of program text as one ``Instruction`` record;
- ``program``: computations, callees, loops and their trip counts, collectives, Pallas kernels' cost estimates,
  the parameters' layouts;
- ``sources``: a program's stack-frame tables, and which line of the model made each instruction;
- ``megascale``: the sends and receives that cross TPU slices over the data-center network;
- ``dumps``: the files XLA dumps for a compile (finding one; a refused program's memory, as ``memory_analysis()`` would
  give it);
- ``heap``: the buffer assignment set against the schedule's live ranges: the bytes held at each program point and
  the buffers live at the peak.
"""
