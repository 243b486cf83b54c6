-- completed_version is the version of the last rollup run that finished:
-- every usage_hourly row at or below it was written by a completed run. An
-- invoice records it, not the highest version it happened to read, so the
-- rest of a run in flight while the invoice was priced is looked at again.
ALTER TABLE rollup_state ADD COLUMN completed_version UInt64 DEFAULT 0;
-- line_count bounds the current revision's lines: a run cut short between
-- the lines insert and the invoices insert can leave lines with higher
-- line_no than the repeated run writes for the same revision.
ALTER TABLE invoices ADD COLUMN line_count UInt32 DEFAULT 0;
