"""The Layout page's compile verdict leads with the predicted step, labelled a prediction, the roofline's bound beside it."""

from explorer.predict.roofline import Estimate

from ui.target_view import step_verdict


def test_the_step_verdict_leads_with_the_prediction_and_gives_the_bound_beside_it():
    """The page gave only "Step ≥ 63.2 µs, memory-bound" while the CLI, Compare and Advisor led with the prediction."""
    text = step_verdict(Estimate(1e-5, 6.32e-5, 2e-5, predicted_s=1.5e-4))
    assert text.startswith("Predicted step: 150 µs (a prediction: the step model")
    assert "Step ≥ 63.2 µs, memory-bound (the roofline, a lower bound)." in text
    assert text.index("Predicted step") < text.index("Step ≥")


def test_without_a_prediction_the_verdict_gives_the_bound_alone():
    assert step_verdict(Estimate(3e-3, 1e-3, 0.0)) == "Step ≥ 3.00 ms, compute-bound (the roofline, a lower bound)."
