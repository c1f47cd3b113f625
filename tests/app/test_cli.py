"""``rgadmin tokens``: keys and tokens from the command line (app/cli.py)."""

from __future__ import annotations

import base64
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from app import cli as cli_module
from app.auth import TokenVerifier, create_token, generate_secret_key
from app.cli import cli, main
from app.config import Settings, get_settings


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No key settings, and a fresh directory so that no data/secret.key is found by accident."""
    for name in ("RG_AUTH_TOKEN_SECRET_KEY", "RG_AUTH_TOKEN_PUBLIC_KEY", "RG_AUTH_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    yield
    get_settings.cache_clear()


def rgadmin(*args: str) -> Result:
    get_settings.cache_clear()  # the commands read the environment each test has set up
    return CliRunner().invoke(cli, list(args))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys" / "secret.key"
    path.parent.mkdir()
    path.write_bytes(generate_secret_key())
    return path


def test_help_through_the_entry_point(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["rgadmin", "--help"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 0
    output = capsys.readouterr().out
    for command in ("serve", "migrate", "tokens"):
        assert command in output


class TestCreateSecretKey:
    def test_to_file(self, tmp_path: Path) -> None:
        path = tmp_path / "new" / "secret.key"
        result = rgadmin("tokens", "create-secret-key", "--output", str(path))
        assert result.exit_code == 0, result.output
        assert len(path.read_bytes()) == 32
        assert mode(path) == 0o600
        assert f"RG_AUTH_TOKEN_SECRET_KEY={path.as_uri()}" in result.stderr

    def test_overwrites_with_private_mode(self, tmp_path: Path) -> None:
        path = tmp_path / "secret.key"
        path.write_bytes(b"old")
        path.chmod(0o644)
        assert rgadmin("tokens", "create-secret-key", "-o", str(path)).exit_code == 0
        assert len(path.read_bytes()) == 32
        assert mode(path) == 0o600

    def test_base64_to_stdout(self) -> None:
        result = rgadmin("tokens", "create-secret-key", "--base64")
        assert result.exit_code == 0
        assert len(base64.b64decode(result.stdout.strip(), validate=True)) == 32

    def test_base64_to_file(self, tmp_path: Path) -> None:
        path = tmp_path / "secret.b64"
        assert rgadmin("tokens", "create-secret-key", "--base64", "-o", str(path)).exit_code == 0
        assert len(base64.b64decode(path.read_text().strip(), validate=True)) == 32

    def test_raw_bytes_to_a_pipe(self) -> None:
        result = rgadmin("tokens", "create-secret-key")
        assert result.exit_code == 0
        assert len(result.stdout_bytes) == 32

    def test_no_raw_bytes_on_a_terminal(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(cli_module, "_stdout_is_terminal", lambda: True)
        result = rgadmin("tokens", "create-secret-key")
        assert result.exit_code == 1
        assert result.stdout_bytes == b""
        assert "--base64" in result.stderr


class TestCreateKeyPair:
    def test_der_rs256_by_default(self, tmp_path: Path) -> None:
        private, public = tmp_path / "private.key", tmp_path / "public.key"
        result = rgadmin(
            "tokens", "create-key-pair",
            "--output-private-key", str(private), "--output-public-key", str(public),
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "RS256 key pair in DER format" in result.stderr
        assert f"RG_AUTH_TOKEN_PUBLIC_KEY={public.as_uri()}" in result.stderr
        assert mode(private) == 0o600
        assert not private.read_bytes().startswith(b"-----")
        token = create_token(subject="admin", private_key=private.read_bytes())
        verifier = TokenVerifier(public_key=public.read_bytes())
        assert (verifier.algorithm, verifier.role_of(token)) == ("RS256", "admin")

    def test_pem_es256(self, tmp_path: Path) -> None:
        private, public = tmp_path / "private.pem", tmp_path / "public.pem"
        result = rgadmin(
            "tokens", "create-key-pair", "-a", "ES256", "--format", "pem",
            "--output-private-key", str(private), "--output-public-key", str(public),
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "ES256 key pair in PEM format" in result.stderr
        assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
        assert TokenVerifier(public_key=public.read_bytes()).algorithm == "ES256"

    def test_unknown_algorithm(self, tmp_path: Path) -> None:
        result = rgadmin(
            "tokens", "create-key-pair", "-a", "HS256",
            "--output-private-key", str(tmp_path / "a"), "--output-public-key", str(tmp_path / "b"),
        )  # fmt: skip
        assert result.exit_code == 2
        assert not (tmp_path / "a").exists()


class TestCreate:
    def test_with_secret_key_file(self, key_file: Path) -> None:
        result = rgadmin(
            "tokens", "create", "--subject", "admin", "--secret-key", key_file.as_uri()
        )
        assert result.exit_code == 0, result.output
        token = result.stdout.strip()
        assert TokenVerifier(secret_key=key_file.read_bytes()).verify(token) == ("admin", None)

    def test_with_expiry(self, key_file: Path) -> None:
        result = rgadmin(
            "tokens", "create", "-s", "admin", "-e", "1h", "--secret-key", key_file.as_uri()
        )
        info = TokenVerifier(secret_key=key_file.read_bytes()).verify(result.stdout.strip())
        assert info.expires_at is not None
        assert abs(info.expires_at - (time.time() + 3600)) < 5

    def test_with_private_key(self, tmp_path: Path) -> None:
        private, public = tmp_path / "private.key", tmp_path / "public.key"
        rgadmin(
            "tokens", "create-key-pair", "-a", "ES256",
            "--output-private-key", str(private), "--output-public-key", str(public),
        )  # fmt: skip
        result = rgadmin("tokens", "create", "-s", "bob", "--private-key", private.as_uri())
        assert result.exit_code == 0, result.output
        assert TokenVerifier(public_key=public.read_bytes()).role_of(result.stdout.strip()) == "bob"

    def test_with_the_servers_setting(self, monkeypatch: pytest.MonkeyPatch) -> None:
        key = generate_secret_key()
        monkeypatch.setenv(
            "RG_AUTH_TOKEN_SECRET_KEY", "data:;base64," + base64.b64encode(key).decode()
        )
        result = rgadmin("tokens", "create", "--subject", "admin")
        assert result.exit_code == 0, result.output
        verifier = TokenVerifier.from_settings(Settings())
        assert verifier.role_of(result.stdout.strip()) == "admin"

    def test_with_the_generated_key_file(self, tmp_path: Path) -> None:
        # What `rgadmin serve` leaves behind on a first run in this directory.
        (tmp_path / "data").mkdir()
        key = generate_secret_key()
        (tmp_path / "data" / "secret.key").write_bytes(key)
        result = rgadmin("tokens", "create", "--subject", "admin")
        assert result.exit_code == 0, result.output
        assert TokenVerifier(secret_key=key).role_of(result.stdout.strip()) == "admin"

    def test_without_any_key(self) -> None:
        result = rgadmin("tokens", "create", "--subject", "admin")
        assert result.exit_code == 1
        assert "--secret-key" in result.stderr
        assert "rgadmin serve" in result.stderr

    def test_both_keys(self, key_file: Path) -> None:
        spec = key_file.as_uri()
        result = rgadmin("tokens", "create", "-s", "a", "--secret-key", spec, "--private-key", spec)
        assert result.exit_code == 1
        assert "not both" in result.stderr

    def test_bad_expiry(self, key_file: Path) -> None:
        result = rgadmin(
            "tokens", "create", "-s", "a", "-e", "soon", "--secret-key", key_file.as_uri()
        )
        assert result.exit_code == 1
        assert "Invalid expiry 'soon'" in result.stderr

    def test_bad_key_location(self) -> None:
        result = rgadmin("tokens", "create", "-s", "a", "--secret-key", "data/secret.key")
        assert result.exit_code == 1
        assert "file:///" in result.stderr


class TestValidate:
    def test_valid(self, key_file: Path) -> None:
        token = create_token(subject="admin", secret_key=key_file.read_bytes())
        result = rgadmin("tokens", "validate", token, "--secret-key", key_file.as_uri())
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == ["Subject: admin", "Expires: never"]

    def test_expiry_is_shown(self, key_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("RG_AUTH_TOKEN_SECRET_KEY", key_file.as_uri())
        token = rgadmin("tokens", "create", "-s", "admin", "-e", "1d").stdout.strip()
        result = rgadmin("tokens", "validate", token)
        assert result.exit_code == 0, result.output
        assert "Expires: 20" in result.stdout
        assert "+00:00" in result.stdout

    def test_with_public_key(self, tmp_path: Path) -> None:
        private, public = tmp_path / "private.key", tmp_path / "public.key"
        rgadmin(
            "tokens", "create-key-pair",
            "--output-private-key", str(private), "--output-public-key", str(public),
        )  # fmt: skip
        token = create_token(subject="bob", private_key=private.read_bytes())
        result = rgadmin("tokens", "validate", token, "--public-key", public.as_uri())
        assert result.exit_code == 0, result.output
        assert "Subject: bob" in result.stdout

    def test_signed_with_another_key(self, key_file: Path) -> None:
        token = create_token(subject="admin", secret_key=generate_secret_key())
        result = rgadmin("tokens", "validate", token, "--secret-key", key_file.as_uri())
        assert result.exit_code == 1
        assert "Invalid token: Invalid signature" in result.stderr

    def test_garbage(self, key_file: Path) -> None:
        result = rgadmin("tokens", "validate", "garbage", "--secret-key", key_file.as_uri())
        assert result.exit_code == 1
        assert "Malformed token" in result.stderr

    def test_without_any_key(self) -> None:
        result = rgadmin("tokens", "validate", "garbage")
        assert result.exit_code == 1
        assert "none configured" in result.stderr
