"""Bearer tokens in Apache Pulsar's format.

A token is a JWT whose ``sub`` claim is the role and whose optional ``exp`` claim ends its life,
signed HS256 with a secret key or RS256/ES256 with a private key: what ``pulsar tokens create``
mints, so tokens and keys move freely between Pulsar and this server. Keys are given as Pulsar
takes them, ``file:///path`` or ``data:;base64,...``, in the formats Pulsar writes them (raw bytes
for a secret key, DER for a key pair), PEM accepted as well.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit
from urllib.request import url2pathname

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.exceptions import InvalidSubjectError

from app.config import Settings

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey

SECRET_ALGORITHM = "HS256"
# Pulsar's HS256 keys are 256 bits, which is also RFC 7518's floor for HS256.
SECRET_KEY_BYTES = 32
RSA_KEY_BITS = 2048  # Pulsar's RS256 default
KEY_PAIR_ALGORITHMS = ("RS256", "ES256")

# One algorithm per key: each curve fixes its ES algorithm, and refusing the rest keeps
# "none" and HMAC-signed forgeries (public key bytes used as the secret) out.
_CURVE_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}

_KEY_SPEC_HELP = "expected file:///absolute/path or data:;base64,<the key in base64>"

_EXPIRY = re.compile(r"(\d+)([smhdwy]?)", re.IGNORECASE)
# As Pulsar's RelativeTimeUtil: a year is 365 days, and a bare number counts seconds.
_DAY = 86400
_EXPIRY_UNIT_SECONDS = {
    "": 1,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": _DAY,
    "w": 7 * _DAY,
    "y": 365 * _DAY,
}


class InvalidToken(Exception):
    """A bearer token that does not authenticate; ``reason`` is short and safe to send back."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TokenInfo(NamedTuple):
    role: str
    expires_at: int | None
    """Seconds since the epoch; ``None`` for a token that never expires."""


class KeyPair(NamedTuple):
    private_key: bytes
    public_key: bytes


# Keys


def load_key(spec: str) -> bytes:
    """The bytes of a key given as ``file:///path`` or ``data:;base64,...``."""
    # The spec is never echoed back: a user who pastes the key itself must not see it in logs.
    if spec.startswith("data:"):
        return _decode_data_url(spec)
    if spec.startswith("file:"):
        return _read_file_url(spec)
    raise ValueError(f"Unsupported key location: {_KEY_SPEC_HELP}.")


def _decode_data_url(spec: str) -> bytes:
    media_type, comma, payload = spec[len("data:") :].partition(",")
    if not comma or not media_type.endswith(";base64"):
        raise ValueError(f"A data: key must be base64-encoded: {_KEY_SPEC_HELP}.")
    try:
        key = base64.b64decode(payload.strip(), validate=True)
    except binascii.Error as exc:
        raise ValueError("The data:;base64, key is not valid base64.") from exc
    if not key:
        raise ValueError("The data:;base64, key is empty.")
    return key


def _read_file_url(spec: str) -> bytes:
    url = urlsplit(spec)
    path = Path(url2pathname(url.path))
    # file://data/secret.key would silently mean host "data"; insist on three slashes.
    if url.netloc not in ("", "localhost") or not path.is_absolute():
        raise ValueError(f"A file: key location needs an absolute path: {_KEY_SPEC_HELP}.")
    try:
        key = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"Cannot read key file {path}: {exc.strerror or exc}.") from exc
    if not key:
        raise ValueError(f"Key file {path} is empty.")
    return key


def generate_secret_key() -> bytes:
    """A new random HS256 key, as ``pulsar tokens create-secret-key`` makes."""
    return secrets.token_bytes(SECRET_KEY_BYTES)


