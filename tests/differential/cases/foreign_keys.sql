-- Foreign keys, enforced on the member that takes the write; cascades replicate as rows.
CREATE TABLE fk_author(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE fk_book(id INTEGER PRIMARY KEY, author INTEGER NOT NULL REFERENCES fk_author(id) ON DELETE CASCADE, title TEXT);
CREATE TABLE fk_review(book INTEGER REFERENCES fk_book(id) ON DELETE CASCADE, n INTEGER, stars INTEGER CHECK (stars BETWEEN 1 AND 5), PRIMARY KEY (book, n)) WITHOUT ROWID;
CREATE TABLE fk_loan(id INTEGER PRIMARY KEY, book INTEGER REFERENCES fk_book(id) ON DELETE SET NULL, who TEXT);
CREATE TABLE fk_tag(name TEXT PRIMARY KEY, author TEXT REFERENCES fk_author(name) ON UPDATE CASCADE ON DELETE RESTRICT);
CREATE INDEX fk_book_author ON fk_book(author);
INSERT INTO fk_author VALUES (1, 'austen'), (2, 'borges'), (3, 'calvino');
INSERT INTO fk_book VALUES (10, 1, 'emma'), (11, 1, 'persuasion'), (20, 2, 'ficciones'), (30, 3, 'invisible cities');
INSERT INTO fk_review VALUES (10, 1, 5), (10, 2, 4), (11, 1, 3), (20, 1, 5), (30, 1, 4);
INSERT INTO fk_loan VALUES (1, 10, 'ann'), (2, 20, 'bob'), (3, NULL, 'cy');
INSERT INTO fk_tag VALUES ('classic', 'austen'), ('labyrinth', 'borges');
-- @error
INSERT INTO fk_book VALUES (40, 4, 'nobody wrote this');
-- @error
INSERT INTO fk_review VALUES (99, 1, 3);
-- @error
UPDATE fk_book SET author = 9 WHERE id = 10;
-- @error
INSERT INTO fk_loan VALUES (4, 77, 'dan');
-- @error
DELETE FROM fk_author WHERE name = 'borges';
-- @error
UPDATE fk_author SET id = 5 WHERE id = 1;
UPDATE fk_author SET name = 'j. austen' WHERE id = 1;
SELECT * FROM fk_tag ORDER BY name;
DELETE FROM fk_tag WHERE name = 'labyrinth';
DELETE FROM fk_author WHERE name = 'borges';
SELECT (SELECT count(*) FROM fk_book), (SELECT count(*) FROM fk_review), (SELECT count(*) FROM fk_loan WHERE book IS NULL);
DELETE FROM fk_book WHERE id = 10;
SELECT * FROM fk_review ORDER BY book, n;
SELECT * FROM fk_loan ORDER BY id;
DELETE FROM fk_author WHERE id = 3 RETURNING name;
SELECT b.title, count(r.n) FROM fk_book b LEFT JOIN fk_review r ON r.book = b.id GROUP BY b.id ORDER BY b.title;
-- @error
DELETE FROM fk_author;
-- A composite key's ON UPDATE CASCADE and ON DELETE SET DEFAULT.
CREATE TABLE fk_region(code TEXT, n INTEGER, name TEXT, PRIMARY KEY (code, n)) WITHOUT ROWID;
CREATE TABLE fk_city(id INTEGER PRIMARY KEY, code TEXT DEFAULT 'xx', n INTEGER DEFAULT 0, FOREIGN KEY (code, n) REFERENCES fk_region(code, n) ON UPDATE CASCADE ON DELETE SET DEFAULT);
INSERT INTO fk_region VALUES ('xx', 0, 'nowhere'), ('eu', 1, 'west'), ('eu', 2, 'east');
INSERT INTO fk_city VALUES (1, 'eu', 1), (2, 'eu', 2), (3, 'eu', 2);
UPDATE fk_region SET n = 20 WHERE code = 'eu' AND n = 2;
DELETE FROM fk_region WHERE code = 'eu' AND n = 1;
SELECT * FROM fk_city ORDER BY id;
-- @error
DELETE FROM fk_region WHERE code = 'xx';
