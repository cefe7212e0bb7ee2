"""The train step's own pieces (``explorer/compile/train_step.py``): the guides' optimizer and gradient accumulation. The
whole step is checked against Flax's recipe in tests/explorer/compile/test_compiled.py and test_advisor_models.py."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from explorer.compile.train_step import accumulated_grads
from explorer.models.base import make_optimizer


def _loss(params, batch):
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)  # a mean over the batch, as the models' losses are


def test_accumulated_gradients_of_a_mean_loss_are_the_whole_batchs_for_every_count():
    keys = jax.random.split(jax.random.key(0), 3)
    params = {"w": jax.random.normal(keys[0], (4, 3)), "b": jnp.zeros(3)}
    x, y = jax.random.normal(keys[1], (8, 4)), jax.random.normal(keys[2], (8, 3))
    whole = jax.grad(lambda p: _loss(p, (x, y)))(params)
    for count in (1, 2, 4, 8):
        accumulated = accumulated_grads(lambda p, batch: _loss(p, batch), params, (x, y), count)
        for key in params:
            np.testing.assert_allclose(accumulated[key], whole[key], rtol=1e-5, atol=1e-6, err_msg=f"{count} microbatches")


def test_the_optimizer_is_the_guides_adam_at_1e_3():
    params = {"w": jnp.ones((2, 2))}
    grads = {"w": jnp.full((2, 2), 0.5)}
    ours, guide = make_optimizer(), optax.adam(1e-3)
    mine, _ = ours.update(grads, ours.init(params), params)
    theirs, _ = guide.update(grads, guide.init(params), params)
    np.testing.assert_allclose(mine["w"], theirs["w"])
    np.testing.assert_allclose(mine["w"], -1e-3, rtol=1e-4)  # Adam's first step: the learning rate against the sign


def test_an_nnx_models_microbatches_accumulate_the_whole_batchs_gradient(monkeypatch):
    """NNX's step splits the parameters from the rest of the model and accumulates their gradients slice by slice:
    one step with 2 or 4 microbatches gives the parameters one step on the whole batch gives."""
    from explorer.analysis import analyzer as analysis
    from explorer.compile import train_step
    from explorer.compile.compiled import compile_step
    from explorer.layout import parse_layout

    factory = "tests.external.factories:make_flax_nnx_guide"
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", factory)

    def one_step(microbatches):
        layout = parse_layout(
            {
                "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
                "model": {"name": factory, "options": {"depth": 64, "batch": 8, "microbatches": microbatches}},
            }
        )
        assert train_step.microbatches_of(analysis.model_of(layout)) == microbatches
        step, _ = compile_step(layout)  # the init and step as the timing runs them, under the layout's mesh
        x = jax.device_put(jax.random.normal(jax.random.key(1), (8, 64)), step.input_shardings[0])
        state = step.init(jax.random.key(0), x)
        return jax.tree_util.tree_leaves(step.step(state, x)[0])

    whole = one_step(1)
    for count in (2, 4):
        for a, b in zip(whole, one_step(count)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-6, err_msg=f"{count} microbatches")


def test_microbatches_of_a_batch_sharded_on_explicit_axes_keep_its_sharding():
    """``lax.scan`` runs over the slices' axis, which must be replicated; each slice keeps the batch's 'data'."""
    from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P

    mesh = AbstractMesh((2, 4), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)

    def typed(shape, *spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, P(*spec)))

    params = {"w": typed((4, 3)), "b": typed((3,))}
    with jax.sharding.use_abstract_mesh(mesh):
        program = jax.make_jaxpr(lambda p, *xs: accumulated_grads(_loss, p, xs, 2))(params, typed((8, 4), "data"), typed((8, 3), "data"))
    scan = next(e for e in program.eqns if e.primitive.name == "scan")
    assert [v.aval.sharding.spec for v in scan.invars[-2:]] == [P(None, "data", None)] * 2