def generate_key_pair(algorithm: str = "RS256", *, pem: bool = False) -> KeyPair:
    """A new key pair: PKCS#8 private key and X.509 public key, DER (as Pulsar) or PEM."""
    private: PrivateKey
    if algorithm == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS)
    elif algorithm == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        raise ValueError(f"Unsupported key pair algorithm {algorithm!r}: use RS256 or ES256.")
    encoding = serialization.Encoding.PEM if pem else serialization.Encoding.DER
    return KeyPair(
        private.private_bytes(
            encoding, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        private.public_key().public_bytes(
            encoding, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


def load_private_key(data: bytes) -> PrivateKey:
    """An RSA or EC private key from PEM or DER bytes."""
    try:
        if _is_pem(data):
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ValueError("Not an unencrypted private key in PEM or DER (PKCS#8).") from exc
    if not isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey)):
        raise ValueError("Only RSA (RS256) and EC (ES256) private keys are supported.")
    return key


def load_public_key(data: bytes) -> PublicKey:
    """An RSA or EC public key from PEM or DER bytes."""
    try:
        if _is_pem(data):
            key = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_der_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ValueError("Not a public key in PEM or DER (X.509 SubjectPublicKeyInfo).") from exc
    if not isinstance(key, (rsa.RSAPublicKey, ec.EllipticCurvePublicKey)):
        raise ValueError("Only RSA (RS256) and EC (ES256) public keys are supported.")
    return key


def algorithm_for(key: PrivateKey | PublicKey) -> str:
    """The one JWT algorithm a key pair signs and verifies with."""
    if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        return "RS256"
    try:
        return _CURVE_ALGORITHMS[key.curve.name]
    except KeyError:
        raise ValueError(f"EC keys on curve {key.curve.name} are not supported.") from None


def _is_pem(data: bytes) -> bool:
    return data.lstrip().startswith(b"-----BEGIN ")


def _check_secret_key(secret_key: bytes) -> bytes:
    if _is_pem(secret_key):
        raise ValueError(
            "The secret key is a PEM key; an RS256/ES256 public key belongs in "
            "RG_AUTH_TOKEN_PUBLIC_KEY, a private key in --private-key."
        )
    if len(secret_key) < SECRET_KEY_BYTES:
        raise ValueError(
            f"The secret key is {len(secret_key)} bytes; HS256 needs at least "
            f"{SECRET_KEY_BYTES}. Create one with: rgadmin tokens create-secret-key"
        )
    return secret_key


# Tokens


def create_token(
    *,
    subject: str,
    secret_key: bytes | None = None,
    private_key: bytes | None = None,
    algorithm: str | None = None,
    expires_in: datetime.timedelta | None = None,
) -> str:
    """A token for role ``subject``, signed with exactly one of the two keys.

    ``algorithm`` defaults to the key's own (HS256 for a secret key, RS256 or ES256 for a
    private key); naming another one is an error, since the server would refuse the token.
    """
    if not subject:
        raise ValueError("A token needs a subject (the role).")
    key, key_algorithm = _signing_key(secret_key, private_key)
    if algorithm is not None and algorithm != key_algorithm:
        raise ValueError(f"This key signs {key_algorithm} tokens, not {algorithm}.")
    claims: dict[str, str | int] = {"sub": subject}
    if expires_in is not None:
        if expires_in <= datetime.timedelta(0):
            raise ValueError("The expiry must be in the future.")
        claims["exp"] = int(time.time() + expires_in.total_seconds())
    return jwt.encode(claims, key, algorithm=key_algorithm)


def _signing_key(
    secret_key: bytes | None, private_key: bytes | None
) -> tuple[bytes | PrivateKey, str]:
    if secret_key is not None and private_key is None:
        return _check_secret_key(secret_key), SECRET_ALGORITHM
    if private_key is not None and secret_key is None:
        key = load_private_key(private_key)
        return key, algorithm_for(key)
    raise ValueError("Sign with either a secret key or a private key (exactly one).")


def parse_expiry(text: str) -> datetime.timedelta:
    """Pulsar's relative times: ``45s``, ``30m``, ``1h``, ``7d``, ``2w``, ``1y``."""
    match = _EXPIRY.fullmatch(text.strip())
    if match is None or int(match[1]) == 0:
        raise ValueError(
            f"Invalid expiry {text!r}: a positive number followed by s, m, h, d, w or y (e.g. 1h)."
        )
    seconds = int(match[1]) * _EXPIRY_UNIT_SECONDS[match[2].lower()]
    return datetime.timedelta(seconds=seconds)


class TokenVerifier:
    """Checks bearer tokens against the server's one key and says whose they are.

    It runs on every request, so verified tokens are remembered (role and expiry) in a bounded
    LRU cache; expiry is still checked on every call against ``clock``. ``functools.lru_cache``
    is thread-safe: two threads missing on the same token both verify it, which is harmless.
    Rejected tokens are not cached, so garbage cannot evict the good ones.
    """

    def __init__(
        self,
        *,
        secret_key: bytes | None = None,
        public_key: bytes | None = None,
        cache_size: int = 4096,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key: bytes | PublicKey
        if secret_key is not None and public_key is None:
            self._key, self.algorithm = _check_secret_key(secret_key), SECRET_ALGORITHM
        elif public_key is not None and secret_key is None:
            self._key = load_public_key(public_key)
            self.algorithm = algorithm_for(self._key)
        else:
            raise ValueError("Verify with either a secret key or a public key (exactly one).")
        self._clock = clock
        self._verify_signed = functools.lru_cache(maxsize=cache_size)(self._decode)

    @classmethod
    def from_settings(
        cls, settings: Settings, *, cache_size: int = 4096, clock: Callable[[], float] = time.time
    ) -> TokenVerifier:
        """The verifier for ``RG_AUTH_TOKEN_SECRET_KEY``, else ``RG_AUTH_TOKEN_PUBLIC_KEY``.

        The secret key wins when both are set, as in Pulsar.
        """
        if settings.auth_token_secret_key:
            key = _load_setting(settings.auth_token_secret_key, "RG_AUTH_TOKEN_SECRET_KEY")
            return cls(secret_key=key, cache_size=cache_size, clock=clock)
        if settings.auth_token_public_key:
            key = _load_setting(settings.auth_token_public_key, "RG_AUTH_TOKEN_PUBLIC_KEY")
            return cls(public_key=key, cache_size=cache_size, clock=clock)
        raise ValueError(
            "Authentication is enabled but no key is configured: set RG_AUTH_TOKEN_SECRET_KEY "
            "or RG_AUTH_TOKEN_PUBLIC_KEY (file:///path or data:;base64,...), or set "
            "RG_AUTH_ENABLED=false."
        )

    def role_of(self, token: str) -> str:
        """The role a valid token speaks for; raises :class:`InvalidToken` otherwise."""
        return self.verify(token).role

    def verify(self, token: str) -> TokenInfo:
        info = self._verify_signed(token)
        if info.expires_at is not None and info.expires_at <= self._clock():
            raise InvalidToken("Token expired")
        return info

    def _decode(self, token: str) -> TokenInfo:
        try:
            # Pulsar ignores "aud" unless told an audience, so a token carrying one is fine.
            claims = jwt.decode(
                token, self._key, algorithms=[self.algorithm], options={"verify_aud": False}
            )
        except jwt.PyJWTError as exc:
            raise InvalidToken(_reason(exc)) from exc
        role = claims.get("sub")
        if not role:  # PyJWT has checked that a present "sub" is a string
            raise InvalidToken("Token has no subject")
        expires_at = claims.get("exp")
        return TokenInfo(role, None if expires_at is None else int(expires_at))


def _load_setting(spec: str, name: str) -> bytes:
    try:
        return load_key(spec)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from exc


# Most specific first: InvalidSignatureError is a DecodeError.
_REASONS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "Token expired"),
    (jwt.InvalidSignatureError, "Invalid signature"),
    (jwt.InvalidAlgorithmError, "Token algorithm not accepted"),
    (jwt.ImmatureSignatureError, "Token not yet valid"),
    (InvalidSubjectError, "Token subject is not a string"),
    (jwt.DecodeError, "Malformed token"),
)


def _reason(exc: jwt.PyJWTError) -> str:
    return next((reason for kind, reason in _REASONS if isinstance(exc, kind)), "Invalid token")
