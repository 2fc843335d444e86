-- Values on the wire: affinities, large and negative numbers, text and blobs, as SQLite stores them.
CREATE TABLE va_cell(id INTEGER PRIMARY KEY, i INTEGER, r REAL, t TEXT, n NUMERIC, b BLOB, any_value);
INSERT INTO va_cell VALUES (1, '42', '1.5', 42, '3.0', x'', 'text');
INSERT INTO va_cell VALUES (2, 9223372036854775807, -0.0, '', '1e3', x'00ff10', 9007199254740993);
INSERT INTO va_cell VALUES (3, -9223372036854775808, 1e308, 'ünïcödé ✓', 'abc', zeroblob(3), 2.5);
INSERT INTO va_cell VALUES ('4', 1.0, 7, NULL, 12345678901234567890, NULL, x'61');
-- @error
INSERT INTO va_cell(id) VALUES (1.5);
SELECT id, i, typeof(i), r, typeof(r), t, typeof(t), n, typeof(n), b, typeof(b), any_value, typeof(any_value) FROM va_cell ORDER BY id;
UPDATE va_cell SET i = i + 1 WHERE id = 1;
UPDATE va_cell SET r = r / 3, n = n * 2 WHERE id IN (1, 4);
SELECT id, i, r, n FROM va_cell ORDER BY id;
SELECT 1 / 0, 5 % 3, 7 / 2, 7 / 2.0, 'a' || NULL, NULL IS NULL, abs(-9223372036854775807), round(2.5), hex('é');
SELECT length(t), quote(b), unicode(substr(t, 1, 1)), instr(t, 'c') FROM va_cell WHERE id = 3;

CREATE TABLE va_name(name TEXT PRIMARY KEY COLLATE NOCASE, n INTEGER) WITHOUT ROWID;
INSERT INTO va_name VALUES ('Ann', 1), ('bob', 2);
-- @error
INSERT INTO va_name VALUES ('ANN', 3);
INSERT INTO va_name VALUES ('BOB', 9) ON CONFLICT(name) DO UPDATE SET n = n + excluded.n;
INSERT OR REPLACE INTO va_name VALUES ('aNN', 4);
UPDATE va_name SET name = 'Cy' WHERE name = 'bob';
SELECT * FROM va_name ORDER BY name;
