"""The schema's migrations, installed as ``app.migrations`` (see pyproject.toml): the server
finds them in its own package, and ``alembic`` in a checkout finds them here."""
