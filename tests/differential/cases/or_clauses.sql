-- Statement-level conflict clauses: OR ABORT undoes the statement, OR IGNORE skips, OR
-- REPLACE deletes (OR FAIL: test_or_fail_keeps_the_rows_changed_before_the_error); triggers
-- that skip a row with RAISE(IGNORE); writes through a view's INSTEAD OF triggers.
CREATE TABLE oc_slot(id INTEGER PRIMARY KEY, code TEXT UNIQUE, n INTEGER NOT NULL CHECK (n < 100));
INSERT INTO oc_slot VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3);
-- @error
INSERT OR ABORT INTO oc_slot VALUES (7, 'g', 7), (8, 'b', 8);
INSERT OR IGNORE INTO oc_slot VALUES (9, 'i', 9), (10, 'c', 10), (11, 'k', 200), (12, 'l', 12);
UPDATE OR IGNORE oc_slot SET code = 'a' WHERE id IN (2, 3);
UPDATE OR REPLACE oc_slot SET code = 'b' WHERE id = 1;
-- @error
UPDATE OR REPLACE oc_slot SET n = NULL WHERE id = 3;
SELECT * FROM oc_slot ORDER BY id;

CREATE TABLE oc_event(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, payload TEXT);
CREATE TABLE oc_count(kind TEXT PRIMARY KEY, seen INTEGER NOT NULL);
CREATE TRIGGER oc_event_skip BEFORE INSERT ON oc_event WHEN new.kind = 'noise' BEGIN SELECT RAISE(IGNORE); END;
CREATE TRIGGER oc_event_count AFTER INSERT ON oc_event BEGIN
  INSERT INTO oc_count VALUES (new.kind, 1) ON CONFLICT(kind) DO UPDATE SET seen = seen + 1;
END;
CREATE TRIGGER oc_event_forget AFTER DELETE ON oc_event BEGIN
  UPDATE oc_count SET seen = seen - 1 WHERE kind = old.kind;
  DELETE FROM oc_count WHERE kind = old.kind AND seen = 0;
END;
INSERT INTO oc_event VALUES (1, 'click', '{}'), (2, 'noise', NULL), (3, 'click', '[]'), (4, 'view', NULL);
INSERT INTO oc_event VALUES (5, 'noise', 'dropped') RETURNING id;
DELETE FROM oc_event WHERE kind = 'view';
SELECT * FROM oc_event ORDER BY id;
SELECT * FROM oc_count ORDER BY kind;

CREATE VIEW oc_event_view AS SELECT id, kind, payload FROM oc_event;
CREATE TRIGGER oc_view_insert INSTEAD OF INSERT ON oc_event_view BEGIN
  INSERT INTO oc_event VALUES (new.id, upper(new.kind), new.payload);
END;
CREATE TRIGGER oc_view_delete INSTEAD OF DELETE ON oc_event_view BEGIN
  UPDATE oc_event SET payload = 'deleted' WHERE id = old.id;
END;
INSERT INTO oc_event_view VALUES (10, 'buy', 'x'), (11, 'noise', 'y');
DELETE FROM oc_event_view WHERE id = 1;
-- @error
UPDATE oc_event_view SET kind = 'nope' WHERE id = 3;
SELECT * FROM oc_event ORDER BY id;
SELECT * FROM oc_count ORDER BY kind;
