"""The Arrays page's single arrays, as JAX's sharding guide plays with them.

Takes an op expression and a mesh; gives the arrays' shardings, what XLA did, and a timing:

- ``expr``: the expression language (parsed safely, never evaluated as Python);
- ``op_spec``: an op as plain data (its arrays, specs, mesh) and its link form;
- ``ops``: the op run and compiled (computation follows sharding, a sharded matmul against one device).
"""
