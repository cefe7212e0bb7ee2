"""XLA's GPU target configs (text protos of ``stream_executor.GpuTargetConfigProto``), vendored unchanged.

``explorer.hardware.accelerators`` reads them to describe NVIDIA GPU clusters to JAX's CUDA plugin without a GPU;
SOURCE.md gives their repository, paths, commits and licence (Apache-2.0).
"""
