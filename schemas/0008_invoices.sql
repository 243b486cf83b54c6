-- Invoices (internal/billing): one row per revision, the highest revision
-- current. A draft is rewritten at a higher revision when a run recomputes
-- it; a finalized invoice only ever gets one more revision, void, which
-- keeps its number and lines. document is the invoice's canonical JSON,
-- served as stored; the other columns are there to query by.
CREATE TABLE IF NOT EXISTS invoices (
    issuer String,
    invoice_id String,
    revision UInt64,
    tenant String,
    department String,
    period_label String,
    period_start DateTime('UTC'),
    period_end DateTime('UTC'),
    status String,
    number String,
    seq UInt64,
    sequence_key String,
    currency String,
    subtotal_minor Int64,
    tax_minor Int64,
    total_minor Int64,
    book_version String,
    book_digest String,
    contract_digest String,
    inputs_hash String,
    rollup_version UInt64,
    document String,
    created_at DateTime('UTC'),
    written_at DateTime('UTC')
) ENGINE = ReplacingMergeTree(revision)
ORDER BY (issuer, invoice_id);

-- The lines of each invoice revision, for SQL readers (chargeback, API).
-- Readers join on the invoice's current revision; lines of a revision
-- whose invoice row never landed (a run cut short) are replaced when the
-- run is repeated, since it writes the same id and revision again.
CREATE TABLE IF NOT EXISTS invoice_lines (
    issuer String,
    invoice_id String,
    revision UInt64,
    line_no UInt32,
    tenant String,
    period_label String,
    kind String,
    sku String,
    meter String,
    description String,
    line_from DateTime('UTC'),
    line_to DateTime('UTC'),
    quantity Decimal(38, 9),
    unit String,
    amount Decimal(38, 9),
    amount_minor Int64,
    currency String,
    adjusts_period String,
    adjusts_invoice String
) ENGINE = ReplacingMergeTree()
ORDER BY (issuer, invoice_id, revision, line_no);
