"""Analysis speed: the explorer against the bare Flax recipe on Llama-2-7B shapes, planned 16x16 mesh.

The bare recipe is what a user would write by hand to see the same things: eval_shape of
the guide's init_fn, nn.get_partition_spec, nn.logical_to_mesh_sharding and shard_shape
for every leaf of the state, and the forward pass traced under the mesh and the rules
(``jax.make_jaxpr`` under ``jax.sharding.use_abstract_mesh`` and ``nn.logical_axis_rules``)
for its ``sharding_constraint`` equations. Both run as whole fresh processes (imports, tracing, everything), in
alternation (A B A B ...), and in one process for the warm and rules-only cases.

    python benchmarks/analyze.py [--rounds 5] [--only llama|t5x|maxtext|explicit ...]

The command line's ``analyze --json`` (layout file in, JSON out) is timed the same way, through its own entry
point (``explorer.__main__.run``, what ``python -m explorer`` and the installed script call), which ends the process
once its output is flushed rather than tearing the interpreter down (about 0.5 s here). Each child's CPU seconds
are printed beside the wall times for the Explicit line: on a shared machine they move less with the load.
"Cold" runs start with an empty trace cache on disk, "warm" ones with the model's trace
there from an earlier run (``explorer/reading/disk.py``).

Goals: whole process <= 1.0x the bare recipe cold and <= 0.4x warm (about what importing
JAX alone costs); a rules-only re-analysis (model in memory) <= 0.2x the bare recipe and
<= 0.5x a cold analysis. A rule naming a logical name the
model was never traced with re-traces once (to see whether an activation carries it);
that case is printed too. A line for a real external model (T5X's T5) compares with
T5X's own recipe.

The explorer traces a Linen model twice on first contact, as the bare recipe does: the guide's
init without a mesh (the state), then the forward pass under the layout tagged with a size-1 axis
per logical name (the activations as JAX receives them under the layout, and their names). The
Llama rules here leave ``kv`` (the per-head width) without a rule, as MaxText-style rules do; the
"rules naming every parameter name" line adds ``kv -> None`` (the same shardings).

An Explicit-axis line: Flax's Gemma example (vendored in tests/external) at Gemma-7B sizes on a planned
16x16 ``("data", "model")`` mesh with Explicit axes and no rules. Its bare recipe, under
``jax.sharding.use_abstract_mesh`` of an Explicit ``AbstractMesh``: ``nnx.eval_shape`` of the model and of its
``nnx.Optimizer``, each leaf's sharding (from its type) and shard shape, then ``jax.make_jaxpr`` of the forward
pass and a walk over every equation reading each output's ``aval.sharding`` (what the per-value view shows). The
explorer runs ``analyze`` in process and ``analyze --json --values`` (the per-value view in the JSON), each in a
fresh process. Goal: cold <= 1.0x the bare recipe. ``--only explicit`` runs this line alone.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from explorer.models.options import SIZE_PRESETS  # noqa: E402  (the Llama-2-7B shapes: one home)

LLAMA_7B = {
    "name": "llama2-7b-16x16",
    "mesh": {"shape": [16, 16], "axes": ["data", "model"]},
    "rules": [
        ["batch", "data"],
        ["mlp", "model"],
        ["heads", "model"],
        ["kv_heads", "model"],
        ["vocab", "model"],
        ["embed", "data"],
        ["layer", None],
    ],
    "model": {
        "name": "transformer",
        "options": {**SIZE_PRESETS["llama2-7b"]},  # batch 16 x 4096 tokens
    },
}
EVERY_NAME_RULES = LLAMA_7B["rules"] + [["kv", None]]
T5X = "tests.external.factories:make_t5x_t5"
T5X_OPTIONS = {
    "num_encoder_layers": 8,
    "num_decoder_layers": 8,
    "emb_dim": 512,
    "num_heads": 8,
    "head_dim": 64,
    "mlp_dim": 2048,
    "vocab_size": 32128,
    "batch": 16,
    "encoder_length": 512,
    "decoder_length": 128,
}


GEMMA = "tests.external.factories:make_flax_gemma"
# the example's TransformerConfig.gemma_7b (tests/external/flax_gemma/transformer_cfg.py; hidden_dim is the MLP
# width); batch and length as the Llama line's
GEMMA_7B_OPTIONS = {
    "num_layers": 28,
    "embed_dim": 3072,
    "hidden_dim": 24576,
    "num_heads": 16,
    "head_dim": 256,
    "num_kv_heads": 16,
    "num_embed": 256128,
    "batch": LLAMA_7B["model"]["options"]["batch"],
    "length": LLAMA_7B["model"]["options"]["seq_len"],
    "fsdp_axis": "data",
    "tensor_axis": "model",
}
GEMMA_7B = {
    "name": "flax-gemma-7b-16x16-explicit",
    "mesh": {"shape": [16, 16], "axes": ["data", "model"], "axis_types": ["explicit", "explicit"]},
    "rules": [],
    "model": {"name": GEMMA, "options": GEMMA_7B_OPTIONS},
}


def bare_gemma() -> int:
    """Flax's recipe on an Explicit mesh: the shardings are in the values' types. Imports no explorer code beyond
    the factory (and the device setup every child shares); returns the leaves and values it read."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

    from tests.external.factories import make_flax_gemma

    builder, inputs, _ = make_flax_gemma(**GEMMA_7B_OPTIONS)
    mesh = AbstractMesh((16, 16), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    with jax.sharding.use_abstract_mesh(mesh):
        model = nnx.eval_shape(builder)
        optimizer = nnx.eval_shape(lambda: nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param))
        leaves = []
        for obj in (model, optimizer):
            for path, variable in nnx.to_flat_state(nnx.state(obj)):
                leaf = variable.get_value()
                leaves.append((path, leaf.sharding, leaf.sharding.shard_shape(leaf.shape)))
        graphdef, state = nnx.split(model)
        xs = [jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype), sharding=NamedSharding(mesh, PartitionSpec())) for i in inputs]
        forward = jax.make_jaxpr(lambda s, *x: nnx.merge(graphdef, s)(*x))(state, *xs)
    return len(leaves) + len(_value_shardings(forward.jaxpr))


