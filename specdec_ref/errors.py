"""The one exception the reference raises for bad input: it always names the offending argument."""


class SpecDecInputError(ValueError):
    """Invalid argument to the reference implementation (message names the argument and the fix)."""
