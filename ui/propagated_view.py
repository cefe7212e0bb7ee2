"""Auto axes: every value of the train step with the sharding propagation gave it, and where each mesh axis came from.

On Explicit axes the Layout page lists every value with the sharding in its type (``report_view``). On Auto axes
the model declares shardings only at its parameters, inputs and constraints; what every other value gets is
propagation's choice. This view asks for it on demand (it lowers the train step and runs Shardy's propagation on
the program JAX hands XLA: ``explorer.compile.origins``) and shows each value, forward and backward, with its sharding and
each mesh axis' origin (an input, an output or a constraint, named with its path or line). A value Shardy records
no origin for says so rather than guess.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from explorer.analysis.report import Report
from explorer.errors import ExplorerError
from explorer.hlo.sources import module_path
from explorer.text import markdown_literal
from ui import tables

PROPAGATED = "propagated_values"  # Layout.key -> the propagated values (explorer.compile.origins.PropagatedValue)
COLUMNS = {"where": 110, "sharding": 130, "origin of each axis": 380}


def render(report: Report) -> None:
    """The section under the arrays table of an Auto layout on this process's devices."""
    from explorer.compile import origins

    st.subheader("Every value's sharding after propagation")
    if report.mesh.abstract:
        st.caption(
            "A planned mesh (more devices than this process has): the train step is not lowered here, so propagation's "
            "choice for each value cannot be read. Compile for a target to see the collectives it leads to."
        )
        return
    kept = st.session_state.setdefault(PROPAGATED, {})
    found = kept.get(report.layout.key)
    if found is None:
        st.caption(
            "On Auto axes the model fixes shardings at its parameters, inputs and constraints; every other value of the "
            "forward and backward pass gets what Shardy's propagation chooses. Read them (the train step is lowered "
            "and propagated here, not compiled)."
        )
        if not st.button("Read every value's sharding", key="propagated_button"):
            return
        try:
            with st.spinner("Lowering the train step and running Shardy's propagation…"):
                found = origins.of_layout(report.layout)
        except ExplorerError as error:
            st.error(markdown_literal(str(error)))
            return
        except Exception as error:  # JAX's own refusal: shown as it said it, in one line
            first = (str(error).strip().splitlines() or [""])[0]
            st.error(markdown_literal(f"Propagation could not be read: {type(error).__name__}: {first}"))
            return
        kept[report.layout.key] = found
    _table(found)


def _table(found) -> None:
    from explorer.compile import origins

    query = st.text_input("Search propagated values", key="propagated_search", placeholder="e.g. dot_general, 'model', constraint")
    chosen = origins.matching(found, query)
    unexplained = sum(1 for v in chosen if any(axes for axes in v.spec) and not v.described)
    st.caption(
        f"{len(chosen):,} of {len(found):,} values (Shardy's aggressive propagation with its origin tracking, run on the "
        f"lowered program; the compiled program's outputs agree with it in the tests). {unexplained:,} sharded value(s) "
        "with no recorded origin. The op's name, its Flax module and the pass (forward or backward): the table's "
        "Show/hide columns menu."
    )
    if not chosen:
        return
    frame = pd.DataFrame(
        {
            "where": value.where or "(no line of the model's code)",
            "sharding": value.spec_text,
            "origin of each axis": value.origin_text,
            "op": value.op_name.rsplit("/", 1)[-1],
            "module": module_path(value.op_name),
            "pass": "backward" if "transpose(" in value.op_name else "forward",
        }
        for value in chosen
    )
    with st.container(key="propagated_table"):
        tables.fitted(frame, COLUMNS, height=min(400, 36 + 35 * len(frame)))