def _value_shardings(jaxpr) -> list:
    """(equation, output sharding) for every output of every equation of a program and the programs it calls."""
    found = []
    for eqn in jaxpr.eqns:
        found.extend((eqn, var.aval.sharding) for var in eqn.outvars)
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(item, "jaxpr", item)
                if hasattr(inner, "eqns"):
                    found.extend(_value_shardings(inner))
    return found


def explorer_gemma() -> int:
    from explorer.analysis.analyzer import analyze
    from explorer.layout import parse_layout

    report = analyze(parse_layout(GEMMA_7B))
    return len(report.arrays) + len(report.values)


def command_line_gemma() -> None:
    """``python -m explorer analyze LAYOUT --json --values`` on the Gemma layout, output discarded."""
    _command_line(GEMMA_7B, "--values")


def t5x_layout() -> dict:
    from tests.external.factories import AUTHORS_RULES

    return {
        "name": "t5x-small-2x4",
        "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
        "rules": AUTHORS_RULES["t5x_t5"],
        "model": {"name": T5X, "options": T5X_OPTIONS},
    }


def bare_t5x() -> int:
    """T5X's own recipe: eval_shape of init, axis names from params_axes, logical_to_mesh_sharding."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from flax.linen import partitioning as nn_partitioning
    from jax.sharding import AbstractMesh, AxisType, PartitionSpec

    from tests.external.factories import AUTHORS_RULES, make_t5x_t5

    module, inputs, _ = make_t5x_t5(**T5X_OPTIONS)
    xs = [jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype)) for i in inputs]
    abstract = jax.eval_shape(module.init, jax.random.key(0), *xs)
    axes = nn_partitioning.get_axis_names(abstract["params_axes"])
    mesh = AbstractMesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    rules = tuple(tuple(r) for r in AUTHORS_RULES["t5x_t5"])
    shardings = nn.logical_to_mesh_sharding(axes, mesh, rules)
    leaves = jax.tree_util.tree_leaves(shardings, is_leaf=lambda x: isinstance(x, PartitionSpec))
    return len(leaves)


MAXTEXT = "tests.external.factories:make_maxtext_decoder"
MAXTEXT_OPTIONS = {"num_decoder_layers": 8, "emb_dim": 512, "mlp_dim": 1408, "num_heads": 8, "head_dim": 64, "batch": 8, "length": 256}


def maxtext_layout() -> dict:
    from tests.external import factories

    shape = [int(n) for n in factories.MAXTEXT_MESH_SHAPE.split("x")]
    return {
        "name": "maxtext-llama2",
        "mesh": {"shape": shape, "axes": list(factories.maxtext_base.MESH_AXES)},
        "rules": factories.maxtext_rules(),
        "model": {"name": MAXTEXT, "options": MAXTEXT_OPTIONS},
    }


def bare_maxtext() -> int:
    """Flax's recipe on MaxText's decoder (NNX layers bridged into Linen, scanned, base.yml's rules on its 12-axis
    mesh): eval_shape of init, nn.get_partition_spec, logical_to_mesh_sharding, the forward pass under the mesh
    and rules for its constraints."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec

    from tests.external import factories

    layout = maxtext_layout()
    module, inputs, _ = factories.make_maxtext_decoder(**MAXTEXT_OPTIONS)
    xs = [jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype)) for i in inputs]
    mesh = jax.make_mesh(
        tuple(layout["mesh"]["shape"]),
        tuple(layout["mesh"]["axes"]),
        axis_types=(jax.sharding.AxisType.Auto,) * len(layout["mesh"]["axes"]),
    )
    rules = tuple((name, tuple(axes) if isinstance(axes, list) else axes) for name, axes in layout["rules"])
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        abstract = jax.eval_shape(module.init, jax.random.key(0), *xs)
        shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, rules)
        forward = jax.make_jaxpr(lambda variables, *x: module.apply(variables, *x))(abstract, *xs)
    leaves = jax.tree_util.tree_leaves(shardings, is_leaf=lambda x: isinstance(x, PartitionSpec))
    return len(leaves) + len(_sharding_constraints(forward.jaxpr))


