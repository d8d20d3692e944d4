"""The order every side-by-side benchmark times its contenders in: all of them each round, the order flipped every
other round, so a machine that speeds up or slows down during the run touches each contender alike."""


def alternated(names, rounds: int):
    """Yields (round, name): round 0 in the given order, round 1 reversed, and so on."""
    names = list(names)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            yield r, name
