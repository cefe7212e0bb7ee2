# Copyright 2025-2026 Google LLC
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#    https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# pylint: disable=line-too-long, disable=bare-except, consider-using-generator
"""Utils that are only interesting to MaxText and sharding related."""

# adapted for Partition Explorer's tests: only the functions the vendored layers call, each verbatim; the
# imports of pyconfig, optax and max_utils (unused by these functions) removed, max_logging from the shims.
from collections.abc import Iterable
import inspect  # for debugging only
from pathlib import Path

from flax import linen as nn, nnx
from flax.core.spmd import get_logical_axis_rules as flax_get_logical_axis_rules
import jax
from jax.core import Tracer
from jax.sharding import NamedSharding, PartitionSpec as P, reshard
from .common_types import ShardMode  # adapted
from ._shims import max_logging  # adapted

_LOGGED_ACTIVATION_SHARDINGS = set()
_ACTIVATION_SHARDINGS_DUMP = []


def get_logical_axis_rules():
  """Get the logical axis rules for the flax model"""
  return flax_get_logical_axis_rules()


def _get_sharding_desc(inputs, extra_stack_level):
  """Get the inputs sharding description using inspect module"""
  frame = inspect.currentframe()
  # Traverse back extra_stack_level times:
  for _ in range(1 + extra_stack_level):
    if frame is not None:
      frame = frame.f_back
  if frame is not None:
    callers_local_vars = frame.f_locals.items()

    x = [var_name for var_name, var_val in callers_local_vars if var_val is inputs]
    if len(x) > 0:
      caller_path_full = inspect.stack()[1 + extra_stack_level].filename
      # Use pathlib.Path to easily extract just the filename from the full path.
      caller_filename = Path(caller_path_full).name
      return f"{caller_filename[:-3]}/{x[0]}"
  return "Unknown"


def maybe_shard_with_name(
    inputs, named_sharding, shard_mode, debug_sharding=False, extra_stack_level=0, sharding_desc="", logical_axes=None
):
  """
  In auto shardmode, this function hints inputs follow given named_sharding.
  In explicit shardmode, this function enforces inputs following named_sharding.
  sharding_desc is description of inputs of upper layer(s) of caller (with the form of <filename>/<variable>).
   It is used as key in log/dump files when debug_sharding==true
  """
  if inputs is None:
    return None
  if hasattr(inputs, "ndim"):
    named_sharding = truncate_out_sharding(named_sharding, inputs.ndim)
  if (
      isinstance(named_sharding, NamedSharding)
      and hasattr(inputs, "shape")
      and getattr(named_sharding, "mesh", None) is not None
      and (isinstance(inputs, nnx.Variable) or hasattr(inputs, "value"))
  ):
    adj_spec = adjust_pspec_for_indivisible_shapes(named_sharding.spec, inputs.shape, named_sharding.mesh)
    if adj_spec != named_sharding.spec:
      named_sharding = NamedSharding(named_sharding.mesh, adj_spec)
  if (
      debug_sharding and isinstance(inputs, Tracer) and isinstance(named_sharding, NamedSharding)
  ):  # only print pspec for JitTracer
    if not sharding_desc:
      sharding_desc = _get_sharding_desc(inputs, extra_stack_level + 1)

    if not logical_axes:
      logical_axes = "Unknown"
    elif isinstance(logical_axes, list):
      logical_axes = tuple(logical_axes)

    pspec = remove_size_one_mesh_axis(getattr(named_sharding, "spec"), getattr(named_sharding, "mesh"))
    log_key = (sharding_desc, str(jax.typeof(inputs)), tuple(pspec), extra_stack_level)
    if log_key not in _LOGGED_ACTIVATION_SHARDINGS:
      max_logging.info(f"{sharding_desc} Logical: {log_key[1]:.<60} {logical_axes}.", stacklevel=3 + extra_stack_level)
      max_logging.info(f"{sharding_desc} Physical: {log_key[1]:.<60} {log_key[2]}.", stacklevel=3 + extra_stack_level)
      _LOGGED_ACTIVATION_SHARDINGS.add(log_key)

      _ACTIVATION_SHARDINGS_DUMP.append(
          {
              f"{sharding_desc}: {log_key[1]}": {
                  "logic_axes": f"{logical_axes}",
                  "PartitionSpec": f"P{log_key[2]}",
              }
          }
      )
  if shard_mode == ShardMode.EXPLICIT:
    return reshard(inputs, named_sharding)
  else:
    return jax.lax.with_sharding_constraint(inputs, named_sharding)


def maybe_shard_with_pspec(
    inputs,
    pspec: jax.sharding.PartitionSpec | None,
    mesh,
    shard_mode,
    debug_sharding=False,
    extra_stack_level=0,
    logical_axes=None,
):
  """Apply a physical sharding constraint while preserving logical-axis debug metadata."""
  if pspec is None:
    return None
  sharding = NamedSharding(mesh, pspec)
  return maybe_shard_with_name(
      inputs,
      sharding,
      shard_mode=shard_mode,
      debug_sharding=debug_sharding,
      extra_stack_level=extra_stack_level + 1,
      logical_axes=logical_axes,
  )


