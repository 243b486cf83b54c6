-- Credit grants (internal/credits): one row per grant, written again at
-- version 2 when it is voided, with the void's time and reason; the grant's
-- own fields never change. Zero expires_at or voided_at (1970-01-01) means
-- never / not voided; has_rollover says whether rollover_cap is set.
CREATE TABLE IF NOT EXISTS credit_grants (
    grant_id String,
    tenant String,
    kind String,
    amount Decimal(38, 9),
    currency String,
    meter String,
    sku_class String,
    priority Int32,
    effective_at DateTime('UTC'),
    expires_at DateTime('UTC'),
    series String,
    has_rollover UInt8,
    rollover_cap Decimal(38, 9),
    source String,
    note String,
    created_at DateTime('UTC'),
    voided_at DateTime('UTC'),
    void_reason String,
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (tenant, grant_id);
