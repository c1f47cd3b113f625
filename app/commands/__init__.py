"""``rgadmin``'s pulsar-admin verbs: commands that administer a server over HTTP.

They need only the server's URL and a token, never its database, so nothing here imports the
server's own code (``app.db``, SQLAlchemy, FastAPI); a test holds them to it.
"""
