"""Alembic's environment for the portal's schema: run by :func:`limelight.service.db.migrate`
on the connection it passes (``config.attributes["connection"]``), never from a config file."""

from alembic import context

import limelight.service.db as db

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=db.Base.metadata,
                  version_table=db.VERSION_TABLE, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
