-- Schema v7: leases on erasure jobs, so that nodes sharing the database run each job once
-- (memlayer-store's `Eraser::claim_job`). A node running a job holds its lease and renews it
-- while the run goes on; another node takes the job only once the lease ran out (its holder
-- died, or lost the database), and then finishes it. Times are the database's clock, so
-- the nodes' clocks need not agree. `holder` is a node's random id for one start: no
-- tenant's data.
ALTER TABLE erasure_jobs ADD COLUMN holder text, ADD COLUMN lease_until timestamptz;
