"""The compile view's pipeline section from a constructed result: the bubble labelled as an estimate beside the
formula, and only the collective-permutes over the stage axis listed as pipeline sends, with their link."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from explorer.compile.compile_result import CollectiveCost
from tests.explorer import compile_result


def _page():
    import dataclasses

    from explorer.compile.compile_result import CollectiveCost
    from explorer.predict.step_model import Bubble
    from tests.explorer import compile_result
    from ui.target_view import pipeline_sends

    send = CollectiveCost("collective-permute", 10, 5120, ("stage",), 2, 1, 1, "dcn", 1e-5, 2)
    other = dataclasses.replace(send, mesh_axes=("data",), link="ici", slices=1)  # a permute inside a stage: not a send
    bubble = Bubble(2, 2, 5, 0.004, 0.0008, 0.005, 0.16)
    pipeline_sends(compile_result("2xv5e:2x2", collectives=(send, other), bubble=bubble), ("stage",))


def test_the_bubble_and_the_sends_between_stages_are_shown():
    app = AppTest.from_function(_page).run()
    assert not app.exception
    text = " ".join(m.value for m in app.markdown)
    assert "Pipeline bubble (estimate)" in text and "16.0%" in text and "20.0%" in text  # the share, the formula's
    frame = app.dataframe[0].value
    assert list(frame["count"]) == [10] and list(frame["link"]) == ["DCN"]


def test_a_result_without_a_pipeline_shows_nothing():
    result = compile_result(collectives=(CollectiveCost("collective-permute", 1, 8, ("data",), 2, 1, 1, "ici", 1e-6),))
    assert result.bubble is None and result.pipeline_sends(("stage",)) == ()