def maybe_shard_with_logical(
    inputs, logical_axes, mesh, shard_mode, rules=None, debug_sharding=False, extra_stack_level=0, sharding_desc=""
):
  """
  A wrapper of maybe_shard_with_name when logical axes are inputs
  sharding_desc is description of inputs of upper layer(s) of caller (with the form of <filename>/<variable>).
   It is used as key in log/dump files when debug_sharding==true
  """
  if inputs is None:
    return None

  if debug_sharding and not sharding_desc:
    sharding_desc = _get_sharding_desc(inputs, extra_stack_level + 1)

  named_sharding = create_sharding(mesh, logical_axes, rules=rules)

  return maybe_shard_with_name(
      inputs,
      named_sharding,
      shard_mode,
      debug_sharding=debug_sharding,
      extra_stack_level=extra_stack_level + 1,
      sharding_desc=sharding_desc,
      logical_axes=logical_axes,
  )


def remove_size_one_mesh_axis(spec, mesh):
  """
  Removes mesh axes from a PartitionSpec (P) where the axis size is 1.

  This is a common optimization to simplify sharding by excluding redundant axes.
  Function originally from jax._src.core:
  https://github.com/jax-ml/jax/blob/main/jax/_src/core.py
  """
  if spec is None:
    return None
  new_spec = []  # type: ignore
  for s in spec:
    if s is None or s == P.UNCONSTRAINED:
      new_spec.append(s)  # type: ignore
    elif isinstance(s, tuple):
      new_spec.append(tuple(i for i in s if mesh.shape.get(i, 1) != 1))
    else:
      new_spec.append(None if mesh.shape.get(s, 1) == 1 else s)  # type: ignore
  return P(*new_spec, unreduced=spec.unreduced, reduced=spec.reduced)


def adjust_pspec_for_indivisible_shapes(spec: P, shape: tuple[int, ...], mesh) -> P:
  """Removes physical mesh axes from spec where array dimension is not divisible by the mesh axis size."""
  if spec is None or mesh is None or not shape:
    return spec
  new_spec = []
  for i, s in enumerate(spec):
    if i >= len(shape) or s is None or s == P.UNCONSTRAINED:
      new_spec.append(s)
    else:
      dim_len = shape[i]
      if isinstance(s, tuple):
        valid_axes = []
        cum_product = 1
        for axis_name in s:
          axis_size = mesh.shape.get(axis_name, 1) if hasattr(mesh, "shape") else 1
          if dim_len % (cum_product * axis_size) == 0:
            valid_axes.append(axis_name)
            cum_product *= axis_size
        new_spec.append(tuple(valid_axes) if valid_axes else None)
      else:
        axis_size = mesh.shape.get(s, 1) if hasattr(mesh, "shape") else 1
        if dim_len % axis_size == 0:
          new_spec.append(s)
        else:
          new_spec.append(None)
  return P(*new_spec, unreduced=spec.unreduced, reduced=spec.reduced)


def mesh_axes_for_dim(axis_names):
  """Returns the mesh axes attached to one tensor dimension."""
  if axis_names is None:
    return ()
  if isinstance(axis_names, str):
    return (axis_names,)
  return tuple(axis for axis in axis_names if axis is not None)


def mesh_axes_size(mesh, axes, *, label):
  """Returns the product of mesh sizes for a set of axes."""
  size = 1
  for axis in axes:
    if axis not in mesh.shape:
      raise ValueError(f"{label} requires mesh axis {axis!r} to exist.")
    size *= mesh.shape[axis]
  return size


def with_axis_on_dim(axis_names, axis, dim):
  """Returns sharding axis names with one dimension replaced."""
  if axis_names is None:
    return None
  if dim >= len(axis_names):
    raise ValueError(f"Dimension {dim} is out of range for sharding axis names {axis_names}.")
  axes = list(axis_names)
  axes[dim] = axis
  if isinstance(axis_names, P):
    return P(*axes, unreduced=axis_names.unreduced, reduced=axis_names.reduced)
  if isinstance(axis_names, tuple):
    return tuple(axes)
  return axes


def logical_to_mesh_axes(logical_names, mesh, rules=None):
  """Remove size one mesh axes given logical names."""
  tensor_spec = nn.logical_to_mesh_axes(logical_names, rules=rules)
  return remove_size_one_mesh_axis(tensor_spec, mesh)


def logical_to_mesh(tree, mesh, rules=None):
  """Remove size one mesh axes given logical pspec pytree."""
  if tree is None:
    return None
  return jax.tree.map(
      lambda x: logical_to_mesh_axes(x, mesh, rules=rules),
      tree,
      is_leaf=lambda x: isinstance(x, P),
  )


