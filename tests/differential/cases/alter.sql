-- ADD COLUMN on a table with rows: the new column's default on every member, then writes to it.
CREATE TABLE al_item(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO al_item VALUES (1, 'one'), (2, 'two');
ALTER TABLE al_item ADD COLUMN colour TEXT DEFAULT 'red';
ALTER TABLE al_item ADD COLUMN weight REAL;
ALTER TABLE al_item ADD COLUMN note TEXT NOT NULL DEFAULT '';
-- @error
ALTER TABLE al_item ADD COLUMN code TEXT NOT NULL;
-- @error
ALTER TABLE al_item ADD COLUMN name TEXT;
-- @error
ALTER TABLE al_item ADD COLUMN extra INTEGER UNIQUE;
SELECT * FROM al_item ORDER BY id;
INSERT INTO al_item(id, name, weight) VALUES (3, 'three', 1.5);
UPDATE al_item SET colour = 'blue', note = 'repainted' WHERE id <= 2;
CREATE TABLE al_parent(id INTEGER PRIMARY KEY);
INSERT INTO al_parent VALUES (1), (2);
ALTER TABLE al_item ADD COLUMN parent INTEGER REFERENCES al_parent(id) ON DELETE CASCADE;
UPDATE al_item SET parent = id WHERE id <= 2;
-- @error
UPDATE al_item SET parent = 9 WHERE id = 3;
DELETE FROM al_parent WHERE id = 1;
SELECT * FROM al_item ORDER BY id;
CREATE INDEX al_item_colour ON al_item(colour);
SELECT colour, count(*) FROM al_item INDEXED BY al_item_colour WHERE colour > '' GROUP BY colour ORDER BY colour;
