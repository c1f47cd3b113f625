"""Where the HTTP commands find the server and their token (options, environment, Pulsar's
client.conf), and how a refused or failed call reads: one line, never a traceback."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.auth import create_token, generate_secret_key
from app.cli import cli
from app.commands.connection import (
    DEFAULT_ADMIN_URL,
    CommandError,
    Connection,
    ConnectionOptions,
    resolve,
)
from tests.cli.conftest import Rgadmin, failure, ok
from tests.conftest import SUPERUSER


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


class TestResolve:
    def test_defaults(self, tmp_path: Path) -> None:
        environ = {"XDG_CONFIG_HOME": str(tmp_path)}
        assert resolve(ConnectionOptions(), environ) == Connection(DEFAULT_ADMIN_URL, None, None)

    def test_each_setting_from_the_first_place_that_has_it(self, tmp_path: Path) -> None:
        config = write(
            tmp_path / "client.conf",
            "# Pulsar's client.conf\n"
            "webServiceUrl=http://from-config:8080/\n"
            "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
            "authParams=token:config-token\n",
        )
        environ = {"RG_ADMIN_CONFIG": str(config)}
        assert resolve(ConnectionOptions(), environ) == Connection(
            "http://from-config:8080", "config-token", f"authParams in {config}"
        )
        environ |= {"RG_ADMIN_URL": "https://from-env", "RG_ADMIN_TOKEN": " env-token\n"}
        assert resolve(ConnectionOptions(), environ) == Connection(
            "https://from-env", "env-token", "RG_ADMIN_TOKEN"
        )
        options = ConnectionOptions(admin_url="http://option:1", auth_params="token:option-token")
        assert resolve(options, environ) == Connection(
            "http://option:1", "option-token", "--auth-params"
        )
        # A URL given on the command line goes with the config file's token.
        mixed = resolve(
            ConnectionOptions(admin_url="http://option:1"), {"RG_ADMIN_CONFIG": str(config)}
        )
        assert (mixed.url, mixed.token) == ("http://option:1", "config-token")

    def test_the_default_config_file_and_properties_syntax(self, tmp_path: Path) -> None:
        token_file = write(tmp_path / "secrets" / "admin.token", "file-token\n")
        write(
            tmp_path / "rgadmin" / "client.conf",
            "! a comment\n\n  webServiceUrl : http://host:9\n"
            f"authParams   {token_file.as_uri()}\nbrokerServiceUrl=pulsar://host:6650\n",
        )
        found = resolve(ConnectionOptions(), {"XDG_CONFIG_HOME": str(tmp_path)})
        assert (found.url, found.token) == ("http://host:9", "file-token")

    def test_a_config_file_named_but_missing(self, tmp_path: Path) -> None:
        with pytest.raises(CommandError, match="does not exist"):
            resolve(ConnectionOptions(), {"RG_ADMIN_CONFIG": str(tmp_path / "nope.conf")})

    def test_the_config_file_is_not_read_when_options_say_everything(self, tmp_path: Path) -> None:
        options = ConnectionOptions(admin_url="http://h:1", auth_params="token:t")
        environ = {"RG_ADMIN_CONFIG": str(tmp_path / "nope.conf")}
        assert resolve(options, environ).token == "t"

    @pytest.mark.parametrize(
        ("auth_params", "message"),
        [
            ("Bearer abc", "expected token:TOKEN or file:///path/to/token"),
            ("token:", "the token is empty"),
            ("file:relative/token", "needs an absolute path"),
            ("file://token.txt", "needs an absolute path"),
            ("file:///nonexistent/token", "cannot read token file /nonexistent/token"),
        ],
    )
    def test_bad_auth_params(self, tmp_path: Path, auth_params: str, message: str) -> None:
        with pytest.raises(CommandError, match=message) as raised:
            resolve(ConnectionOptions(auth_params=auth_params), {"XDG_CONFIG_HOME": str(tmp_path)})
        assert "abc" not in str(raised.value)  # what may be a token is never echoed

    @pytest.mark.parametrize("url", ["localhost:8080", "ftp://host", "http://", "http://h:99999"])
    def test_bad_urls(self, tmp_path: Path, url: str) -> None:
        with pytest.raises(CommandError, match="Invalid admin URL"):
            resolve(ConnectionOptions(admin_url=url), {"XDG_CONFIG_HOME": str(tmp_path)})


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class TestFailures:
    def test_a_bad_token_is_401_naming_where_it_came_from(self, server: str) -> None:
        forged = create_token(subject=SUPERUSER, secret_key=generate_secret_key())
        result = CliRunner().invoke(
            cli, ["--admin-url", server, "--auth-params", f"token:{forged}", "tenants", "list"]
        )
        assert failure(result) == (
            "Invalid token: Invalid signature (HTTP 401); the token came from --auth-params"
        )

    def test_no_token_is_401_saying_how_to_give_one(self, rgadmin: Rgadmin) -> None:
        message = failure(rgadmin("resourcegroups", "list", role=None))
        assert message == (
            "Authentication required: send 'Authorization: Bearer <token>' (HTTP 401); no token "
            "was given: pass --auth-params token:TOKEN or file:///path/to/token, or set "
            "RG_ADMIN_TOKEN"
        )

    def test_a_role_without_the_right_is_403(self, rgadmin: Rgadmin) -> None:
        ok(rgadmin("tenants", "create", "t", "-r", "t-admin"))
        assert failure(rgadmin("resourcegroups", "list", role="t-admin")).endswith("(HTTP 403)")

    def test_an_unreachable_server_is_one_line_naming_it(self) -> None:
        url = f"http://127.0.0.1:{unused_port()}"
        result = CliRunner().invoke(cli, ["--admin-url", url, "resourcegroups", "list"])
        assert failure(result).startswith(f"Cannot reach the server at {url}: ")

    def test_an_invalid_url_is_one_line(self) -> None:
        result = CliRunner().invoke(cli, ["--admin-url", "localhost:8080", "tenants", "list"])
        assert failure(result).startswith("Invalid admin URL 'localhost:8080' (from --admin-url)")

    def test_a_bad_connection_setting_never_stops_the_other_commands(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.setenv("RG_ADMIN_CONFIG", str(tmp_path / "nope.conf"))
        result = CliRunner().invoke(
            cli, ["--auth-params", "nonsense", "tokens", "create-secret-key", "--base64"]
        )
        assert ok(result).strip()


class TestSettingsReachTheServer:
    def test_environment(
        self, server: str, token: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RG_ADMIN_URL", server)
        monkeypatch.setenv("RG_ADMIN_TOKEN", token(SUPERUSER))
        ok(CliRunner().invoke(cli, ["resourcegroups", "create", "from-env"]))
        assert ok(CliRunner().invoke(cli, ["resourcegroups", "list"])) == "from-env\n"

    def test_default_config_file_with_a_token_file(
        self, server: str, token: Callable[[str], str], no_connection_settings: Path, tmp_path: Path
    ) -> None:
        token_file = write(tmp_path / "admin.token", token(SUPERUSER) + "\n")
        write(
            no_connection_settings / "rgadmin" / "client.conf",
            f"webServiceUrl={server}\nauthParams={token_file.as_uri()}\n",
        )
        ok(CliRunner().invoke(cli, ["tenants", "create", "from-config"]))
        assert ok(CliRunner().invoke(cli, ["tenants", "list"])) == "from-config\n"
