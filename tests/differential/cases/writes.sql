-- INSERT OR ..., REPLACE, upserts, INSERT ... SELECT, RETURNING.
CREATE TABLE wr_stock(sku TEXT PRIMARY KEY, qty INTEGER NOT NULL DEFAULT 0 CHECK (qty >= 0), price REAL, seen INTEGER DEFAULT 1);
CREATE TABLE wr_user(id INTEGER PRIMARY KEY, login TEXT NOT NULL UNIQUE, visits INTEGER DEFAULT 0);
INSERT INTO wr_stock(sku, qty, price) VALUES ('apple', 5, 0.5), ('pear', 2, 0.75), ('plum', 0, 1.25);
INSERT INTO wr_stock(sku, qty) VALUES ('apple', 3) ON CONFLICT(sku) DO UPDATE SET qty = qty + excluded.qty, seen = seen + 1;
INSERT INTO wr_stock(sku, qty) VALUES ('fig', 7), ('pear', 1) ON CONFLICT(sku) DO UPDATE SET qty = qty + excluded.qty;
INSERT INTO wr_stock(sku, qty) VALUES ('plum', 9) ON CONFLICT DO NOTHING;
INSERT INTO wr_stock(sku, qty) VALUES ('pear', 100) ON CONFLICT(sku) DO UPDATE SET qty = excluded.qty WHERE excluded.qty < 50;
-- @error
INSERT INTO wr_stock(sku, qty) VALUES ('apple', -30) ON CONFLICT(sku) DO UPDATE SET qty = qty + excluded.qty;
INSERT OR IGNORE INTO wr_stock(sku, qty) VALUES ('apple', 1), ('kiwi', 4), ('lime', -1);
INSERT OR REPLACE INTO wr_stock(sku, qty, price) VALUES ('fig', 1, 2.0);
REPLACE INTO wr_stock(sku, qty) VALUES ('kiwi', 8), ('mango', 2);
-- OR REPLACE puts the default in place of a NULL for a NOT NULL column
INSERT OR REPLACE INTO wr_stock(sku, qty) VALUES ('apple', NULL);
INSERT OR REPLACE INTO wr_stock(sku, qty, price) VALUES ('apple', 6, NULL) RETURNING sku, qty, price, seen;
INSERT INTO wr_stock(sku, qty) VALUES ('grape', 12) RETURNING *;
INSERT INTO wr_stock(sku, qty) VALUES ('grape', 1) ON CONFLICT(sku) DO UPDATE SET qty = qty * 2 RETURNING qty, seen;
UPDATE wr_stock SET price = coalesce(price, 0) + 1 WHERE qty > 4 RETURNING sku, price;
UPDATE wr_stock SET qty = qty - 1 WHERE sku IN ('apple', 'fig', 'nothing') RETURNING sku, qty * 10 AS tenfold;
-- @error
UPDATE wr_stock SET qty = qty - 2 WHERE sku = 'fig' RETURNING qty;
DELETE FROM wr_stock WHERE qty = 0 RETURNING sku;
DELETE FROM wr_stock WHERE sku = 'nothing' RETURNING sku;
SELECT * FROM wr_stock ORDER BY sku;

INSERT INTO wr_user VALUES (1, 'ann', 0), (2, 'bob', 3);
INSERT INTO wr_user(id, login) VALUES (3, 'ann') ON CONFLICT(login) DO UPDATE SET visits = visits + 1;
INSERT INTO wr_user(id, login) VALUES (2, 'bobby') ON CONFLICT(id) DO UPDATE SET login = excluded.login || '-' || login;
-- @error
INSERT INTO wr_user(id, login) VALUES (1, 'bobby-bob') ON CONFLICT(id) DO UPDATE SET login = excluded.login;
INSERT INTO wr_user(id, login) VALUES (4, 'cy') ON CONFLICT(id) DO NOTHING ON CONFLICT(login) DO NOTHING;
INSERT INTO wr_user(id, login) VALUES (5, 'cy') ON CONFLICT(id) DO NOTHING ON CONFLICT(login) DO UPDATE SET visits = 50;
INSERT OR REPLACE INTO wr_user(id, login, visits) VALUES (6, 'ann', 9);
REPLACE INTO wr_user(id, login) VALUES (2, 'cy');
SELECT * FROM wr_user ORDER BY id;

CREATE TABLE wr_copy(sku TEXT PRIMARY KEY, qty INTEGER, note TEXT);
INSERT INTO wr_copy(sku, qty) SELECT sku, qty FROM wr_stock WHERE qty > 2;
INSERT INTO wr_copy(sku, qty, note) SELECT sku, qty, 'again' FROM wr_stock WHERE true ON CONFLICT(sku) DO UPDATE SET note = excluded.note, qty = wr_copy.qty + excluded.qty;
-- @error
INSERT INTO wr_copy(sku, qty) SELECT sku, qty FROM wr_stock;
INSERT OR IGNORE INTO wr_copy(sku, qty) SELECT login, visits FROM wr_user;
INSERT INTO wr_copy(sku, qty, note) SELECT 'sum', sum(qty), 'total' FROM wr_stock RETURNING *;
WITH doubled(s, q) AS (SELECT sku, qty * 2 FROM wr_copy WHERE note IS NULL) UPDATE wr_copy SET qty = (SELECT q FROM doubled WHERE s = sku) WHERE sku IN (SELECT s FROM doubled);
UPDATE wr_copy SET note = u.login FROM wr_user u WHERE u.login = wr_copy.sku;
DELETE FROM wr_copy WHERE sku IN (SELECT login FROM wr_user WHERE visits > 5);
SELECT * FROM wr_copy ORDER BY sku;
SELECT note, count(*), total(qty) FROM wr_copy GROUP BY note ORDER BY note;
