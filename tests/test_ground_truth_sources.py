"""Every collective traced to the same (file, line) as the compiled module's own stack frames, on real models.

For each case the model's train step is compiled twice on 8 simulated CPU devices: by the explorer (its
``compile_step``, the program the Timing page runs) and bare, by ``tests/ground_truth_sources.py`` (plain JAX and
Flax, its own stack-frame parser, no explorer code). Two checks:

- on the bare program, instruction by instruction: the explorer's reading of the text (``sources.instruction_source``,
  ``hlo.collective_ops``' runs) gives every collective the ground truth's file, line and runs per step;
- the explorer's own program gives the same collectives per (op, file, line) and step as the bare one.

Cases: Flax's lm1b (Linen, 2x2x2 with the authors' 3-axis rules), the NNX guide's model (NNX, 2x4) and
big_vision's ViT scanned (``nn.scan(nn.remat(...))``); in both of the latter the layers run in a loop whose body's
collectives count once per layer.
"""

from __future__ import annotations

import collections

import pytest

from explorer.hlo import program as hlo
from explorer.hlo import sources
from explorer.analysis.analyzer import analyze
from explorer.compile.compiled import compile_step
from explorer.layout import parse_layout
from explorer.compile.target_compile import compile_target
from explorer.timing.timing import traced_collectives
from tests import ground_truth, ground_truth_sources
from tests.external import factories as external

EXTERNAL = "tests.external.factories"
MESH_2X4 = {"shape": [2, 4], "axes": ["data", "model"]}
MESH_2X2X2 = {"shape": [2, 2, 2], "axes": ["data", "fsdp", "model"]}
CASES = {
    "lm1b-linen-2x2x2": (MESH_2X2X2, external.AUTHORS_RULES_3AXIS["flax_lm1b"], "make_flax_lm1b", {}),
    "nnx-guide-2x4": (MESH_2X4, [], "make_flax_nnx_guide", {"depth": 64}),
    "vit-scanned-2x2x2": (MESH_2X2X2, external.AUTHORS_RULES_3AXIS["big_vision_vit"], "make_big_vision_vit", {"scan": True}),
}
LOOPED = {"nnx-guide-2x4", "vit-scanned-2x2x2"}  # the NNX guide's layers run under nnx.scan


@pytest.fixture(scope="module", params=sorted(CASES))
def compiled(request):
    """(case, the bare program's text, the explorer's program's text, the mesh) for one case, compiled once."""
    mesh, rules, factory, options = CASES[request.param]
    name = f"{EXTERNAL}:{factory}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_ALLOWED_FACTORIES", name)
        layout = parse_layout({"name": request.param, "mesh": mesh, "rules": rules, "model": {"name": name, "options": options}})
        input_specs = [a.spec for a in analyze(layout).arrays if a.kind == "input"]  # the inputs' shardings, as given
        explorer_text = compile_step(layout)[0].step.as_text()
    module, inputs, loss = getattr(external, factory)(**options)
    the_mesh = ground_truth.mesh_of(mesh["shape"], mesh["axes"])
    if isinstance(module, type(lambda: 0)):  # NNX: a builder
        bare = ground_truth_sources.nnx_step_text(module, inputs, input_specs, loss, the_mesh, ground_truth.flax_rules(rules))
    else:
        bare = ground_truth_sources.linen_step_text(module, inputs, input_specs, loss, the_mesh, ground_truth.flax_rules(rules))
    return request.param, bare, explorer_text, mesh


def test_every_collective_of_the_bare_program_is_read_at_the_ground_truths_line(compiled):
    case, bare, _, mesh = compiled
    truth = ground_truth_sources.collective_lines(bare)
    assert truth and all(file is not None for _, file, _, _ in truth.values()), case  # every collective has a model line
    read = {}
    for op in hlo.collective_ops(bare, 8):
        frame = sources.instruction_source(bare, op.name).frame
        read[op.name] = (op.op, frame.file if frame else None, frame.line if frame else None, op.runs)
    assert read == truth
    runs = {r for _, _, _, r in truth.values()}
    assert (2 in runs) == (case in LOOPED)  # two layers in a loop: its body's collectives run twice per step


def test_the_explorers_program_has_the_bare_programs_collectives_line_by_line(compiled):
    case, bare, explorer_text, mesh = compiled
    found: collections.Counter = collections.Counter()
    for traced in traced_collectives(explorer_text, tuple(mesh["shape"]), tuple(mesh["axes"])):
        for source in traced.sources:
            found[(traced.op, source.file, source.line)] += source.count
    assert found == ground_truth_sources.by_line(ground_truth_sources.collective_lines(bare))


def test_the_ground_truth_imports_no_explorer_code():
    import ast
    import pathlib

    from tests import ground_truth_gpu

    for module in (ground_truth_sources, ground_truth_gpu):
        tree = ast.parse(pathlib.Path(module.__file__).read_text())
        imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module] + [
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        ]
        assert not [m for m in imported if m == "explorer" or m.startswith("explorer.")], module.__name__


def test_a_tpu_compile_traces_every_collective_to_the_bare_programs_lines(monkeypatch, tmp_path):
    """lm1b on v5p:2x2x2 (the target compile, in its child process) against the bare step compiled for the same slice."""
    mesh, rules, factory, options = CASES["lm1b-linen-2x2x2"]
    name = f"{EXTERNAL}:{factory}"
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", name)
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    layout = parse_layout({"name": "lm1b", "mesh": mesh, "rules": rules, "model": {"name": name, "options": options}})
    input_specs = [a.spec for a in analyze(layout).arrays if a.kind == "input"]
    result, _ = compile_target(layout, "v5p:2x2x2")
    found: collections.Counter = collections.Counter()
    for c in result.collectives:
        for source in c.sources:
            found[(c.op, source.file, source.line)] += source.count
    truth = ground_truth_sources.tpu_collective_lines("v5p:2x2x2", mesh["shape"], mesh["axes"], rules, input_specs, factory, options)
    assert sum(truth.values()) > 20 and None not in {file for _, file, _ in truth}
    assert found == truth
