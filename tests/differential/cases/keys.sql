-- Primary keys of every type SQLite compares: numbers that are equal across int and real,
-- text that looks like a number, blobs, and a composite key mixing them.
CREATE TABLE ky_any(k PRIMARY KEY, v TEXT) WITHOUT ROWID;
INSERT INTO ky_any VALUES (1, 'int'), ('1', 'text'), (x'01', 'blob'), (2.5, 'real'), ('', 'empty'), (-0.0, 'zero');
-- @error
INSERT INTO ky_any VALUES (1.0, 'real one');
-- @error
INSERT INTO ky_any VALUES (0, 'int zero');
INSERT INTO ky_any VALUES (1.0, 'upserted') ON CONFLICT(k) DO UPDATE SET v = v || '+' || excluded.v;
UPDATE ky_any SET k = 3 WHERE k = 2.5;
UPDATE ky_any SET v = 'blob again' WHERE k = x'01';
DELETE FROM ky_any WHERE k = '1';
SELECT k, typeof(k), v FROM ky_any ORDER BY k;
CREATE TABLE ky_real(k REAL PRIMARY KEY, v TEXT);
INSERT INTO ky_real VALUES (1, 'one'), (0.1, 'tenth'), (1e20, 'big'), (-3, 'minus');
-- @error
INSERT INTO ky_real VALUES ('1', 'text one');
UPDATE ky_real SET v = 'changed' WHERE k = 1e20;
DELETE FROM ky_real WHERE k = 0.1;
SELECT k, typeof(k), v FROM ky_real ORDER BY k;
CREATE TABLE ky_mix(a TEXT, b INTEGER, c BLOB, v INTEGER, PRIMARY KEY (a, b, c));
INSERT INTO ky_mix VALUES ('x', 1, x'00', 1), ('x', 1, x'0000', 2), ('x', '1', x'01', 3), ('1', 1, x'00', 4);
-- @error
INSERT INTO ky_mix VALUES ('x', '1', x'00', 5);
UPDATE ky_mix SET v = v * 10 WHERE c = x'0000';
REPLACE INTO ky_mix VALUES ('x', 1.0, x'00', 6);
DELETE FROM ky_mix WHERE a = 1;
SELECT a, b, hex(c), v FROM ky_mix ORDER BY a, b, c;
-- Keys that move: every row's key at once, a self-copy, a composite WITHOUT ROWID key.
CREATE TABLE ky_move(id INTEGER PRIMARY KEY, v INTEGER, at TEXT DEFAULT (date('2020-02-28', '+1 day')));
INSERT INTO ky_move(id, v) VALUES (1, 10), (2, 20), (3, 30);
INSERT INTO ky_move(id, v) SELECT id + 3, v + 1 FROM ky_move;
UPDATE ky_move SET id = id + 100;
UPDATE ky_move SET id = id - 100 WHERE id > 103;
SELECT * FROM ky_move ORDER BY id;
CREATE TABLE ky_pair(a TEXT, b INTEGER, v INTEGER, PRIMARY KEY (a, b)) WITHOUT ROWID;
INSERT INTO ky_pair VALUES ('x', 1, 1), ('x', 2, 2);
INSERT INTO ky_pair VALUES ('x', 1, 5), ('y', 1, 6) ON CONFLICT(a, b) DO UPDATE SET v = v + excluded.v WHERE excluded.v > 3;
UPDATE ky_pair SET a = 'z', b = b * 10;
DELETE FROM ky_pair WHERE b = 20 RETURNING *;
SELECT * FROM ky_pair ORDER BY a, b;
