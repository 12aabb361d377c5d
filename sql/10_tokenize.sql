-- The token pipeline: pgrag.tokenize and its stopwords.
--
-- Applied by `pgrag db upgrade` after every migration, in the order of the file
-- names (pgrag.schema.upgrade_files): CREATE OR REPLACE definitions, so this file
-- is the single current definition of what it holds. A changed signature or
-- return type needs a migration that drops the old one.
--
-- Implementation: shared. The Python layer (named queries) and SQL callers run these same
-- functions; there is no second implementation.

-- The token pipeline, defined once: NFC-normalise, lowercase (Unicode simple case
-- mapping), split on anything that is not a letter or digit, drop stopwords
-- (spaCy's English list, alphanumeric words of 3+ letters) and tokens shorter than
-- 3 or longer than 64 characters (TIGRAG's validity filter keeps years and long
-- numbers). Ingest and queries, from Python or SQL, all go through pgrag.tokenize.
--
-- Lowercasing and [:alnum:] follow the collation written into pgrag.tokenize (the
-- DO block at the end of this file picks it from pg_collation when this file is
-- applied; the database's default collation may be plain "C", ASCII only):
--   1. the builtin "pg_c_utf8" (PostgreSQL >= 17): Unicode's own case mapping and
--      properties, the same on every machine;
--   2. else a libc "C.utf8" / "C.UTF-8" collation of pg_catalog (initdb imports it
--      from the OS; PostgreSQL 16): glibc's Unicode tables. Against PostgreSQL
--      18's pg_c_utf8 (measured over every code point, glibc 2.36): the same
--      lowercase for all but 27 letters that Unicode 16 added; [:alnum:] also
--      takes the 650 non-ASCII decimal digits (Arabic-Indic, Devanagari, ...),
--      which pg_c_utf8 splits on, and leaves out 38 combining letters (U+0363..)
--      and the letters of Unicode 15 and 16 that glibc does not know yet;
--   3. else "default" (the database's own collation), with a WARNING: under a C
--      or POSIX default, non-ASCII letters are neither lowercased nor kept whole.
-- A server upgraded to 17 or later moves to pg_c_utf8 at its next `pgrag db
-- upgrade`; text that differs as above then tokenizes differently (docs/sql.md,
-- "Supported servers").
CREATE OR REPLACE FUNCTION pgrag_internal.stopwords() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN '{about,above,across,after,afterwards,again,against,all,almost,alone,along,already,also,although,always,among,amongst,amount,and,another,any,anyhow,anyone,anything,anyway,anywhere,are,around,back,became,because,become,becomes,becoming,been,before,beforehand,behind,being,below,beside,besides,between,beyond,both,bottom,but,call,can,cannot,could,did,does,doing,done,down,due,during,each,eight,either,eleven,else,elsewhere,empty,enough,even,ever,every,everyone,everything,everywhere,except,few,fifteen,fifty,first,five,for,former,formerly,forty,four,from,front,full,further,get,give,had,has,have,hence,her,here,hereafter,hereby,herein,hereupon,hers,herself,him,himself,his,how,however,hundred,indeed,into,its,itself,just,keep,last,latter,latterly,least,less,made,make,many,may,meanwhile,might,mine,more,moreover,most,mostly,move,much,must,myself,name,namely,neither,never,nevertheless,next,nine,nobody,none,noone,nor,not,nothing,now,nowhere,off,often,once,one,only,onto,other,others,otherwise,our,ours,ourselves,out,over,own,part,per,perhaps,please,put,quite,rather,really,regarding,same,say,see,seem,seemed,seeming,seems,serious,several,she,should,show,side,since,six,sixty,some,somehow,someone,something,sometime,sometimes,somewhere,still,such,take,ten,than,that,the,their,them,themselves,then,thence,there,thereafter,thereby,therefore,therein,thereupon,these,they,third,this,those,though,three,through,throughout,thru,thus,together,too,top,toward,towards,twelve,twenty,two,under,unless,until,upon,used,using,various,very,via,was,well,were,what,whatever,when,whence,whenever,where,whereafter,whereas,whereby,wherein,whereupon,wherever,whether,which,while,whither,who,whoever,whole,whom,whose,why,will,with,within,without,would,yet,you,your,yours,yourself,yourselves}'::text[];

DO $tokenize$
DECLARE
    token_collation name;
BEGIN
    SELECT c.collname INTO token_collation
    FROM pg_collation c
    WHERE c.collnamespace = 'pg_catalog'::regnamespace
      AND c.collencoding IN (-1, pg_char_to_encoding('UTF8'))
      AND (c.collname = 'pg_c_utf8'
           OR (c.collprovider = 'c' AND lower(replace(c.collctype, '-', '')) = 'c.utf8'))
    ORDER BY c.collname = 'pg_c_utf8' DESC, c.collname
    LIMIT 1;
    IF token_collation IS NULL THEN
        token_collation := 'default';
        RAISE WARNING 'pgrag.tokenize: this server has neither the pg_c_utf8 nor a C.UTF-8 collation; '
                      'it lowercases and splits with the database''s default collation';
    END IF;
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION pgrag.tokenize(input text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path FROM CURRENT
RETURN ARRAY(
    SELECT t.term
    FROM regexp_split_to_table(lower(normalize(input, NFC) COLLATE %I), '[^[:alnum:]]+')
         WITH ORDINALITY AS t(term, pos)
    WHERE char_length(t.term) BETWEEN 3 AND 64
      AND NOT t.term = ANY (pgrag_internal.stopwords())
    ORDER BY t.pos)
$sql$, token_collation);
END
$tokenize$;
