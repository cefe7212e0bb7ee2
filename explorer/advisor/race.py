"""The race of a search's best candidates on this process's own devices (``compare.race``: A B C A B C ...).

This module's one job is the race that follows a search: which candidates (the best that fit, in rank order),
whether this process can run them (as many devices as the target has), and the race itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax

from explorer.advisor.candidates import Candidate, Search
from explorer.errors import ExplorerError

if TYPE_CHECKING:
    from explorer.timing.compare import RaceResult

RACE_COUNT = 3


def race_refusal(search: Search) -> str | None:
    """None when the top candidates can be raced on this process's own devices (as many as the target has), else why not."""
    here, kind = jax.device_count(), jax.devices()[0].device_kind
    if here != search.target.devices:
        return (
            f"This process has {here} device(s) ({kind}) and {search.target.name} has {search.target.devices}: a race runs "
            "the candidates on this process's own devices, so it needs as many as the target."
        )
    if len(race_candidates(search)) < 2:
        return "Fewer than two candidates fit the target: nothing to race."
    return None


def race_candidates(search: Search, count: int = RACE_COUNT) -> list[Candidate]:
    """The best ``count`` candidates that fit (rank order), for ``compare.race`` on this process's devices."""
    return [c for c in search.ranked() if c.fits][:count]


def race_top(search: Search, rounds: int = 3, steps: int = 5, **kwargs) -> RaceResult:
    """Race the top three on this process's devices with ``compare.race`` (A B C A B C ...); its ``RaceResult``."""
    from explorer.timing.compare import race  # imports the timing module and Flax: only when a race is run

    why = race_refusal(search)
    if why:
        raise ExplorerError("race", search.target.name, why)
    return race([c.layout for c in race_candidates(search)], rounds=rounds, steps=steps, **kwargs)
