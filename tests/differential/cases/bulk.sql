-- Statements that change many rows at once: a recursive CTE's thousands of rows, then
-- updates and deletes over most of them, cascading into a child table.
CREATE TABLE bk_row(id INTEGER PRIMARY KEY, v TEXT NOT NULL, n INTEGER NOT NULL, UNIQUE (v, n));
CREATE TABLE bk_mark(row_id INTEGER PRIMARY KEY REFERENCES bk_row(id) ON DELETE CASCADE, marked TEXT);
WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 2000) INSERT INTO bk_row SELECT i, 'row' || (i % 50), i / 50 FROM k;
INSERT INTO bk_mark SELECT id, printf('%05d', id) FROM bk_row WHERE id % 3 = 0;
UPDATE bk_row SET v = upper(v) || '!', n = n * 2 WHERE id % 2 = 1;
-- @error
UPDATE bk_row SET v = 'same', n = 0 WHERE id BETWEEN 10 AND 20;
DELETE FROM bk_row WHERE id % 4 = 0;
INSERT OR REPLACE INTO bk_row SELECT id + 1, v, n FROM bk_row WHERE id BETWEEN 100 AND 300 AND id % 4 = 3;
SELECT count(*), sum(n), count(DISTINCT v) FROM bk_row;
SELECT count(*), min(row_id), max(row_id) FROM bk_mark;
