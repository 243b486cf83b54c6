-- API keys (internal/auth): the sha256 of each secret, never the secret.
-- A key is rewritten at a higher version when it is revoked. Zero
-- expires_at or revoked_at (1970-01-01) means never / not revoked.
CREATE TABLE IF NOT EXISTS api_keys (
    key_id String,
    secret_sha256 String,
    scope String,
    portal UInt8,
    note String,
    created_at DateTime('UTC'),
    expires_at DateTime('UTC'),
    revoked_at DateTime('UTC'),
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY key_id;

-- Every use of a key: who (key and scope), what (method, route, path,
-- status), when, and from where.
CREATE TABLE IF NOT EXISTS api_audit (
    at DateTime('UTC'),
    key_id String,
    scope String,
    method String,
    route String,
    path String,
    status UInt16,
    remote String,
    request_id String
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(at)
ORDER BY (at, key_id);
