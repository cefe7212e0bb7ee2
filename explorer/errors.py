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
        super().__init__(f"{field}: {_show(value)} {problem}")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
