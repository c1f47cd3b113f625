"""Random tokens: rows tokens, plan ids and markers are told apart by these."""

import os
import secrets
from array import array


def new_token() -> int:
    """A random token: rows tokens, plan ids and markers are told apart by these."""
    return secrets.randbits(63)


def new_tokens(count: int) -> list[int]:
    """``count`` tokens as `new_token` makes them, from one read of the system's random
    source rather than one each: a broker's report makes thousands."""
    return [word >> 1 for word in array("Q", os.urandom(8 * count))]
