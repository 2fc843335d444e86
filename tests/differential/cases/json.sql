-- JSON functions in reads, in writes, and in generated columns.
CREATE TABLE js_doc(id INTEGER PRIMARY KEY, body TEXT NOT NULL CHECK (json_valid(body)), kind TEXT GENERATED ALWAYS AS (json_extract(body, '$.kind')) STORED);
INSERT INTO js_doc(id, body) VALUES (1, '{"kind":"a","n":1,"tags":["x","y"]}'), (2, '{"kind":"b","n":2.5,"tags":[]}'), (3, json_object('kind', 'a', 'n', 3, 'nested', json_object('deep', json_array(1, 2, 3))));
-- @error
INSERT INTO js_doc(id, body) VALUES (4, '{not json');
SELECT id, kind, json_extract(body, '$.n'), body ->> '$.n', body -> '$.tags' FROM js_doc ORDER BY id;
SELECT id, json_array_length(body, '$.tags') FROM js_doc ORDER BY id;
SELECT j.key, j.value, j.type FROM js_doc, json_each(js_doc.body) AS j WHERE js_doc.id = 1 ORDER BY j.key;
SELECT j.fullkey, j.atom FROM js_doc, json_tree(js_doc.body) AS j WHERE js_doc.id = 3 AND j.atom IS NOT NULL ORDER BY j.fullkey;
UPDATE js_doc SET body = json_set(body, '$.n', body ->> '$.n' * 10, '$.seen', json('true')) WHERE kind = 'a';
UPDATE js_doc SET body = json_insert(body, '$.tags[#]', 'z') WHERE id = 1;
UPDATE js_doc SET body = json_remove(body, '$.tags') WHERE id = 2 RETURNING body, kind;
UPDATE js_doc SET body = json_replace(body, '$.kind', 'c') WHERE id = 3;
UPDATE js_doc SET body = json_patch(body, '{"kind":"d","n":null}') WHERE id = 2;
-- @error
UPDATE js_doc SET body = 'broken' || body WHERE id = 1;
SELECT kind, json_group_array(id), json_group_object(id, body ->> '$.n') FROM js_doc GROUP BY kind ORDER BY kind;
SELECT * FROM js_doc ORDER BY id;
SELECT json_quote('a"b'), json_type('[1,{}]', '$[1]'), json('  {"a" : [1, 2] } ');
DELETE FROM js_doc WHERE body ->> '$.seen' = 1;
SELECT id, kind FROM js_doc ORDER BY id;
