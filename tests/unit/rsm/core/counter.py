"""The tiny example application the rsm unit tests drive: a counter.

It is also the shape of the API we promise: state in plain attributes,
`@command` to change it, `@query` to read it, `self.context` for logged time
and randomness, no framework ceremony.
"""

from __future__ import annotations

from rsm.core.state_machine import StateMachine, command, query


class Counter(StateMachine):
    def __init__(self) -> None:
        self.value = 0

    @command
    def add(self, amount: int = 1) -> int:
        if type(amount) is not int:
            raise TypeError(f"amount must be an int, not {type(amount).__name__}")
        self.value += amount
        return self.value

    @command
    def roll(self, sides: int) -> int:
        """Add a die roll: randomness from the context, so every replica rolls the same."""
        rolled = self.context.random.randint(1, sides)
        self.value += rolled
        return rolled

    @command
    def stamp(self) -> list[int]:
        return [self.context.index, self.context.time_ms, self.context.epoch]

    @command
    def fail(self, message: str) -> None:
        raise ValueError(message)

    @query
    def get(self) -> int:
        return self.value