def explorer_maxtext() -> int:
    from explorer.analysis.analyzer import analyze
    from explorer.layout import parse_layout

    return len(analyze(parse_layout(maxtext_layout())).arrays)


def explorer_t5x() -> int:
    from explorer.analysis.analyzer import analyze
    from explorer.layout import parse_layout

    return len(analyze(parse_layout(t5x_layout())).arrays)


def bare_recipe() -> int:
    """What a user writes by hand with Flax; returns the number of leaves it sharded."""
    import functools

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax
    from flax.training import train_state
    from jax.sharding import AbstractMesh, AxisType

    from explorer.models import build_model
    from explorer.layout import parse_layout

    built = build_model(parse_layout(LLAMA_7B).model)

    def init_fn(key, x, model, optimizer):
        variables = model.init(key, x)
        return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optimizer)

    x = jax.ShapeDtypeStruct(built.inputs[0].shape, jnp.dtype(built.inputs[0].dtype))
    abstract = jax.eval_shape(functools.partial(init_fn, model=built.module, optimizer=optax.adam(1e-3)), jax.random.key(0), x)
    mesh = AbstractMesh((16, 16), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    rules = tuple(tuple(r) for r in LLAMA_7B["rules"])
    shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, rules)
    shapes = jax.tree_util.tree_map(lambda s, a: s.shard_shape(a.shape), shardings, nn.unbox(abstract))
    with jax.sharding.use_abstract_mesh(mesh), nn.logical_axis_rules(rules):
        forward = jax.make_jaxpr(lambda params, x: built.module.apply({"params": params}, x))(abstract.params, x)
    return len(jax.tree_util.tree_leaves(shapes)) + len(_sharding_constraints(forward.jaxpr))


def _sharding_constraints(jaxpr) -> list:
    """Every sharding_constraint equation of a program and the programs it calls."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "sharding_constraint":
            found.append(eqn)
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(item, "jaxpr", item)
                if hasattr(inner, "eqns"):
                    found.extend(_sharding_constraints(inner))
    return found


def explorer_every_name() -> int:
    return explorer_analysis(EVERY_NAME_RULES)


def explorer_analysis(rules=None, model=None) -> int:
    from explorer.analysis.analyzer import analyze
    from explorer.layout import parse_layout

    layout = dict(LLAMA_7B, rules=rules or LLAMA_7B["rules"], model=model or LLAMA_7B["model"])
    return len(analyze(parse_layout(layout)).arrays)


def command_line_json() -> None:
    """``python -m explorer analyze LAYOUT --json``, output discarded: what a CI job runs."""
    _command_line(LLAMA_7B)


def _command_line(layout: dict, *flags: str) -> None:
    """The command line's own entry point (``run``: ``main``, then the process ends as the installed script's does),
    the layout file written into this child's fresh cache folder, the output discarded."""
    import contextlib
    import io
    import json

    from explorer.__main__ import run

    path = os.path.join(os.environ["EXPLORER_CACHE_DIR"], "layout.json")
    with open(path, "w") as handle:
        json.dump(layout, handle)
    sys.argv = ["partition-explorer", "analyze", path, "--json", *flags]
    with contextlib.redirect_stdout(io.StringIO()):
        run()


CPU_SECONDS: dict[str, list[float]] = {}  # each child's user + system CPU seconds, by ``which``


