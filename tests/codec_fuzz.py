"""A mutation fuzzer for the sans-IO codecs: millions of inputs where hypothesis manages
thousands (issue 8, part 3).

Each input starts from a seed of the codec's corpus (valid byte streams: a handshake and a few
frames or packets), takes one to four random mutations (bit flips, bytes set to edge values,
insertions, deletions, duplications, splices with another seed, truncation, and length-like
runs of 0x00 / 0xFF / 0x7F / 0x80) and is fed to a fresh server codec in random chunks. The
property is the one tests/*/test_fuzz.py check with hypothesis: every outcome is an event,
"need data", or the codec's own protocol error with a code the protocol allows; any other
exception is a bug. A failure names the seed of the random generator that found it and the
input's bytes, so it can be replayed.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Sequence

import attrs

EDGE_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF, 0x0A, 0x0D, 0x3A, 0x5C)

Check = Callable[[list[bytes]], None]
"""Feed the chunks to a fresh codec; raise AssertionError (or anything) if the property fails."""


@attrs.frozen
class FuzzReport:
    inputs: int
    seconds: float
    protocol_errors: int  # inputs that ended in the codec's protocol error (the expected kind)

    @property
    def rate(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0


def mutate(rng: random.Random, data: bytes, corpus: Sequence[bytes]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(8)
        at = rng.randrange(len(out) + 1)
        if choice == 0 and out:  # flip a bit
            at = min(at, len(out) - 1)
            out[at] ^= 1 << rng.randrange(8)
        elif choice == 1 and out:  # an edge value
            out[min(at, len(out) - 1)] = rng.choice(EDGE_BYTES)
        elif choice == 2:  # insert random bytes
            out[at:at] = rng.randbytes(rng.randint(1, 16))
        elif choice == 3 and out:  # delete a run
            del out[at : at + rng.randint(1, 16)]
        elif choice == 4 and out:  # duplicate a run
            start = rng.randrange(len(out))
            out[at:at] = out[start : start + rng.randint(1, 32)]
        elif choice == 5:  # splice in part of another seed
            other = rng.choice(corpus)
            start = rng.randrange(len(other) + 1)
            out[at:at] = other[start : start + rng.randint(1, 64)]
        elif choice == 6:  # truncate
            del out[at:]
        else:  # a length-like run of one edge byte
            out[at:at] = bytes([rng.choice((0x00, 0xFF, 0x7F, 0x80))]) * rng.randint(2, 8)
    return bytes(out)


def chunks(rng: random.Random, data: bytes) -> list[bytes]:
    """`data` whole, byte by byte, or cut at random points."""
    mode = rng.randrange(4)
    if mode == 0 or len(data) < 2:
        return [data]
    if mode == 1:
        return [data[i : i + 1] for i in range(len(data))]
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 6))))
    points = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


def run_fuzz(
    corpus: Sequence[bytes],
    check: Check,
    inputs: int,
    seed: int,
    is_protocol_error: Callable[[BaseException], bool],
) -> FuzzReport:
    """Feed `inputs` mutated inputs to `check`; raise AssertionError naming the first input
    that broke the property (and the seed, to replay the run)."""
    rng = random.Random(seed)
    errors = 0
    start = time.perf_counter()
    for n in range(inputs):
        data = mutate(rng, rng.choice(corpus), corpus)
        pieces = chunks(rng, data)
        try:
            check(pieces)
        except BaseException as exc:
            if is_protocol_error(exc):
                errors += 1
                continue
            raise AssertionError(
                f"input #{n} of seed {seed} broke the property: {exc!r}; input {data!r}"
            ) from exc
    return FuzzReport(inputs, time.perf_counter() - start, errors)
