-- Conflict clauses declared on the table, expression, collated and partial UNIQUE indexes, a
-- self-referencing cascade. (A deferred foreign key: test_a_deferred_foreign_key_violation_is_refused_and_the_member_stays_up.)
CREATE TABLE cc_item(id INTEGER PRIMARY KEY ON CONFLICT REPLACE, code TEXT UNIQUE ON CONFLICT IGNORE, label TEXT NOT NULL ON CONFLICT IGNORE, qty INTEGER CHECK (qty >= 0) ON CONFLICT ABORT);
INSERT INTO cc_item VALUES (1, 'a', 'one', 1), (2, 'b', 'two', 2);
INSERT INTO cc_item VALUES (1, 'c', 'uno', 5);
INSERT INTO cc_item VALUES (3, 'a', 'three', 3);
INSERT INTO cc_item VALUES (4, 'd', NULL, 4);
-- @error
INSERT INTO cc_item VALUES (5, 'e', 'five', -5);
UPDATE cc_item SET code = 'b' WHERE id = 1;
SELECT * FROM cc_item ORDER BY id;

CREATE TABLE cc_login(id INTEGER PRIMARY KEY, email TEXT NOT NULL);
CREATE UNIQUE INDEX cc_login_email ON cc_login(lower(email));
INSERT INTO cc_login VALUES (1, 'Ann@Example.org'), (2, 'bob@example.org');
-- @error
INSERT INTO cc_login VALUES (3, 'ann@example.ORG');
INSERT INTO cc_login VALUES (3, 'ANN@example.org') ON CONFLICT DO NOTHING;
UPDATE cc_login SET email = upper(email) WHERE id = 2;
SELECT * FROM cc_login ORDER BY id;

CREATE TABLE cc_ticket(id INTEGER PRIMARY KEY, owner TEXT NOT NULL, state TEXT NOT NULL COLLATE NOCASE);
CREATE UNIQUE INDEX cc_ticket_one_open ON cc_ticket(owner) WHERE state = 'open';
INSERT INTO cc_ticket VALUES (1, 'ann', 'closed'), (2, 'ann', 'open'), (3, 'ann', 'closed'), (4, 'bob', 'Open');
-- @error
INSERT INTO cc_ticket VALUES (5, 'ann', 'OPEN');
UPDATE cc_ticket SET state = 'closed' WHERE id = 2;
INSERT INTO cc_ticket VALUES (5, 'ann', 'OPEN');
UPDATE cc_ticket SET owner = 'bob' WHERE id = 1;
-- @error
UPDATE cc_ticket SET state = 'open' WHERE id = 1;
SELECT * FROM cc_ticket ORDER BY id;

CREATE TABLE cc_node(id INTEGER PRIMARY KEY, parent INTEGER REFERENCES cc_node(id) ON DELETE CASCADE, name TEXT);
INSERT INTO cc_node VALUES (1, NULL, 'root'), (2, 1, 'a'), (3, 2, 'a.a'), (4, 3, 'a.a.a'), (5, 1, 'b');
-- @error
INSERT INTO cc_node VALUES (6, 60, 'orphan');
DELETE FROM cc_node WHERE id = 2;
SELECT * FROM cc_node ORDER BY id;
WITH RECURSIVE below(id, depth) AS (SELECT 1, 0 UNION ALL SELECT c.id, depth + 1 FROM cc_node c JOIN below ON c.parent = below.id) SELECT id, depth FROM below ORDER BY id;
