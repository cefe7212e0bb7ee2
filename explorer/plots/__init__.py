"""Plotly figures built from plain report data (GridView, MeshInfo, Totals, Memory, Estimate), never from live JAX
objects, one module per kind of figure: ``grid`` (an array's blocks and the mesh), ``memory``, ``times``, ``roofline``,
``advisor``; ``scales`` holds what they share.

Every public function returns a fresh figure the caller may change.
"""
