"""A user's own jitted step as a layout: its allow-listed factory, called with a mesh, and the layout that names it.

A step factory is ``factory(mesh, **options) -> (fn, args)`` or ``(fn, args, kwargs)``: ``fn`` a ``jax.jit``-ed
function, ``args`` its abstract arguments (``jax.ShapeDtypeStruct``s) with their shardings written on ``mesh``. The
explorer hands the mesh in (``compile.jitted`` says why): a target's (the compile child builds it over the slice's
devices), or the layout's own for the analysis (this process's devices where they are enough, else an
``AbstractMesh``: write the arguments abstract). Naming a factory imports code, so it is allow-listed as a model
factory is (``EXPLORER_ALLOWED_FACTORIES``). A step layout's model is ``step``, its options the factory's name
(``factory``) and what it is given besides the mesh; it has no rules (the arguments carry their own shardings).
"""

from __future__ import annotations

from typing import Any

from explorer.errors import ExplorerError, first_line


def factory_step(factory_name: str, options: dict[str, Any], mesh) -> tuple[Any, tuple, dict]:
    """The allow-listed step factory ``factory_name`` (``package.module:function``) called with ``mesh`` and
    ``options``: ``(fn, args, kwargs)``, the arguments on ``mesh`` as the factory wrote them."""
    from explorer.models import import_factory

    factory = import_factory(factory_name, "model.options.factory")
    try:
        made = factory(mesh, **options)
    except ExplorerError:
        raise
    except Exception as error:  # the user's code
        raise ExplorerError("model.options.factory", factory_name, f"failed: {type(error).__name__}: {first_line(error)}") from None
    if not isinstance(made, tuple) or len(made) not in (2, 3) or not isinstance(made[1], (tuple, list)):
        raise ExplorerError(
            "model.options.factory",
            factory_name,
            "returned no (fn, args) or (fn, args, kwargs): a step factory returns its jitted function and its arguments",
        )
    return made[0], tuple(made[1]), dict(made[2]) if len(made) == 3 else {}


def step_layout_data(factory: str, target, mesh: str | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A step as a layout, in the file format (``explorer.layout.parse_layout`` reads it; the app, Compare, links and
    the team library carry it as any layout): its mesh (``mesh``: ``"data=2,model=4"``, the axes in order; by default
    one axis ``data`` over every device of ``target``), no rules (the step's arguments carry their own shardings) and
    the model ``step`` whose options name the factory and what it is given besides the mesh.

    >>> from explorer.hardware.targets import parse_target
    >>> step_layout_data("pkg.mod:make", parse_target("v5e-8"), "data=2,model=4", {"width": 64})["mesh"]
    {'shape': [2, 4], 'axes': ['data', 'model']}
    """
    if mesh is None:
        shape, axes = [target.devices], ["data"]
    else:
        pairs = [part.strip().partition("=") for part in str(mesh).split(",") if part.strip()]
        if not pairs or any(not sep or not name.strip() or not size.strip().isdigit() for name, sep, size in pairs):
            raise ExplorerError("--mesh", mesh, "is not AXIS=SIZE,... (e.g. data=2,model=4: the step's mesh, axes in order)")
        shape, axes = [int(size) for _, _, size in pairs], [name.strip() for name, _, _ in pairs]
    return {
        "name": f"step {factory}"[:120],
        "mesh": {"shape": shape, "axes": axes},
        "rules": [],
        "model": {"name": "step", "options": {"factory": factory, **(options or {})}},
        "target": target.name,
    }
