"""The hardware a layout is planned for, at the bottom of the stages with the vocabulary (imports nothing above).

Takes a target's name; gives what the rest of the stages ask of it:

- ``accelerators``: the chips and GPUs (HBM, peak rates, links), each figure with its source;
- ``targets``: target names (a TPU slice, N slices over the data-center network, a GPU cluster) parsed into a ``Target``;
- ``placement``: where each mesh axis falls on a target's torus, hosts or slices (``AxisPlacement``);
- ``devices``: this process's simulated CPU devices, and the environment a compile child runs JAX in;
- ``libtpu``: no process of the explorer takes libtpu's lock, and a refusal from it in one line of ours;
- ``gpu_targets/``: XLA's GPU target configs, vendored.
"""
