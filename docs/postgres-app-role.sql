-- Run the console on PostgreSQL as a role that does not own its tables, so that nothing it
-- runs can rewrite or delete audit events, not even by disabling the triggers that refuse it.
--
-- The audit table's triggers refuse UPDATE, DELETE and TRUNCATE, but the table's owner may
-- disable or drop them (ALTER TABLE ... DISABLE TRIGGER, DROP TABLE). So the console, its
-- workers and its commands connect as console_app, which owns nothing; only migrations run as
-- console_owner. console_app may read and write the working tables, may only read and append
-- to the audit log, and may not touch the migration records.
--
-- Once, as a superuser:
--   CREATE ROLE console_owner LOGIN PASSWORD '...';
--   CREATE ROLE console_app LOGIN PASSWORD '...';
--   CREATE DATABASE console OWNER console_owner;
--   \c console
--   ALTER SCHEMA public OWNER TO console_owner;
--
-- Then after every `manage.py migrate` (run with DATABASE_URL naming console_owner), run this
-- file as console_owner in the console database:
--   psql "postgres://console_owner@HOST/console" -v ON_ERROR_STOP=1 -f docs/postgres-app-role.sql

REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO console_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO console_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO console_app;
-- The audit log: read and append only.
REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON audit_auditevent FROM console_app;
-- The migration records: read only (the readiness check reads them).
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON django_migrations FROM console_app;
