# The ResourceGroups admin server.
#
#   docker build -t resourcegroups .
#   docker run --rm -e RG_DATABASE_URL=postgresql://rg:PASSWORD@db:5432/rg resourcegroups rgadmin migrate
#   docker run -d -p 8080:8080 -e RG_DATABASE_URL=postgresql://rg:PASSWORD@db:5432/rg \
#       -e 'RG_AUTH_TOKEN_SECRET_KEY=data:;base64,...' resourcegroups
#   docker exec CONTAINER rgadmin tokens create --subject admin
#
# On PostgreSQL the schema is migrated only by `rgadmin migrate`, run once per release before the
# new server starts. Without RG_DATABASE_URL the server keeps SQLite in /srv/rg/data and migrates
# it itself; without a key it generates /srv/rg/data/secret.key. Mount a volume on /srv/rg/data to
# keep both across containers, or tokens stop working when the container is replaced.

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/rg

# Dependencies (and the build backend) get their own layer, rebuilt only when pyproject.toml
# changes, not on every source edit.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb')); print('\n'.join(p['build-system']['requires'] + p['project']['dependencies'] + p['project']['optional-dependencies']['server']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY alembic.ini ./
COPY migrations ./migrations
COPY spark/rgspark ./spark/rgspark
COPY app ./app

# Editable, so that `app` is imported from here: it finds alembic.ini and migrations/ next to
# itself. The install only adds the rgadmin command; every dependency is already in place.
RUN pip install --no-deps --no-build-isolation --editable . \
    && useradd --system --uid 10001 --home-dir /srv/rg --no-create-home rg \
    && mkdir data \
    && chown rg:rg data

USER rg
EXPOSE 8080

# Slim has no curl. /health is 200 while the database answers and 503 otherwise; urlopen raises
# on a 503, which exits non-zero.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=4)"]

CMD ["rgadmin", "serve", "--host", "0.0.0.0", "--port", "8080"]
