-- RETURNING as SQLite gives it: the row as the statement wrote it, before AFTER triggers
-- change it; nothing for a row an upsert left alone; expressions and subqueries.
CREATE TABLE rt_row(id INTEGER PRIMARY KEY, v TEXT NOT NULL, touched INTEGER NOT NULL DEFAULT 0, big BLOB);
CREATE TRIGGER rt_row_touch AFTER INSERT ON rt_row BEGIN
  UPDATE rt_row SET touched = touched + 1 WHERE id = new.id;
END;
INSERT INTO rt_row(id, v) VALUES (1, 'a'), (2, 'b') RETURNING *;
INSERT INTO rt_row(id, v) VALUES (2, 'again') ON CONFLICT DO NOTHING RETURNING id;
INSERT INTO rt_row(id, v) VALUES (2, 'again'), (3, 'c') ON CONFLICT(id) DO UPDATE SET v = excluded.v RETURNING id, v, touched;
UPDATE rt_row SET v = v || '!' RETURNING id, v, length(v), (SELECT count(*) FROM rt_row) AS rows_seen;
-- @error
UPDATE rt_row SET v = NULL WHERE id = 3 RETURNING id;
DELETE FROM rt_row WHERE id = 1 RETURNING *, 'gone' AS what;
UPDATE rt_row SET big = zeroblob(300000) WHERE id = 2 RETURNING id, length(big);
UPDATE rt_row SET v = replace(hex(zeroblob(200000)), '00', 'ab') WHERE id = 3 RETURNING length(v);
SELECT id, length(v), length(big), touched FROM rt_row ORDER BY id;
