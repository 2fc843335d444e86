-- Table kinds and their constraints: every refusal must change nothing on any member.
CREATE TABLE tb_plain(id INTEGER PRIMARY KEY, name TEXT NOT NULL, score REAL DEFAULT 1.5, tag TEXT DEFAULT 'none');
INSERT INTO tb_plain(id, name) VALUES (1, 'ann');
INSERT INTO tb_plain VALUES (2, 'bob', 3, 'x'), (3, 'cy', NULL, NULL), (4, 'dee', -0.25, 'y');
-- @error
INSERT INTO tb_plain(id, name) VALUES (5, NULL);
-- @error
INSERT INTO tb_plain(id, name) VALUES (2, 'again');
-- @error
INSERT INTO tb_plain(id, name) VALUES (6, 'six'), (1, 'dup');
-- @error
INSERT INTO tb_plain(id, name) VALUES ('text key', 'nope');
SELECT * FROM tb_plain ORDER BY id;
SELECT typeof(score), typeof(tag), count(*) FROM tb_plain GROUP BY 1, 2 ORDER BY 1, 2;
UPDATE tb_plain SET score = score * 2 WHERE score IS NOT NULL;
UPDATE tb_plain SET tag = upper(name) WHERE id >= 3;
UPDATE tb_plain SET name = name || '!' WHERE id = 99;
-- @error
UPDATE tb_plain SET name = NULL WHERE id = 3;
-- @error
UPDATE tb_plain SET id = 1 WHERE id = 4;
DELETE FROM tb_plain WHERE id = 3;
SELECT id, name, score, tag FROM tb_plain ORDER BY id;

CREATE TABLE tb_pair(region TEXT NOT NULL, n INTEGER NOT NULL, amount INTEGER, PRIMARY KEY (region, n));
INSERT INTO tb_pair VALUES ('eu', 1, 10), ('eu', 2, 20), ('us', 1, 30);
-- @error
INSERT INTO tb_pair VALUES ('eu', 1, 99);
-- @error
INSERT INTO tb_pair VALUES (NULL, 5, 1);
UPDATE tb_pair SET amount = amount + n WHERE region = 'eu';
UPDATE tb_pair SET n = n + 10 WHERE region = 'us';
DELETE FROM tb_pair WHERE region = 'eu' AND n = 2;
SELECT region, sum(amount) FROM tb_pair GROUP BY region ORDER BY region;

CREATE TABLE tb_norowid(code TEXT PRIMARY KEY, label TEXT UNIQUE, qty INTEGER CHECK (qty BETWEEN 0 AND 100)) WITHOUT ROWID;
INSERT INTO tb_norowid VALUES ('a', 'alpha', 1), ('b', 'beta', 2), ('c', NULL, 3), ('d', NULL, 4);
-- @error
INSERT INTO tb_norowid VALUES ('e', 'alpha', 5);
-- @error
INSERT INTO tb_norowid VALUES ('f', 'phi', 101);
-- @error
UPDATE tb_norowid SET qty = qty - 2;
-- @error
INSERT INTO tb_norowid VALUES (NULL, 'null key', 1);
UPDATE tb_norowid SET label = 'gamma' WHERE code = 'c';
-- @error
UPDATE tb_norowid SET label = 'beta' WHERE code = 'd';
UPDATE tb_norowid SET code = 'z' WHERE code = 'a';
SELECT * FROM tb_norowid ORDER BY code;

CREATE TABLE tb_strict(id INTEGER PRIMARY KEY, i INT, r REAL, t TEXT, b BLOB, a ANY) STRICT;
INSERT INTO tb_strict VALUES (1, 1, 1, 'one', x'01', 1), (2, '2', 2.5, 'two', x'0203', 'two'), (3, NULL, NULL, NULL, NULL, 3.5);
-- @error
INSERT INTO tb_strict VALUES (4, 'four', 4, 'four', NULL, NULL);
-- @error
INSERT INTO tb_strict VALUES (5, 5, 'five', 'five', NULL, NULL);
-- @error
UPDATE tb_strict SET b = 'text' WHERE id = 1;
UPDATE tb_strict SET r = i WHERE i IS NOT NULL;
SELECT id, i, typeof(i), r, typeof(r), t, b, a, typeof(a) FROM tb_strict ORDER BY id;

CREATE TABLE tb_checked(id INTEGER PRIMARY KEY, lo INTEGER NOT NULL DEFAULT 0, hi INTEGER NOT NULL DEFAULT 10, email TEXT UNIQUE COLLATE NOCASE, CHECK (lo <= hi), CHECK (email IS NULL OR email LIKE '%@%'));
INSERT INTO tb_checked(id, email) VALUES (1, 'Ann@example.org');
INSERT INTO tb_checked(id, lo, hi) VALUES (2, 3, 4), (3, -5, -5);
-- @error
INSERT INTO tb_checked(id, lo, hi) VALUES (4, 5, 4);
-- @error
INSERT INTO tb_checked(id, email) VALUES (5, 'ann@EXAMPLE.org');
-- @error
INSERT INTO tb_checked(id, email) VALUES (6, 'no at sign');
-- @error
UPDATE tb_checked SET hi = lo - 1 WHERE id = 2;
UPDATE tb_checked SET hi = hi + 100, lo = lo - 1;
SELECT * FROM tb_checked ORDER BY id;
SELECT count(*), min(lo), max(hi), group_concat(email) FROM tb_checked;
DELETE FROM tb_checked WHERE lo < 0;
SELECT * FROM tb_checked WHERE email = 'ANN@example.org';
