-- Schemas as applications write them (issue 36): tables without a declared key, renames and
-- dropped columns, VIRTUAL generated columns. A table without a key is compared by its
-- columns: its rowids are the set's own (cluster-unique), never read back here.
CREATE TABLE as_log(who TEXT, what TEXT, size INTEGER DEFAULT 0);
INSERT INTO as_log(who, what) VALUES ('ann', 'login'), ('bob', 'login'), ('ann', 'logout');
INSERT INTO as_log SELECT who, what || ' again', 1 FROM as_log WHERE who = 'ann';
UPDATE as_log SET size = size + 10 WHERE what LIKE '%again';
DELETE FROM as_log WHERE who = 'bob';
SELECT who, what, size FROM as_log ORDER BY who, what;
SELECT count(*), sum(size) FROM as_log;
CREATE TABLE as_tag(name TEXT UNIQUE, colour TEXT);
INSERT INTO as_tag VALUES ('red', '#f00'), ('blue', '#00f');
INSERT INTO as_tag VALUES ('red', '#e00') ON CONFLICT(name) DO UPDATE SET colour = excluded.colour;
-- @error
INSERT INTO as_tag VALUES ('blue', 'again');
INSERT OR REPLACE INTO as_tag VALUES ('blue', '#00e');
SELECT name, colour FROM as_tag ORDER BY name;
-- renames and a dropped column, with writes before and after each
CREATE TABLE as_item(id INTEGER PRIMARY KEY, name TEXT, size INTEGER, note TEXT);
INSERT INTO as_item VALUES (1, 'one', 10, 'a'), (2, 'two', 20, 'b');
ALTER TABLE as_item RENAME TO as_thing;
INSERT INTO as_thing VALUES (3, 'three', 30, 'c');
-- @error
INSERT INTO as_item VALUES (4, 'four', 40, 'd');
ALTER TABLE as_thing RENAME COLUMN size TO weight;
UPDATE as_thing SET weight = weight + 1 WHERE id <= 2;
ALTER TABLE as_thing DROP COLUMN note;
INSERT INTO as_thing VALUES (4, 'four', 41);
SELECT * FROM as_thing ORDER BY id;
-- the rebuild a migration tool runs: create, copy, drop, rename into place
CREATE TABLE as_thing_new(id INTEGER PRIMARY KEY, name TEXT NOT NULL, weight INTEGER CHECK (weight > 0));
INSERT INTO as_thing_new SELECT id, name, weight FROM as_thing;
DROP TABLE as_thing;
ALTER TABLE as_thing_new RENAME TO as_thing;
INSERT INTO as_thing VALUES (5, 'five', 50);
-- @error
INSERT INTO as_thing VALUES (6, 'six', 0);
SELECT * FROM as_thing ORDER BY id;
-- VIRTUAL generated columns, the default kind among them
CREATE TABLE as_person(id INTEGER PRIMARY KEY, first TEXT, last TEXT, full TEXT AS (first || ' ' || last),
                       initials TEXT GENERATED ALWAYS AS (substr(first, 1, 1) || substr(last, 1, 1)) VIRTUAL);
INSERT INTO as_person(id, first, last) VALUES (1, 'Ann', 'Lee'), (2, 'Bob', 'Ray');
UPDATE as_person SET last = 'Hope' WHERE id = 2;
INSERT INTO as_person(id, first, last) VALUES (3, 'Cy', 'Ode') RETURNING full, initials;
DELETE FROM as_person WHERE id = 1;
SELECT id, full, initials FROM as_person ORDER BY id;
CREATE TABLE as_size(label TEXT, size INTEGER, half INTEGER AS (size / 2));
INSERT INTO as_size VALUES ('a', 10), ('b', 21);
UPDATE as_size SET size = size * 2;
SELECT label, size, half FROM as_size ORDER BY label;
