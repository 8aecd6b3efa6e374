-- The erasure jobs' journal (memlayer-store's `Eraser::record_job` … `receipt`): a job is
-- recorded before its first step, pending until it finishes, then has exactly one receipt.
--
-- One row per job for good: its id (random, below 2^53, so JSON clients keep it exact) is
-- never issued again, because a finished job's id names its receipt. While pending the row
-- holds the coordinator's document; finishing replaces it with the tenant and the receipt in
-- the same statement, so a job is pending or has a receipt, never both or neither. No CHECK
-- constraints: a violated one prints the whole row, documents included, into the error.
--
-- Jobs are the server's, not a tenant's (an operator's purge spans tenants): this is the one
-- table without the tenant leading its key, a reference table if distributed by tenant.
CREATE TABLE erasure_jobs (
    id bigint PRIMARY KEY,
    -- Recording order: pending jobs run oldest first, receipts list newest first.
    seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    document text,
    tenant text,
    receipt text
);
CREATE INDEX erasure_jobs_pending ON erasure_jobs (seq) WHERE receipt IS NULL;
CREATE INDEX erasure_jobs_receipts ON erasure_jobs (tenant, seq) WHERE receipt IS NOT NULL;
