-- Keys left to the database. The server's ids are cluster-unique (auto_ids.py), not SQLite's,
-- so the key columns are left out of the comparison and no statement reads them back.
-- @keys-differ ai_seq.id
-- @keys-differ ai_note.id
CREATE TABLE ai_seq(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, n INTEGER DEFAULT 0);
CREATE TABLE ai_note(id INTEGER PRIMARY KEY, body TEXT NOT NULL);
INSERT INTO ai_seq(name) VALUES ('a');
INSERT INTO ai_seq(name, n) VALUES ('b', 1), ('c', 2);
INSERT INTO ai_note(body) VALUES ('first');
INSERT INTO ai_note(body) SELECT name FROM ai_seq;
-- @error
INSERT INTO ai_seq(name) VALUES ('a');
INSERT OR IGNORE INTO ai_seq(name) VALUES ('a'), ('d');
INSERT INTO ai_seq(name) VALUES ('b') ON CONFLICT(name) DO UPDATE SET n = n + 10;
INSERT INTO ai_seq(name, n) VALUES ('e', 5) RETURNING name, n;
UPDATE ai_seq SET n = n + 1 WHERE name IN ('a', 'e');
DELETE FROM ai_seq WHERE name = 'c';
INSERT INTO ai_seq(name) VALUES ('c');
INSERT OR REPLACE INTO ai_seq(name, n) VALUES ('a', 100);
REPLACE INTO ai_note(body) VALUES ('first');
INSERT INTO ai_note(id, body) VALUES (NULL, 'explicit null');
CREATE TRIGGER ai_seq_noted AFTER INSERT ON ai_seq BEGIN
  INSERT INTO ai_note(body) VALUES ('added ' || new.name);
END;
INSERT INTO ai_seq(name) VALUES ('f'), ('g');
INSERT INTO ai_seq(name, n) SELECT 'copy ' || name, n FROM ai_seq WHERE n > 0;
SELECT name, n FROM ai_seq ORDER BY name;
SELECT count(DISTINCT id), count(*) FROM ai_seq;
SELECT body FROM ai_note ORDER BY body;
