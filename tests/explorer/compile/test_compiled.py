"""Compiling the train step on this process's devices: the host-memory estimate bounds XLA's buffers, the cache is bounded."""

from explorer.compile import compiled as compiled_lib
from explorer.analysis.analyzer import analyze
from explorer.compile.compiled import compile_step
from tests.explorer.timing.test_timing import SMALL_MLP, layout
from tests.small_models import SMALL_TRANSFORMER_OPTIONS


def test_host_memory_estimate_bounds_what_xla_allocates(seed_dict):
    """The Timing page's host-memory figure (and the refusal built on it) is an upper bound of XLA's buffers."""
    transformer = {
        "name": "transformer",
        "options": {
            **SMALL_TRANSFORMER_OPTIONS,
        },
    }
    for rules, model in [
        ([["batch", "data"], ["hidden", "model"]], SMALL_MLP),
        ([["batch", "data"]], SMALL_MLP),
        ([["batch", "data"], ["hidden", "model"]], {"name": "mlp", "options": {"batch": 64, "layers": 2, "depth": 64}}),
        ([["batch", "data"], ["heads", "model"], ["mlp", "model"]], transformer),
    ]:
        seed = layout(seed_dict, rules=rules, model=model)
        report = analyze(seed)
        memory = compiled_lib.memory_of(compile_step(seed, report)[0].step)
        per_device = memory["argument_bytes"] + memory["output_bytes"] + memory["temp_bytes"] - memory["alias_bytes"]
        estimate = compiled_lib.host_footprint_bytes(report)
        assert per_device * report.mesh.size <= estimate <= 4 * per_device * report.mesh.size, (rules, model)


def test_compile_cache_is_bounded(seed_dict):
    for depth in (64, 128, 192, 320, 384, 448):
        compile_step(layout(seed_dict, model={"name": "mlp", "options": {"batch": 8, "layers": 1, "depth": depth}}))
    assert len(compiled_lib._steps) == compiled_lib.CACHE_SIZE  # six layouts compiled, the oldest dropped
