#!/bin/sh
# The container's entry point: pgrag's model runtime as the postgres user, then
# PostgreSQL as the image starts it. Backends reach the runtime through the socket
# in /var/run/postgresql (compose.yaml sets pgrag.model_runtime to it).
set -e
mkdir -p /var/run/postgresql && chown postgres:postgres /var/run/postgresql
su postgres -s /bin/sh -c "/opt/pgrag/bin/pgrag models serve --socket /var/run/postgresql/pgrag-models.sock" &
exec docker-entrypoint.sh "$@"
