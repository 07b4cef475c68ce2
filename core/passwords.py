"""Password hashing for the internal user database: scrypt, self-describing, cached.

A stored hash reads `scrypt$<n>$<r>$<p>$<b64 salt>$<b64 hash>`, so the cost parameters travel
with the hash: they can be raised later, and old hashes still verify (and are re-hashed on the
next successful login, see `needs_rehash`).

scrypt costs tens of milliseconds on purpose, and clients reconnect often. `VerifiedCache`
remembers successful verifications so a reconnect does not pay again; it never holds a
password, only an HMAC of it under a key that exists in this process alone.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections import OrderedDict

SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
SCHEME = "scrypt"

_MAX_N = 2**20  # refuse stored parameters that would cost seconds or gigabytes
_MAX_R = 32
_MAX_P = 16


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """A new self-describing hash of `password`, with a fresh random salt."""
    _check_params(n, r, p)
    salt = os.urandom(SALT_BYTES)
    digest = _scrypt(password.encode(), salt, n, r, p, HASH_BYTES)
    return "$".join((SCHEME, str(n), str(r), str(p), _b64(salt), _b64(digest)))


def verify_password(password: str | bytes, stored: str) -> bool:
    """Whether `password` matches `stored`; constant-time compare; False for a malformed hash."""
    parsed = _parse(stored)
    if parsed is None:
        return False
    n, r, p, salt, expected = parsed
    secret = password.encode() if isinstance(password, str) else password
    return hmac.compare_digest(_scrypt(secret, salt, n, r, p, len(expected)), expected)


def needs_rehash(stored: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> bool:
    """Whether `stored` was made with other parameters than the current ones."""
    parsed = _parse(stored)
    return parsed is None or parsed[:3] != (n, r, p)


def is_well_formed(stored: str) -> bool:
    """Whether `stored` is a hash this module can verify (for loading metadata)."""
    return _parse(stored) is not None


class VerifiedCache:
    """A bounded LRU of successful verifications: (user, HMAC(password)) -> stored hash.

    A hit counts only if the user's hash is still the one the password was checked against,
    so a password change (new salt, new string) invalidates old entries without a scan.
    """

    def __init__(self, maxsize: int = 1024) -> None:
        self._maxsize = maxsize
        self._key = os.urandom(32)  # per process: the cache's keys mean nothing elsewhere
        self._entries: OrderedDict[tuple[str, bytes], str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"VerifiedCache({len(self._entries)}/{self._maxsize} entries)"

    def digest(self, password: str | bytes) -> bytes:
        """A keyed digest of `password`: how the cache (and the broker's table of logins
        being verified) knows a password again without keeping it."""
        secret = password.encode() if isinstance(password, str) else password
        return hmac.new(self._key, secret, hashlib.sha256).digest()

    def hit(self, user: str, password: str | bytes, stored: str) -> bool:
        """Whether `password` was already verified against exactly `stored` for `user`."""
        key = (user, self.digest(password))
        cached = self._entries.get(key)
        if cached is None or not hmac.compare_digest(cached, stored):
            return False
        self._entries.move_to_end(key)
        return True

    def remember(self, user: str, password: str | bytes, stored: str) -> None:
        """Record a successful verification, evicting the least recently used entry if full."""
        key = (user, self.digest(password))
        self._entries[key] = stored
        self._entries.move_to_end(key)
        while len(self._entries) > self._maxsize:
            self._entries.popitem(last=False)

    def forget_user(self, user: str) -> None:
        """Drop every entry of `user` (deleted, or its password changed)."""
        for key in [k for k in self._entries if k[0] == user]:
            del self._entries[key]


def _scrypt(secret: bytes, salt: bytes, n: int, r: int, p: int, dklen: int) -> bytes:
    # OpenSSL refuses above `maxmem` (32 MiB by default); give it what the parameters need.
    maxmem = 128 * r * (n + p + 2) + (1 << 20)
    return hashlib.scrypt(secret, salt=salt, n=n, r=r, p=p, dklen=dklen, maxmem=maxmem)


def _check_params(n: int, r: int, p: int) -> None:
    if not (1 < n <= _MAX_N and n & (n - 1) == 0):
        raise ValueError(f"scrypt n must be a power of two in 2..{_MAX_N}, got {n}")
    if not (0 < r <= _MAX_R and 0 < p <= _MAX_P):
        raise ValueError(f"scrypt r must be in 1..{_MAX_R} and p in 1..{_MAX_P}")


def _parse(stored: str) -> tuple[int, int, int, bytes, bytes] | None:
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != SCHEME:
        return None
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        _check_params(n, r, p)
        salt = base64.b64decode(parts[4], validate=True)
        digest = base64.b64decode(parts[5], validate=True)
    except (ValueError, binascii.Error):
        return None
    if not salt or len(digest) < 16:
        return None
    return n, r, p, salt, digest


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