def _fresh_process(which: str, cache: str) -> float:
    """Seconds for a whole new process running ``which``, with the trace cache in ``cache``; its CPU seconds are
    kept in ``CPU_SECONDS`` (on a machine shared with other work, wall time also counts the waits for a core)."""
    env = {**os.environ, "EXPLORER_CACHE_DIR": cache}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--child", which], check=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU_SECONDS.setdefault(which, []).append(cpu)
    return wall


def _timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def _summary(name: str, samples: list[float]) -> str:
    return f"{name:<34} median {statistics.median(samples):7.3f} s  (min {min(samples):.3f}, max {max(samples):.3f}, n={len(samples)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--only",
        action="append",
        choices=["llama", "t5x", "maxtext", "explicit"],
        help="run only this line (repeatable); llama includes the in-process cases",
    )
    parser.add_argument(
        "--child",
        choices=[
            "bare",
            "explorer",
            "explorer-every-name",
            "cli",
            "bare-t5x",
            "explorer-t5x",
            "bare-maxtext",
            "explorer-maxtext",
            "bare-gemma",
            "explorer-gemma",
            "cli-gemma",
        ],
    )
    args = parser.parse_args()
    os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")
    if args.child:
        from explorer.hardware import devices

        devices.configure()
        os.environ["EXPLORER_ALLOWED_FACTORIES"] = f"{T5X},{MAXTEXT},{GEMMA}"
        children = {
            "bare": bare_recipe,
            "explorer": explorer_analysis,
            "explorer-every-name": explorer_every_name,
            "cli": command_line_json,
            "bare-t5x": bare_t5x,
            "explorer-t5x": explorer_t5x,
            "bare-maxtext": bare_maxtext,
            "explorer-maxtext": explorer_maxtext,
            "bare-gemma": bare_gemma,
            "explorer-gemma": explorer_gemma,
            "cli-gemma": command_line_gemma,
        }
        children[args.child]()
        return

    lines = set(args.only or ["llama", "t5x", "maxtext", "explicit"])
    if "llama" in lines:
        explorer_cold = _llama_whole_process(args.rounds)
    if "t5x" in lines:
        _t5x(args.rounds)
    if "maxtext" in lines:
        _maxtext(args.rounds)
    if "explicit" in lines:
        _explicit(args.rounds)
    if "llama" in lines:
        _llama_in_process(args.rounds, explorer_cold)


def _explicit(rounds: int) -> None:
    print(
        f"Flax's Gemma example (tests/external) at Gemma-7B sizes (28 layers, d_model 3072) on a planned 16x16 mesh "
        f"with Explicit axes, no rules, {rounds} rounds, A B C A B C ..."
    )
    bare, cold, cli = [], [], []
    for _ in range(rounds):
        bare.append(_fresh_process("bare-gemma", tempfile.mkdtemp()))
        cold.append(_fresh_process("explorer-gemma", tempfile.mkdtemp()))
        cli.append(_fresh_process("cli-gemma", tempfile.mkdtemp()))
    print(_summary("bare NNX recipe, whole process", bare))
    print(_summary("explorer, whole process, cold", cold))
    print(_summary("analyze --json --values, cold", cli))
    for label, samples in (("cold", cold), ("analyze --json --values cold", cli)):
        ratios = [e / b for e, b in zip(samples, bare)]
        print(f"ratio explorer {label} / bare (Explicit, whole process): median {statistics.median(ratios):.2f}x  (goal <= 1.0x)")
    cpu_bare = CPU_SECONDS["bare-gemma"][-rounds:]
    for label, which in (("cold", "explorer-gemma"), ("analyze --json --values cold", "cli-gemma")):
        ratios = [e / b for e, b in zip(CPU_SECONDS[which][-rounds:], cpu_bare)]
        print(
            f"ratio explorer {label} / bare, CPU seconds (user + system): median {statistics.median(ratios):.2f}x  "
            f"(bare median {statistics.median(cpu_bare):.3f} s)"
        )


