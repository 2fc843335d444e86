-- What SQLite takes and the server refuses today (docs/decisions.md, "Refused client SQL" and
-- "Refused because they cannot replicate faithfully"). Each `-- @refused` statement must be
-- refused by the server and taken by SQLite, whose change is then undone. When the server
-- starts taking one, the test fails: move the statement to a file of cases/.
CREATE TABLE gap_item(id INTEGER PRIMARY KEY, name TEXT, size INTEGER);
INSERT INTO gap_item VALUES (1, 'one', 10), (2, 'two', 20);
-- NULL in a key of a rowid table, which SQLite allows (NULL never matches on another member)
CREATE TABLE gap_named(name TEXT PRIMARY KEY, size INTEGER);
-- @refused
INSERT INTO gap_named VALUES (NULL, 1);
CREATE TABLE gap_pair(a TEXT, b INTEGER, PRIMARY KEY (a, b));
-- @refused
INSERT INTO gap_pair VALUES ('a', NULL);
-- @refused
CREATE TABLE gap_copy AS SELECT * FROM gap_item;
CREATE TABLE gap_part(id INTEGER PRIMARY KEY, item INTEGER REFERENCES gap_item(id) ON DELETE CASCADE);
INSERT INTO gap_part VALUES (1, 1), (2, 1);
-- a DDL statement that also changes rows: the drop deletes gap_item's rows, which cascade
-- @refused
DROP TABLE gap_item;
SELECT * FROM gap_item ORDER BY id;
SELECT * FROM gap_part ORDER BY id;
