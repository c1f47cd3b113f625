# The ResourceGroups admin server, installed from its wheel: the image holds the installed
# package (with its migrations) and no source tree.
#
#   docker build -t resourcegroups .
#   docker run --rm -e RG_DATABASE_URL=postgresql://rg:PASSWORD@db:5432/rg resourcegroups rgadmin migrate
#   docker run -d -p 8080:8080 -e RG_DATABASE_URL=postgresql://rg:PASSWORD@db:5432/rg \
#       -e 'RG_AUTH_TOKEN_SECRET_KEY=data:;base64,...' resourcegroups
#   docker exec CONTAINER rgadmin tokens create --subject admin
#
# On PostgreSQL the schema is migrated only by `rgadmin migrate`, run once per release before the
# new server starts: the server refuses to start on a schema behind its own. Without
# RG_DATABASE_URL the server keeps SQLite in /srv/rg/data and migrates it itself; without a key
# it generates /srv/rg/data/secret.key. Mount a volume on /srv/rg/data to keep both across
# containers, or tokens stop working when the container is replaced.

FROM python:3.11-slim AS wheel

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY migrations ./migrations
COPY spark/rgspark ./spark/rgspark
COPY app ./app
# The build backend comes from pyproject.toml's build-system, in an isolated environment.
RUN pip wheel --no-deps --wheel-dir /wheels .


FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Dependencies get their own layer, rebuilt only when pyproject.toml changes, not on every
# source edit.
COPY pyproject.toml /tmp/pyproject.toml
RUN python -c "import tomllib; p = tomllib.load(open('/tmp/pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['server']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt /tmp/pyproject.toml

# With its server extra, so that pip checks the wheel's own requirements against the layer
# above (and fetches whatever it lacks).
COPY --from=wheel /wheels /tmp/wheels
RUN set -- /tmp/wheels/*.whl \
    && pip install "$1[server]" \
    && rm -r /tmp/wheels \
    && useradd --system --uid 10001 --home-dir /srv/rg --no-create-home rg \
    && mkdir -p /srv/rg/data \
    && chown rg:rg /srv/rg/data

WORKDIR /srv/rg
USER rg
EXPOSE 8080

# Slim has no curl. /health is 200 while the database answers with this server's schema, and
# 503 when it is down or its schema is behind; urlopen raises on a 503, which exits non-zero.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=4)"]

CMD ["rgadmin", "serve", "--host", "0.0.0.0", "--port", "8080"]
