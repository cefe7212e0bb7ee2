"""The one error type the core raises."""


class ExplorerError(ValueError):
    """Bad input or an impossible request; the message names the field and the value.

    Pages show it with ``st.error`` and the command line prints it and exits with 2,
    so it must always read as a complete sentence for a user, never a traceback.
    """

    def __init__(self, field: str, value: object, problem: str):
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{_shorten(field)}: {shown(value)} {_shorten(problem, MAX_PROBLEM_CHARACTERS)}")


SHOWN_CHARACTERS = 80  # a 10 MB name from a hostile file is echoed as its first 77 characters and "..."
MAX_PROBLEM_CHARACTERS = 1_000  # a backstop: problems quote values through ``shown``


def check_between(field: str, value: int | float, low: int, high: int) -> int:
    """``value`` as a whole number where it is one from ``low`` to ``high``, else ExplorerError naming ``field``.

    >>> check_between("Timed steps", 20, 1, 1000)
    20
    >>> check_between("Timed steps", 5000, 1, 1000)
    Traceback (most recent call last):
    ...
    explorer.errors.ExplorerError: Timed steps: 5000 must be a whole number from 1 to 1,000
    """
    if value != int(value) or not low <= value <= high:
        raise ExplorerError(field, value, f"must be a whole number from {low:,} to {high:,}")
    return int(value)


def shown(value: object) -> str:
    """``repr(value)``, at most SHOWN_CHARACTERS long: how a message quotes a value from the user."""
    return _shorten(repr(value))


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (at most 500 characters), or its type's name when it has none:
    how a message quotes an error from JAX or XLA, whose messages run to pages."""
    text = str(error).strip()
    return text.splitlines()[0][:500] if text else type(error).__name__


def _shorten(text: str, limit: int = SHOWN_CHARACTERS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class NeedsExplicitAxes(ExplorerError):
    """A model written for Explicit axes (``out_sharding=``, ``reshard``) opened on a mesh of Auto axes.

    The app offers a button that switches the layout's mesh to Explicit axes; the command line says how.
    """
