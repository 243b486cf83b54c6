-- Claims on the billing lease of an issuer: one run at a time finalizes
-- invoices and draws their numbers (internal/billing/lease.go). A row is
-- rewritten with a higher version when its holder renews or releases it.
CREATE TABLE IF NOT EXISTS billing_leases (
    name String,
    holder String,
    claimed_at DateTime('UTC'),
    renewed_at DateTime('UTC'),
    released UInt8,
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (name, holder);