def logical_to_mesh_sharding(tree, mesh, rules=None):
  """Return sharding pytree given logical specs pytree"""
  if tree is None:
    return None
  return jax.tree.map(
      lambda x: NamedSharding(mesh, x),
      logical_to_mesh(tree, mesh, rules=rules),
      is_leaf=lambda x: isinstance(x, P),
  )


def create_sharding(mesh, logical_names, rules=None):
  """Create NamedSharding with given logical names."""
  return NamedSharding(mesh, logical_to_mesh_axes(logical_names, mesh, rules=rules))


def truncate_out_sharding(out_sharding, out_ndim: int):
  """Truncates out_sharding if tensor ndim is less than out_sharding pspec length."""
  if out_sharding is None:
    return None
  if isinstance(out_sharding, NamedSharding):
    if len(out_sharding.spec) > out_ndim:
      return NamedSharding(
          out_sharding.mesh,
          P(*out_sharding.spec[:out_ndim]),
      )
  elif isinstance(out_sharding, P):
    if len(out_sharding) > out_ndim:
      return P(*out_sharding[:out_ndim])
  elif isinstance(out_sharding, (tuple, list)):
    if len(out_sharding) > out_ndim:
      return tuple(out_sharding[:out_ndim])
  return out_sharding


def remove_mesh_axes_from_partition_spec(pspec, axes_to_remove, dims=None):
  """Return `pspec` with `axes_to_remove` stripped from the given dims.

  Replacing a mesh axis with `None` in a PartitionSpec instructs JAX to replicate
  the array data along that physical mesh dimension, so peeling an axis here is
  what turns a sharding constraint into an all-gather.

  Args:
    pspec: The PartitionSpec to strip axes from.
    axes_to_remove: Collection of physical mesh axis names to remove.
    dims: Dim indices to modify; `None` (the default) modifies every dim.

  Returns:
    A new PartitionSpec with the requested axes replaced by `None`.
  """
  axes_to_remove = set(axes_to_remove)
  new_spec = []
  for i, axis in enumerate(pspec):
    if axis is None or (dims is not None and i not in dims):
      new_spec.append(axis)
    elif isinstance(axis, str):
      new_spec.append(None if axis in axes_to_remove else axis)
    elif isinstance(axis, (list, tuple)):
      new_spec.append(tuple(a for a in axis if a not in axes_to_remove) or None)
    else:
      raise ValueError(f"Unsupported axis type: {type(axis)}")
  return jax.sharding.PartitionSpec(*new_spec)


def remove_mesh_axes_from_sharding(sharding_tree, axes_to_remove):
  """Recursively traverses a sharding tree removing `axes_to_remove` from each spec."""

  def _peel(named_sharding):
    if isinstance(named_sharding, jax.sharding.NamedSharding):
      return jax.sharding.NamedSharding(
          named_sharding.mesh,
          remove_mesh_axes_from_partition_spec(named_sharding.spec, axes_to_remove),
      )
    return named_sharding

  return jax.tree.map(_peel, sharding_tree)


def remove_expert_from_partition_spec(pspec, dims_to_peel):
  """Return `pspec` with the 'expert' mesh axis removed from the given dim indices.

  Used by the MoE dispatch/MLP sharding: the expert dim is already sharded over the
  'expert' mesh axis via the `activation_exp` rule, so the batch dim must not also map
  to 'expert' (that double-maps two tensor dims onto one mesh axis and makes GSPMD fall
  back to FSDP-style AllGather+ReduceScatter instead of expert-parallel AllToAll). Only
  the dims listed in `dims_to_peel` (the batch dim) are modified; the expert dim is left
  untouched. Avoids needing a separate `activation_batch_no_exp` logical rule that every
  `custom_mesh_and_rule` set would have to redefine.
  """
  return remove_mesh_axes_from_partition_spec(pspec, ("expert",), dims=dims_to_peel)



def get_physical_spec_without_axes(full_logical, mesh, axes_to_remove, logical_axis_rules=None):
  """Resolve `full_logical` to a physical sharding with `axes_to_remove` peeled off.

  Combines the logical-to-physical lookup with an axis peel, producing a target
  layout for an all-gather over exactly the named mesh axes. Peeling a subset of
  the FSDP axes (rather than all of them at once) is what lets a 2D-FSDP-sharded
  weight be gathered in two separate single-axis stages.

  Args:
    full_logical: A PyTree of logical PartitionSpecs. Note that a bare tuple of
      logical names is a pytree of strings, not a leaf -- wrap it in a
      `PartitionSpec` before passing it in.
    mesh: The JAX device mesh.
    axes_to_remove: Collection of physical mesh axis names to peel.
    logical_axis_rules: Rules for converting logical axes to physical mesh axes.
      Defaults to the ambient rules context.

  Returns:
    A PyTree of physical `jax.sharding.NamedSharding` objects.
  """
  physical = logical_to_mesh_sharding(full_logical, mesh=mesh, rules=logical_axis_rules)
  return remove_mesh_axes_from_sharding(physical, axes_to_remove)


FSDP_MESH_AXES = ("fsdp", "fsdp_transpose")
