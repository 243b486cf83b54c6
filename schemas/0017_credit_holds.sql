-- Credit holds (internal/credits, docs/credits.md "Admission", docs/ha.md):
-- what each credit_only admission holds of its customer's balance until
-- measured usage replaces it, written by the leader within 100 ms of the
-- decision, beside the admission's quota_admissions parts. One row per
-- admission and part of its hold: kind 'money' (sku_class empty) or
-- 'hours', included GPU-hours of sku_class (empty: of any SKU). A new
-- leader rebuilds the holds whose held_until lies less than a day back;
-- the first balance it reads drops those its usage has measured. Rows are
-- written once (a replay writes the same key, which ReplacingMergeTree
-- collapses).
CREATE TABLE IF NOT EXISTS credit_holds (
    tenant String,
    admission_id String,
    kind String,
    sku_class String,
    amount Decimal(38, 18),
    held_until DateTime('UTC')
) ENGINE = ReplacingMergeTree()
ORDER BY (tenant, admission_id, kind, sku_class);
