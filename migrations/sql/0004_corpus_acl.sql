-- Tenant isolation (optional, off until pgrag.enable_tenant_isolation() runs):
-- which database roles may see which corpus. Rows are written by the schema
-- owner only (pgrag.grant_corpus / pgrag.revoke_corpus); writer roles get no
-- write privilege on this table. role_name is text, not regrole: a role dropped
-- later leaves a harmless row instead of breaking every policy that reads it.

CREATE TABLE pgrag.corpus_acl (
    corpus_id  bigint NOT NULL REFERENCES pgrag.corpus (corpus_id) ON DELETE CASCADE,
    role_name  text NOT NULL,
    PRIMARY KEY (corpus_id, role_name)
);
