"""Engine, sessions and schema migration."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import URL, Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker


def sqlalchemy_url(database_url: str) -> URL:
    """Turn a plain ``postgresql://`` or ``sqlite:///`` URL into one naming our driver."""
    url = make_url(database_url)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


def make_engine(database_url: str) -> Engine:
    url = sqlalchemy_url(database_url)
    if url.get_backend_name() == "sqlite":
        engine = create_engine(
            url,
            # The API serves requests from a thread pool; SQLite connections move between threads.
            connect_args={"check_same_thread": False, "timeout": 15},
        )
        event.listen(engine, "connect", _configure_sqlite)
        return engine
    return create_engine(
        url,
        # Fail fast when the database is down (the API answers 503). A connection it closed
        # meanwhile is replaced when a transaction finds it so (`app.api.deps`).
        connect_args={"connect_timeout": 5},
    )


def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # SQLite ignores foreign keys unless asked on every connection; they are what makes a
    # dangling attachment impossible.
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


_AFTER_COMMIT = "after_commit"


def after_commit(session: Session, callback: Callable[[], object]) -> None:
    """Call ``callback`` once the session's transaction has committed (never if it rolls
    back): what a report remembers must not be taken for stored before it is. Kept in the
    session's info for the listeners below: a listener of its own made SQLAlchemy build the
    session's event collections anew, which cost a Spark worker's report more CPU than any
    of its statements."""
    session.info.setdefault(_AFTER_COMMIT, []).append(callback)


@event.listens_for(Session, "after_commit")
def _committed(session: Session) -> None:
    for callback in session.info.pop(_AFTER_COMMIT, ()):
        callback()


@event.listens_for(Session, "after_rollback")
def _rolled_back(session: Session) -> None:
    session.info.pop(_AFTER_COMMIT, None)


@cache
def migrations_directory() -> Path:
    """The migrations, from this package: ``app.migrations`` in a wheel, the checkout's
    ``migrations/`` in an editable install (pyproject.toml maps one onto the other)."""
    directory = files("app.migrations")
    # Alembic reads a directory of files; a package in a zip would need extracting first.
    if not isinstance(directory, Path):
        raise RuntimeError(f"The migrations are not on the file system: {directory}")
    return directory


def alembic_config(database_url: str) -> Config:
    # No alembic.ini: it lives in the checkout, for `alembic` there; an installed server has
    # only its package, and takes everything it needs from here.
    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    config.attributes["database_url"] = database_url
    return config


def upgrade_schema(database_url: str) -> None:
    """Bring the schema to the latest migration (``alembic upgrade head``)."""
    url = sqlalchemy_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(database_url), "head")


def begin_write(session: Session) -> None:
    """Take SQLite's write lock up front, so concurrent writers wait their turn.

    Otherwise two transactions that first read and then write both hold read snapshots, and
    the second to write fails with "database is locked" instead of waiting. On PostgreSQL
    writers run side by side: a write that reads before it writes takes the locks its
    decision rests on itself (a usage report locks its groups' marker rows first, see
    `app.quota.store`; an attachment check locks the tenant and namespace rows).
    """
    connection = session.connection()
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")