def _llama_whole_process(rounds: int) -> list[float]:
    print(f"Llama-2-7B shapes (32 unscanned layers) on a planned 16x16 mesh, {rounds} rounds, A B A B ...")
    warm_cache = tempfile.mkdtemp(prefix="explorer-bench-warm-")
    _fresh_process("explorer", warm_cache)  # fills the warm cache once
    bare_cold, explorer_cold, every_name_cold, explorer_warm, cli_cold = [], [], [], [], []
    for _ in range(rounds):
        bare_cold.append(_fresh_process("bare", tempfile.mkdtemp()))
        explorer_cold.append(_fresh_process("explorer", tempfile.mkdtemp()))
        every_name_cold.append(_fresh_process("explorer-every-name", tempfile.mkdtemp()))
        explorer_warm.append(_fresh_process("explorer", warm_cache))
        cli_cold.append(_fresh_process("cli", tempfile.mkdtemp()))
    print(_summary("bare recipe, whole process", bare_cold))
    print(_summary("explorer, whole process, cold", explorer_cold))
    print(_summary("explorer, every name ruled, cold", every_name_cold))
    print(_summary("explorer, whole process, warm", explorer_warm))
    print(_summary("analyze --json, whole process, cold", cli_cold))
    for label, samples, goal in (
        ("cold", explorer_cold, 1.0),
        ("cold, rules naming every parameter name", every_name_cold, 1.0),
        ("warm", explorer_warm, 0.4),
        ("analyze --json cold", cli_cold, 1.0),
    ):
        ratios = [e / b for e, b in zip(samples, bare_cold)]
        print(f"ratio explorer {label} / bare (whole process): median {statistics.median(ratios):.2f}x  (goal <= {goal}x)")
    return explorer_cold


def _t5x(rounds: int) -> None:
    print(f"T5X's T5 (tests/external, 8+8 layers, d_model 512) on 2x4 with T5X's rules, {rounds} rounds")
    bare_t5, explorer_t5 = [], []
    for _ in range(rounds):
        bare_t5.append(_fresh_process("bare-t5x", tempfile.mkdtemp()))
        explorer_t5.append(_fresh_process("explorer-t5x", tempfile.mkdtemp()))
    print(_summary("bare T5X recipe, whole process", bare_t5))
    print(_summary("explorer, whole process, cold", explorer_t5))
    ratios = [e / b for e, b in zip(explorer_t5, bare_t5)]
    print(f"ratio explorer / bare (T5X, whole process, cold): median {statistics.median(ratios):.2f}x")


def _maxtext(rounds: int) -> None:
    print(
        f"MaxText's decoder (tests/external: NNX layers bridged into Linen, scanned, 8 layers, d_model 512) on its "
        f"12-axis mesh with base.yml's rules, {rounds} rounds"
    )
    bare_mt, explorer_mt = [], []
    for _ in range(rounds):
        bare_mt.append(_fresh_process("bare-maxtext", tempfile.mkdtemp()))
        explorer_mt.append(_fresh_process("explorer-maxtext", tempfile.mkdtemp()))
    print(_summary("bare Flax recipe, whole process", bare_mt))
    print(_summary("explorer, whole process, cold", explorer_mt))
    ratios = [e / b for e, b in zip(explorer_mt, bare_mt)]
    print(f"ratio explorer / bare (MaxText, whole process, cold): median {statistics.median(ratios):.2f}x")


def _llama_in_process(rounds: int, explorer_cold: list[float]) -> None:
    from explorer.hardware import devices

    devices.configure()
    os.environ["EXPLORER_CACHE_DIR"] = "off"
    explorer_analysis()  # the model in memory once
    bare_warm, rules_only, new_name = [], [], []
    for round_index in range(rounds):
        bare_warm.append(_timed(bare_recipe))
        rules = LLAMA_7B["rules"]
        # a set of rules not seen before each round, for 12 rounds: the first analysis's order (shift 0) is
        # cached, and so is any set an earlier round analyzed (a 7 ms hit, not a re-analysis)
        shift = (round_index // 2) % (len(rules) - 1) + 1
        edited = rules[shift:] + rules[:shift]
        if round_index % 2:
            edited = [[name, "model" if axes == "data" else "data" if axes == "model" else axes] for name, axes in edited]
        rules_only.append(_timed(explorer_analysis, edited))
        new_name.append(_timed(explorer_analysis, LLAMA_7B["rules"] + [[f"unseen_{round_index}", None]]))
    print(_summary("bare recipe, in process", bare_warm))
    print(_summary("explorer, rules-only re-analysis", rules_only))
    print(_summary("explorer, rule with a new logical name", new_name))
    ratio = statistics.median(rules_only) / statistics.median(bare_warm)
    print(f"ratio rules-only re-analysis / bare recipe: {ratio:.3f}x  (goal <= 0.2x)")
    ratio = statistics.median(rules_only) / statistics.median(explorer_cold)
    print(f"ratio rules-only re-analysis / explorer cold analysis (whole process): {ratio:.3f}x  (goal <= 0.5x)")
    ratio = statistics.median(new_name) / statistics.median(bare_warm)
    print(f"ratio re-analysis after a rule naming a new logical name (re-traces) / bare recipe: {ratio:.3f}x")


if __name__ == "__main__":
    main()
