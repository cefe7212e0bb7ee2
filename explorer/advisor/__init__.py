"""The layout advisor: given a model and a TPU slice or an NVIDIA GPU cluster, which mesh and which rules?

Two stages, as a person would do it, but over every candidate: stage 1 analyzes every candidate
without a compile (exact state per device, an estimated step), stage 2 compiles the shortlist for
the target and ranks by XLA's figures. One job a module:

- ``space``: the search space (roles of the logical names, mesh axes, factorizations, rules, candidates);
- ``estimate``: stage 1's roofline of one analyzed layout (compute, HBM traffic, collectives);
- ``candidates``: ``Search`` and ``Candidate`` (the record both stages write), the shortlist and the ranking;
- ``search``: stage 1, stage 2, ``advise`` (both stages);
- ``calibration``: stage 1's estimate scaled by what XLA said of the compiles so far, and the next to compile;
- ``fitting``: memory: the settings that make a layout fit, the memory search where nothing compiled fits, larger slices;
- ``race``: the race of the top three on this process's devices;
- ``depth``: the depth shortcut (compile at two small depths, extrapolate to the model's);
- ``explain``: why a pipeline won or lost (its bubble and sends against the gathers the best other layout spends);
- ``output``: JSON, the verdict, the table's rows and the text ``python -m explorer advise`` prints.

Where each mesh axis lies on the target (a TPU slice's torus, a GPU cluster's hosts) and what its
collectives ride is ``explorer.hardware.placement``'s.

Example: ``advise(load_layout_file("layouts/seed-2x4.json"), "v5litepod-8", compiles=2)``, or ``"h100:2x8"``.
"""

from __future__ import annotations

from explorer.advisor.depth import (
    DEPTH_OPTIONS,
    MEMORY_FIELDS,
    NO_DEPTH_OPTION,
    SHORTCUT_DEPTHS,
    Depth,
    at_depth,
    depth_of,
    extrapolate,
    extrapolation_error,
)
from explorer.advisor.estimate import (
    KV_NAMES,
    STACK_NAMES,
    STAGE1_NOTE,
    Projection,
    Stage1,
    estimate_candidate,
    stage1_estimate,
    tokens_per_step,
)
from explorer.advisor.explain import pipeline_explanation, pipeline_text, pipelined
from explorer.advisor.output import (
    PREDICTION_NOTE,
    RULES_NOTE,
    TABLE_COLUMNS,
    agreement,
    agreement_text,
    candidate_to_dict,
    elsewhere_text,
    extrapolation_text,
    fits_text,
    guessed_text,
    limit_text,
    maxtext_advice_text,
    maxtext_keys,
    predicted_text,
    rules_short,
    rules_text,
    search_text,
    search_to_dict,
    table_rows,
    target_text,
    verdict_text,
)
from explorer.advisor.candidates import (
    Candidate,
    Elsewhere,
    Search,
    estimated_peak,
    limit_bytes,
    memory_factor,
    rank,
    shortlist,
)
from explorer.advisor.race import (
    RACE_COUNT,
    race_candidates,
    race_refusal,
    race_top,
)
from explorer.advisor.calibration import (
    agreement_line,
    calibrated,
    calibrated_prediction,
    calibration,
    next_to_compile,
    recalibrate,
)
from explorer.advisor.fitting import LEVERS, larger_targets, memory_variants, where_memory_goes
from explorer.advisor.search import (
    advise,
    stage1,
    stage2,
    verified,
)
from explorer.advisor.space import (
    AXIS_ORDER,
    ROLE_NAMES,
    ROLES,
    candidate_layouts,
    check_roles,
    default_roles,
    factorizations,
    mesh_axes_for,
    nvlink_first,
    rules_for,
)

__all__ = [
    "AXIS_ORDER",
    "DEPTH_OPTIONS",
    "KV_NAMES",
    "MEMORY_FIELDS",
    "NO_DEPTH_OPTION",
    "PREDICTION_NOTE",
    "RULES_NOTE",
    "RACE_COUNT",
    "ROLES",
    "ROLE_NAMES",
    "SHORTCUT_DEPTHS",
    "STACK_NAMES",
    "STAGE1_NOTE",
    "TABLE_COLUMNS",
    "Candidate",
    "Elsewhere",
    "LEVERS",
    "Depth",
    "Projection",
    "Search",
    "Stage1",
    "advise",
    "agreement",
    "agreement_line",
    "agreement_text",
    "at_depth",
    "calibrated",
    "calibrated_prediction",
    "calibration",
    "candidate_layouts",
    "candidate_to_dict",
    "check_roles",
    "default_roles",
    "depth_of",
    "estimate_candidate",
    "elsewhere_text",
    "estimated_peak",
    "extrapolate",
    "extrapolation_error",
    "extrapolation_text",
    "factorizations",
    "fits_text",
    "guessed_text",
    "limit_bytes",
    "limit_text",
    "larger_targets",
    "memory_factor",
    "memory_variants",
    "mesh_axes_for",
    "next_to_compile",
    "pipeline_explanation",
    "pipeline_text",
    "pipelined",
    "nvlink_first",
    "predicted_text",
    "race_candidates",
    "race_refusal",
    "race_top",
    "rank",
    "recalibrate",
    "rules_for",
    "rules_short",
    "rules_text",
    "search_text",
    "search_to_dict",
    "shortlist",
    "stage1",
    "stage1_estimate",
    "stage2",
    "table_rows",
    "target_text",
    "tokens_per_step",
    "verdict_text",
    "maxtext_advice_text",
    "maxtext_keys",
    "verified",
    "where_memory_goes",
]
