-- Run once by the mariadb image of docker-compose.yml, when its data volume is
-- first initialised (after it created MARIADB_USER and MARIADB_DATABASE, and
-- granted that user all privileges on that database).
--
-- The global grants deploy/local/stack.py gives the same user in the local
-- stack: binlog reading and snapshots for Debezium, and DDL/DML outside the
-- sample database for the tests. tests/unit/test_compose.py holds them equal.
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR, LOCK TABLES ON *.* TO 'cdcsync'@'%';
GRANT CREATE, DROP, ALTER, INSERT, UPDATE, DELETE, INDEX ON *.* TO 'cdcsync'@'%';
