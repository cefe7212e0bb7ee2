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
        super().__init__(f"{_shorten(field)}: {_show(value)} {problem}")


SHOWN_CHARACTERS = 80  # a 10 MB name from a hostile file is echoed as its first 77 characters and "..."


def _show(value: object) -> str:
    return _shorten(repr(value))


def _shorten(text: str) -> str:
    return text if len(text) <= SHOWN_CHARACTERS else text[: SHOWN_CHARACTERS - 3] + "..."
