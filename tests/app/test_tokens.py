"""Pulsar-format tokens: keys, minting and verification (app/auth.py)."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from app.auth import (
    InvalidToken,
    KeyPair,
    TokenVerifier,
    create_token,
    generate_key_pair,
    generate_secret_key,
    load_key,
    load_private_key,
    load_public_key,
    parse_expiry,
)
from app.config import Settings
from tests.factories import FakeClock

HOUR = datetime.timedelta(hours=1)


@pytest.fixture(scope="module")
def rs256_der() -> KeyPair:
    return generate_key_pair("RS256")


@pytest.fixture(scope="module")
def rs256_pem() -> KeyPair:
    return generate_key_pair("RS256", pem=True)


@pytest.fixture(scope="module")
def es256_der() -> KeyPair:
    return generate_key_pair("ES256")


@pytest.fixture(scope="module")
def es256_pem() -> KeyPair:
    return generate_key_pair("ES256", pem=True)


@pytest.fixture(scope="module")
def es384_der() -> KeyPair:
    private = ec.generate_private_key(ec.SECP384R1())
    return KeyPair(
        private.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


@pytest.fixture
def key() -> bytes:
    return generate_secret_key()


def signed(claims: dict[str, Any], secret: bytes) -> str:
    return jwt.encode(claims, secret, algorithm="HS256")


def reason(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(InvalidToken) as caught:
        verifier.role_of(token)
    return caught.value.reason


def data_url(key: bytes) -> str:
    return "data:;base64," + base64.b64encode(key).decode()


class TestLoadKey:
    def test_file_url(self, tmp_path: Path) -> None:
        path = tmp_path / "secret.key"
        path.write_bytes(b"\x00\x01key")
        assert load_key(path.as_uri()) == b"\x00\x01key"
        assert load_key(f"file://localhost{path}") == b"\x00\x01key"

    def test_file_url_with_escaped_characters(self, tmp_path: Path) -> None:
        path = tmp_path / "my keys" / "secret.key"
        path.parent.mkdir()
        path.write_bytes(b"key")
        assert "%20" in path.as_uri()
        assert load_key(path.as_uri()) == b"key"

    @pytest.mark.parametrize("media_type", ["", "application/octet-stream"])
    def test_data_url(self, media_type: str) -> None:
        encoded = base64.b64encode(b"\xffkey").decode()
        assert load_key(f"data:{media_type};base64,{encoded}") == b"\xffkey"

    def test_relative_file_url_is_refused(self) -> None:
        with pytest.raises(ValueError, match="absolute path"):
            load_key("file://data/secret.key")

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="Cannot read key file"):
            load_key((tmp_path / "absent.key").as_uri())

    def test_empty_file(self, tmp_path: Path) -> None:
        path = tmp_path / "empty.key"
        path.touch()
        with pytest.raises(ValueError, match="empty"):
            load_key(path.as_uri())

    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("data:;base64,not base64!", "not valid base64"),
            ("data:,plain", "base64-encoded"),
            ("data:;base64,", "empty"),
        ],
    )
    def test_bad_data_url(self, spec: str, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            load_key(spec)

    @pytest.mark.parametrize("spec", ["/etc/secret.key", "c2VjcmV0", "https://example.com/k"])
    def test_other_locations_are_refused_without_echoing_them(self, spec: str) -> None:
        with pytest.raises(ValueError, match="file:///") as caught:
            load_key(spec)
        assert spec not in str(caught.value)


class TestKeys:
    def test_secret_key_is_256_random_bits(self) -> None:
        first, second = generate_secret_key(), generate_secret_key()
        assert len(first) == 32
        assert first != second

    @pytest.mark.parametrize("pair", ["rs256_der", "es256_der"])
    def test_key_pairs_are_der_like_pulsars(
        self, pair: str, request: pytest.FixtureRequest
    ) -> None:
        keys: KeyPair = request.getfixturevalue(pair)
        assert not keys.private_key.startswith(b"-----")
        serialization.load_der_private_key(keys.private_key, password=None)
        serialization.load_der_public_key(keys.public_key)

    def test_pem_on_request(self, es256_pem: KeyPair) -> None:
        assert es256_pem.private_key.startswith(b"-----BEGIN PRIVATE KEY-----")
        assert es256_pem.public_key.startswith(b"-----BEGIN PUBLIC KEY-----")

    def test_unknown_algorithm(self) -> None:
        with pytest.raises(ValueError, match="RS256 or ES256"):
            generate_key_pair("HS256")

    def test_garbage_keys(self) -> None:
        with pytest.raises(ValueError, match="private key"):
            load_private_key(b"garbage")
        with pytest.raises(ValueError, match="public key"):
            load_public_key(b"-----BEGIN PUBLIC KEY-----\ngarbage\n-----END PUBLIC KEY-----\n")

    def test_encrypted_private_key(self) -> None:
        encrypted = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"password"),
        )
        with pytest.raises(ValueError, match="unencrypted"):
            load_private_key(encrypted)

    def test_unsupported_key_type(self) -> None:
        ed = ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        with pytest.raises(ValueError, match="Only RSA"):
            load_private_key(ed)


class TestRoundTrip:
    def test_hs256(self, key: bytes) -> None:
        token = create_token(subject="admin", secret_key=key)
        assert jwt.get_unverified_header(token)["alg"] == "HS256"
        assert TokenVerifier(secret_key=key).role_of(token) == "admin"

    @pytest.mark.parametrize(
        ("pair", "algorithm"),
        [
            ("rs256_der", "RS256"),
            ("rs256_pem", "RS256"),
            ("es256_der", "ES256"),
            ("es256_pem", "ES256"),
            ("es384_der", "ES384"),
        ],
    )
    def test_key_pairs(self, pair: str, algorithm: str, request: pytest.FixtureRequest) -> None:
        keys: KeyPair = request.getfixturevalue(pair)
        token = create_token(subject="tenant-admin", private_key=keys.private_key)
        assert jwt.get_unverified_header(token)["alg"] == algorithm
        verifier = TokenVerifier(public_key=keys.public_key)
        assert verifier.algorithm == algorithm
        assert verifier.role_of(token) == "tenant-admin"

    def test_pulsar_style_token_without_typ_header(self, key: bytes) -> None:
        # Pulsar's JJWT writes {"alg":"HS256"} only.
        token = jwt.encode({"sub": "admin"}, key, algorithm="HS256", headers={"typ": None})
        assert "typ" not in jwt.get_unverified_header(token)
        assert TokenVerifier(secret_key=key).role_of(token) == "admin"

    def test_expiry_claim(self, key: bytes) -> None:
        token = create_token(subject="admin", secret_key=key, expires_in=HOUR)
        info = TokenVerifier(secret_key=key).verify(token)
        assert info.expires_at is not None
        assert abs(info.expires_at - (time.time() + 3600)) < 5

    def test_without_expiry_valid_forever(self, key: bytes) -> None:
        clock = FakeClock(time.time())
        verifier = TokenVerifier(secret_key=key, clock=clock)
        token = create_token(subject="admin", secret_key=key)
        clock.now += 1000 * 365 * 86400
        assert verifier.verify(token) == ("admin", None)

    def test_audience_is_ignored_as_in_pulsar(self, key: bytes) -> None:
        token = signed({"sub": "admin", "aud": "some-broker"}, key)
        assert TokenVerifier(secret_key=key).role_of(token) == "admin"


class TestCreateToken:
    def test_needs_exactly_one_key(self, key: bytes, es256_der: KeyPair) -> None:
        with pytest.raises(ValueError, match="exactly one"):
            create_token(subject="admin")
        with pytest.raises(ValueError, match="exactly one"):
            create_token(subject="admin", secret_key=key, private_key=es256_der.private_key)

    def test_algorithm_must_match_the_key(self, key: bytes, es256_der: KeyPair) -> None:
        assert create_token(subject="a", secret_key=key, algorithm="HS256")
        assert create_token(subject="a", private_key=es256_der.private_key, algorithm="ES256")
        with pytest.raises(ValueError, match="signs HS256 tokens, not RS256"):
            create_token(subject="a", secret_key=key, algorithm="RS256")
        with pytest.raises(ValueError, match="signs ES256 tokens, not RS256"):
            create_token(subject="a", private_key=es256_der.private_key, algorithm="RS256")

    def test_needs_a_subject(self, key: bytes) -> None:
        with pytest.raises(ValueError, match="subject"):
            create_token(subject="", secret_key=key)

    def test_expiry_must_be_in_the_future(self, key: bytes) -> None:
        with pytest.raises(ValueError, match="future"):
            create_token(subject="a", secret_key=key, expires_in=datetime.timedelta(0))

    def test_short_secret_is_refused(self) -> None:
        with pytest.raises(ValueError, match="at least 32"):
            create_token(subject="a", secret_key=b"changeme")

    def test_pem_is_not_a_secret(self, rs256_pem: KeyPair) -> None:
        with pytest.raises(ValueError, match="PEM"):
            create_token(subject="a", secret_key=rs256_pem.public_key)


class TestRejected:
    def test_expired(self, key: bytes) -> None:
        token = signed({"sub": "admin", "exp": int(time.time()) - 10}, key)
        assert reason(TokenVerifier(secret_key=key), token) == "Token expired"

    def test_not_yet_valid(self, key: bytes) -> None:
        token = signed({"sub": "admin", "nbf": int(time.time()) + 600}, key)
        assert reason(TokenVerifier(secret_key=key), token) == "Token not yet valid"

    def test_other_secret(self, key: bytes) -> None:
        token = create_token(subject="admin", secret_key=generate_secret_key())
        assert reason(TokenVerifier(secret_key=key), token) == "Invalid signature"

    def test_other_key_pair(self, rs256_der: KeyPair, rs256_pem: KeyPair) -> None:
        token = create_token(subject="admin", private_key=rs256_pem.private_key)
        assert reason(TokenVerifier(public_key=rs256_der.public_key), token) == "Invalid signature"

    @pytest.mark.parametrize("token", ["", "garbage", "a.b.c", "\u00e9.\u00e9.\u00e9"])
    def test_garbage(self, key: bytes, token: str) -> None:
        assert reason(TokenVerifier(secret_key=key), token) == "Malformed token"

    def test_none_algorithm(self, key: bytes, es256_der: KeyPair) -> None:
        token = jwt.encode({"sub": "admin"}, "", algorithm="none")
        assert reason(TokenVerifier(secret_key=key), token) == "Token algorithm not accepted"
        verifier = TokenVerifier(public_key=es256_der.public_key)
        assert reason(verifier, token) == "Token algorithm not accepted"

    @pytest.mark.parametrize("pair", ["rs256_der", "rs256_pem", "es256_der"])
    def test_public_key_as_hmac_secret(self, pair: str, request: pytest.FixtureRequest) -> None:
        # The algorithm-confusion forgery: anyone holding the public key signs HS256 with it.
        public_key = request.getfixturevalue(pair).public_key
        token = hmac_token({"sub": "admin"}, public_key)
        verifier = TokenVerifier(public_key=public_key)
        assert reason(verifier, token) == "Token algorithm not accepted"

    def test_key_pair_token_on_a_secret_key_server(self, key: bytes, es256_der: KeyPair) -> None:
        token = create_token(subject="admin", private_key=es256_der.private_key)
        assert reason(TokenVerifier(secret_key=key), token) == "Token algorithm not accepted"

    @pytest.mark.parametrize("claims", [{}, {"sub": ""}, {"exp": 4102444800}])
    def test_no_subject(self, key: bytes, claims: dict[str, Any]) -> None:
        assert reason(TokenVerifier(secret_key=key), signed(claims, key)) == "Token has no subject"

    def test_subject_not_a_string(self, key: bytes) -> None:
        token = signed({"sub": 42}, key)
        assert reason(TokenVerifier(secret_key=key), token) == "Token subject is not a string"

    def test_non_integer_expiry(self, key: bytes) -> None:
        token = signed({"sub": "admin", "exp": "tomorrow"}, key)
        assert reason(TokenVerifier(secret_key=key), token) == "Malformed token"


def hmac_token(claims: dict[str, Any], secret: bytes) -> str:
    """An HS256 token built by hand, since PyJWT refuses to sign with key-shaped secrets."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    signing_input = f"{header}.{b64(json.dumps(claims).encode())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


class TestCache:
    @pytest.fixture
    def decodes(self, monkeypatch: pytest.MonkeyPatch) -> list[str]:
        calls: list[str] = []
        real_decode = jwt.decode

        def counting(token: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
            calls.append(token)
            return real_decode(token, *args, **kwargs)

        monkeypatch.setattr(jwt, "decode", counting)
        return calls

    def test_verified_once(self, key: bytes, decodes: list[str]) -> None:
        verifier = TokenVerifier(secret_key=key)
        token = create_token(subject="admin", secret_key=key)
        for _ in range(3):
            assert verifier.role_of(token) == "admin"
        assert len(decodes) == 1

    def test_cached_token_still_expires(self, key: bytes, decodes: list[str]) -> None:
        clock = FakeClock(time.time())
        verifier = TokenVerifier(secret_key=key, clock=clock)
        token = create_token(subject="admin", secret_key=key, expires_in=HOUR)
        assert verifier.role_of(token) == "admin"
        clock.now += 3599
        assert verifier.role_of(token) == "admin"
        clock.now += 1
        assert reason(verifier, token) == "Token expired"
        assert len(decodes) == 1

    def test_rejected_tokens_are_not_cached(self, key: bytes, decodes: list[str]) -> None:
        verifier = TokenVerifier(secret_key=key)
        for _ in range(2):
            reason(verifier, "garbage")
        assert len(decodes) == 2

    def test_bounded(self, key: bytes, decodes: list[str]) -> None:
        verifier = TokenVerifier(secret_key=key, cache_size=2)
        first, second, third = (create_token(subject=r, secret_key=key) for r in "abc")
        for token in (first, second, third, first):
            verifier.role_of(token)
        assert decodes == [first, second, third, first]


class TestFromSettings:
    def test_secret_key(self, key: bytes) -> None:
        verifier = TokenVerifier.from_settings(Settings(auth_token_secret_key=data_url(key)))
        assert verifier.algorithm == "HS256"
        assert verifier.role_of(create_token(subject="admin", secret_key=key)) == "admin"

    def test_public_key_file(self, tmp_path: Path, es256_der: KeyPair) -> None:
        path = tmp_path / "public.key"
        path.write_bytes(es256_der.public_key)
        verifier = TokenVerifier.from_settings(Settings(auth_token_public_key=path.as_uri()))
        token = create_token(subject="admin", private_key=es256_der.private_key)
        assert verifier.role_of(token) == "admin"

    def test_secret_key_wins_as_in_pulsar(self, key: bytes, es256_der: KeyPair) -> None:
        settings = Settings(
            auth_token_secret_key=data_url(key),
            auth_token_public_key=data_url(es256_der.public_key),
        )
        assert TokenVerifier.from_settings(settings).algorithm == "HS256"

    def test_no_key(self) -> None:
        settings = Settings(auth_token_secret_key=None, auth_token_public_key=None)
        with pytest.raises(ValueError, match="RG_AUTH_TOKEN_SECRET_KEY"):
            TokenVerifier.from_settings(settings)

    def test_bad_setting_is_named(self, tmp_path: Path) -> None:
        settings = Settings(auth_token_public_key=(tmp_path / "absent").as_uri())
        with pytest.raises(ValueError, match="RG_AUTH_TOKEN_PUBLIC_KEY: Cannot read key file"):
            TokenVerifier.from_settings(settings)

    def test_short_secret(self) -> None:
        settings = Settings(auth_token_secret_key=data_url(b"changeme"))
        with pytest.raises(ValueError, match="at least 32"):
            TokenVerifier.from_settings(settings)

    def test_exactly_one_key(self, key: bytes, es256_der: KeyPair) -> None:
        with pytest.raises(ValueError, match="exactly one"):
            TokenVerifier()
        with pytest.raises(ValueError, match="exactly one"):
            TokenVerifier(secret_key=key, public_key=es256_der.public_key)


class TestParseExpiry:
    @pytest.mark.parametrize(
        ("text", "seconds"),
        [
            ("45s", 45),
            ("30m", 1800),
            ("1h", 3600),
            ("7d", 7 * 86400),
            ("2w", 14 * 86400),
            ("1y", 365 * 86400),
            ("1H", 3600),
            ("90", 90),
        ],
    )
    def test_valid(self, text: str, seconds: int) -> None:
        assert parse_expiry(text) == datetime.timedelta(seconds=seconds)

    @pytest.mark.parametrize("text", ["", "h", "0h", "-1h", "1.5h", "1x", "1 h", "1hh"])
    def test_invalid(self, text: str) -> None:
        with pytest.raises(ValueError, match="Invalid expiry"):
            parse_expiry(text)
