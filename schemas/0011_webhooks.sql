-- The outbox of outbound webhook events: any process (an invoice run, the
-- quota evaluator) writes events here; gpumeter serve delivers them.
CREATE TABLE IF NOT EXISTS webhook_events (
    event_id String,
    type String,
    created_at DateTime('UTC'),
    body String
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(created_at)
ORDER BY event_id;

-- Every delivery attempt of an event to an endpoint.
CREATE TABLE IF NOT EXISTS webhook_attempts (
    event_id String,
    endpoint String,
    attempt UInt32,
    at DateTime('UTC'),
    status UInt16,
    error String,
    duration_ms UInt32
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(at)
ORDER BY (event_id, endpoint, attempt);
