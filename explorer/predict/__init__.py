"""A step's time on a target, from the compiled program: the lower bound and the per-kernel prediction.

Takes a program (through ``explorer.hlo``) and the hardware's rates; gives times, each labelled as what it is:

- ``roofline``: the whole-program lower bound (compute, memory, collectives) and the collectives' times;
- ``step_model``: the per-kernel prediction of the step as real runs measure it;
- ``step_rates``: the rates it uses, each with its source (measured runs, data sheets).

Below the compile, which attaches both to its result.
"""
