"""Tests of ``explorer/plots/``: ``plots/<module>.py`` is tested in ``tests/explorer/plots/test_<module>.py``; the
layouts they draw are here."""

from explorer.analysis.analyzer import analyze
from explorer.layout import parse_layout
from explorer.tiles import grid_view

KERNEL = "params/LogicalDotReluDot_0/Dense_0/kernel"


def kernel_view(seed_dict):
    report = analyze(parse_layout(seed_dict))
    info = report.array(KERNEL)
    return report, grid_view(info.shape, info.spec, report.mesh, 0, 1)


def planned_256x256():
    return analyze(
        parse_layout(
            {
                "name": "huge",
                "mesh": {"shape": [256, 256], "axes": ["data", "model"]},
                "rules": [["batch", "data"], ["hidden", "model"]],
                "model": {"name": "mlp", "options": {"batch": 256, "layers": 1, "depth": 1024}},
            }
        )
    )
