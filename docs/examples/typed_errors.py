"""Errors are typed: a bad setting is refused when the object is built, with the fix in the message."""

import numpy as np

import torchloom as tl
from torchloom.errors import ConfigError, DecodeError


def main() -> None:
    try:
        tl.BalancedSampler(np.array([0, 0, 1]), mode="log")
    except ConfigError as error:  # also a ValueError
        print(error)  # Invalid mode='log'; must be one of ('inverse', 'sqrt', 'effective')

    # Data faults share one base, so a loop can tell bad input from bad code.
    print(issubclass(DecodeError, tl.DataError), issubclass(ConfigError, tl.DataError))  # True False


if __name__ == "__main__":
    main()
