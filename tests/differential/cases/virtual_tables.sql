-- FTS5 and R*Tree: their rows replicate; each member's module keeps its own shadow tables.
CREATE VIRTUAL TABLE vt_text USING fts5(title, body);
INSERT INTO vt_text(rowid, title, body) VALUES (1, 'replica', 'every member keeps a copy'), (2, 'writer', 'any member takes writes');
UPDATE vt_text SET body = 'any member takes a write' WHERE rowid = 2;
SELECT rowid, title FROM vt_text WHERE vt_text MATCH 'member' ORDER BY rowid;
DELETE FROM vt_text WHERE rowid = 1;
SELECT rowid, title, body FROM vt_text ORDER BY rowid;
CREATE VIRTUAL TABLE vt_box USING rtree(id, x0, x1, y0, y1);
INSERT INTO vt_box VALUES (1, 0, 10, 0, 10), (2, 5, 15, 5, 15);
SELECT id FROM vt_box WHERE x0 <= 7 AND x1 >= 7 ORDER BY id;
UPDATE vt_box SET x1 = 4 WHERE id = 1;
SELECT * FROM vt_box ORDER BY id;
CREATE TABLE vt_doc(id INTEGER PRIMARY KEY, body TEXT NOT NULL);
CREATE VIRTUAL TABLE vt_doc_index USING fts5(body, content='vt_doc', content_rowid='id');
CREATE TRIGGER vt_doc_added AFTER INSERT ON vt_doc BEGIN
  INSERT INTO vt_doc_index(rowid, body) VALUES (new.id, new.body);
END;
CREATE TRIGGER vt_doc_removed AFTER DELETE ON vt_doc BEGIN
  INSERT INTO vt_doc_index(vt_doc_index, rowid, body) VALUES ('delete', old.id, old.body);
END;
CREATE TRIGGER vt_doc_changed AFTER UPDATE ON vt_doc BEGIN
  INSERT INTO vt_doc_index(vt_doc_index, rowid, body) VALUES ('delete', old.id, old.body);
  INSERT INTO vt_doc_index(rowid, body) VALUES (new.id, new.body);
END;
INSERT INTO vt_doc VALUES (1, 'the writer orders every write'), (2, 'a relay sends rows'), (3, 'an applier applies rows');
UPDATE vt_doc SET body = 'a relay ships rows' WHERE id = 2;
DELETE FROM vt_doc WHERE id = 3;
SELECT rowid, body FROM vt_doc_index WHERE vt_doc_index MATCH 'rows' ORDER BY rowid;
SELECT rowid FROM vt_doc_index WHERE vt_doc_index MATCH 'applier';
