-- Indexes, views, triggers and STORED generated columns: each member runs the DDL, and
-- what a trigger writes on the origin replicates as rows.
CREATE TABLE so_order(id INTEGER PRIMARY KEY, customer TEXT NOT NULL, qty INTEGER NOT NULL, unit REAL NOT NULL, total REAL GENERATED ALWAYS AS (qty * unit) STORED, status TEXT NOT NULL DEFAULT 'new');
CREATE TABLE so_log(id INTEGER PRIMARY KEY, order_id INTEGER, what TEXT NOT NULL, amount REAL);
CREATE TABLE so_balance(customer TEXT PRIMARY KEY, owed REAL NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE INDEX so_order_customer ON so_order(customer, status);
CREATE INDEX so_order_big ON so_order(total) WHERE total > 100;
CREATE TRIGGER so_order_added AFTER INSERT ON so_order BEGIN
  INSERT INTO so_log(id, order_id, what, amount) VALUES (new.id * 10, new.id, 'added', new.total);
  INSERT INTO so_balance(customer, owed) VALUES (new.customer, new.total)
    ON CONFLICT(customer) DO UPDATE SET owed = owed + excluded.owed;
END;
CREATE TRIGGER so_order_changed AFTER UPDATE OF qty, unit ON so_order WHEN old.total <> new.total BEGIN
  UPDATE so_balance SET owed = owed - old.total + new.total WHERE customer = new.customer;
  INSERT INTO so_log(id, order_id, what, amount) VALUES (new.id * 10 + 1, new.id, 'changed', new.total - old.total);
END;
CREATE TRIGGER so_order_removed BEFORE DELETE ON so_order BEGIN
  UPDATE so_balance SET owed = owed - old.total WHERE customer = old.customer;
END;
CREATE TRIGGER so_no_negative BEFORE INSERT ON so_order WHEN new.qty <= 0 BEGIN
  SELECT RAISE(ABORT, 'qty must be positive');
END;
CREATE VIEW so_open AS SELECT customer, count(*) AS orders, sum(total) AS total FROM so_order WHERE status <> 'closed' GROUP BY customer;
CREATE VIEW so_history AS SELECT o.customer, l.what, l.amount FROM so_log l JOIN so_order o ON o.id = l.order_id;
INSERT INTO so_order(id, customer, qty, unit) VALUES (1, 'acme', 3, 10.0);
INSERT INTO so_order(id, customer, qty, unit, status) VALUES (2, 'acme', 20, 7.5, 'open'), (3, 'zeta', 1, 0.5, 'open');
-- @error
INSERT INTO so_order(id, customer, qty, unit) VALUES (4, 'zeta', 0, 1.0);
-- @error
INSERT INTO so_order(id, customer, qty, unit, total) VALUES (6, 'acme', 1, 1.0, 99);
SELECT * FROM so_open ORDER BY customer;
UPDATE so_order SET qty = qty + 1 WHERE customer = 'acme';
UPDATE so_order SET status = 'closed' WHERE id = 1;
UPDATE so_order SET unit = unit WHERE id = 3;
SELECT * FROM so_balance ORDER BY customer;
DELETE FROM so_order WHERE id = 2 RETURNING id, total;
SELECT customer, what, amount FROM so_history ORDER BY customer, what, amount;
SELECT * FROM so_order WHERE total > 100 ORDER BY id;
SELECT name FROM pragma_index_list('so_order') ORDER BY name;
DROP TRIGGER so_no_negative;
INSERT INTO so_order(id, customer, qty, unit) VALUES (7, 'zeta', -2, 3.0);
DROP VIEW so_history;
DROP INDEX so_order_big;
CREATE TRIGGER so_order_closed AFTER UPDATE OF status ON so_order WHEN new.status = 'closed' BEGIN
  DELETE FROM so_log WHERE order_id = new.id;
END;
UPDATE so_order SET status = 'closed' WHERE customer = 'zeta';
SELECT * FROM so_log ORDER BY id;
SELECT * FROM so_open ORDER BY customer;
-- A trigger that trims its own table, and one on a WITHOUT ROWID table writing elsewhere.
CREATE TABLE so_queue(id INTEGER PRIMARY KEY, v INTEGER);
CREATE TRIGGER so_queue_trim AFTER INSERT ON so_queue BEGIN DELETE FROM so_queue WHERE id < new.id - 2; END;
INSERT INTO so_queue VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, 5);
CREATE TABLE so_flag(k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID;
CREATE TRIGGER so_flag_changed AFTER UPDATE ON so_flag BEGIN INSERT INTO so_queue VALUES (100 + new.v, new.v); END;
INSERT INTO so_flag VALUES ('a', 1), ('b', 2);
UPDATE so_flag SET v = v + 7;
SELECT * FROM so_queue ORDER BY id;
